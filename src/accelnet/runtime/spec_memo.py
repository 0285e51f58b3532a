"""Validated job specs kept by what they were made from, so that a program submitting the
same call again and again (a batch of tasks, a loop of inference requests) validates its
spec once and its jobs share one :class:`~accelnet.sched.JobSpec`.

A spec is frozen, and nothing in accelnet changes one, so jobs can share it. Sharing also
keeps the heap small: a spec is six pydantic models, each with a dict and a set the garbage
collector tracks, that a controller would otherwise keep for every job it ran.

Only fields made of plain values (str, int, float, bool, None, and lists, tuples and dicts
of them, at most :data:`MAX_DEPTH` deep) are kept, each leaf with its type (``1``, ``1.0``
and ``True`` are different keys, as they are different to a strict field) and every float
exactly (``-0.0`` is not ``0.0``). Anything else is validated afresh each time, and so are
fields with an ``entrypoint``, whose arguments a spec holds as the caller's own objects
(which may change after the call; every other field is copied into the spec).

The specs are kept as :class:`~accelnet.runtime.control.sqlite_store.SqliteStore` keeps
those it reads: ``functools.lru_cache`` around the validation, keyed here by that exact
form, from which the fields are made again when a spec is not kept.
"""

from __future__ import annotations

import functools
from collections.abc import Hashable, Mapping
from typing import Any

from accelnet.sched import JobSpec

MEMO_SPECS = 256
"""How many distinct specs a :class:`SpecMemo` keeps (the least recently asked for goes
first)."""

MAX_DEPTH = 32
"""How deep a plain value may nest to be kept (deeper: validated afresh, as pydantic does)."""

_LEAVES = (str, int, bool, type(None))


class SpecMemo:
    """``JobSpec.model_validate(fields)``, validated once per distinct ``fields``."""

    def __init__(self, size: int = MEMO_SPECS) -> None:
        # thread-safe; an error is never kept, so the same bad fields raise again
        self._validate = functools.lru_cache(maxsize=size)(_validate)

    def __len__(self) -> int:
        return self._validate.cache_info().currsize

    def spec(self, fields: Mapping[str, Any]) -> JobSpec:
        """The spec ``fields`` make; pydantic's ValidationError if they make none."""
        key = None if "entrypoint" in fields else plain_key(fields)
        return JobSpec.model_validate(fields) if key is None else self._validate(key)


def _validate(key: Hashable) -> JobSpec:
    return JobSpec.model_validate(_plain(key))


def plain_key(value: Any, depth: int = 0) -> Hashable | None:
    """A hashable, exact form of ``value`` (a dict, list or tuple of plain values, leaves
    tagged with their type); None if anything in it is not plain, or it nests deeper than
    :data:`MAX_DEPTH` (a value that contains itself included)."""
    if depth > MAX_DEPTH:
        return None
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
            inner = plain_key(v, depth + 1)
            if inner is None:
                return None
            items.append((k, inner))
        return ("dict", tuple(items))
    if kind is list or kind is tuple:
        parts = []
        for v in value:
            inner = plain_key(v, depth + 1)
            if inner is None:
                return None
            parts.append(inner)
        return (kind.__name__, tuple(parts))
    return None


def _plain(key: Any) -> Any:
    """The value :func:`plain_key` made ``key`` of."""
    kind, inner = key
    if kind == "dict":
        return {k: _plain(v) for k, v in inner}
    if kind == "list":
        return [_plain(v) for v in inner]
    if kind == "tuple":
        return tuple(_plain(v) for v in inner)
    if kind == "float":
        return float.fromhex(inner)
    return inner
