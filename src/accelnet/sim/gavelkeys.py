"""The keys of Gavel's throughput table: ``"('<job type>', <scale factor>)"``."""

from __future__ import annotations

import ast


def parse_key(key: str, where: str) -> tuple[str, int]:
    """``"('ResNet-50 (batch size 64)', 2)"`` -> the tuple, read as a literal (never eval)."""
    try:
        value = ast.literal_eval(key)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError) as exc:
        raise ValueError(f"{where}: key {key!r} is not a (job type, scale) tuple") from exc
    if (
        not isinstance(value, tuple)
        or len(value) != 2
        or not isinstance(value[0], str)
        or not value[0]
        or isinstance(value[1], bool)
        or not isinstance(value[1], int)
        or value[1] < 1
    ):
        raise ValueError(f"{where}: key {key!r} is not a (job type, scale >= 1) tuple")
    return value[0], value[1]
