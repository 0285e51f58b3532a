"""``aggregate_partition`` / ``merge``: partial aggregates merge to the whole-table answer."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from accelnet.workloads.data import (
    CHUNK_ROWS,
    REGIONS,
    RESULT_SCHEMA,
    aggregate,
    aggregate_partition,
    generate_table,
    merge,
)

ROWS = 2 * CHUNK_ROWS + 12_345  # three chunks, so partitions straddle chunk boundaries


def run(out: Path, world: int, rows: int = ROWS, seed: int = 0) -> dict[str, object]:
    for rank in range(world):
        summary = aggregate_partition(str(out), rank, world, rows=rows, seed=seed)
        assert (out / summary["files"]["partial"]).exists()
    return merge(str(out), world)


def test_merge_equals_aggregating_the_whole_table(tmp_path: Path) -> None:
    summary = run(tmp_path, 3)
    merged = pl.read_parquet(tmp_path / "result.parquet")
    whole = aggregate(generate_table(ROWS, seed=0))
    assert_frame_equal(merged, whole)  # exact: money is summed in integer cents
    assert merged.schema == pl.Schema(RESULT_SCHEMA)
    assert summary["total_rows"] == ROWS == int(whole["count"].sum())
    assert summary["groups"] == whole.height == len(REGIONS) * 1000


def test_the_answer_does_not_depend_on_the_split(tmp_path: Path) -> None:
    run(tmp_path / "one", 1, rows=20_000)
    run(tmp_path / "five", 5, rows=20_000)
    assert_frame_equal(
        pl.read_parquet(tmp_path / "one" / "result.parquet"),
        pl.read_parquet(tmp_path / "five" / "result.parquet"),
    )


def test_partitions_are_slices_of_one_table() -> None:
    whole = generate_table(ROWS, seed=1)
    assert whole.columns == ["key", "region", "amount", "qty"]
    assert whole.schema == pl.Schema(
        {"key": pl.Int64, "region": pl.String, "amount": pl.Float64, "qty": pl.Int64}
    )
    lo, hi = CHUNK_ROWS - 5, 2 * CHUNK_ROWS + 7
    assert_frame_equal(generate_table(ROWS, seed=1, start=lo, stop=hi), whole.slice(lo, hi - lo))
    assert_frame_equal(generate_table(1000, seed=1), whole.head(1000))  # a prefix
    assert not generate_table(1000, seed=2).equals(whole.head(1000))
    assert set(whole["region"].unique()) == set(REGIONS)
    assert 990 <= whole["key"].n_unique() <= 1000
    assert (whole["amount"] > 0).all() and whole["qty"].is_between(1, 20).all()


def test_partition_summary_and_merge_summary(tmp_path: Path) -> None:
    part = aggregate_partition(str(tmp_path), 1, 2, rows=10_001, seed=0, device="tpu:0")
    assert part["rows"] == 5001 and part["row_range"] == [5000, 10_001]
    assert part["device"] == "tpu:0"
    aggregate_partition(str(tmp_path), 0, 2, rows=10_001, seed=0)
    summary = merge(str(tmp_path), 2)
    assert json.loads((tmp_path / "summary.json").read_text()) == summary
    regions = summary["regions"]
    assert {r["region"] for r in regions} == set(REGIONS)
    amounts = [r["amount"] for r in regions]
    assert amounts == sorted(amounts, reverse=True)
    assert sum(r["rows"] for r in regions) == 10_001
    assert summary["total_amount"] == pytest.approx(sum(amounts))
    assert len(summary["top_groups"]) == 5


def test_more_partitions_than_rows(tmp_path: Path) -> None:
    summary = run(tmp_path, 4, rows=2)
    assert summary["total_rows"] == 2


def test_merge_names_a_missing_partial(tmp_path: Path) -> None:
    aggregate_partition(str(tmp_path), 0, 2, rows=100)
    with pytest.raises(FileNotFoundError, match="part_1"):
        merge(str(tmp_path), 2)


@pytest.mark.parametrize(("rank", "world"), [(-1, 2), (2, 2), (0, 0)])
def test_rejects_bad_ranks(tmp_path: Path, rank: int, world: int) -> None:
    with pytest.raises(ValueError):
        aggregate_partition(str(tmp_path), rank, world, rows=100)
