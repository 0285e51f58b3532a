"""docs/metrics.md names every exported family with its type and unit."""

from __future__ import annotations

from pathlib import Path

from accelnet.monitor.names import METRICS

DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"


def test_every_metric_is_documented_with_its_type_and_unit() -> None:
    rows = {
        line.split("|")[1].strip().strip("`"): [c.strip() for c in line.split("|")[2:4]]
        for line in DOC.read_text(encoding="utf-8").splitlines()
        if line.startswith("| `accelnet_") or line.startswith("| `DCGM_")
    }
    for d in METRICS.values():
        assert rows.get(d.name) == [d.kind, d.unit], d.name
    assert set(rows) == set(METRICS)
