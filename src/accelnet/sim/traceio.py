"""Reading trace files: errors that name the place, cells parsed and checked, reference
rates looked up once, CSV rows read one at a time.

Used by the trace loaders (:mod:`accelnet.sim.traces`, :mod:`accelnet.sim.streams`) and the
failure schedules (:mod:`accelnet.sim.failures`).
"""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from accelnet.sim.workload import RateModel, SimJob

NAME = re.compile(r"^[\w][\w.-]*$")  # a tenant name the job spec accepts


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


def open_text(path: str | Path) -> tuple[str, TextIO]:
    """``(name, open file)`` of a trace file to read line by line, or an error naming it."""
    name = str(path)
    try:
        return name, Path(path).open(encoding="utf-8", newline="")
    except FileNotFoundError:
        raise TraceError(f"{name}: no such file", source=name) from None
    except OSError as exc:
        raise TraceError(f"{name}: cannot be read: {exc}", source=name) from None


def csv_rows(name: str, text: str | Iterable[str]) -> Iterator[tuple[int, list[str]]]:
    """``(line, cells)`` of each non-blank CSV row (line numbers of the file, where the
    row starts); ``text`` is the whole text or its lines (an open file, read lazily)."""
    lines = io.StringIO(text, newline="") if isinstance(text, str) else text
    reader = csv.reader(lines)
    start = 1
    try:
        for row in reader:
            if any(cell.strip() for cell in row):
                yield start, row
            start = reader.line_num + 1
    except csv.Error as exc:
        raise TraceError(f"{name}:{start}: malformed CSV: {exc}", source=name, line=start) from None
    except UnicodeDecodeError as exc:
        raise TraceError(f"{name}: cannot be read: {exc}", source=name) from None


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
