"""Traces read lazily: each yields its jobs one at a time, in arrival order.

A simulation of a million jobs should not hold a million :class:`SimJob` objects (and their
job specs) before it starts: :class:`~accelnet.sim.engine.Simulation` pulls jobs from an
iterator just before they arrive. These readers make such iterators:

- :func:`iter_gavel`: Gavel's generator, drawn in blocks of :data:`BLOCK` jobs (a
  trace of up to ``BLOCK`` jobs is the one :func:`~accelnet.sim.traces.generate_gavel`
  always made);
- :func:`read_gavel_trace`: a Gavel ``.trace`` file, line by line, in file order (Gavel's
  files are in arrival order; the simulation checks);
- :func:`stream_philly`: the Philly table, read row by row into compact columns (about 30
  bytes a row: the table must be sorted by arrival before its first job is known), then
  yielded job by job, replayed ``time_scale`` times faster and ``repeat`` times over.

Errors are :class:`~accelnet.sim.traceio.TraceError` naming the file and the line, raised
when the bad line is read (for the Philly table: before the first job, since every row is
read then).
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TextIO

import numpy as np
import numpy.typing as npt

from accelnet.sim.columns import Codes
from accelnet.sim.traceio import NAME, At, Rates, TraceError, csv_rows, header, open_text
from accelnet.sim.workload import RateModel, SimJob

BLOCK = 65_536
"""Jobs :func:`iter_gavel` draws at a time (its random stream depends on it)."""

GAVEL_FIELDS = (
    "job_type, command, working_directory, num_steps_arg, needs_data_dir, total_steps, "
    "scale_factor, priority_weight, SLO, arrival_time"
)
PHILLY_COLUMNS = ("timestamp", "duration", "num_gpus", "gpu_time", "cluster")


# ---------------------------------------------------------------- Gavel's generator


def iter_gavel(
    n: int, lam: float, seed: int, rates: RateModel, multi_gpu: bool = True
) -> Iterator[SimJob]:
    """``n`` jobs as Gavel's simulator generates them (ids ``gen-00000``, ...), lazily.

    With ``numpy.random.default_rng(seed)`` (same seed, same jobs), block by block of
    :data:`BLOCK` jobs (the last block may be shorter): Poisson arrivals with a mean
    inter-arrival time of ``lam`` seconds, the first at 0 (``lam`` 0: all at 0); GPUs 1
    (70%), 2 (10%), 4 (15%) or 8 (5%), or always 1 if not ``multi_gpu``; a run time alone
    on the reference model of 10^U(1.5, 3) minutes with probability 0.8, else 10^U(3, 4)
    minutes; the job type uniform over the rate model's job types that have a rate for the
    job's GPU count (Gavel likewise draws again until the type can run distributed), and
    ``work = run time x reference_rate(job_type, gpus)`` steps. Within a block the draws
    come quantity by quantity (all gaps, then all GPU draws, ...). Arguments are checked
    at once; jobs are made as they are asked for (memory does not grow with ``n``).
    """
    if n < 0:
        raise ValueError(f"n = {n!r}: the number of jobs must be >= 0")
    if not (math.isfinite(lam) and lam >= 0):
        raise ValueError(f"lam = {lam!r}: the mean inter-arrival time must be >= 0 seconds")
    return _gavel_jobs(n, lam, np.random.default_rng(seed), Rates(rates), multi_gpu)


def _gavel_jobs(
    n: int, lam: float, rng: np.random.Generator, table: Rates, multi_gpu: bool
) -> Iterator[SimJob]:
    at = At("gavel-gen")
    total = 0.0  # sum of the gaps drawn so far
    first_gap = 0.0
    done = 0
    while done < n:
        k = min(BLOCK, n - done)
        gaps = rng.exponential(lam, k) if lam > 0 else np.zeros(k)
        if done == 0:
            first_gap = float(gaps[0])
        # a running sum over the blocks, added left to right as one cumsum would
        sums = np.cumsum(np.concatenate(([total], gaps)))[1:]
        total = float(sums[-1])
        arrivals = (sums - first_gap).tolist()
        draw = rng.random(k)
        counts = np.select([draw < 0.7, draw < 0.8, draw < 0.95], [1, 2, 4], 8)
        if not multi_gpu:
            counts = np.ones(k, dtype=np.int64)
        short = rng.random(k) < 0.8
        exponent = np.where(short, rng.uniform(1.5, 3.0, k), rng.uniform(3.0, 4.0, k))
        run_s = (60.0 * np.power(10.0, exponent)).tolist()
        pick = rng.random(k).tolist()
        for i, gpus in enumerate(counts.tolist()):
            types = table.runnable(gpus)
            if not types:
                raise ValueError(f"the rate model has no job type with a rate on {gpus} GPU(s)")
            job_type = types[min(int(pick[i] * len(types)), len(types) - 1)]
            yield SimJob(
                id=f"gen-{done + i:05d}",
                arrival=arrivals[i],
                job_type=job_type,
                gpus=gpus,
                work=run_s[i] * table.rate(at, job_type, gpus),
            )
        done += k


# ---------------------------------------------------------------- Gavel's trace files


def read_gavel_trace(path: str | Path, rates: RateModel) -> Iterator[SimJob]:
    """Jobs of a Gavel ``.trace`` file (tab-separated, 10 fields a line), line by line.

    Ids ``gavel-00000``, ... in file order; ``work`` = total_steps, ``gpus`` =
    scale_factor, ``weight`` = priority_weight, ``arrival`` = arrival_time. Gavel's SLO is
    a multiple of the job's run time alone: a negative SLO (Gavel writes -1) means no
    deadline; a positive one sets ``deadline = arrival + SLO x work / reference_rate``
    (the run time alone on the rate model's reference device model). The command,
    working directory, num_steps_arg and needs_data_dir fields are not used. The file is
    opened at once (a missing file is an error here); its lines are read as jobs are
    asked for.
    """
    name, fh = open_text(path)
    return _gavel_lines(name, fh, Rates(rates))


def _gavel_lines(name: str, fh: TextIO, table: Rates) -> Iterator[SimJob]:
    count = 0
    with fh:
        try:
            for line, raw in enumerate(fh, 1):
                if raw.strip():
                    yield _gavel_job(At(name, line), raw.rstrip("\r\n"), count, table)
                    count += 1
        except UnicodeDecodeError as exc:
            raise TraceError(f"{name}: cannot be read: {exc}", source=name) from None


def _gavel_job(at: At, raw: str, index: int, table: Rates) -> SimJob:
    cells = raw.split("\t")
    if len(cells) != 10:
        raise at.error(
            "fields", len(cells), f"a Gavel trace line has 10 tab-separated fields: {GAVEL_FIELDS}"
        )
    job_type = cells[0].strip()
    if not table.known(job_type):
        raise table.unknown(at, job_type)
    work = at.number("total_steps", cells[5], above=0)
    gpus = at.integer("scale_factor", cells[6], low=1)
    weight = at.number("priority_weight", cells[7], above=0)
    slo = at.number("SLO", cells[8])
    arrival = at.number("arrival_time", cells[9], low=0)
    deadline = None
    if slo == 0:
        raise at.error(
            "SLO",
            cells[8],
            "must be > 0 (a multiple of the run time alone) or negative (no deadline)",
        )
    if slo > 0:
        deadline = arrival + slo * work / table.rate(at, job_type, gpus)
    return at.job(
        id=f"gavel-{index:05d}",
        arrival=arrival,
        job_type=job_type,
        gpus=gpus,
        work=work,
        weight=weight,
        deadline=deadline,
    )


# ---------------------------------------------------------------- the Philly table


@dataclass(slots=True)
class PhillyStream:
    """The Philly table's jobs, yielded lazily (``jobs``, in arrival order, ``count`` of
    them) and notes on how they were made (``notes[0]``: how job types were chosen; then
    what was dropped, limited, scaled or repeated). ``rows`` counts the table's rows,
    ``dropped`` those that made no job."""

    jobs: Iterator[SimJob]
    count: int
    notes: list[str] = field(default_factory=list)
    rows: int = 0
    dropped: int = 0


@dataclass(slots=True)
class _Kept:
    """The kept rows as columns (file order until sorted)."""

    when: array[float] = field(default_factory=lambda: array("d"))
    duration: array[float] = field(default_factory=lambda: array("d"))
    gpus: array[int] = field(default_factory=lambda: array("q"))
    tenant: array[int] = field(default_factory=lambda: array("l"))
    tenants: Codes = field(default_factory=Codes)


def stream_philly(
    path: str | Path,
    rates: RateModel,
    seed: int = 0,
    limit: int | None = None,
    time_scale: float = 1.0,
    repeat: int = 1,
) -> PhillyStream:
    """Jobs of the Philly table (``timestamp,duration,num_gpus,gpu_time,cluster``).

    ``arrival = (timestamp - earliest kept timestamp) / time_scale`` (``time_scale`` 10
    replays the arrivals 10x faster; run times are not scaled); jobs sorted by arrival,
    ties in file order, ids ``philly-00000``, ... in that order; ``tenant`` = cluster,
    ``gpus`` = num_gpus. Rows with duration <= 0 or num_gpus <= 0 are dropped and counted
    in the notes; a malformed row is a :class:`TraceError` naming its line.

    Philly has no job types: with ``rng = numpy.random.default_rng(seed)``, one uniform
    draw per job in arrival order picks its type among the rate model's job types that
    have a rate for its GPU count (jobs whose GPU count no type has a rate for are dropped
    and counted). Philly's durations are taken as run times on the rate model's reference
    device model: ``work = duration x reference_rate(job_type, gpus)``.

    ``repeat`` R plays the table R times back to back: copy ``k`` (from 0) arrives ``k``
    spans later (the span: the last kept arrival, scaled), its job types drawn anew (the
    same rng, continued), its ids continuing the count (copy 0 is the table played once).
    ``time_scale`` 10 with ``repeat`` 10 is 10x the jobs over the table's own time span.
    ``limit`` keeps the first ``limit`` jobs by arrival (types are drawn before, so a
    limit does not change them). The table is read (row by row, into compact columns) and
    sorted now; jobs are made as they are asked for.
    """
    if not (math.isfinite(time_scale) and time_scale > 0):
        raise ValueError(f"time_scale = {time_scale!r}: must be > 0")
    if limit is not None and limit < 0:
        raise ValueError(f"limit = {limit!r}: must be >= 0")
    if repeat < 1:
        raise ValueError(f"repeat = {repeat!r}: must be >= 1")
    name, fh = open_text(path)
    with fh:
        kept, dropped = _philly_rows(name, fh)
    table = Rates(rates)
    order = np.argsort(np.array(kept.when, dtype=np.float64), kind="stable")
    gpus = np.array(kept.gpus, dtype=np.int64)[order]
    unrated: dict[int, int] = {}
    for g, k in zip(*np.unique(gpus, return_counts=True), strict=True):
        if not table.runnable(int(g)):
            unrated[int(g)] = int(k)
    typed = order[np.isin(gpus, list(unrated), invert=True)] if unrated else order
    per_copy = int(typed.size)
    total = per_copy * repeat
    count = total if limit is None else min(limit, total)
    notes = [
        f"job types: one uniform draw per job in arrival order (numpy default_rng({seed})) "
        f"among the rate model's {len(table.types)} job types with a rate for its GPU "
        f"count; durations are run times on {table.model.reference}: work = duration x "
        "its reference rate"
    ]
    rows = len(kept.when) + sum(dropped)
    no_rate = sum(unrated.values())
    notes.append(
        f"{name}: {rows} rows; {per_copy} jobs kept; {sum(dropped) + no_rate} dropped "
        f"({dropped[0]} with duration <= 0, {dropped[1]} with num_gpus <= 0, {no_rate} "
        "whose GPU count no job type has a rate for"
        + ("".join(f"; {k} x {g} GPUs" for g, k in sorted(unrated.items())))
        + ")"
    )
    if time_scale != 1:
        notes.append(f"arrivals replayed {time_scale:g}x faster (run times unchanged)")
    if repeat > 1:
        notes.append(
            f"the table played {repeat} times back to back ({total} jobs; each copy's job "
            "types drawn anew)"
        )
    if limit is not None and limit < total:
        notes.append(f"limited to the first {limit} of {total} jobs by arrival")
    jobs = _philly_jobs(name, kept, order, typed, table, seed, time_scale, repeat, count)
    return PhillyStream(jobs, count, notes, rows=rows, dropped=sum(dropped) + no_rate)


def _philly_rows(name: str, fh: TextIO) -> tuple[_Kept, tuple[int, int]]:
    """The kept rows (duration > 0, num_gpus > 0) and how many were dropped (by duration,
    by num_gpus)."""
    rows = csv_rows(name, fh)
    columns = header(name, rows, PHILLY_COLUMNS, ("timestamp", "duration", "num_gpus", "cluster"))
    i_ts, i_dur, i_gpus, i_cl = (
        columns.index(c) for c in ("timestamp", "duration", "num_gpus", "cluster")
    )
    seconds: dict[str, float] = {}
    kept = _Kept()
    no_duration = no_gpus = 0
    for line, row in rows:
        at = At(name, line)
        if len(row) != len(columns):
            raise at.error("columns", len(row), f"expected {len(columns)}: {','.join(columns)}")
        stamp = row[i_ts]
        when = seconds.get(stamp)
        if when is None:
            when = seconds[stamp] = _seconds(at, stamp)
        duration = at.number("duration", row[i_dur])
        gpus = at.integer("num_gpus", row[i_gpus])
        if duration <= 0:
            no_duration += 1
            continue
        if gpus <= 0:
            no_gpus += 1
            continue
        tenant = row[i_cl].strip()
        if not NAME.match(tenant) or len(tenant) > 64:
            raise at.error("cluster", row[i_cl], "must be a name (letters, digits, _ . -)")
        kept.when.append(when)
        kept.duration.append(duration)
        kept.gpus.append(gpus)
        kept.tenant.append(kept.tenants.code(tenant))
    return kept, (no_duration, no_gpus)


def _philly_jobs(
    name: str,
    kept: _Kept,
    order: npt.NDArray[np.intp],
    typed: npt.NDArray[np.intp],
    table: Rates,
    seed: int,
    time_scale: float,
    repeat: int,
    count: int,
) -> Iterator[SimJob]:
    """The jobs, copy after copy, each copy's types drawn as it begins."""
    if count == 0 or typed.size == 0:
        return
    rng = np.random.default_rng(seed)
    when = np.array(kept.when, dtype=np.float64)
    earliest = float(when[typed[0]])
    span = (float(when[typed[-1]]) - earliest) / time_scale
    rated = [False] * order.size
    for k in typed.tolist():
        rated[k] = True
    at = At(name)
    made = 0
    for copy in range(repeat):
        shift = copy * span
        pick = rng.random(order.size).tolist()  # one draw per kept row, in arrival order
        for k, u in zip(order.tolist(), pick, strict=True):
            if not rated[k]:
                continue
            gpus = kept.gpus[k]
            types = table.runnable(gpus)
            job_type = types[min(int(u * len(types)), len(types) - 1)]
            arrival = (kept.when[k] - earliest) / time_scale
            yield SimJob(
                id=f"philly-{made:05d}",
                arrival=arrival + shift if copy else arrival,
                job_type=job_type,
                gpus=gpus,
                work=kept.duration[k] * table.rate(at, job_type, gpus),
                tenant=kept.tenants.names[kept.tenant[k]],
            )
            made += 1
            if made == count:
                return


_ORIGIN = datetime(1970, 1, 1)


def _seconds(at: At, stamp: str) -> float:
    """Seconds since 1970 of an ISO timestamp (``2017-10-09 07:01:55``; naive = UTC)."""
    try:
        when = datetime.fromisoformat(stamp.strip())
    except ValueError:
        raise at.error(
            "timestamp", stamp, "must be a date and time like 2017-10-09 07:01:55"
        ) from None
    if when.tzinfo is not None:
        when = when.astimezone(UTC).replace(tzinfo=None)
    return (when - _ORIGIN).total_seconds()
