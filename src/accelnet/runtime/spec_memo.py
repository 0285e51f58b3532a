"""Validated job specs kept by what they were made from, so that a program submitting the
same call again and again (a batch of tasks, a loop of inference requests) validates its
spec once and its jobs share one :class:`~accelnet.sched.JobSpec`.

A spec is frozen, and nothing in accelnet changes one, so jobs can share it. Sharing also
keeps the heap small: a spec is six pydantic models, each with a dict and a set the garbage
collector tracks, that a controller would otherwise keep for every job it ran.

Only fields made of plain values (str, int, float, bool, None, and lists, tuples and dicts
of them) are kept, each leaf with its type (``1``, ``1.0`` and ``True`` are different keys,
as they are different to a strict field) and every float exactly (``-0.0`` is not
``0.0``). Anything else is validated afresh each time.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any

from accelnet.sched import JobSpec

MEMO_SPECS = 256
"""How many distinct specs a :class:`SpecMemo` keeps (the oldest made goes first)."""

_LEAVES = (str, int, bool, type(None))


class SpecMemo:
    """``JobSpec.model_validate(fields)``, validated once per distinct ``fields``."""

    def __init__(self, size: int = MEMO_SPECS) -> None:
        self._size = size
        self._kept: dict[Hashable, JobSpec] = {}

    def __len__(self) -> int:
        return len(self._kept)

    def spec(self, fields: Mapping[str, Any]) -> JobSpec:
        """The spec ``fields`` make; pydantic's ValidationError if they make none (never
        kept, so the same bad fields raise again)."""
        key = plain_key(fields)
        if key is None:
            return JobSpec.model_validate(fields)
        found = self._kept.get(key)
        if found is None:
            found = JobSpec.model_validate(fields)
            if len(self._kept) >= self._size:
                del self._kept[next(iter(self._kept))]
            self._kept[key] = found
        return found


def plain_key(value: Any) -> Hashable | None:
    """A hashable, exact form of ``value`` (a dict, list or tuple of plain values, leaves
    tagged with their type); None if anything in it is not plain."""
    kind = type(value)
    if kind in _LEAVES:
        return (kind.__name__, value)
    if kind is float:
        return ("float", value.hex())
    if kind is dict:
        items = []
        for k, v in value.items():
            if type(k) is not str:
                return None
            inner = plain_key(v)
            if inner is None:
                return None
            items.append((k, inner))
        return ("dict", tuple(items))
    if kind is list or kind is tuple:
        parts = []
        for v in value:
            inner = plain_key(v)
            if inner is None:
                return None
            parts.append(inner)
        return (kind.__name__, tuple(parts))
    return None
