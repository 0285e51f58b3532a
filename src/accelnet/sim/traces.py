"""Traces for the simulator: Gavel's traces and generator, the Philly table, accelnet's own
job logs, and :func:`load_trace`, which picks the right one from a source string.

Every loader validates what it reads and raises :class:`TraceError` naming the file, the
line (CSV/trace line number, or ``jobs[i]`` in JSON), the field and the value. Nothing read
from a file is ever evaluated. Device failures are in :mod:`accelnet.sim.failures`.

Units: times in seconds from the trace's start; ``work`` in steps of the job's type, as
the rate model (:class:`~accelnet.sim.workload.RateModel`) measures them. A duration in a
trace is a run time on the rate model's reference device model, alone and consolidated:
it becomes ``duration x reference_rate(job_type, gpus)`` steps.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
from pydantic import ValidationError

from accelnet.sched.spec import AcceleratorRequest
from accelnet.sim.failures import load_failures, mtbf_failures
from accelnet.sim.workload import RateModel, SimJob

__all__ = [
    "ACCEPTED",
    "GENERIC",
    "JOB_FIELDS",
    "SCHEMA",
    "PhillyTrace",
    "TraceError",
    "generate_gavel",
    "load_failures",
    "load_gavel_trace",
    "load_jobs",
    "load_philly",
    "load_trace",
    "mtbf_failures",
]

_NAME = re.compile(r"^[\w][\w.-]*$")  # a tenant name the job spec accepts
_GAVEL_FIELDS = (
    "job_type, command, working_directory, num_steps_arg, needs_data_dir, total_steps, "
    "scale_factor, priority_weight, SLO, arrival_time"
)
SCHEMA = "accelnet.trace/v1"
JOB_FIELDS = (
    "id",
    "arrival",
    "gpus",
    "job_type",
    "work",
    "duration",
    "tenant",
    "priority",
    "weight",
    "deadline",
    "accelerators",
    "checkpointable",
    "max_retries",
)
GENERIC = "generic"  # the job type of a job given by its duration alone
ACCEPTED = (
    "PATH.trace (a Gavel trace)",
    "philly:PATH[,scale=S][,limit=N][,seed=K] (or a file named philly*.csv)",
    "gavel-gen:n=N,lam=SECONDS[,single][,seed=K] (Gavel's generator)",
    f"PATH.csv or PATH.json (jobs in accelnet's format, {SCHEMA})",
)


class TraceError(ValueError):
    """A trace that cannot be read: ``"<file>:<line>: <field> = <value!r>: <what is wrong>"``.

    ``source`` is the file (or source string), ``line`` the line number (an ``int``), a
    JSON location such as ``"jobs[3]"``, or None; ``field`` the field or key, or None.
    """

    def __init__(
        self,
        message: str,
        *,
        source: str = "",
        line: int | str | None = None,
        field: str | None = None,
    ) -> None:
        super().__init__(message)
        self.source = source
        self.line = line
        self.field = field


@dataclass(frozen=True, slots=True)
class At:
    """Where a value was read (a file and a line, or a JSON location): builds errors and
    parses cells, each error naming this place, the field and the value."""

    source: str
    line: int | str | None = None

    def error(self, name: str, value: object, problem: str) -> TraceError:
        """``<source>:<line>: <name> = <value!r>: <problem>``."""
        where = self.source if self.line is None else f"{self.source}:{self.line}"
        return TraceError(
            f"{where}: {name} = {value!r}: {problem}",
            source=self.source,
            line=self.line,
            field=name,
        )

    def number(
        self, name: str, value: object, *, low: float | None = None, above: float | None = None
    ) -> float:
        """A finite number (``>= low``, ``> above``), from text or a JSON number."""
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise self.error(name, value, "must be a number")
        try:
            number = float(value.strip()) if isinstance(value, str) else float(value)
        except ValueError:
            raise self.error(name, value, "must be a number") from None
        if not math.isfinite(number):
            raise self.error(name, value, "must be a finite number")
        if low is not None and number < low:
            raise self.error(name, value, f"must be >= {low:g}")
        if above is not None and number <= above:
            raise self.error(name, value, f"must be > {above:g}")
        return number

    def integer(
        self, name: str, value: object, *, low: int | None = None, high: int | None = None
    ) -> int:
        """A whole number (``3``, ``"3"``, ``"3.0"``) within ``[low, high]``."""
        number = self.number(name, value)
        if number != int(number):
            raise self.error(name, value, "must be a whole number")
        if (low is not None and number < low) or (high is not None and number > high):
            bounds = (
                f"in [{low}, {high}]"
                if low is not None and high is not None
                else (f">= {low}" if low is not None else f"<= {high}")
            )
            raise self.error(name, value, f"must be a whole number {bounds}")
        return int(number)

    def flag(self, name: str, value: object) -> bool:
        """``true``/``false``/``1``/``0`` (any case), or a JSON boolean."""
        if isinstance(value, bool):
            return value
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
        if isinstance(value, str) and value.strip().lower() in ("true", "false", "1", "0"):
            return value.strip().lower() in ("true", "1")
        raise self.error(name, value, "must be true, false, 1 or 0")

    def text(self, name: str, value: object) -> str:
        """A non-empty string."""
        if not isinstance(value, str) or not value.strip():
            raise self.error(name, value, "must be a non-empty string")
        return value.strip()

    def job(self, **fields: object) -> SimJob:
        """A :class:`SimJob`; its own checks become errors at this place."""
        try:
            return SimJob(**fields)  # type: ignore[arg-type]
        except (ValueError, TypeError) as exc:
            raise self.error("job", fields.get("id"), str(exc)) from None


class Rates:
    """A rate model's reference rates, each looked up once, with errors at a place."""

    def __init__(self, rates: RateModel) -> None:
        self.model = rates
        self.types = tuple(rates.job_types())
        self._known = frozenset(self.types)
        self._rates: dict[tuple[str, int], float | None] = {}
        self._runnable: dict[int, tuple[str, ...]] = {}

    def known(self, job_type: str) -> bool:
        """Whether the model lists ``job_type``."""
        return job_type in self._known

    def get(self, job_type: str, gpus: int) -> float | None:
        """Steps/s on the reference model; None if the model has no (usable) rate."""
        key = (job_type, gpus)
        if key not in self._rates:
            try:
                rate: float | None = float(self.model.reference_rate(job_type, gpus))
            except (LookupError, ValueError):
                rate = None
            self._rates[key] = (
                rate if rate is not None and math.isfinite(rate) and rate > 0 else None
            )
        return self._rates[key]

    def rate(self, at: At, job_type: str, gpus: int) -> float:
        """Steps/s on the reference model, or an error naming the job type at ``at``."""
        rate = self.get(job_type, gpus)
        if rate is None:
            problem = f"the rate model has no rate for it on {gpus} x {self.model.reference}"
            raise at.error("job_type", job_type, problem)
        return rate

    def runnable(self, gpus: int) -> tuple[str, ...]:
        """The listed job types with a rate for a gang of ``gpus`` (in the model's order)."""
        if gpus not in self._runnable:
            self._runnable[gpus] = tuple(t for t in self.types if self.get(t, gpus) is not None)
        return self._runnable[gpus]

    def unknown(self, at: At, job_type: str) -> TraceError:
        """The error for a job type the model does not list."""
        shown = ", ".join(self.types[:8]) + (", ..." if len(self.types) > 8 else "")
        return at.error("job_type", job_type, f"unknown job type; the rate model knows: {shown}")


def read_text(path: str | Path) -> tuple[str, str]:
    """``(name, text)`` of a trace file, or an error naming it."""
    name = str(path)
    try:
        return name, Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise TraceError(f"{name}: no such file", source=name) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise TraceError(f"{name}: cannot be read: {exc}", source=name) from None


def csv_rows(name: str, text: str) -> Iterator[tuple[int, list[str]]]:
    """``(line, cells)`` of each non-blank CSV row after the header (line numbers of the
    file, where the row starts)."""
    reader = csv.reader(io.StringIO(text, newline=""))
    start = 1
    try:
        for row in reader:
            if any(cell.strip() for cell in row):
                yield start, row
            start = reader.line_num + 1
    except csv.Error as exc:
        raise TraceError(f"{name}:{start}: malformed CSV: {exc}", source=name, line=start) from None


def header(
    name: str,
    rows: Iterator[tuple[int, list[str]]],
    allowed: Sequence[str],
    required: Sequence[str],
) -> list[str]:
    """The CSV header's column names, checked: none unknown, none twice, all required."""
    first = next(rows, None)
    if first is None:
        raise TraceError(f"{name}: empty file: a header line is required", source=name, line=1)
    at = At(name, first[0])
    columns = [cell.strip() for cell in first[1]]
    unknown = [c for c in columns if c not in allowed]
    if unknown:
        raise at.error("columns", unknown, f"unknown column(s); allowed: {', '.join(allowed)}")
    twice = sorted({c for c in columns if columns.count(c) > 1})
    if twice:
        raise at.error("columns", twice, "column(s) given twice")
    missing = [c for c in required if c not in columns]
    if missing:
        raise at.error("columns", columns, f"missing required column(s): {', '.join(missing)}")
    return columns


# ---------------------------------------------------------------- Gavel


def load_gavel_trace(path: str | Path, rates: RateModel) -> list[SimJob]:
    """Jobs of a Gavel ``.trace`` file (tab-separated, 10 fields a line).

    Ids ``gavel-00000``, ... in file order; ``work`` = total_steps, ``gpus`` =
    scale_factor, ``weight`` = priority_weight, ``arrival`` = arrival_time. Gavel's SLO is
    a multiple of the job's run time alone: a negative SLO (Gavel writes -1) means no
    deadline; a positive one sets ``deadline = arrival + SLO x work / reference_rate``
    (the run time alone on the rate model's reference device model). The command,
    working directory, num_steps_arg and needs_data_dir fields are not used.
    """
    name, text = read_text(path)
    table = Rates(rates)
    jobs: list[SimJob] = []
    for line, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        at = At(name, line)
        cells = raw.split("\t")
        if len(cells) != 10:
            raise at.error(
                "fields",
                len(cells),
                f"a Gavel trace line has 10 tab-separated fields: {_GAVEL_FIELDS}",
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
        jobs.append(
            at.job(
                id=f"gavel-{len(jobs):05d}",
                arrival=arrival,
                job_type=job_type,
                gpus=gpus,
                work=work,
                weight=weight,
                deadline=deadline,
            )
        )
    return jobs


def generate_gavel(
    n: int, lam: float, seed: int, rates: RateModel, multi_gpu: bool = True
) -> list[SimJob]:
    """``n`` jobs as Gavel's simulator generates them (ids ``gen-00000``, ...).

    With ``numpy.random.default_rng(seed)`` (same seed, same list): Poisson arrivals with a
    mean inter-arrival time of ``lam`` seconds, the first at 0 (``lam`` 0: all at 0); GPUs
    1 (70%), 2 (10%), 4 (15%) or 8 (5%), or always 1 if not ``multi_gpu``; a run time alone
    on the reference model of 10^U(1.5, 3) minutes with probability 0.8, else 10^U(3, 4)
    minutes; the job type uniform over the rate model's job types that have a rate for the
    job's GPU count (Gavel likewise draws again until the type can run distributed), and
    ``work = run time x reference_rate(job_type, gpus)`` steps.
    """
    if n < 0:
        raise ValueError(f"n = {n!r}: the number of jobs must be >= 0")
    if not (math.isfinite(lam) and lam >= 0):
        raise ValueError(f"lam = {lam!r}: the mean inter-arrival time must be >= 0 seconds")
    table = Rates(rates)
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(lam, n) if lam > 0 else np.zeros(n)
    arrivals = np.cumsum(gaps) - (gaps[0] if n else 0.0)
    draw = rng.random(n)
    counts = np.select([draw < 0.7, draw < 0.8, draw < 0.95], [1, 2, 4], 8)
    if not multi_gpu:
        counts = np.ones(n, dtype=np.int64)
    short = rng.random(n) < 0.8
    exponent = np.where(short, rng.uniform(1.5, 3.0, n), rng.uniform(3.0, 4.0, n))
    run_s = 60.0 * np.power(10.0, exponent)
    pick = rng.random(n)
    jobs: list[SimJob] = []
    for i in range(n):
        gpus = int(counts[i])
        types = table.runnable(gpus)
        if not types:
            raise ValueError(f"the rate model has no job type with a rate on {gpus} GPU(s)")
        job_type = types[min(int(pick[i] * len(types)), len(types) - 1)]
        work = float(run_s[i]) * table.rate(At("gavel-gen"), job_type, gpus)
        jobs.append(
            SimJob(
                id=f"gen-{i:05d}",
                arrival=float(arrivals[i]),
                job_type=job_type,
                gpus=gpus,
                work=work,
            )
        )
    return jobs


# ---------------------------------------------------------------- Philly


@dataclass(slots=True)
class PhillyTrace:
    """The jobs of the Philly table and notes on how they were made (``notes[0]``: how job
    types were chosen; then what was dropped, limited or scaled). ``rows`` counts the
    table's rows, ``dropped`` those that made no job (``len(jobs) + dropped == rows``
    unless a limit cut the jobs)."""

    jobs: list[SimJob]
    notes: list[str] = field(default_factory=list)
    rows: int = 0
    dropped: int = 0


_PHILLY_COLUMNS = ("timestamp", "duration", "num_gpus", "gpu_time", "cluster")


def load_philly(
    path: str | Path,
    rates: RateModel,
    seed: int = 0,
    limit: int | None = None,
    time_scale: float = 1.0,
) -> PhillyTrace:
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
    device model: ``work = duration x reference_rate(job_type, gpus)``. ``limit`` keeps
    the first ``limit`` jobs by arrival (types are drawn before, so a limit does not
    change them).
    """
    if not (math.isfinite(time_scale) and time_scale > 0):
        raise ValueError(f"time_scale = {time_scale!r}: must be > 0")
    if limit is not None and limit < 0:
        raise ValueError(f"limit = {limit!r}: must be >= 0")
    name, text = read_text(path)
    rows = csv_rows(name, text)
    columns = header(name, rows, _PHILLY_COLUMNS, ("timestamp", "duration", "num_gpus", "cluster"))
    i_ts, i_dur, i_gpus, i_cl = (
        columns.index(c) for c in ("timestamp", "duration", "num_gpus", "cluster")
    )
    seconds: dict[str, float] = {}
    kept: list[tuple[float, float, int, str]] = []
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
        if not _NAME.match(tenant) or len(tenant) > 64:
            raise at.error("cluster", row[i_cl], "must be a name (letters, digits, _ . -)")
        kept.append((when, duration, gpus, tenant))
    kept.sort(key=lambda r: r[0])
    return _philly_jobs(name, kept, Rates(rates), seed, limit, time_scale, (no_duration, no_gpus))


def _philly_jobs(
    name: str,
    kept: list[tuple[float, float, int, str]],
    table: Rates,
    seed: int,
    limit: int | None,
    time_scale: float,
    dropped: tuple[int, int],
) -> PhillyTrace:
    """Typed, scaled and limited jobs from the kept rows (sorted by arrival)."""
    notes = [
        f"job types: one uniform draw per job in arrival order (numpy default_rng({seed})) "
        f"among the rate model's {len(table.types)} job types with a rate for its GPU "
        f"count; durations are run times on {table.model.reference}: work = duration x "
        "its reference rate"
    ]
    pick = np.random.default_rng(seed).random(len(kept))
    typed: list[tuple[float, float, int, str, str]] = []
    unrated: dict[int, int] = {}
    for (when, duration, gpus, tenant), u in zip(kept, pick.tolist(), strict=True):
        types = table.runnable(gpus)
        if types:
            job_type = types[min(int(u * len(types)), len(types) - 1)]
            typed.append((when, duration, gpus, tenant, job_type))
        else:
            unrated[gpus] = unrated.get(gpus, 0) + 1
    earliest = typed[0][0] if typed else 0.0
    jobs = [
        SimJob(
            id=f"philly-{i:05d}",
            arrival=(when - earliest) / time_scale,
            job_type=job_type,
            gpus=gpus,
            work=duration * table.rate(At(name), job_type, gpus),
            tenant=tenant,
        )
        for i, (when, duration, gpus, tenant, job_type) in enumerate(typed)
    ]
    total = len(kept) + sum(dropped)
    no_rate = sum(unrated.values())
    notes.append(
        f"{name}: {total} rows; {len(jobs)} jobs kept; {sum(dropped) + no_rate} dropped "
        f"({dropped[0]} with duration <= 0, {dropped[1]} with num_gpus <= 0, {no_rate} "
        "whose GPU count no job type has a rate for"
        + ("".join(f"; {k} x {g} GPUs" for g, k in sorted(unrated.items())))
        + ")"
    )
    if time_scale != 1:
        notes.append(f"arrivals replayed {time_scale:g}x faster (run times unchanged)")
    if limit is not None and limit < len(jobs):
        notes.append(f"limited to the first {limit} of {len(jobs)} jobs by arrival")
        jobs = jobs[:limit]
    return PhillyTrace(jobs, notes, rows=total, dropped=sum(dropped) + no_rate)


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


# ---------------------------------------------------------------- accelnet's own format


def load_jobs(path: str | Path, rates: RateModel) -> list[SimJob]:
    """Jobs of a user's log in accelnet's format: CSV with a header, or JSON
    ``{"schema": "accelnet.trace/v1", "jobs": [{...}, ...]}``.

    Fields (:data:`JOB_FIELDS`): ``arrival`` (s, required), ``gpus`` (whole, >= 1,
    required), and either ``job_type`` + ``work`` (steps) or ``duration`` (seconds alone on
    the rate model's reference model; ``job_type`` defaults to ``generic``; ``work =
    duration x reference_rate``). Optional: ``id`` (default ``job-<n>``, n counting jobs
    from 0), ``tenant``, ``priority``, ``weight``, ``deadline`` (absolute s),
    ``accelerators`` (e.g. ``H100:4``), ``checkpointable`` (true/false/1/0),
    ``max_retries``. An empty CSV cell or a JSON null is an absent field.
    """
    name, text = read_text(path)
    suffix = Path(path).suffix.lower()
    records: list[tuple[At, dict[str, object]]]
    if suffix == ".csv":
        rows = csv_rows(name, text)
        columns = header(name, rows, JOB_FIELDS, ("arrival", "gpus"))
        records = []
        for line, row in rows:
            at = At(name, line)
            if len(row) != len(columns):
                raise at.error("columns", len(row), f"expected {len(columns)}: {','.join(columns)}")
            records.append((at, {c: v for c, v in zip(columns, row, strict=True) if v.strip()}))
    elif suffix == ".json":
        records = _json_records(name, text)
    else:
        raise TraceError(f"{name}: accelnet job logs are .csv or .json files", source=name)
    table = Rates(rates)
    jobs: list[SimJob] = []
    first: dict[str, At] = {}
    for at, record in records:
        job = _job(at, record, len(jobs), table)
        if job.id in first:
            raise at.error("id", job.id, f"duplicate job id (first at {_place(first[job.id])})")
        first[job.id] = at
        jobs.append(job)
    return jobs


def _place(at: At) -> str:
    return at.source if at.line is None else f"{at.source}:{at.line}"


def _json_records(name: str, text: str) -> list[tuple[At, dict[str, object]]]:
    """``(place, fields)`` of each job of a JSON log, its shape checked."""
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TraceError(
            f"{name}:{exc.lineno}: invalid JSON: {exc.msg} (column {exc.colno})",
            source=name,
            line=exc.lineno,
        ) from None
    top = At(name)
    if not isinstance(document, dict):
        raise top.error(
            "document",
            type(document).__name__,
            f'must be an object {{"schema": "{SCHEMA}", "jobs": [...]}}',
        )
    extra = sorted(set(document) - {"schema", "jobs"})
    if extra:
        raise top.error("keys", extra, "unknown top-level key(s); allowed: schema, jobs")
    if document.get("schema") != SCHEMA:
        raise top.error("schema", document.get("schema"), f'must be "{SCHEMA}"')
    items = document.get("jobs")
    if not isinstance(items, list):
        raise top.error("jobs", items, "must be a list of job objects")
    records: list[tuple[At, dict[str, object]]] = []
    for i, item in enumerate(items):
        at = At(name, f"jobs[{i}]")
        if not isinstance(item, dict):
            raise at.error("job", item, "must be an object")
        unknown = [k for k in item if k not in JOB_FIELDS]
        if unknown:
            raise at.error(
                unknown[0], item[unknown[0]], f"unknown key; allowed: {', '.join(JOB_FIELDS)}"
            )
        records.append((at, {k: v for k, v in item.items() if v is not None}))
    return records


def _job(at: At, r: Mapping[str, object], index: int, table: Rates) -> SimJob:
    """One job of accelnet's format from its present fields."""
    for needed in ("arrival", "gpus"):
        if needed not in r:
            raise at.error(needed, None, "required")
    arrival = at.number("arrival", r["arrival"], low=0)
    gpus = at.integer("gpus", r["gpus"], low=1)
    if "work" in r and "duration" in r:
        raise at.error("duration", r["duration"], "give either work (steps) or duration, not both")
    if "work" in r:
        if "job_type" not in r:
            raise at.error("job_type", None, "required with work (work is in its steps)")
        job_type = at.text("job_type", r["job_type"])
        work = at.number("work", r["work"], above=0)
        if not table.known(job_type) and table.get(job_type, gpus) is None:
            raise table.unknown(at, job_type)
    elif "duration" in r:
        job_type = at.text("job_type", r["job_type"]) if "job_type" in r else GENERIC
        duration = at.number("duration", r["duration"], above=0)
        work = duration * table.rate(at, job_type, gpus)
    else:
        raise at.error("work", None, "give work (steps, with job_type) or duration (seconds)")
    fields: dict[str, object] = {
        "id": at.text("id", r["id"]) if "id" in r else f"job-{index}",
        "arrival": arrival,
        "gpus": gpus,
        "job_type": job_type,
        "work": work,
    }
    if "tenant" in r:
        tenant = at.text("tenant", r["tenant"])
        if not _NAME.match(tenant) or len(tenant) > 64:
            raise at.error("tenant", r["tenant"], "must be a name (letters, digits, _ . -)")
        fields["tenant"] = tenant
    if "priority" in r:
        fields["priority"] = at.integer("priority", r["priority"], low=-1000, high=1000)
    if "weight" in r:
        fields["weight"] = at.number("weight", r["weight"], above=0)
    if "deadline" in r:
        fields["deadline"] = at.number("deadline", r["deadline"], low=arrival)
    if "checkpointable" in r:
        fields["checkpointable"] = at.flag("checkpointable", r["checkpointable"])
    if "max_retries" in r:
        fields["max_retries"] = at.integer("max_retries", r["max_retries"], low=0, high=100)
    if "accelerators" in r:
        fields["accelerators"] = _accelerators(at, r["accelerators"], gpus)
    return at.job(**fields)


def _accelerators(at: At, value: object, gpus: int) -> str:
    """An accelerator request (``H100:4``, ``any:2``, ``A100|H100:8``) matching ``gpus``."""
    text = at.text("accelerators", value)
    try:
        request = AcceleratorRequest.model_validate(text)
    except ValidationError as exc:
        problem = exc.errors()[0]["msg"].removeprefix("Value error, ")
        raise at.error("accelerators", value, problem) from None
    if request.share >= 1 and request.count != gpus:
        raise at.error("accelerators", value, f"asks for {request.count} devices but gpus = {gpus}")
    return text


# ---------------------------------------------------------------- the dispatcher


def load_trace(source: str, rates: RateModel, seed: int = 0) -> tuple[list[SimJob], list[str]]:
    """``(jobs, notes)`` of a trace source; the forms are in :data:`ACCEPTED`:
    ``*.trace`` (Gavel), ``philly:PATH[,scale=S][,limit=N][,seed=K]`` or a file named
    ``philly*.csv`` (Philly), ``gavel-gen:n=N,lam=S[,single][,seed=K]`` (Gavel's
    generator), other ``*.csv``/``*.json`` (accelnet's format). ``seed`` is the default
    seed of the generator and of Philly's job types."""
    text = source.strip()
    if text.startswith("gavel-gen:"):
        opts = _options(
            source, text[len("gavel-gen:") :].split(","), {"n", "lam", "seed", "single"}
        )
        at = At(source)
        for needed in ("n", "lam"):
            if needed not in opts:
                raise at.error(needed, None, "required: gavel-gen:n=N,lam=SECONDS")
        n = at.integer("n", opts["n"], low=0)
        lam = at.number("lam", opts["lam"], low=0)
        seed = at.integer("seed", opts["seed"]) if "seed" in opts else seed
        multi = "single" not in opts
        jobs = generate_gavel(n, lam, seed, rates, multi_gpu=multi)
        return jobs, [
            f"Gavel's generator: n={n}, lam={lam:g} s, seed={seed}, "
            f"{'multi-GPU' if multi else 'single-GPU'}; run times on "
            f"{rates.reference}"
        ]
    if text.startswith("philly:"):
        parts = text[len("philly:") :].split(",")
        opts = _options(source, parts[1:], {"scale", "limit", "seed"})
        at = At(source)
        trace = load_philly(
            _existing(source, parts[0].strip()),
            rates,
            seed=at.integer("seed", opts["seed"]) if "seed" in opts else seed,
            limit=at.integer("limit", opts["limit"], low=0) if "limit" in opts else None,
            time_scale=at.number("scale", opts["scale"], above=0) if "scale" in opts else 1.0,
        )
        return trace.jobs, trace.notes
    path = Path(text)
    suffix = path.suffix.lower()
    if suffix not in (".trace", ".csv", ".json"):
        raise TraceError(
            f"{source}: unknown trace source; accepted: {'; '.join(ACCEPTED)}", source=source
        )
    _existing(source, text)
    if suffix == ".trace":
        jobs = load_gavel_trace(path, rates)
        return jobs, [
            f"Gavel trace {path}: {len(jobs)} jobs; work = total_steps; a positive "
            f"SLO sets deadline = arrival + SLO x run time alone on "
            f"{rates.reference}"
        ]
    if suffix == ".csv" and path.name.lower().startswith("philly"):
        trace = load_philly(path, rates, seed=seed)
        return trace.jobs, trace.notes
    jobs = load_jobs(path, rates)
    return jobs, [f"{path}: {len(jobs)} jobs ({SCHEMA})"]


def _existing(source: str, path: str) -> Path:
    """``path`` if it is a file, else an error naming it."""
    if not path or not Path(path).is_file():
        raise TraceError(f"{path or source}: no such file (trace source {source!r})", source=source)
    return Path(path)


def _options(source: str, parts: Sequence[str], allowed: set[str]) -> dict[str, str]:
    """``key=value`` (or a bare flag) options of a source string, each known, none twice."""
    at = At(source)
    opts: dict[str, str] = {}
    for part in parts:
        key, _, value = part.strip().partition("=")
        key = key.strip()
        if not key:
            continue
        if key not in allowed:
            raise at.error(key, value, f"unknown option; allowed: {', '.join(sorted(allowed))}")
        if key in opts:
            raise at.error(key, value, "option given twice")
        opts[key] = value.strip()
    return opts
