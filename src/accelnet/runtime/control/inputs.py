"""Jobs that consume earlier jobs' outputs: held until those jobs have succeeded.

A job's ``inputs`` (alias -> job) are resolved to job ids when it is submitted. While an
input job is unfinished the job stays PENDING, held here with a reason a user can read
("waits for job render-tiles-1a2b (running)"); when every input has succeeded it is
admitted; when one has failed or was cancelled it fails, naming it. :class:`InputGate` is
bookkeeping only: the controller asks it and applies what it says.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from accelnet.runtime.control.store import JobRecord, Store, StoreError
from accelnet.sched import JobSpec, JobState

StateOf = Callable[[str], JobState | None]  # job id -> its state now (None: unknown)
Inputs = tuple[tuple[str, str], ...]  # (alias, job id)


@dataclass(frozen=True, slots=True)
class Verdict:
    """What to do with a job now: ``ready`` (admit it), else ``failed`` (fail it with
    ``text``) or neither (hold it; ``text`` says what it waits for)."""

    ready: bool
    failed: bool
    text: str


def resolve(spec: JobSpec, store: Store) -> Inputs:
    """The spec's inputs as ``(alias, job id)``, sorted by alias: each names a job id, or
    else the last job the spec's tenant submitted with that name (names are the tenant's
    own: another tenant's job of that name is not seen). LookupError naming the key and
    value of an input that names no known job."""
    found = []
    for alias, ref in sorted(spec.inputs.items()):
        try:
            rec: JobRecord | None = store.get(ref)
        except StoreError:
            rec = store.latest_named(ref, spec.tenant)
        if rec is None:
            raise LookupError(f"inputs.{alias} = {ref!r}: no job has that id or name")
        found.append((alias, rec.id))
    return tuple(found)


def verdict(inputs: Inputs, state_of: StateOf) -> Verdict:
    """Judge a job's inputs by their jobs' states now."""
    waiting = []
    for alias, job in inputs:
        state = state_of(job)
        if state is JobState.SUCCEEDED:
            continue
        if state is None or state in (JobState.FAILED, JobState.CANCELLED):
            how = "is unknown" if state is None else state.value
            return Verdict(False, True, f"input {alias}: job {job} {how}")
        waiting.append(f"{job} ({state.value})")
    if waiting:
        noun = "job" if len(waiting) == 1 else "jobs"
        return Verdict(False, False, f"waits for {noun} {', '.join(waiting)}")
    names = ", ".join(f"{alias} from {job}" for alias, job in inputs)
    return Verdict(True, False, f"inputs ready: {names}" if names else "no inputs")


class InputGate:
    """The jobs held for their inputs, and which jobs wait for which."""

    def __init__(self) -> None:
        self._held: dict[str, Inputs] = {}
        self._waiters: dict[str, set[str]] = {}  # input job -> held jobs consuming it

    def hold(self, job_id: str, inputs: Inputs) -> None:
        """Hold ``job_id`` until :meth:`waiters` of one of its inputs brings it back."""
        self._held[job_id] = inputs
        for _, job in inputs:
            self._waiters.setdefault(job, set()).add(job_id)

    def holds(self, job_id: str) -> bool:
        """Whether ``job_id`` is held for its inputs."""
        return job_id in self._held

    def inputs(self, job_id: str) -> Inputs:
        """A held job's inputs (empty if it is not held)."""
        return self._held.get(job_id, ())

    def forget(self, job_id: str) -> None:
        """``job_id`` is no longer held (admitted, failed or cancelled); idempotent."""
        for _, job in self._held.pop(job_id, ()):
            waiters = self._waiters.get(job)
            if waiters is not None:
                waiters.discard(job_id)
                if not waiters:
                    del self._waiters[job]

    def waiters(self, job_id: str) -> Iterable[str]:
        """The held jobs that consume ``job_id`` (to judge again when it has finished), in
        a stable order."""
        return sorted(self._waiters.get(job_id, ()))

    def reason(self, job_id: str, state_of: StateOf) -> str | None:
        """Why a held job waits now (None if it is not held)."""
        inputs = self._held.get(job_id)
        return None if inputs is None else verdict(inputs, state_of).text
