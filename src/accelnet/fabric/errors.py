"""Errors in fabric files that name the file, the line, the key path and the bad value."""

from __future__ import annotations

import reprlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class SpecIssue:
    """One problem: where (``hosts[0].devices[1].model``), what value, and why."""

    path: str
    message: str
    value: Any = None
    line: int | None = None

    def render(self, source: str) -> str:
        """``lab.yaml:12: hosts[0].devices[0].model = 'H900': unknown device model ...``."""
        where = f"{source}:{self.line}" if self.line is not None else source
        shown = "" if self.value is None else f" = {_short(self.value)}"
        key = self.path or "(top level)"
        return f"{where}: {key}{shown}: {self.message}"


def _bounded_repr() -> reprlib.Repr:
    r = reprlib.Repr()  # keyword arguments only from Python 3.12
    r.maxlevel, r.maxlist, r.maxdict, r.maxstring, r.maxother = 2, 4, 4, 60, 60
    return r


_REPR = _bounded_repr()


def short_repr(value: Any) -> str:
    """A bounded ``repr``: safe on huge or self-sharing values (YAML alias bombs)."""
    return _REPR.repr(value)


def _short(value: Any) -> str:
    return short_repr(value)


class FabricSpecError(ValueError):
    """A fabric file (or preset) that is not valid; ``issues`` lists every problem found."""

    def __init__(self, source: str, issues: Sequence[SpecIssue]) -> None:
        self.source = source
        self.issues = tuple(issues)
        lines = [issue.render(source) for issue in self.issues]
        head = f"invalid fabric spec {source}: {len(lines)} problem{'s' * (len(lines) != 1)}"
        super().__init__("\n".join([head, *("  " + line for line in lines)]))


def format_path(loc: Sequence[str | int]) -> str:
    """``("hosts", 0, "devices")`` -> ``"hosts[0].devices"``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + part
    return out
