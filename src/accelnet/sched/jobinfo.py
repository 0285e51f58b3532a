"""What policies know of a job beyond its spec: its rate on each device model, the service
it has received, the work it has done and has left.

A *rate* is steps per second of the whole gang on ``count`` devices of a model in one host.
The live system takes rates from the job's own hints (``workload.throughput``: steps/s on
one device of a model, scaled linearly with the gang; other models scaled by peak FLOP/s);
the simulator gives its throughput model (:mod:`accelnet.sim.throughput`). Progress comes
from the backend when it can say (:class:`~accelnet.runtime.backend.SupportsProgress`),
else from the job's kept work plus its current attempt at its rate.
"""

from __future__ import annotations

from collections.abc import Callable

from accelnet.fabric.catalog import find_device_model
from accelnet.fabric.model import DeviceModel, Precision
from accelnet.sched.jobstate import JobState
from accelnet.sched.snapshot import JobView
from accelnet.sched.spec import JobSpec

RateFn = Callable[[JobSpec, str, int], float]  # (spec, device model, count) -> steps/s
ProgressFn = Callable[[str], "float | None"]  # job id -> steps kept so far, if known


def peak_tflops(m: DeviceModel) -> float:
    """The model's best dense peak among FP32, FP16 and BF16 (TFLOP/s)."""
    return max(m.tflops(Precision.FP32), m.tflops(Precision.BF16), m.tflops(Precision.FP16))


def hint_rate(spec: JobSpec, model: str, count: int) -> float:
    """A rate from the job's hints: its measured steps/s on one device of ``model`` (or of
    the hinted model most like it, scaled by peak FLOP/s), times ``count``; without hints,
    peak TFLOP/s times ``count`` (a relative figure: faster devices run faster)."""
    hints = spec.workload.throughput
    if model in hints:
        return hints[model] * count
    target = find_device_model(model)
    target_peak = peak_tflops(target) if target is not None else 0.0
    for name, value in hints.items():
        known = find_device_model(name)
        if known is not None and known.name == model:
            return value * count
    for name, value in hints.items():
        known = find_device_model(name)
        if value > 0 and known is not None and target_peak > 0 and peak_tflops(known) > 0:
            return value * target_peak / peak_tflops(known) * count
    return max(target_peak, 1e-3) * count


def hint_pairs(a: JobSpec, b: JobSpec, model: str, count: int) -> tuple[float, float] | None:
    """Packed pairs' rates from the jobs' hints: each job's ``workload.colocated`` fraction
    for ``model`` (a catalog alias counts as the model); None unless both give one."""
    fa, fb = _colocated(a, model), _colocated(b, model)
    return None if fa is None or fb is None else (fa, fb)


def _colocated(spec: JobSpec, model: str) -> float | None:
    hints = spec.workload.colocated
    if model in hints:
        return hints[model]
    for name, value in hints.items():
        known = find_device_model(name)
        if known is not None and known.name == model:
            return value
    return None


class JobInfo:
    """Rates, service and progress of jobs at one moment (``now``); answers are memoised
    for the decision that made this object."""

    def __init__(
        self, now: float, rates: RateFn | None = None, progress: ProgressFn | None = None
    ) -> None:
        self.now = now
        self.rates: RateFn = rates or hint_rate
        self.progress = progress
        self._rates: dict[tuple[str, str, int], float] = {}
        self._left: dict[str, float | None] = {}

    def rate(self, job: JobView, model: str, count: int | None = None) -> float:
        """Steps/s of ``job``'s gang (or of ``count`` devices) of ``model``."""
        n = count if count is not None else job.spec.resources.accelerators.count
        key = (job.id, model, n)
        found = self._rates.get(key)
        if found is None:
            found = self._rates[key] = max(0.0, self.rates(job.spec, model, n))
        return found

    def running_for(self, job: JobView) -> float:
        """Seconds its current attempt has run (0 if it is not running)."""
        if job.state is not JobState.RUNNING or job.started_at is None:
            return 0.0
        return max(0.0, self.now - job.started_at)

    def attained_on(self, job: JobView, model: str) -> float:
        """Device-seconds received on ``model``, the current attempt included."""
        total = sum(s for m, s in job.attained if m == model)
        p = job.placement
        if p is not None and p.model == model:
            total += self.running_for(job) * len(p.devices) * p.share
        return total

    def attained_s(self, job: JobView) -> float:
        """Device-seconds received on every model, the current attempt included."""
        p = job.placement
        current = self.running_for(job) * len(p.devices) * p.share if p is not None else 0.0
        return job.attained_s + current

    def done(self, job: JobView) -> float:
        """Steps done and kept so far."""
        if self.progress is not None:
            reported = self.progress(job.id)
            if reported is not None:
                return reported
        p = job.placement
        extra = 0.0
        if p is not None:
            extra = self.running_for(job) * self.rate(job, p.model, len(p.devices)) * p.share
        total = job.spec.workload.total_steps
        done = job.done + extra
        return min(done, total) if total is not None else done

    def remaining(self, job: JobView) -> float | None:
        """Steps left, or None if the job's work is not known (memoised per job: a
        decision sees each job as one view)."""
        jid = job.id
        if jid in self._left:
            return self._left[jid]
        total = job.spec.workload.total_steps
        left = self._left[jid] = None if total is None else max(0.0, total - self.done(job))
        return left

    def remaining_s(self, job: JobView, model: str) -> float | None:
        """Seconds left alone on its gang of ``model`` (None if the work is not known):
        remaining steps over the rate, or, with only a duration estimate, that estimate."""
        left = self.remaining(job)
        if left is None:
            est = job.spec.workload.duration_s
            return None if est is None else max(0.0, est - self.attained_s(job) / max(
                1, job.spec.resources.accelerators.count))  # fmt: skip
        rate = self.rate(job, model)
        return left / rate if rate > 0 else float("inf")

    def age(self, job: JobView) -> float:
        """Seconds since the job was submitted."""
        return max(0.0, self.now - job.submitted_at)
