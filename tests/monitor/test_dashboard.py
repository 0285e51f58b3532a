"""The Grafana dashboard in deploy/grafana is valid JSON with what Grafana needs to import it,
and every metric its queries use is one /metrics exports (or a dcgm-exporter name)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from accelnet.monitor.names import METRICS

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "accelnet-dashboard.json"
PANEL_TYPES = {"row", "timeseries", "stat", "bargauge", "table", "state-timeline", "gauge"}
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
METRIC = re.compile(r"\b(accelnet_[a-z0-9_]+|DCGM_FI_[A-Z0-9_]+)\b(\s*\{([^}]*)\})?")
MATCHER = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"')
GROUPING = re.compile(r"\b(?:on|by|without|ignoring|group_left|group_right)\s*\(([^)]*)\)")
SUFFIXES = ("_bucket", "_count", "_sum")


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    data = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for p in dashboard["panels"]:
        out.append(p)
        out.extend(p.get("panels", []))  # a collapsed row holds its panels
    return out


def queries(dashboard: dict[str, Any]) -> list[str]:
    exprs = [t["expr"] for p in panels(dashboard) for t in p.get("targets", [])]
    for var in dashboard["templating"]["list"]:
        if var["type"] == "query":
            exprs.append(var["query"]["query"])
            assert var["definition"] == var["query"]["query"]
    return exprs


def family(name: str) -> str | None:
    """The exported family a query's series name belongs to, or None."""
    if name in METRICS:
        return name
    for suffix in SUFFIXES:
        base = name.removesuffix(suffix)
        if base != name and base in METRICS and METRICS[base].kind == "histogram":
            return base
    return None


def test_the_dashboard_has_what_grafana_needs_to_import_it(dashboard: dict[str, Any]) -> None:
    assert dashboard["uid"] == "accelnet-overview" and len(dashboard["uid"]) <= 40
    assert dashboard["title"]
    assert 36 <= dashboard["schemaVersion"] <= 41
    assert dashboard["id"] is None  # Grafana assigns it on import
    assert dashboard["time"]["from"].startswith("now-")
    assert "__inputs" not in dashboard  # no import-time prompts: the datasource is a variable


def test_the_datasource_is_a_variable_every_panel_uses(dashboard: dict[str, Any]) -> None:
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    ds = variables["datasource"]
    assert ds["type"] == "datasource" and ds["query"] == "prometheus"
    for var in variables.values():
        if var["type"] == "query":
            assert var["datasource"] == DATASOURCE, var["name"]
    for p in panels(dashboard):
        if p["type"] == "row":
            continue
        assert p["datasource"] == DATASOURCE, p["title"]
        assert p["targets"], p["title"]
        for t in p["targets"]:
            assert t["datasource"] == DATASOURCE, p["title"]
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs)), p["title"]


def test_panels_have_unique_ids_and_fit_the_grid(dashboard: dict[str, Any]) -> None:
    ids = [p["id"] for p in panels(dashboard)]
    assert len(ids) == len(set(ids))
    cells: set[tuple[int, int]] = set()
    for p in panels(dashboard):
        assert p["type"] in PANEL_TYPES, p["type"]
        assert p["title"]
        g = p["gridPos"]
        assert all(isinstance(g[k], int) for k in ("h", "w", "x", "y")), p["title"]
        assert g["w"] > 0 and g["h"] > 0 and g["x"] >= 0 and g["x"] + g["w"] <= 24, p["title"]
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"])
                for y in range(g["y"], g["y"] + g["h"])}  # fmt: skip
        assert not cells & mine, f"{p['title']} overlaps another panel"
        cells |= mine


def test_every_query_uses_exported_metrics_and_their_labels(dashboard: dict[str, Any]) -> None:
    used: set[str] = set()
    every_label = {label for d in METRICS.values() for label in d.labels} | {"le"}
    for expr in queries(dashboard):
        assert expr.count("(") == expr.count(")") and expr.count("{") == expr.count("}"), expr
        for group in GROUPING.findall(expr):  # by (state), on (accelnet_device), ...
            for label in filter(None, (x.strip() for x in group.split(","))):
                assert label in every_label, f"no metric has label {label!r}: {expr}"
        for m in METRIC.finditer(GROUPING.sub("", expr)):
            fam = family(m.group(1))
            assert fam is not None, f"{m.group(1)} in {expr!r} is not exported"
            used.add(fam)
            for label, _ in MATCHER.findall(m.group(3) or ""):
                assert label in METRICS[fam].labels, f"{fam} has no label {label!r}: {expr}"
    # the panels the issue asks for
    for name in (
        "accelnet_jobs",
        "accelnet_queue_wait_seconds",
        "accelnet_scheduler_decision_seconds",
        "accelnet_device_state",
        "accelnet_link_utilization",
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_FB_USED",
    ):
        assert name in used, name


def test_queue_wait_percentiles_come_from_the_histogram(dashboard: dict[str, Any]) -> None:
    exprs = queries(dashboard)
    for q in ("0.5", "0.95"):
        assert any(
            f"histogram_quantile({q}, sum by (le) (rate(accelnet_queue_wait_seconds_bucket" in e
            for e in exprs
        ), q
