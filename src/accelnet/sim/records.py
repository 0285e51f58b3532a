"""What a simulation produces: one outcome per job and samples of the fabric over time.

These are plain values so that metrics, reports and plots (:mod:`accelnet.sim.metrics`)
need nothing else; the engine fills them as the simulation runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(slots=True)
class JobOutcome:
    """One job's life in a simulation (times in seconds from the trace's start).

    ``state`` is ``succeeded``, ``failed``, ``cancelled``, ``rejected`` (the fabric can never
    run it) or ``unfinished`` (still queued or running when the simulation stopped).
    ``first_start`` is None if it never ran; ``end`` is None unless it finished. ``run_s``
    is the time it held devices (all attempts);
    ``device_s`` the device-seconds it held, per device model; ``energy_j`` the energy of
    its devices while it held them. ``alone_s`` is its run time alone on the fastest
    devices of the fabric for its gang (a lower bound on its JCT); ``preemptions`` counts
    the times it was stopped for another job; ``attempts`` its launches.
    """

    id: str
    job_type: str
    tenant: str
    gpus: int
    arrival: float
    work: float
    weight: float = 1.0
    priority: int = 0
    deadline: float | None = None
    state: str = "unfinished"
    first_start: float | None = None
    end: float | None = None
    attempts: int = 0
    preemptions: int = 0
    failures: int = 0
    run_s: float = 0.0
    device_s: dict[str, float] = field(default_factory=dict)
    energy_j: float = 0.0
    alone_s: float = 0.0

    @property
    def jct(self) -> float | None:
        """Job completion time (end - arrival), None if it did not finish."""
        return None if self.end is None else self.end - self.arrival

    @property
    def queueing(self) -> float | None:
        """Time from arrival to its first start, None if it never started."""
        return None if self.first_start is None else self.first_start - self.arrival


@dataclass(frozen=True, slots=True)
class Sample:
    """The fabric at time ``t``: devices busy (running a job or a share of one) of all
    ``devices`` of the fabric, power drawn (W), jobs queued and running, and busy devices
    per model."""

    t: float
    busy: int
    devices: int
    power_w: float
    queued: int
    running: int
    busy_by_model: dict[str, int] = field(default_factory=dict)


@dataclass(slots=True)
class SimResult:
    """One simulation: its setup, every job's outcome, samples over time, and cost.

    ``jobs`` and ``samples`` are sequences: lists, or the compact tables the engine fills
    (:mod:`accelnet.sim.columns`), which make each record on access.

    ``capacity`` counts devices per model; ``wall_s`` is the real time the simulation took
    and ``events`` how many task events the controller handled; ``notes`` what a reader
    should know (jobs the fabric could never run, for one); ``makespan_lp_s`` a lower bound
    on the makespan from the allocation LP (see :func:`accelnet.sim.bounds.makespan_lp`).
    """

    policy: str
    fabric: str
    trace: str
    seed: int
    jobs: Sequence[JobOutcome]  # a list, or the engine's JobTable (compact columns)
    samples: Sequence[Sample]  # a list, or the engine's SampleTable
    capacity: dict[str, int]
    end: float = 0.0
    wall_s: float = 0.0
    events: int = 0
    decisions: int = 0
    peak_rss_mb: float = 0.0
    notes: list[str] = field(default_factory=list)
    makespan_lp_s: float | None = None  # an LP lower bound on the makespan, if computed
    # the most a device's work grows under this run's policy (1.0: it never packs jobs;
    # a policy that packs: the throughput model's best pair), what the area bound allows for
    pair_gain: float = 1.0
    jct_lp_s: float | None = None  # an LP lower bound on the average JCT, if asked for
