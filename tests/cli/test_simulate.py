"""``accelnet simulate``: a trace replayed on a fabric, reported as a table, JSON and files."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from accelnet.cli.main import app

runner = CliRunner()

# two jobs of Gavel's trace format: job_type, command, working_directory, num_steps_arg,
# needs_data_dir, total_steps, scale_factor, priority_weight, SLO, arrival_time
TRACE = (
    "ResNet-50 (batch size 64)\tpython3 main.py\timagenet\t--num_steps\t1\t4400\t1\t1\t-1\t0\n"
    "Transformer (batch size 64)\tpython3 train.py\ttranslation\t-step\t1\t5000\t2\t1\t-1\t60\n"
)


def simulate(*args: str) -> Any:
    return runner.invoke(app, ["simulate", *args], env={"COLUMNS": "200"})


def test_json_report_of_a_small_gavel_trace(tmp_path: Path) -> None:
    trace = tmp_path / "two.trace"
    trace.write_text(TRACE)
    out = tmp_path / "out"
    r = simulate("--fabric", "gavel-48", "--trace", str(trace), "--json", "--out", str(out))
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["schema"] == "accelnet.simulate/v1" and data["fabric"] == "gavel-48"
    (run,) = data["runs"]
    m = run["metrics"]
    assert run["policy"] == "fifo" and m["jobs"]["finished"] == 2
    assert m["jct_s"]["avg"] >= m["bounds"]["jct_lb_avg_s"] > 0
    rows = list(csv.DictReader((out / "jobs-fifo.csv").open()))
    first = next(row for row in rows if row["id"] == "gavel-00000")
    # ResNet-50 bs64 runs 4.40 steps/s on a V100 (the fastest here): 4,400 steps in ~1,000 s,
    # and it arrived on an idle fabric, so it ran at once
    assert abs(float(first["alone_s"]) - 1000) < 5
    assert float(first["first_start"]) == 0 and abs(float(first["jct"]) - 1000) < 5


def test_policies_side_by_side_with_files(tmp_path: Path) -> None:
    out = tmp_path / "out"
    r = simulate("--fabric", "gavel-48", "--trace", "gavel-gen:n=40,lam=30", "--seed", "3",
                 "--policy", "fifo,priority", "--out", str(out))  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "fifo" in r.stdout and "priority" in r.stdout and "JCT avg" in r.stdout
    names = {p.name for p in out.iterdir()}
    assert {"metrics.json", "jobs-fifo.csv", "jobs-priority.csv", "jct_cdf.png",
            "utilization.png", "queue.png"} <= names  # fmt: skip
    rows = (out / "jobs-fifo.csv").read_text().splitlines()
    assert len(rows) == 41 and rows[0].startswith("id,")


def test_a_power_cap_makes_the_same_work_take_longer(tmp_path: Path) -> None:
    trace = tmp_path / "two.trace"
    trace.write_text(TRACE)

    def makespan(*extra: str) -> float:
        r = simulate("--fabric", "gavel-48", "--trace", str(trace), "--json", *extra)
        assert r.exit_code == 0, r.output
        return float(json.loads(r.stdout)["runs"][0]["metrics"]["makespan_s"])

    assert makespan("--power-cap", "100") > makespan()


def test_failures_are_injected_and_counted(tmp_path: Path) -> None:
    r = simulate("--fabric", "gavel-48", "--trace", "gavel-gen:n=60,lam=60", "--mtbf", "20000",
                 "--repair-s", "600", "--json")  # fmt: skip
    assert r.exit_code == 0, r.output
    m = json.loads(r.stdout)["runs"][0]["metrics"]
    assert m["failures"] > 0 and m["jobs"]["total"] == 60


def test_bad_input_names_what_is_wrong(tmp_path: Path) -> None:
    r = simulate("--fabric", "gavel-48", "--trace", str(tmp_path / "missing.trace"))
    assert r.exit_code == 2 and "missing.trace" in r.output
    trace = tmp_path / "t.trace"
    trace.write_text(TRACE)
    r = simulate("--fabric", "gavel-48", "--trace", str(trace), "--policy", "fastest")
    assert r.exit_code == 2 and "unknown policy 'fastest'" in r.output and "fifo" in r.output
    r = simulate("--fabric", "gavel-48", "--trace", str(trace), "--power-cap", "0")
    assert r.exit_code == 2 and "--power-cap" in r.output


def test_bad_failure_options_and_unrunnable_jobs(tmp_path: Path) -> None:
    trace = tmp_path / "t.trace"
    trace.write_text(TRACE)
    r = simulate("--fabric", "gavel-48", "--trace", str(trace), "--mtbf", "0")
    assert r.exit_code == 2 and "mtbf" in r.output and "Traceback" not in r.output
    big = tmp_path / "big.csv"
    big.write_text("id,arrival,gpus,duration\nhuge,0,64,100\nsmall,0,1,100\n")
    r = simulate("--fabric", "gavel-48", "--trace", str(big), "--json")
    assert r.exit_code == 0, r.output
    jobs = json.loads(r.stdout)["runs"][0]["metrics"]["jobs"]
    assert jobs["rejected"] == 1 and jobs["finished"] == 1


def test_reservations_and_locality_waits_from_the_command_line(tmp_path: Path) -> None:
    fab = "fat-tree:hosts=8,gpus_per_host=8,model=V100"
    trace = "gavel-gen:n=150,lam=200,seed=1"  # queues build on 64 GPUs
    spread = {}
    for name, extra in {"plain": [], "kept": ["--reserve-after", "3600",
                                              "--locality-wait", "1e12"]}.items():  # fmt: skip
        out = tmp_path / name
        r = simulate("--fabric", fab, "--trace", trace, "--out", str(out), *extra)
        assert r.exit_code == 0, r.output
        rows = list(csv.DictReader((out / "jobs-fifo.csv").open()))
        assert len(rows) == 150 and all(row["state"] == "succeeded" for row in rows)
        # a gang spread over hosts runs slower than alone on one host
        spread[name] = sum(float(row["run_s"]) > float(row["alone_s"]) + 1 for row in rows)
    assert spread["plain"] > 0 and spread["kept"] == 0
    r = simulate("--fabric", fab, "--trace", trace, "--policy", "hetero-fair",
                 "--reserve-after", "60")  # fmt: skip
    assert r.exit_code == 2 and "queue policies" in r.output
    r = simulate("--fabric", fab, "--trace", trace, "--policy", "fifo,sjf",
                 "--locality-wait", "60")  # fmt: skip
    assert r.exit_code == 2 and "not to sjf" in r.output
    r = simulate("--fabric", fab, "--trace", trace, "--locality-wait", "-5")
    assert r.exit_code == 2 and "locality wait" in r.output


def test_a_reallocation_interval_from_the_command_line(tmp_path: Path) -> None:
    trace = "gavel-gen:n=40,lam=900,seed=2"
    # fifo beside a round policy: the interval is the round policy's, fifo is unchanged
    r = simulate("--fabric", "gavel-48", "--trace", trace, "--policy", "fifo,hetero-fair",
                 "--min-reallocation-s", "1920", "--json")  # fmt: skip
    assert r.exit_code == 0, r.output
    runs = {run["policy"]: run["metrics"] for run in json.loads(r.stdout)["runs"]}
    assert runs["hetero-fair"]["jobs"]["finished"] == 40
    hf = runs["hetero-fair"]  # stops are reported per job beside the count
    assert hf["preemptions_per_job"] == pytest.approx(hf["preemptions"] / 40, abs=1e-6)
    plain = simulate("--fabric", "gavel-48", "--trace", trace, "--json")
    assert json.loads(plain.stdout)["runs"][0]["metrics"]["jct_s"] == runs["fifo"]["jct_s"]
    r = simulate("--fabric", "gavel-48", "--trace", trace, "--policy", "hetero-fair",
                 "--min-reallocation-s", "-5")  # fmt: skip
    assert r.exit_code == 2 and "--min-reallocation-s" in r.output and "-5" in r.output


def test_a_fabric_with_a_model_of_its_own_is_simulated(tmp_path: Path) -> None:
    # issue 25 item 5: `fabric validate` and `plan` took an A10 the catalog lacks; simulate
    # refused it ("unknown device model 'A10'"). Its rate comes from its declared figures.
    fab = tmp_path / "a10.yaml"
    fab.write_text(
        "name: a10-lab\nhosts:\n  - name: h0\n    devices:\n"
        "      - {model: A10, count: 2, kind: gpu, memory_gb: 24, mem_bw_gbps: 600,\n"
        "         peak_tflops: {fp16: 125, fp32: 31}, max_w: 150}\n"
    )
    trace = tmp_path / "two.trace"
    trace.write_text(TRACE)
    r = simulate("--fabric", str(fab), "--trace", str(trace), "--json")
    assert r.exit_code == 0, r.output
    (run,) = json.loads(r.stdout)["runs"]
    assert run["metrics"]["jobs"]["finished"] == 2
    assert run["metrics"]["jct_s"]["avg"] > 0
