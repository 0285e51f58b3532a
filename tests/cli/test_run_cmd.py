"""``accelnet run``: job files run to completion on real workers, with a report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from accelnet.cli.main import app

runner = CliRunner()

JOBS = """jobs:
  - {name: hello, run: "echo hello from $ACCELNET_DEVICE"}
  - {name: pair, run: "echo rank $ACCELNET_RANK of $ACCELNET_WORLD_SIZE",
     resources: {accelerators: "any:2"}}
  - {name: bad, run: "echo broken >&2; exit 4", max_retries: 1}
  - {name: mul, entrypoint: {function: "operator:mul", args: [6, 7]}}
"""


def test_run_reports_every_job(tmp_path: Path) -> None:
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(JOBS)
    out = tmp_path / "out"
    r = runner.invoke(app, ["run", str(jobs), "--out", str(out), "--json",
                            "--fabric", "pcie-4xL4"], env={"COLUMNS": "200"})  # fmt: skip
    assert r.exit_code == 1  # one job failed
    data = json.loads(r.stdout)
    states = {j["name"]: (j["state"], j["attempts"]) for j in data["jobs"]}
    assert states == {"hello": ("succeeded", 1), "pair": ("succeeded", 1),
                      "bad": ("failed", 2), "mul": ("succeeded", 1)}  # fmt: skip
    bad = next(j for j in data["jobs"] if j["name"] == "bad")
    assert "exited with code 4" in bad["error"]
    err_log = Path(bad["logs"]) / f"{bad['id']}.2.0.err"
    assert err_log.read_text().strip() == "broken"
    pair = next(j for j in data["jobs"] if j["name"] == "pair")
    outs = sorted(Path(pair["logs"]).glob(f"{pair['log_prefix']}.*.out"))
    assert [p.read_text().strip() for p in outs] == ["rank 0 of 2", "rank 1 of 2"]
    assert data["emulated"] is True


def test_run_rejects_a_job_the_fabric_cannot_run(tmp_path: Path) -> None:
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text("name: big\nrun: x\nresources: {accelerators: 'L4:9'}\n")
    r = runner.invoke(app, ["run", str(jobs), "--fabric", "pcie-4xL4", "--out",
                            str(tmp_path / "o")])  # fmt: skip
    assert r.exit_code == 1 and "needs 9 x L4" in " ".join(r.stderr.split())


def test_a_run_with_a_store_file_resumes_instead_of_rerunning(tmp_path: Path) -> None:
    jobs = tmp_path / "jobs.yaml"
    count = tmp_path / "count.txt"
    jobs.write_text(f"jobs:\n  - {{name: once, run: 'echo x >> {count}'}}\n")
    args = ["run", str(jobs), "--out", str(tmp_path / "o"), "--db", str(tmp_path / "s.db"),
            "--json"]  # fmt: skip
    first = runner.invoke(app, args, env={"COLUMNS": "200"})
    assert first.exit_code == 0, first.stderr
    second = runner.invoke(app, args, env={"COLUMNS": "200"})
    assert second.exit_code == 0, second.stderr
    assert json.loads(second.stdout)["jobs"][0]["id"] == "once"
    assert count.read_text().split() == ["x"]  # ran once, not twice


def test_a_job_file_of_jobs_consuming_each_others_outputs(tmp_path: Path) -> None:
    dag = Path(__file__).parents[2] / "examples" / "jobs" / "dag.yaml"
    args = ["run", str(dag), "--out", str(tmp_path / "o"), "--json", "--fabric", "pcie-4xL4"]
    r = runner.invoke(app, args, env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.stderr
    jobs = {j["name"]: j for j in json.loads(r.stdout)["jobs"]}
    assert jobs["report"]["inputs"] == {"parts": jobs["split"]["id"], "sum": jobs["total"]["id"]}
    assert (Path(jobs["total"]["output"]) / "total.txt").read_text().strip() == "4950"
    report = Path(jobs["report"]["logs"]) / f"{jobs['report']['log_prefix']}.0.out"
    assert report.read_text().strip() == "sum 4950 of 100 numbers"


def test_a_power_budget_runs_jobs_one_at_a_time_and_the_store_keeps_energy_and_history(
    tmp_path: Path,
) -> None:
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text("jobs:\n  - {name: one, run: 'sleep 0.3'}\n  - {name: two, run: 'sleep 0.3'}\n")
    db = tmp_path / "s.db"
    r = runner.invoke(app, ["run", str(jobs), "--out", str(tmp_path / "o"), "--db", str(db),
                            "--fabric", "pcie-4xL4", "--power-budget", "72", "--json"],
                      env={"COLUMNS": "200"})  # fmt: skip
    assert r.exit_code == 0, r.stderr
    data = json.loads(r.stdout)
    one, two = data["jobs"]
    assert one["energy"]["source"] == two["energy"]["source"] == "modelled"
    assert one["energy"]["joules"] > 0 and set(two["energy"]["by_device"]) == set(two["devices"])
    assert data["power"]["budget_w"] == 72.0
    lowered = [c["detail"] for c in data["power"]["changes"] if c["kind"] == "power:cap"]
    assert lowered and lowered[0].endswith("power budget 72 W, 1 job running, projected 72 W")
    # the store keeps it: device list shows the jobs' energy, device history the samples
    listed = runner.invoke(app, ["device", "list", "--fabric", "pcie-4xL4", "--db", str(db),
                                 "--json"])  # fmt: skip
    rows = {d["device"]: d for d in json.loads(listed.stdout)["devices"]}
    used = sum(j["energy"]["joules"] for j in data["jobs"])
    assert sum(d["energy_j"] or 0 for d in rows.values()) == pytest.approx(used)
    assert all(d["power_cap_w"] is None for d in rows.values())  # back to the default at close
    hist = runner.invoke(app, ["device", "history", "l4box/gpu0", "--db", str(db), "--json"])
    assert hist.exit_code == 0, hist.output
    buckets = json.loads(hist.stdout)["buckets"]
    assert buckets and {b["device"] for b in buckets} == {"l4box/gpu0"}
    assert buckets[0]["schema"] == "accelnet.device-history/v1" and buckets[0]["width_s"] == 60
    table = runner.invoke(app, ["device", "history", "--db", str(db)], env={"COLUMNS": "200"})
    assert table.exit_code == 0 and "l4box/gpu3" in table.output
    unknown = runner.invoke(app, ["device", "history", "nope/gpu9", "--db", str(db)])
    assert unknown.exit_code == 2 and "unknown device 'nope/gpu9'" in unknown.output
