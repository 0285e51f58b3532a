"""Big-data processing: a synthetic sales table aggregated per partition, then merged.

The table has columns ``key`` (Int64, 0..999, skewed towards small keys), ``region``
(String, one of :data:`REGIONS`), ``amount`` (Float64, money rounded to cents) and ``qty``
(Int64, 1..20). Row ``i`` depends only on ``seed`` and ``i``: the table is generated in
fixed chunks of :data:`CHUNK_ROWS` rows, chunk ``c`` from ``numpy.random.default_rng((seed,
c))``. So a partition is the same rows whatever ``world`` is, and a smaller table is a
prefix of a larger one.

``aggregate_partition`` aggregates one partition per ``(region, key)`` with polars and
``merge`` combines the partials. Money is summed as integer cents, so the merged result is
*exactly* the aggregation of the whole table, whatever the split.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from accelnet.workloads._common import Summary, band, check_rank, prepare_out_dir, write_json

REGIONS = ("north", "south", "east", "west", "central")
REGION_WEIGHTS = (0.3, 0.25, 0.2, 0.15, 0.1)
KEYS = 1000
MAX_QTY = 20
CHUNK_ROWS = 1 << 16
GROUP_BY = ("region", "key")
RESULT_SCHEMA = {
    "region": pl.String,
    "key": pl.Int64,
    "count": pl.Int64,
    "amount_cents": pl.Int64,
    "qty": pl.Int64,
    "amount": pl.Float64,
}
"""Columns of a partial and of the merged result, in order; sorted by region, then key."""


def _chunk(seed: int, index: int) -> pl.DataFrame:
    rng = np.random.default_rng((seed, index))
    n = CHUNK_ROWS
    key = np.floor(KEYS * rng.random(n) ** 2).astype(np.int64)
    region = rng.choice(len(REGIONS), size=n, p=REGION_WEIGHTS)
    cents = np.round(rng.lognormal(mean=3.0, sigma=1.0, size=n) * 100.0).astype(np.int64)
    qty = rng.integers(1, MAX_QTY + 1, size=n, dtype=np.int64)
    return pl.DataFrame(
        {
            "key": key,
            "region": pl.Series(REGIONS, dtype=pl.String).gather(region),
            "amount": cents / 100.0,
            "qty": qty,
        }
    )


def generate_table(
    rows: int, seed: int = 0, start: int = 0, stop: int | None = None
) -> pl.DataFrame:
    """Rows ``[start, stop)`` (default: all ``rows``) of the synthetic table for ``seed``.

    Pure and deterministic. Raises ``ValueError`` unless ``0 <= start <= stop <= rows``.
    """
    stop = rows if stop is None else stop
    if not 0 <= start <= stop <= rows:
        raise ValueError(f"need 0 <= start <= stop <= rows, got {start}, {stop}, {rows}")
    frames = []
    for index in range(start // CHUNK_ROWS, -(-stop // CHUNK_ROWS)):
        base = index * CHUNK_ROWS
        lo, hi = max(start - base, 0), min(stop - base, CHUNK_ROWS)
        frames.append(_chunk(seed, index).slice(lo, hi - lo))
    if not frames:
        return _chunk(seed, 0).clear()
    return pl.concat(frames, rechunk=True)


def _with_amount(frame: pl.LazyFrame) -> pl.DataFrame:
    return (
        frame.with_columns((pl.col("amount_cents") / 100.0).alias("amount"))
        .select(list(RESULT_SCHEMA))
        .sort(GROUP_BY)
        .collect()
    )


def aggregate(table: pl.DataFrame) -> pl.DataFrame:
    """Per ``(region, key)``: ``count``, ``amount_cents`` (exact), ``qty`` and ``amount``.

    Columns and order are :data:`RESULT_SCHEMA`; rows sorted by region, then key. Pure.
    """
    partial = (
        table.lazy()
        .group_by(GROUP_BY)
        .agg(
            pl.len().cast(pl.Int64).alias("count"),
            (pl.col("amount") * 100.0).round(0).cast(pl.Int64).sum().alias("amount_cents"),
            pl.col("qty").cast(pl.Int64).sum().alias("qty"),
        )
    )
    return _with_amount(partial)


def part_name(rank: int) -> str:
    """The file ``aggregate_partition`` writes for ``rank``."""
    return f"part_{rank}.parquet"


def aggregate_partition(
    out_dir: str,
    rank: int,
    world: int,
    rows: int = 2_000_000,
    seed: int = 0,
    device: str = "cpu",
) -> Summary:
    """Generate partition ``rank`` of ``world`` of the table and aggregate it to a parquet.

    Partition ``rank`` is table rows ``[rank * rows // world, (rank + 1) * rows // world)``.
    Writes ``part_{rank}.parquet`` (columns :data:`RESULT_SCHEMA`) under ``out_dir``
    (created if missing). Deterministic; idempotent (overwrites). Returns a
    JSON-serialisable summary: ``rank``, ``world``, ``rows`` (in this partition),
    ``row_range``, ``groups``, ``generate_s``, ``aggregate_s``, ``rows_per_s`` (of the
    aggregation), ``device`` and ``files`` (``{"partial": "part_{rank}.parquet"}``). The
    work runs on the CPU whatever ``device`` says; it is recorded, not interpreted.
    Raises ``ValueError`` for a ``rank`` outside ``[0, world)`` or negative ``rows``.
    """
    check_rank(rank, world)
    if rows < 0:
        raise ValueError(f"rows must be >= 0, got {rows}")
    out = prepare_out_dir(out_dir)
    start, stop = band(rank, world, rows)
    t0 = time.perf_counter()
    table = generate_table(rows, seed, start, stop)
    t1 = time.perf_counter()
    partial = aggregate(table)
    t2 = time.perf_counter()
    partial.write_parquet(out / part_name(rank))
    return {
        "workload": "aggregate_partition",
        "device": device,
        "rank": rank,
        "world": world,
        "seed": seed,
        "rows": stop - start,
        "row_range": [start, stop],
        "groups": partial.height,
        "generate_s": round(t1 - t0, 6),
        "aggregate_s": round(t2 - t1, 6),
        "rows_per_s": (stop - start) / max(t2 - t1, 1e-9),
        "files": {"partial": part_name(rank)},
    }


def merge(out_dir: str, world: int, in_dir: str | None = None) -> Summary:
    """Merge ``part_0.parquet`` .. ``part_{world-1}.parquet`` in ``in_dir`` (default
    ``out_dir``) into ``out_dir/result.parquet``.

    The result (columns :data:`RESULT_SCHEMA`, sorted by region, then key) equals
    :func:`aggregate` of the whole table exactly. Also writes ``summary.json``: the
    returned summary, i.e. ``world``, ``total_rows``, ``groups``, ``total_amount``,
    ``regions`` (per region ``rows``, ``amount``, ``qty``, largest amount first),
    ``top_groups`` (the 5 largest by amount), ``seconds`` and ``files``. Idempotent.
    Raises ``FileNotFoundError`` naming a missing partial, ``ValueError`` for
    ``world < 1``.
    """
    if world < 1:
        raise ValueError(f"world must be >= 1, got {world}")
    out = prepare_out_dir(out_dir)
    began = time.perf_counter()
    source = Path(in_dir) if in_dir is not None else out
    paths = [source / part_name(rank) for rank in range(world)]
    for rank, path in enumerate(paths):
        if not path.exists():
            raise FileNotFoundError(f"missing partial {path} (rank {rank} of {world})")
    combined = pl.concat([pl.scan_parquet(p) for p in paths])
    merged = combined.group_by(GROUP_BY).agg(
        pl.col("count").sum(), pl.col("amount_cents").sum(), pl.col("qty").sum()
    )
    result = _with_amount(merged)
    result.write_parquet(out / "result.parquet")

    by_region = (
        result.group_by("region")
        .agg(
            pl.col("count").sum().alias("rows"),
            pl.col("amount_cents").sum(),
            pl.col("qty").sum(),
        )
        .sort(["amount_cents", "region"], descending=[True, False])
    )
    regions: list[dict[str, Any]] = [
        {
            "region": r["region"],
            "rows": r["rows"],
            "amount": r["amount_cents"] / 100.0,
            "qty": r["qty"],
        }
        for r in by_region.iter_rows(named=True)
    ]
    top = result.sort(["amount_cents", "region", "key"], descending=[True, False, False]).head(5)
    summary: Summary = {
        "workload": "merge",
        "world": world,
        "total_rows": int(result["count"].sum()),
        "groups": result.height,
        "total_amount": int(result["amount_cents"].sum()) / 100.0,
        "regions": regions,
        "top_groups": [
            {"region": r["region"], "key": r["key"], "amount": r["amount"], "rows": r["count"]}
            for r in top.iter_rows(named=True)
        ],
        "seconds": round(time.perf_counter() - began, 6),
        "files": {"result": "result.parquet", "summary": "summary.json"},
    }
    write_json(out / "summary.json", summary)
    return summary
