"""Rich tables for the benchmark's rows (like nccl-tests' output) and for a calibration fit."""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table

from accelnet.commbench.calibrate import RingFit
from accelnet.commbench.results import DTYPE, Row, factor, summarize
from accelnet.commbench.sizes import format_size


def _ratio_style(ratio: float) -> str:
    f = factor(ratio)
    return "green" if f <= 1.5 else "yellow" if f <= 3 else "red"


def rows_table(rows: Sequence[Row], title: str) -> Table:
    """One collective's rows: nccl-tests' columns, then the model's beside them."""
    table = Table(title=title, title_justify="left", show_edge=False, pad_edge=False)
    for name in (
        "size", "bytes", "count", "type", "time (us)", "algbw (GB/s)", "busbw (GB/s)",
        "model (us)", "model busbw", "ratio",
    ):  # fmt: skip
        table.add_column(name, justify="left" if name in ("size", "type") else "right")
    for r in rows:
        table.add_row(
            format_size(r.nbytes),
            str(r.nbytes),
            str(r.count),
            DTYPE,
            f"{r.time_s * 1e6:.1f}",
            f"{r.algbw_gbps:.3f}",
            f"{r.busbw_gbps:.3f}",
            f"{r.predicted.time_s * 1e6:.1f}",
            f"{r.predicted.busbw_gbps:.3f}",
            f"[{_ratio_style(r.ratio)}]{r.ratio:.2f}[/]",
        )
    return table


def summary_lines(rows: Sequence[Row]) -> list[str]:
    """One line per collective: median ratio by size band and the worst factor."""
    out = []
    for coll, bands in summarize(rows).items():
        parts = [
            f"{name} {bands[name]['median_ratio']:.2f} ({bands[name]['rows']})"
            for name in ("small", "medium", "large")
            if name in bands
        ]
        out.append(
            f"{coll}: measured/model busbw, median by band: {', '.join(parts)}; "
            f"worst factor {bands['all']['worst_factor']:.2f}"
        )
    return out


def fit_table(fit: RingFit, title: str) -> Table:
    """Measured ring allreduce times beside the fitted formula's."""
    table = Table(title=title, title_justify="left", show_edge=False, pad_edge=False)
    for name in ("size", "bytes", "measured (us)", "fitted (us)", "fitted/measured"):
        table.add_column(name, justify="left" if name == "size" else "right")
    for p in fit.points:
        table.add_row(
            format_size(int(p.nbytes)),
            str(int(p.nbytes)),
            f"{p.time_s * 1e6:.1f}",
            f"{p.fitted_s * 1e6:.1f}",
            f"[{_ratio_style(p.ratio)}]{p.ratio:.2f}[/]",
        )
    return table
