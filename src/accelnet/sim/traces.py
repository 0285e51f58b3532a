"""Traces for the simulator: Gavel's traces and generator, the Philly table, accelnet's own
job logs, and :func:`load_trace` / :func:`stream_trace`, which pick the right one from a
source string. The lazy readers are in :mod:`accelnet.sim.streams`; the shared parsing in
:mod:`accelnet.sim.traceio`.

Every loader validates what it reads and raises :class:`TraceError` naming the file, the
line (CSV/trace line number, or ``jobs[i]`` in JSON), the field and the value. Nothing read
from a file is ever evaluated. Device failures are in :mod:`accelnet.sim.failures`.

Units: times in seconds from the trace's start; ``work`` in steps of the job's type, as
the rate model (:class:`~accelnet.sim.workload.RateModel`) measures them. A duration in a
trace is a run time on the rate model's reference device model, alone and consolidated:
it becomes ``duration x reference_rate(job_type, gpus)`` steps (times the share, for a job
asking for a share of one device: its duration is wall time at that share).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from accelnet.sched.spec import AcceleratorRequest
from accelnet.sim.failures import load_failures, mtbf_failures
from accelnet.sim.streams import iter_gavel, read_gavel_trace, stream_philly
from accelnet.sim.traceio import (
    NAME,
    At,
    Rates,
    TraceError,
    csv_rows,
    header,
    read_text,
)
from accelnet.sim.workload import RateModel, SimJob

__all__ = [
    "ACCEPTED",
    "GENERIC",
    "JOB_FIELDS",
    "SCHEMA",
    "At",
    "PhillyTrace",
    "TraceError",
    "TraceStream",
    "csv_rows",
    "generate_gavel",
    "header",
    "iter_gavel",
    "load_failures",
    "load_gavel_trace",
    "load_jobs",
    "load_philly",
    "load_trace",
    "mtbf_failures",
    "read_gavel_trace",
    "read_text",
    "stream_philly",
    "stream_trace",
]

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
    "philly:PATH[,scale=S][,repeat=R][,limit=N][,seed=K] (or a file named philly*.csv)",
    "gavel-gen:n=N,lam=SECONDS[,single][,seed=K] (Gavel's generator)",
    f"PATH.csv or PATH.json (jobs in accelnet's format, {SCHEMA})",
)


# ---------------------------------------------------------------- Gavel


def load_gavel_trace(path: str | Path, rates: RateModel) -> list[SimJob]:
    """Jobs of a Gavel ``.trace`` file, all of them (:func:`read_gavel_trace` reads them
    lazily, and says what the fields become)."""
    return list(read_gavel_trace(path, rates))


def generate_gavel(
    n: int, lam: float, seed: int, rates: RateModel, multi_gpu: bool = True
) -> list[SimJob]:
    """``n`` jobs as Gavel's simulator generates them, all of them (:func:`iter_gavel`
    makes them lazily, and says how they are drawn)."""
    return list(iter_gavel(n, lam, seed, rates, multi_gpu))


# ---------------------------------------------------------------- Philly


@dataclass(slots=True)
class PhillyTrace:
    """The jobs of the Philly table and notes on how they were made (``notes[0]``: how job
    types were chosen; then what was dropped, limited or scaled). ``rows`` counts the
    table's rows, ``dropped`` those that made no job (``len(jobs) + dropped == rows``
    unless a limit cut the jobs or ``repeat`` played the table more than once)."""

    jobs: list[SimJob]
    notes: list[str] = field(default_factory=list)
    rows: int = 0
    dropped: int = 0


def load_philly(
    path: str | Path,
    rates: RateModel,
    seed: int = 0,
    limit: int | None = None,
    time_scale: float = 1.0,
    repeat: int = 1,
) -> PhillyTrace:
    """Jobs of the Philly table, all of them (:func:`stream_philly` yields them lazily and
    says how they are made)."""
    stream = stream_philly(path, rates, seed, limit, time_scale, repeat)
    return PhillyTrace(list(stream.jobs), stream.notes, stream.rows, stream.dropped)


# ---------------------------------------------------------------- accelnet's own format


def load_jobs(path: str | Path, rates: RateModel) -> list[SimJob]:
    """Jobs of a user's log in accelnet's format: CSV with a header, or JSON
    ``{"schema": "accelnet.trace/v1", "jobs": [{...}, ...]}``.

    Fields (:data:`JOB_FIELDS`): ``arrival`` (s, required), ``gpus`` (whole, >= 1,
    required), and either ``job_type`` + ``work`` (steps) or ``duration`` (seconds alone on
    the rate model's reference model; ``job_type`` defaults to ``generic``; ``work =
    duration x reference_rate``; for a share of a device, ``accelerators: T4:0.5``, the
    duration is wall time at that share: ``work = duration x reference_rate x share``).
    Optional: ``id`` (default ``job-<n>``, n counting jobs from 0), ``tenant``,
    ``priority``, ``weight``, ``deadline`` (absolute s), ``accelerators`` (e.g. ``H100:4``),
    ``checkpointable`` (true/false/1/0), ``max_retries``. An empty CSV cell or a JSON null
    is an absent field.
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
        # a share of a device runs at that share of its rate: a fractional job's duration
        # is its wall time at its share (as GPU-sharing traces record it)
        share = _share(at, r["accelerators"], gpus) if "accelerators" in r else 1.0
        work = duration * table.rate(at, job_type, gpus) * share
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
        if not NAME.match(tenant) or len(tenant) > 64:
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


def _share(at: At, value: object, gpus: int) -> float:
    """The share of a device the job's ``accelerators`` ask for (1.0 for whole devices)."""
    _accelerators(at, value, gpus)
    return AcceleratorRequest.model_validate(at.text("accelerators", value)).share


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


@dataclass(slots=True)
class TraceStream:
    """A trace source's jobs, yielded lazily in arrival order, how many there are (None
    when not known before they are read) and notes on how they were made."""

    jobs: Iterator[SimJob]
    count: int | None
    notes: list[str] = field(default_factory=list)


def load_trace(source: str, rates: RateModel, seed: int = 0) -> tuple[list[SimJob], list[str]]:
    """``(jobs, notes)`` of a trace source, every job in a list (:func:`stream_trace`
    yields them lazily; the forms are in :data:`ACCEPTED`)."""
    stream = stream_trace(source, rates, seed)
    return list(stream.jobs), stream.notes


def stream_trace(source: str, rates: RateModel, seed: int = 0) -> TraceStream:
    """The jobs of a trace source in arrival order (ties by id for files read whole), made
    as they are asked for where the source allows; the forms are in :data:`ACCEPTED`:
    ``*.trace`` (Gavel), ``philly:PATH[,scale=S][,repeat=R][,limit=N][,seed=K]`` or a file
    named ``philly*.csv`` (Philly), ``gavel-gen:n=N,lam=S[,single][,seed=K]`` (Gavel's
    generator), other ``*.csv``/``*.json`` (accelnet's format). ``seed`` is the default
    seed of the generator and of Philly's job types. The generator and the Philly table
    are lazy (a million generated jobs cost nothing until read); Gavel's trace files and
    accelnet's logs are read whole (they may be out of order) and sorted. Errors in the
    source string or a missing file are raised here."""
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
        return TraceStream(iter_gavel(n, lam, seed, rates, multi_gpu=multi), n, [
            f"Gavel's generator: n={n}, lam={lam:g} s, seed={seed}, "
            f"{'multi-GPU' if multi else 'single-GPU'}; run times on "
            f"{rates.reference}"
        ])  # fmt: skip
    if text.startswith("philly:"):
        parts = text[len("philly:") :].split(",")
        opts = _options(source, parts[1:], {"scale", "repeat", "limit", "seed"})
        at = At(source)
        philly = stream_philly(
            _existing(source, parts[0].strip()),
            rates,
            seed=at.integer("seed", opts["seed"]) if "seed" in opts else seed,
            limit=at.integer("limit", opts["limit"], low=0) if "limit" in opts else None,
            time_scale=at.number("scale", opts["scale"], above=0) if "scale" in opts else 1.0,
            repeat=at.integer("repeat", opts["repeat"], low=1) if "repeat" in opts else 1,
        )
        return TraceStream(philly.jobs, philly.count, philly.notes)
    path = Path(text)
    suffix = path.suffix.lower()
    if suffix not in (".trace", ".csv", ".json"):
        raise TraceError(
            f"{source}: unknown trace source; accepted: {'; '.join(ACCEPTED)}", source=source
        )
    _existing(source, text)
    if suffix == ".trace":
        jobs = load_gavel_trace(path, rates)
        notes = [
            f"Gavel trace {path}: {len(jobs)} jobs; work = total_steps; a positive "
            f"SLO sets deadline = arrival + SLO x run time alone on "
            f"{rates.reference}"
        ]
    elif suffix == ".csv" and path.name.lower().startswith("philly"):
        philly = stream_philly(path, rates, seed=seed)
        return TraceStream(philly.jobs, philly.count, philly.notes)
    else:
        jobs = load_jobs(path, rates)
        notes = [f"{path}: {len(jobs)} jobs ({SCHEMA})"]
    return TraceStream(iter(jobs), len(jobs), notes)


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
