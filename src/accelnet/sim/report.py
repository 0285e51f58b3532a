"""Reports of simulations side by side: a rich table, metrics.json, per-job CSVs, plots.

:func:`table` puts one column per run (policy) beside the figures of
:mod:`accelnet.sim.metrics`; :func:`write_outputs` writes ``metrics.json``, one
``jobs-<policy>.csv`` per run and three PNG plots (``jct_cdf.png``, ``utilization.png``,
``queue.png``). matplotlib is imported only when plotting, and only its object API
(:class:`~matplotlib.figure.Figure`, no pyplot): no backend switch, no global figure state.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from rich.table import Table

from accelnet.sim.metrics import FloatArray, Metrics
from accelnet.sim.records import Sample, SimResult

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

SCHEMA = "accelnet.sim.report/v1"
MAX_POINTS = 5000  # per plotted line; longer series are reduced keeping their extremes

CSV_FIELDS = (
    "id",
    "job_type",
    "tenant",
    "gpus",
    "arrival",
    "first_start",
    "end",
    "jct",
    "queueing",
    "state",
    "attempts",
    "preemptions",
    "failures",
    "run_s",
    "energy_j",
    "alone_s",
    "rho",
)


# ---------------------------------------------------------------------------- table


def _num(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100.0 * x:.1f}"


def _int(x: int) -> str:
    return f"{x:,}"


Row = tuple[str, str, Callable[[Metrics], str]]


def _model_util(model: str) -> Callable[[Metrics], str]:
    return lambda m: _pct(m.utilization_by_model.get(model))


def _tenant_share(tenant: str) -> Callable[[Metrics], str]:
    return lambda m: _pct(m.tenant_share.get(tenant))


def _tenant_jct(tenant: str) -> Callable[[Metrics], str]:
    return lambda m: _num(m.tenant_avg_jct.get(tenant))


def _rows(metrics: Sequence[Metrics]) -> list[list[Row]]:
    """Sections of rows: label, unit, how to read the cell from one run's metrics."""
    models = sorted({m for x in metrics for m in x.utilization_by_model})
    tenants = sorted({t for x in metrics for t in x.tenant_share})
    jobs: list[Row] = [
        ("jobs", "", lambda m: _int(m.jobs_total)),
        ("finished", "", lambda m: _int(m.jobs_finished)),
        ("failed", "", lambda m: _int(m.jobs_failed)),
        ("cancelled", "", lambda m: _int(m.jobs_cancelled)),
        ("unfinished", "", lambda m: _int(m.jobs_unfinished)),
        ("rejected (can never run here)", "", lambda m: _int(m.jobs_rejected)),
    ]
    times: list[Row] = [
        ("JCT avg", "s", lambda m: _num(m.jct.avg)),
        ("JCT median", "s", lambda m: _num(m.jct.median)),
        ("JCT p95", "s", lambda m: _num(m.jct.p95)),
        ("JCT p99", "s", lambda m: _num(m.jct.p99)),
        ("queueing avg", "s", lambda m: _num(m.queueing.avg)),
        ("queueing median", "s", lambda m: _num(m.queueing.median)),
        ("queueing p95", "s", lambda m: _num(m.queueing.p95)),
        ("queueing p99", "s", lambda m: _num(m.queueing.p99)),
        ("makespan", "s", lambda m: _num(m.makespan_s)),
    ]
    bounds: list[Row] = [
        ("[dim]JCT avg lower bound[/]", "s", lambda m: _num(m.jct_lb_avg_s)),
        ("[dim]JCT avg / lower bound[/]", "x", lambda m: _num(m.jct_ratio, 2)),
        ("[dim]JCT avg LP bound[/]", "s", lambda m: _num(m.jct_lp_avg_s)),
        ("[dim]makespan lower bound[/]", "s", lambda m: _num(m.makespan_lb_s)),
        ("[dim]makespan / lower bound[/]", "x", lambda m: _num(m.makespan_ratio, 2)),
    ]
    use: list[Row] = [("utilization", "%", lambda m: _pct(m.utilization))]
    use += [(f"utilization {k}", "%", _model_util(k)) for k in models]
    share: list[Row] = []
    for tenant in tenants:
        share.append((f"share {tenant}", "% dev-s", _tenant_share(tenant)))
        share.append((f"JCT avg {tenant}", "s", _tenant_jct(tenant)))
    fair: list[Row] = [
        ("rho avg", "", lambda m: _num(m.rho_avg, 3)),
        ("rho max", "", lambda m: _num(m.rho_max, 3)),
        ("rho > 1", "% jobs", lambda m: _pct(m.rho_over_1)),
        ("preemptions", "", lambda m: _int(m.preemptions)),
        ("preemptions per job", "", lambda m: _num(m.preemptions_per_job, 2)),
        ("failures", "", lambda m: _int(m.failures)),
        ("deadlines", "jobs", lambda m: _int(m.deadline_jobs)),
        ("deadlines missed", "jobs", lambda m: _int(m.deadline_missed)),
    ]
    energy: list[Row] = [
        ("energy", "kWh", lambda m: _num(m.energy_j / 3.6e6, 3)),
        ("energy attributed to jobs", "kWh", lambda m: _num(m.energy_jobs_j / 3.6e6, 3)),
        ("power avg", "W", lambda m: _num(m.avg_power_w, 0)),
        ("power peak", "W", lambda m: _num(m.peak_power_w, 0)),
    ]
    cost: list[Row] = [
        ("simulation wall time", "s", lambda m: _num(m.wall_s, 2)),
        ("events", "", lambda m: _int(m.events)),
        ("decisions", "", lambda m: _int(m.decisions)),
        ("events / wall s", "1/s", lambda m: _num(m.events_per_s, 0)),
        ("peak RSS", "MB", lambda m: _num(m.peak_rss_mb, 0)),
    ]
    return [jobs, times, bounds, use, share, fair, energy, cost]


def _headers(results: Sequence[SimResult]) -> list[str]:
    """Policy names, told apart by seed (or position) where the same one runs twice."""
    names = [r.policy for r in results]
    out: list[str] = []
    for i, r in enumerate(results):
        name = r.policy
        if names.count(name) > 1:
            name = f"{name} (seed {r.seed})"
            if sum(1 for x in results if x.policy == r.policy and x.seed == r.seed) > 1:
                name = f"{r.policy} #{i + 1}"
        out.append(name)
    return out


def table(results: Sequence[SimResult], metrics: Sequence[Metrics]) -> Table:
    """The figures of each run side by side: one column per policy."""
    if len(results) != len(metrics):
        raise ValueError(f"{len(results)} results but {len(metrics)} metrics")
    traces = sorted({f"{r.trace} on {r.fabric}" for r in results})
    tab = Table(title="simulation: " + "; ".join(traces) if traces else "simulation")
    tab.add_column("figure", no_wrap=True)
    tab.add_column("unit", style="dim", no_wrap=True)
    for header in _headers(results):
        tab.add_column(header, justify="right", no_wrap=True)
    for section in _rows(metrics):
        if not section:
            continue
        for label, unit, cell in section:
            tab.add_row(label, unit, *(cell(m) for m in metrics))
        tab.add_section()
    return tab


# ---------------------------------------------------------------------------- files


def safe_name(name: str) -> str:
    """``name`` made safe as part of a file name (letters, digits, ``._-``)."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._-")
    return cleaned[:80] or "policy"


def _cell(x: float | int | str | None) -> str:
    if x is None:
        return ""
    if isinstance(x, float):
        return repr(round(x, 6))
    return str(x)


def _write_csv(path: Path, result: SimResult, metrics: Metrics) -> None:
    with path.open("w", newline="", encoding="utf-8") as fh:
        out = csv.writer(fh)
        out.writerow(CSV_FIELDS)
        for j in result.jobs:
            row: tuple[float | int | str | None, ...] = (
                j.id,
                j.job_type,
                j.tenant,
                j.gpus,
                j.arrival,
                j.first_start,
                j.end,
                j.jct,
                j.queueing,
                j.state,
                j.attempts,
                j.preemptions,
                j.failures,
                j.run_s,
                j.energy_j,
                j.alone_s,
                metrics.rho_by_job.get(j.id),
            )
            out.writerow([_cell(x) for x in row])


def write_outputs(
    out_dir: Path, results: Sequence[SimResult], metrics: Sequence[Metrics]
) -> list[Path]:
    """Write metrics.json, jobs-<policy>.csv per run and the PNG plots under ``out_dir``
    (created if missing); return the paths written."""
    if len(results) != len(metrics):
        raise ValueError(f"{len(results)} results but {len(metrics)} metrics")
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []

    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "runs": [
            {
                "policy": r.policy,
                "fabric": r.fabric,
                "trace": r.trace,
                "seed": r.seed,
                "metrics": m.to_json(),
            }
            for r, m in zip(results, metrics, strict=True)
        ],
    }
    path = out_dir / "metrics.json"
    path.write_text(json.dumps(doc, indent=2, allow_nan=False) + "\n", encoding="utf-8")
    written.append(path)

    used: set[str] = set()
    for r, m in zip(results, metrics, strict=True):
        stem = safe_name(r.policy)
        if stem in used:
            stem = f"{stem}-seed{r.seed}"
        base, k = stem, 2
        while stem in used:
            stem, k = f"{base}-{k}", k + 1
        used.add(stem)
        path = out_dir / f"jobs-{stem}.csv"
        _write_csv(path, r, m)
        written.append(path)

    labels = _headers(results)
    written.append(plot_jct_cdf(out_dir / "jct_cdf.png", results, labels))
    written.append(plot_utilization(out_dir / "utilization.png", results, labels))
    written.append(plot_queue(out_dir / "queue.png", results, labels))
    return written


# ---------------------------------------------------------------------------- plots


def downsample_step(
    t: FloatArray, v: FloatArray, max_points: int = MAX_POINTS
) -> tuple[FloatArray, FloatArray]:
    """At most about ``max_points`` samples of a step series, keeping its shape: the
    series is cut into runs of consecutive samples and each run keeps its first, lowest
    and highest samples (in time order), so peaks and troughs survive."""
    n = int(t.size)
    if n <= max_points or max_points < 3:
        return t, v
    buckets = max(1, max_points // 3)
    edges = np.linspace(0, n, buckets + 1).astype(np.int64)
    starts = edges[:-1]
    starts = starts[np.diff(edges) > 0]
    lo = np.minimum.reduceat(v, starts)
    hi = np.maximum.reduceat(v, starts)
    bucket = np.repeat(np.arange(starts.size), np.diff(np.append(starts, n)))
    keep = np.zeros(n, dtype=bool)
    keep[starts] = True
    keep[n - 1] = True
    # first sample of each bucket that reaches its low and its high
    for target in (lo, hi):
        hit = np.flatnonzero(v == target[bucket])
        first = np.unique(bucket[hit], return_index=True)[1]
        keep[hit[first]] = True
    return t[keep], v[keep]


def _series(result: SimResult, value: Callable[[Sample], float]) -> tuple[FloatArray, FloatArray]:
    """A sample series of ``result``, extended to its end, reduced for plotting."""
    s = result.samples
    t = np.fromiter((x.t for x in s), dtype=np.float64, count=len(s))
    v = np.fromiter((value(x) for x in s), dtype=np.float64, count=len(s))
    if t.size > 1 and bool(np.any(np.diff(t) < 0)):
        order = np.argsort(t, kind="stable")
        t, v = t[order], v[order]
    if t.size and result.end > t[-1]:
        t, v = np.append(t, result.end), np.append(v, v[-1])
    return downsample_step(t, v)


def _figure(rows: int = 1) -> tuple[Figure, list[Axes]]:
    from matplotlib.figure import Figure  # noqa: PLC0415 (heavy: only when plotting)

    fig = Figure(figsize=(9.0, 3.2 * rows + 1.0), dpi=100, layout="constrained")
    axes = [fig.add_subplot(rows, 1, i + 1) for i in range(rows)]
    for ax in axes[1:]:
        ax.sharex(axes[0])
    return fig, axes


def _finish(fig: Figure, axes: Sequence[Axes], path: Path) -> Path:
    for ax in axes:
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="best", fontsize="small")
        else:
            ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
    fig.savefig(path, format="png")
    return path


def plot_jct_cdf(path: Path, results: Sequence[SimResult], labels: Sequence[str]) -> Path:
    """CDF of the finished jobs' JCT, one curve per run, log-scaled time."""
    fig, (ax,) = _figure()
    for r, label in zip(results, labels, strict=True):
        jct = np.sort(
            np.array(
                [j.end - j.arrival for j in r.jobs if j.state == "succeeded" and j.end is not None],
                dtype=np.float64,
            )
        )
        jct = jct[jct > 0]
        if jct.size == 0:
            continue
        frac = np.arange(1, jct.size + 1, dtype=np.float64) / jct.size
        if jct.size > MAX_POINTS:
            idx = np.unique(np.linspace(0, jct.size - 1, MAX_POINTS).astype(np.int64))
            jct, frac = jct[idx], frac[idx]
        jct, frac = np.insert(jct, 0, jct[0]), np.insert(frac, 0, 0.0)  # rise from 0
        ax.plot(jct, frac, drawstyle="steps-post", label=label)
    if ax.get_legend_handles_labels()[0]:
        ax.set_xscale("log")
    ax.set_xlabel("job completion time (s)")
    ax.set_ylabel("fraction of finished jobs")
    ax.set_ylim(0.0, 1.02)
    ax.set_title("JCT CDF")
    return _finish(fig, [ax], path)


def plot_utilization(path: Path, results: Sequence[SimResult], labels: Sequence[str]) -> Path:
    """Utilization (busy / devices) and power over time, one line per run."""
    fig, (top, bottom) = _figure(2)
    for r, label in zip(results, labels, strict=True):
        t, u = _series(r, lambda s: 100.0 * s.busy / s.devices if s.devices else 0.0)
        top.plot(t, u, drawstyle="steps-post", label=label, linewidth=0.9)
        t, p = _series(r, lambda s: s.power_w)
        bottom.plot(t, p, drawstyle="steps-post", label=label, linewidth=0.9)
    top.set_ylabel("utilization (%)")
    top.set_ylim(0.0, 102.0)
    top.set_title("utilization and power over time")
    bottom.set_ylabel("power (W)")
    bottom.set_xlabel("time (s)")
    return _finish(fig, [top, bottom], path)


def plot_queue(path: Path, results: Sequence[SimResult], labels: Sequence[str]) -> Path:
    """Jobs waiting in the queue over time, one line per run."""
    fig, (ax,) = _figure()
    for r, label in zip(results, labels, strict=True):
        t, q = _series(r, lambda s: s.queued)
        ax.plot(t, q, drawstyle="steps-post", label=label, linewidth=0.9)
    ax.set_xlabel("time (s)")
    ax.set_ylabel("queued jobs")
    ax.set_title("queue length over time")
    return _finish(fig, [ax], path)
