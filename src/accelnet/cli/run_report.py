"""What ``accelnet run`` tells its user once the jobs are done (or the run is interrupted
or out of time): where the logs and outputs are, each job's result or the tail of its
output, what a rerun with a store file resumed, and what a stopped run left unfinished."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Group
from rich.text import Text

from accelnet.cli.render import JOB_STATE_STYLE
from accelnet.runtime.control.store import JobRecord

TAIL_LINES = 5  # lines of a log shown per job
_TAIL_BYTES = 16384  # read at most this much of a log's end
_MAX_NAMES = 8  # job names listed in one message before "and N more"
_MAX_TEXT = 300  # characters of a result's repr or an error shown
_ENDED = ("succeeded", "failed", "cancelled")


@dataclass(frozen=True, slots=True)
class LogTail:
    """The last lines of one task's log: which stream of which rank, and its file."""

    label: str  # "stdout", "rank 1 stderr"
    path: Path
    text: str


@dataclass(frozen=True, slots=True)
class JobOutcome:
    """One job as the report shows it. ``result`` is an entrypoint job's return value
    (``has_result`` False for a ``run`` job, or one that returned None or did not
    succeed); ``output`` its output folder if it wrote one; ``earlier`` True for a job that
    had finished in an earlier run on the same store file (not run again)."""

    id: str
    name: str
    state: str
    error: str | None
    has_result: bool
    result: Any
    output: Path | None
    tail: LogTail | None
    earlier: bool


def tail(path: Path, lines: int = TAIL_LINES) -> str:
    """The last ``lines`` lines of ``path`` (reads at most its last 16 KiB; invalid UTF-8
    replaced); '' if it is missing or empty. Never raises for a missing file."""
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - _TAIL_BYTES))
            data = f.read()
    except (FileNotFoundError, IsADirectoryError, PermissionError):
        return ""
    return "\n".join(data.decode(errors="replace").rstrip().splitlines()[-lines:])


def _task_logs(log_dir: Path, job_id: str, attempt: int, stream: str) -> list[tuple[int, Path]]:
    """The log files of the attempt's ranks for ``stream`` (only those a task wrote), by
    rank."""
    prefix, suffix = f"{job_id}.{attempt}.", f".{stream}"
    try:
        names = os.listdir(log_dir)
    except FileNotFoundError:
        return []
    found = []
    for name in names:
        rank = name[len(prefix) : -len(suffix)]
        if name.startswith(prefix) and name.endswith(suffix) and rank.isdigit():
            found.append((int(rank), log_dir / name))
    return sorted(found)


def _pick_tail(record: JobRecord, log_dir: Path) -> LogTail | None:
    """The log most worth showing: for a job that did not succeed the first rank's stderr
    that has any, else stdout; for one that did, rank 0's stdout, else its stderr."""
    if record.attempts == 0:
        return None
    streams = ("out", "err") if record.state.value == "succeeded" else ("err", "out")
    for stream in streams:
        for rank, path in _task_logs(log_dir, record.id, record.attempts, stream):
            text = tail(path)
            if text:
                name = "stdout" if stream == "out" else "stderr"
                gang = record.placement is not None and len(record.placement.devices) > 1
                label = f"rank {rank} {name}" if gang or rank else name
                return LogTail(label, path, text)
    return None


def outcome(record: JobRecord, log_dir: Path, output: Path, earlier: bool) -> JobOutcome:
    """What the report says of ``record``: its logs are under ``log_dir``, its outputs (if
    it wrote any) in ``output``. Reads files; never raises for missing ones."""
    value = record.result
    returned = (
        record.spec.entrypoint is not None
        and record.state.value == "succeeded"
        and value is not None
        and not (isinstance(value, list) and all(v is None for v in value))  # a gang's
    )
    return JobOutcome(
        id=record.id,
        name=record.spec.name,
        state=record.state.value,
        error=record.error,
        has_result=returned,
        result=record.result if returned else None,
        output=output if output.is_dir() else None,
        tail=_pick_tail(record, log_dir),
        earlier=earlier,
    )


def json_safe(value: Any) -> Any:
    """``value`` if JSON can hold it as it is, else its ``repr()`` (a string)."""
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return repr(value)
    return value


def _clip(text: str, limit: int = _MAX_TEXT) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def names(ids: Sequence[str]) -> str:
    """``a, b, c`` (the first few, then ``and N more``)."""
    shown = ", ".join(ids[:_MAX_NAMES])
    return shown + (f" and {len(ids) - _MAX_NAMES} more" if len(ids) > _MAX_NAMES else "")


def _jobs(n: int) -> str:
    return f"{n} job{'s' * (n != 1)}"


def resume_message(
    resumed: Sequence[str], finished: Sequence[str], new: Sequence[str], db: Path
) -> str | None:
    """What a rerun on store file ``db`` found there: the jobs it resumes (unfinished) and
    those it does not run again (finished); None if it found none of its jobs there."""
    if not resumed and not finished:
        return None
    parts = []
    if resumed:
        parts.append(f"resumed {_jobs(len(resumed))} ({names(resumed)}) from {db}")
    if finished:
        where = "" if resumed else f" in {db}"
        parts.append(
            f"{_jobs(len(finished)) if not resumed else len(finished)} already finished{where} "
            f"({names(finished)}): not run again"
        )
    if new:
        parts.append(f"{len(new)} new ({names(new)})")
    return "; ".join(parts)


def stopped_message(why: str, unfinished: Sequence[str], db: Path | None) -> str:
    """What a run stopped before its jobs ended (``why``: ``interrupted``, ``not finished
    within 60 s``) says of the jobs it left, and how a rerun goes on."""
    head = f"{why}: {_jobs(len(unfinished))} unfinished"
    if unfinished:
        head += f" ({names(unfinished)})"
    if db is not None:
        return f"{head}; rerun with --db {db} to resume"
    return f"{head}; they were stopped (rerun with --db FILE to make a run resumable)"


def render(outcomes: Sequence[JobOutcome], log_dir: Path) -> Group:
    """The report: where the logs are, then a short block per job (state, result or error,
    output folder, the tail of the log most worth reading)."""
    lines = [Text.assemble(("logs: ", "bold"), str(log_dir),
                           ("  (<job>.<attempt>.<rank>.out|err)", "dim"))]  # fmt: skip
    for o in outcomes:
        head = Text.assemble((o.name, "bold"), " ", (o.state, JOB_STATE_STYLE.get(o.state, "")))
        if o.name != o.id:
            head.append(f" [{o.id}]", "dim")
        if o.earlier:
            head.append(" (finished in an earlier run)", "dim")
        elif o.state not in _ENDED:
            head.append(" (unfinished)", "bold red")
        if o.has_result:
            head.append(f"  result: {_clip(repr(o.result))}")
        if o.error and o.state != "succeeded":  # its first line: the tail below has the rest
            first = o.error.strip().splitlines()[0].removesuffix("; stderr ends:")
            head.append(f"  {_clip(first)}", "red")
        lines.append(head)
        if o.output is not None:
            lines.append(Text(f"  output: {o.output}"))
        if o.tail is not None:
            lines.append(Text(f"  {o.tail.label} ({o.tail.path}):", "dim"))
            lines.extend(Text(f"    {line}") for line in o.tail.text.splitlines())
        elif o.state in _ENDED and not o.has_result:
            lines.append(Text("  (no output)", "dim"))
    return Group(*lines)
