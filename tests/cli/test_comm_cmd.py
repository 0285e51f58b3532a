"""The ``accelnet comm`` commands."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from accelnet.cli.main import app

runner = CliRunner()


def run(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args), env={"COLUMNS": "220"})
    return result.exit_code, result.stdout, result.stderr


def test_estimate_json_picks_the_fastest_algorithm_per_size() -> None:
    code, out, _ = run("comm", "estimate", "dgx-h100:hosts=2", "--devices", "all",
                       "--sizes", "1K,1G", "--json")  # fmt: skip
    assert code == 0
    doc = json.loads(out)
    assert doc["schema"] == "accelnet.comm-estimate/v1"
    assert len(doc["ranks"]) == 16
    small, big = doc["rows"]
    for row in (small, big):
        times = {e["algorithm"]: e["time_s"] for e in row["estimates"]}
        assert times[row["best"]] == min(times.values())
    assert small["best"] != "hierarchical"
    assert big["best"] == "hierarchical"
    best = big["estimates"][0]
    assert best["busbw_gbps"] == best["algbw_gbps"] * 2 * 15 / 16


def test_estimate_table_and_ring_order() -> None:
    code, out, _ = run("comm", "estimate", "dgx-h100", "--devices", "gpu0,gpu1,gpu2,gpu3",
                       "--sizes", "1M..4M", "--factor", "2")  # fmt: skip
    assert code == 0
    assert "allreduce on 4 ranks of dgx-h100" in out
    assert "ranks in ring order" in out
    code, out, _ = run("comm", "ring", "dgx1-v100", "--devices",
                       "gpu0,gpu5,gpu2,gpu7,gpu4,gpu1,gpu6,gpu3", "--json")  # fmt: skip
    assert code == 0
    doc = json.loads(out)
    assert doc["ring_bottleneck_gbps"] == 50.0
    assert doc["given_bottleneck_gbps"] < 10.0
    assert {h["level"] for h in doc["hops"]} == {"NVLINK"}


def test_place_shows_the_gain_over_a_topology_oblivious_scheduler() -> None:
    code, out, _ = run("comm", "place", "dgx-h100:hosts=4", "--accelerators", "H100:4",
                       "--busy", "8", "--json")  # fmt: skip
    assert code == 0
    doc = json.loads(out)
    by = {p["strategy"]: p for p in doc["placements"]}
    assert by["oblivious"]["vs_comm_aware"] >= 2.0
    assert by["comm-aware"]["vs_comm_aware"] == 1.0
    code, out, _ = run("comm", "place", "mixed-lab")
    assert code == 0
    assert "oblivious" in out and "comm-aware" in out


def test_bad_input_names_the_flag_and_value() -> None:
    code, _, err = run("comm", "estimate", "dgx-h100", "--devices", "gpu0,gpu9")
    assert code == 2 and "--devices" in err and "gpu9" in err
    code, _, err = run("comm", "estimate", "dgx-h100", "--devices", "all", "--sizes", "1K..0")
    assert code == 2 and "--sizes" in err
    code, _, err = run("comm", "estimate", "dgx-h100", "--devices", "all", "--collective", "x")
    assert code == 2 and "--collective" in err and "allreduce" in err
    code, _, err = run("comm", "place", "mixed-lab", "--accelerators", "H100:9")
    assert code == 2 and "H100:9" in err
    code, _, err = run("comm", "place", "mixed-lab", "--bytes", "lots")
    assert code == 2 and "--bytes" in err
