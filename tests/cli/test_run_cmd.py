"""``accelnet run``: job files run to completion on real workers, with a report."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
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
    results = {j["name"]: j["result"] for j in data["jobs"]}
    assert results == {"hello": None, "pair": None, "bad": None, "mul": 42}
    assert data["interrupted"] is False and data["unfinished"] == []
    assert "logs: " in r.stderr  # the report is for people: on stderr, stdout stays JSON


REPORTED = """jobs:
  - {name: chatty, run: 'mkdir -p "$ACCELNET_OUTPUT" && echo made > "$ACCELNET_OUTPUT/made.txt"
                         && for i in 1 2 3 4 5 6 7; do echo line $i; done'}
  - {name: mul, entrypoint: {function: "operator:mul", args: [6, 7]}}
  - {name: bad, run: "echo early >&2; echo broken >&2; exit 4"}
"""


def _blocks(text: str) -> dict[str, list[str]]:
    """The report's lines per job: a block starts at a line that does not start with a
    space (the job's name first)."""
    blocks: dict[str, list[str]] = {}
    current: list[str] = []
    for line in text[text.index("logs: ") :].splitlines()[1:]:
        if line and not line.startswith(" "):
            current = blocks.setdefault(line.split()[0], [])
        current.append(line)
    return blocks


def test_the_report_says_where_logs_and_outputs_are_with_results_and_output_tails(
    tmp_path: Path,
) -> None:
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(REPORTED)
    r = runner.invoke(app, ["run", str(jobs), "--out", str(tmp_path / "o"), "--fabric",
                            "pcie-4xL4"], env={"COLUMNS": "300"})  # fmt: skip
    assert r.exit_code == 1, r.output  # bad failed
    logs = re.search(r"^logs: (\S+)", r.stdout, re.M)
    assert logs and Path(logs[1]).is_dir() and Path(logs[1]) == (tmp_path / "o" / "logs")
    blocks = _blocks(r.stdout)
    chatty = blocks["chatty"]
    assert "succeeded" in chatty[0]
    output = next(line.split("output: ")[1] for line in chatty if "output: " in line)
    assert (Path(output) / "made.txt").read_text() == "made\n"
    shown = re.search(r"stdout \((\S+)\):", chatty[2])
    assert shown and Path(shown[1]).parent == Path(logs[1])
    tail = [line.strip() for line in chatty[3:]]
    assert tail == ["line 3", "line 4", "line 5", "line 6", "line 7"]  # the last lines
    assert Path(shown[1]).read_text().splitlines()[-5:] == tail  # of its real log
    assert "result: 42" in blocks["mul"][0] and len(blocks["mul"]) == 1
    bad = blocks["bad"]
    assert "failed" in bad[0] and "exited with code 4" in bad[0]
    err = re.search(r"stderr \((\S+)\):", bad[1])
    assert err and Path(err[1]).read_text() == "early\nbroken\n"
    assert [line.strip() for line in bad[2:]] == ["early", "broken"]


def test_a_rerun_on_the_store_file_says_what_it_resumed_and_what_was_already_done(
    tmp_path: Path,
) -> None:
    release = tmp_path / "release"
    ran = tmp_path / "ran.txt"
    done = "".join(f"  - {{name: {n}, run: 'echo {n} >> {ran}'}}\n" for n in ("c", "d"))
    held = "".join(
        f"  - {{name: {n}, run: 'if [ -e {release} ]; then echo {n} >> {ran}; else sleep 600; "
        "fi'}\n"
        for n in ("a", "b")
    )
    first, second = tmp_path / "first.yaml", tmp_path / "second.yaml"
    first.write_text("jobs:\n" + done)
    second.write_text("jobs:\n" + done + held)
    db = tmp_path / "s.db"
    args = ["--out", str(tmp_path / "o"), "--db", str(db), "--fabric", "pcie-4xL4"]
    env = {"COLUMNS": "300"}
    r = runner.invoke(app, ["run", str(first), *args], env=env)
    assert r.exit_code == 0, r.output
    assert "already finished" not in r.output and "resumed" not in r.output  # all new
    # a and b cannot finish without the release file: the run gives up with them unfinished
    r = runner.invoke(app, ["run", str(second), *args, "--timeout", "0"], env=env)
    assert r.exit_code == 1, r.output
    said = " ".join(r.stdout.split())
    assert f"2 jobs already finished in {db} (c, d): not run again; 2 new (a, b)" in said
    assert f"not finished within 0 s: 2 jobs unfinished (a, b); rerun with --db {db}" in said
    release.touch()
    r = runner.invoke(app, ["run", str(second), *args], env=env)
    assert r.exit_code == 0, r.output
    said = " ".join(r.stdout.split())
    assert f"resumed 2 jobs (a, b) from {db}; 2 already finished (c, d): not run again" in said
    assert sorted(ran.read_text().split()) == ["a", "b", "c", "d"]  # c and d ran once
    blocks = _blocks(r.stdout)
    assert "(finished in an earlier run)" in blocks["c"][0]
    assert "earlier" not in blocks["a"][0] and "succeeded" in blocks["a"][0]


def test_ctrl_c_stops_the_run_says_so_and_a_rerun_resumes(tmp_path: Path) -> None:
    release, started = tmp_path / "release", tmp_path / "started"
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(
        "jobs:\n  - {name: quick, run: 'echo quick done'}\n"
        f"  - {{name: slow, inputs: {{q: quick}},"  # starts once quick has succeeded
        f" run: 'if [ -e {release} ]; then echo slow resumed; "
        f"else touch {started}; sleep 600; fi'}}\n"
    )
    db = tmp_path / "s.db"
    args = ["run", str(jobs), "--out", str(tmp_path / "o"), "--db", str(db)]
    accelnet = Path(sys.executable).with_name("accelnet")
    proc = subprocess.Popen([str(accelnet), *args], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env={**os.environ, "COLUMNS": "300"})  # fmt: skip
    try:
        deadline = time.monotonic() + 120  # generous: a loaded machine starts slowly
        while not started.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert started.exists(), f"slow never started: {proc.poll()=}"
        os.kill(proc.pid, signal.SIGINT)  # what Ctrl-C sends
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == 130, err
    assert out.strip().splitlines()[0].strip() == "interrupted: 1 job unfinished"  # the title
    said = " ".join(out.split())
    assert f"interrupted: 1 job unfinished (slow); rerun with --db {db} to resume" in said
    assert _blocks(out)["slow"][0].endswith("(unfinished)")  # running, or still starting
    release.touch()
    r = runner.invoke(app, args, env={"COLUMNS": "300"})
    assert r.exit_code == 0, r.output
    said = " ".join(r.stdout.split())
    assert f"resumed 1 job (slow) from {db}; 1 already finished (quick): not run again" in said
    assert "slow resumed" in said


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
