"""Compact columns of a simulation's job outcomes and fabric samples.

A million-job simulation cannot keep a :class:`~accelnet.sim.records.JobOutcome` object (and
its dict) per job, nor a :class:`~accelnet.sim.records.Sample` object per event: the engine
writes them into typed arrays instead (:class:`JobTable`, :class:`SampleTable`, about 150
bytes per job and 56 per sample plus 8 per device model). Both tables are read-only
sequences of the record types, made one at a time on access, so code written for lists of
records (reports, tests) reads them unchanged; :mod:`accelnet.sim.metrics` reads their
columns directly (:func:`job_columns`, :func:`sample_columns`), and turns plain lists into
the same columns, so the figures are computed one way whatever holds the records.

Absent values (no first start, no end, no deadline, a model a job never ran on) are NaN in
the float columns.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import overload

import numpy as np
import numpy.typing as npt

from accelnet.sim.records import JobOutcome, Sample

STATES = ("unfinished", "succeeded", "failed", "cancelled", "rejected")
"""Outcome states by code (the ``state`` column)."""
_STATE_CODE = {s: i for i, s in enumerate(STATES)}
NAN = math.nan

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def _opt(x: float) -> float | None:
    return None if math.isnan(x) else x


class Codes:
    """Names as small integers, in the order first seen."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self._index: dict[str, int] = {}

    def code(self, name: str) -> int:
        """The code of ``name`` (a new one the first time)."""
        k = self._index.get(name)
        if k is None:
            k = self._index[name] = len(self.names)
            self.names.append(name)
        return k


class JobTable(Sequence[JobOutcome]):
    """One row per job, in arrival order: what it is (set by :meth:`add`) and how it went
    (set by :meth:`settle`); ``device_s`` is one column per device model."""

    def __init__(self, models: Sequence[str] = ()) -> None:
        self.ids: list[str] = []
        self.types = Codes()
        self.tenants = Codes()
        self.type_code = array("l")
        self.tenant_code = array("l")
        self.gpus = array("q")
        self.arrival = array("d")
        self.work = array("d")
        self.weight = array("d")
        self.priority = array("q")
        self.deadline = array("d")
        self.alone_s = array("d")
        self.state = array("b")
        self.first_start = array("d")
        self.end = array("d")
        self.attempts = array("q")
        self.preemptions = array("q")
        self.failures = array("q")
        self.run_s = array("d")
        self.energy_j = array("d")
        self.device_s: dict[str, array[float]] = {}
        for m in models:
            self._model(m)

    def _model(self, model: str) -> array[float]:
        col = self.device_s.get(model)
        if col is None:
            col = self.device_s[model] = array("d", [NAN]) * len(self.ids)
        return col

    def add(
        self,
        id: str,
        job_type: str,
        tenant: str,
        gpus: int,
        arrival: float,
        work: float,
        weight: float,
        priority: int,
        deadline: float | None,
        alone_s: float,
    ) -> int:
        """A new row (state unfinished, nothing used yet); its index."""
        self.ids.append(id)
        self.type_code.append(self.types.code(job_type))
        self.tenant_code.append(self.tenants.code(tenant))
        self.gpus.append(gpus)
        self.arrival.append(arrival)
        self.work.append(work)
        self.weight.append(weight)
        self.priority.append(priority)
        self.deadline.append(NAN if deadline is None else deadline)
        self.alone_s.append(alone_s)
        self.state.append(0)
        for col in (self.first_start, self.end):
            col.append(NAN)
        for icol in (self.attempts, self.preemptions, self.failures):
            icol.append(0)
        for fcol in (self.run_s, self.energy_j):
            fcol.append(0.0)
        for dcol in self.device_s.values():
            dcol.append(NAN)
        return len(self.ids) - 1

    def settle(
        self,
        row: int,
        state: str,
        *,
        end: float | None = None,
        attempts: int = 0,
        failures: int = 0,
        preemptions: int = 0,
    ) -> None:
        """How the job of ``row`` ended (or stood when the simulation stopped)."""
        self.state[row] = _STATE_CODE[state]
        self.end[row] = NAN if end is None else end
        self.attempts[row] = attempts
        self.failures[row] = failures
        self.preemptions[row] = preemptions

    def use(
        self,
        row: int,
        first_start: float | None,
        run_s: float,
        device_s: Mapping[str, float],
        energy_j: float,
    ) -> None:
        """What the job of ``row`` used, over all its attempts."""
        self.first_start[row] = NAN if first_start is None else first_start
        self.run_s[row] = run_s
        self.energy_j[row] = energy_j
        for model, s in device_s.items():
            self._model(model)[row] = s

    def __len__(self) -> int:
        return len(self.ids)

    @overload
    def __getitem__(self, i: int) -> JobOutcome: ...
    @overload
    def __getitem__(self, i: slice) -> list[JobOutcome]: ...
    def __getitem__(self, i: int | slice) -> JobOutcome | list[JobOutcome]:
        if isinstance(i, slice):
            return [self._outcome(k) for k in range(*i.indices(len(self)))]
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"row {i} of {n}")
        return self._outcome(i % n if i < 0 else i)

    def __iter__(self) -> Iterator[JobOutcome]:
        for k in range(len(self)):
            yield self._outcome(k)

    def _outcome(self, k: int) -> JobOutcome:
        device_s = {m: v for m, col in self.device_s.items() if (v := col[k]) == v}
        return JobOutcome(
            id=self.ids[k], job_type=self.types.names[self.type_code[k]],
            tenant=self.tenants.names[self.tenant_code[k]], gpus=self.gpus[k],
            arrival=self.arrival[k], work=self.work[k], weight=self.weight[k],
            priority=self.priority[k], deadline=_opt(self.deadline[k]),
            state=STATES[self.state[k]], first_start=_opt(self.first_start[k]),
            end=_opt(self.end[k]), attempts=self.attempts[k], preemptions=self.preemptions[k],
            failures=self.failures[k], run_s=self.run_s[k], device_s=device_s,
            energy_j=self.energy_j[k], alone_s=self.alone_s[k],
        )  # fmt: skip

    def nbytes(self) -> int:
        """Bytes held by the arrays (not the id strings)."""
        cols: list[array[int] | array[float]] = [
                self.type_code, self.tenant_code, self.gpus, self.arrival, self.work,
                self.weight, self.priority, self.deadline, self.alone_s, self.state,
                self.first_start, self.end, self.attempts, self.preemptions, self.failures,
                self.run_s, self.energy_j, *self.device_s.values()]  # fmt: skip
        return sum(c.itemsize * len(c) for c in cols)


class SampleTable(Sequence[Sample]):
    """The fabric over time, one row per sample; busy devices per model in one column per
    model (0 before the model was first busy)."""

    def __init__(self) -> None:
        self.t = array("d")
        self.busy = array("q")
        self.devices = array("q")
        self.power_w = array("d")
        self.queued = array("q")
        self.running = array("q")
        self.busy_by_model: dict[str, array[int]] = {}

    def add(
        self,
        t: float,
        busy: int,
        devices: int,
        power_w: float,
        queued: int,
        running: int,
        busy_by_model: Mapping[str, int],
    ) -> None:
        """Append one sample."""
        self.t.append(t)
        self.busy.append(busy)
        self.devices.append(devices)
        self.power_w.append(power_w)
        self.queued.append(queued)
        self.running.append(running)
        cols = self.busy_by_model
        for model in busy_by_model:
            if model not in cols:
                cols[model] = array("q", [0]) * (len(self.t) - 1)
        for model, col in cols.items():
            col.append(busy_by_model.get(model, 0))

    def __len__(self) -> int:
        return len(self.t)

    @overload
    def __getitem__(self, i: int) -> Sample: ...
    @overload
    def __getitem__(self, i: slice) -> list[Sample]: ...
    def __getitem__(self, i: int | slice) -> Sample | list[Sample]:
        if isinstance(i, slice):
            return [self._sample(k) for k in range(*i.indices(len(self)))]
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"sample {i} of {n}")
        return self._sample(i % n if i < 0 else i)

    def __iter__(self) -> Iterator[Sample]:
        for k in range(len(self)):
            yield self._sample(k)

    def _sample(self, k: int) -> Sample:
        by_model = {m: v for m, col in self.busy_by_model.items() if (v := col[k])}
        return Sample(self.t[k], self.busy[k], self.devices[k], self.power_w[k],
                      self.queued[k], self.running[k], by_model)  # fmt: skip


# ----------------------------------------------------------------- columns for metrics


@dataclass(frozen=True, slots=True)
class JobColumns:
    """Every job's figures as arrays (rows in the result's order); ``tenant`` codes index
    ``tenants`` (in the order first seen); ``device_total`` is each job's device-seconds
    over all models."""

    ids: Sequence[str]
    tenants: Sequence[str]
    tenant: IntArray
    gpus: IntArray
    arrival: FloatArray
    deadline: FloatArray
    alone_s: FloatArray
    state: IntArray
    first_start: FloatArray
    end: FloatArray
    preemptions: IntArray
    failures: IntArray
    energy_j: FloatArray
    device_total: FloatArray

    def __len__(self) -> int:
        return int(self.arrival.size)

    def is_state(self, state: str) -> npt.NDArray[np.bool_]:
        """Rows in ``state``."""
        out: npt.NDArray[np.bool_] = self.state == _STATE_CODE[state]
        return out


def _f(values: Sequence[float] | array[float]) -> FloatArray:
    return np.array(values, dtype=np.float64)


def _i(values: Sequence[int] | array[int]) -> IntArray:
    return np.array(values, dtype=np.int64)


def _nan(x: float | None) -> float:
    return NAN if x is None else x


def job_columns(jobs: Sequence[JobOutcome]) -> JobColumns:
    """The columns of ``jobs`` (a :class:`JobTable`'s own, or built from a list)."""
    if isinstance(jobs, JobTable):
        n = len(jobs)
        total = np.zeros(n, dtype=np.float64)
        for col in jobs.device_s.values():
            v = _f(col)
            total = total + np.where(np.isnan(v), 0.0, v)
        return JobColumns(
            jobs.ids, jobs.tenants.names, _i(jobs.tenant_code), _i(jobs.gpus),
            _f(jobs.arrival), _f(jobs.deadline), _f(jobs.alone_s), _i(jobs.state),
            _f(jobs.first_start), _f(jobs.end), _i(jobs.preemptions), _i(jobs.failures),
            _f(jobs.energy_j), total,
        )  # fmt: skip
    tenants = Codes()
    return JobColumns(
        [j.id for j in jobs], tenants.names, _i([tenants.code(j.tenant) for j in jobs]),
        _i([j.gpus for j in jobs]), _f([j.arrival for j in jobs]),
        _f([_nan(j.deadline) for j in jobs]), _f([j.alone_s for j in jobs]),
        _i([_STATE_CODE.get(j.state, 0) for j in jobs]),
        _f([_nan(j.first_start) for j in jobs]), _f([_nan(j.end) for j in jobs]),
        _i([j.preemptions for j in jobs]), _i([j.failures for j in jobs]),
        _f([j.energy_j for j in jobs]), _f([sum(j.device_s.values()) for j in jobs]),
    )  # fmt: skip


@dataclass(frozen=True, slots=True)
class SampleColumns:
    """The samples as arrays, in time order (a stable sort if they were not)."""

    t: FloatArray
    busy: FloatArray
    devices: FloatArray
    power_w: FloatArray
    queued: FloatArray
    running: FloatArray
    by_model: Mapping[str, FloatArray]

    def __len__(self) -> int:
        return int(self.t.size)

    def busy_of(self, model: str) -> FloatArray:
        """Busy devices of ``model`` at each sample."""
        col = self.by_model.get(model)
        return np.zeros_like(self.t) if col is None else col


def sample_columns(samples: Sequence[Sample]) -> SampleColumns:
    """The columns of ``samples`` (a :class:`SampleTable`'s own, or built from a list)."""
    if isinstance(samples, SampleTable):
        cols = SampleColumns(
            _f(samples.t), _f(samples.busy), _f(samples.devices), _f(samples.power_w),
            _f(samples.queued), _f(samples.running),
            {m: _f(c) for m, c in samples.busy_by_model.items()},
        )  # fmt: skip
    else:
        models = sorted({m for s in samples for m in s.busy_by_model})
        cols = SampleColumns(
            _f([s.t for s in samples]), _f([s.busy for s in samples]),
            _f([s.devices for s in samples]), _f([s.power_w for s in samples]),
            _f([s.queued for s in samples]), _f([s.running for s in samples]),
            {m: _f([s.busy_by_model.get(m, 0) for s in samples]) for m in models},
        )  # fmt: skip
    t = cols.t
    if t.size > 1 and bool(np.any(np.diff(t) < 0)):
        o = np.argsort(t, kind="stable")
        cols = SampleColumns(
            t[o], cols.busy[o], cols.devices[o], cols.power_w[o], cols.queued[o],
            cols.running[o], {m: c[o] for m, c in cols.by_model.items()},
        )  # fmt: skip
    return cols
