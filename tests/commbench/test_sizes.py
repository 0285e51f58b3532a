"""Sizes as nccl-tests takes them: units, ranges with a factor, comma lists, bad input."""

from __future__ import annotations

import pytest

from accelnet.commbench import BenchInputError, parse_size, parse_sizes
from accelnet.commbench.sizes import format_size


@pytest.mark.parametrize(
    ("text", "nbytes"),
    [("1024", 1024), ("1K", 1024), ("1kb", 1024), ("1KiB", 1024), ("256M", 256 << 20),
     ("2G", 2 << 30), (" 3 M ", 3 << 20)],
)  # fmt: skip
def test_parse_size(text: str, nbytes: int) -> None:
    assert parse_size(text) == nbytes


def test_ranges_step_by_factor_and_lists_merge() -> None:
    assert parse_sizes("1K..8K") == (1024, 2048, 4096, 8192)
    assert parse_sizes("1K..64K", factor=4) == (1 << 10, 1 << 12, 1 << 14, 1 << 16)
    assert parse_sizes("1K..5K") == (1024, 2048, 4096)  # HI need not be on the grid
    assert parse_sizes("1M,1K,1K") == (1024, 1 << 20)
    assert parse_sizes("1K..2K,1M") == (1024, 2048, 1 << 20)
    assert parse_sizes("4K..4K") == (4096,)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("1K..0", "'1K..0': '0': a size must be at least 1 byte"),
        ("abc", "'abc' is not a size"),
        ("4K..1K", "'4K..1K': the end 1K is below the start 4K"),
        ("1K..x", "'x' is not a size"),
        ("", "names no size"),
        ("32G", "over the limit"),
        (",".join(map(str, range(1, 70))), "more than 64 sizes"),
        ("-1K", "'-1K' is not a size"),
    ],
)
def test_bad_sizes_name_the_flag_and_value(text: str, needle: str) -> None:
    with pytest.raises(BenchInputError) as info:
        parse_sizes(text)
    assert str(info.value).startswith("--sizes: ")
    assert needle in str(info.value)


def test_factor_must_grow() -> None:
    with pytest.raises(BenchInputError, match="--factor: 1 must be at least 2"):
        parse_sizes("1K..1M", factor=1)


def test_format_size() -> None:
    assert [format_size(n) for n in (1024, 3 << 20, 1 << 30, 1000)] == ["1K", "3M", "1G", "1000"]
