"""Message sizes as nccl-tests takes them: ``1K``, ``256M``, ranges ``1K..256M`` stepped by a
factor (``-b/-e/-f``), or comma lists. Units are binary (``1K`` = 1024 bytes). Pure."""

from __future__ import annotations

import re

from accelnet.commbench.errors import BenchInputError

UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
MAX_BYTES = 16 << 30
MAX_SIZES = 64
_SIZE = re.compile(r"^\s*(\d+)\s*([KMG]?)(?:I?B)?\s*$", re.IGNORECASE)


def _bytes(text: str) -> int:
    """Bytes in ``text``; ValueError with the reason when it is not a valid size."""
    found = _SIZE.match(text)
    if found is None:
        raise ValueError(f"{text.strip()!r} is not a size (examples: 1024, 1K, 256M, 1G)")
    value = int(found.group(1)) * UNITS[found.group(2).upper()]
    if value <= 0:
        raise ValueError(f"{text.strip()!r}: a size must be at least 1 byte")
    if value > MAX_BYTES:
        raise ValueError(f"{text.strip()!r} is over the limit of 16G")
    return value


def parse_size(text: str, flag: str = "--sizes") -> int:
    """Bytes in ``text`` (``1024``, ``1K``, ``1KB``, ``1KiB``, ``256M``, ``1G``).

    Raises BenchInputError naming ``flag`` and the value when it is not a size, is zero or
    is over 16G.
    """
    try:
        return _bytes(text)
    except ValueError as e:
        raise BenchInputError(f"{flag}: {e}") from None


def format_size(nbytes: int) -> str:
    """``1024`` -> ``1K``, ``3 << 20`` -> ``3M``, ``1000`` -> ``1000``."""
    for unit in ("G", "M", "K"):
        if nbytes >= UNITS[unit] and nbytes % UNITS[unit] == 0:
            return f"{nbytes // UNITS[unit]}{unit}"
    return str(nbytes)


def parse_sizes(text: str, factor: int = 2, flag: str = "--sizes") -> tuple[int, ...]:
    """The sizes ``text`` names, ascending and without repeats.

    ``text`` is a comma list whose items are sizes or ranges ``LO..HI`` (``LO``, ``LO*f``,
    ``LO*f^2``, ... up to ``HI``). Raises BenchInputError naming ``flag`` and the item at
    fault (not a size, an empty range, a factor below 2, more than 64 sizes).
    """
    if factor < 2:
        raise BenchInputError(f"--factor: {factor} must be at least 2")
    out: set[int] = set()
    items = [item for item in text.split(",") if item.strip()]
    if not items:
        raise BenchInputError(f"{flag}: {text!r} names no size (example: 1K..256M)")
    for item in items:
        lo_text, dots, hi_text = item.partition("..")
        if not dots:
            out.add(parse_size(item, flag))
            continue
        try:
            lo, hi = _bytes(lo_text), _bytes(hi_text)
        except ValueError as e:
            raise BenchInputError(f"{flag}: {item.strip()!r}: {e}") from None
        if hi < lo:
            raise BenchInputError(
                f"{flag}: {item.strip()!r}: the end {hi_text.strip()} is below the start "
                f"{lo_text.strip()}"
            )
        size = lo
        while size <= hi:
            out.add(size)
            if len(out) > MAX_SIZES:
                break
            size *= factor
        if len(out) > MAX_SIZES:
            break
    if len(out) > MAX_SIZES:
        raise BenchInputError(f"{flag}: {text!r} names more than {MAX_SIZES} sizes")
    return tuple(sorted(out))
