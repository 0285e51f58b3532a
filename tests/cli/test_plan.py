"""``accelnet plan``: placements and reasons, without running anything."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from accelnet.cli.main import app

runner = CliRunner()
EXAMPLE = Path(__file__).parents[2] / "examples" / "jobs" / "lab.yaml"


def run(*args: str) -> tuple[int, str, str]:
    r = runner.invoke(app, list(args), env={"COLUMNS": "200"})
    return r.exit_code, r.stdout, r.stderr


def test_plan_example_on_mixed_lab() -> None:
    code, out, _ = run("plan", "mixed-lab", str(EXAMPLE), "--json")
    assert code == 0
    data = json.loads(out)
    starts = {s["job"]: s for s in data["starts"]}
    assert starts["train-llm"]["span"] == "nvlink" and len(starts["train-llm"]["devices"]) == 8
    assert starts["serve-digits"]["share"] == 0.25
    assert starts["edge-video"]["model"] == "Jetson-AGX-Orin"
    assert set(starts["render-frames"]["devices"]) <= {f"l4box/gpu{i}" for i in range(4)}
    # H100s are taken by train-llm, L4s by render-frames and etl-logs: finetune waits
    assert data["waiting"]["finetune"].startswith("needs 4 x H100-SXM; 0 of 8 free; or needs")
    assert data["waiting_codes"]["finetune"] == "no_capacity"
    assert set(data["waiting_codes"]) == set(data["waiting"])
    code, out, _ = run("plan", "mixed-lab", str(EXAMPLE))
    assert code == 0 and "start" in out and "wait" in out and "train-llm" in out


def test_plan_rejects_jobs_the_fabric_can_never_run(tmp_path: Path) -> None:
    p = tmp_path / "j.yaml"
    p.write_text("name: x\nrun: y\nresources: {accelerators: 'B200:2'}\n")
    code, _, err = run("plan", "mixed-lab", str(p))
    assert code == 1
    assert "resources.accelerators = 'B200': job x: fabric 'mixed-lab' has no B200" in " ".join(
        err.split()
    )


def test_plan_bad_file_and_bad_policy(tmp_path: Path) -> None:
    p = tmp_path / "j.yaml"
    p.write_text("name: x\nrun: y\nresources: {accelerators: 'H100:0'}\n")
    code, _, err = run("plan", "mixed-lab", str(p))
    assert code == 1 and "j.yaml:3: resources.accelerators = 'H100:0'" in err
    code, _, err = run("plan", "mixed-lab", str(EXAMPLE), "--ordering", "lifo")
    assert code == 2 and "unknown ordering policy 'lifo'" in err


def test_job_validate_and_schema(tmp_path: Path) -> None:
    code, out, _ = run("job", "validate", str(EXAMPLE), "--fabric", "mixed-lab")
    assert code == 0 and "6 job(s) on mixed-lab" in out
    code, _, err = run("job", "validate", str(EXAMPLE), "--fabric", "dgx-h100")
    assert code == 1 and "fabric 'dgx-h100' has no T4" in " ".join(err.split())
    code, out, _ = run("job", "schema")
    assert code == 0 and json.loads(out)["title"] == "JobSpec"


def test_plan_lists_every_placement_and_takes_a_frag_aware_job_mix() -> None:
    code, out, _ = run("plan", "--help")
    assert code == 0
    for name in ("best-fit", "first-fit", "frag-aware", "comm-aware"):
        assert name in out
    code, out, _ = run("plan", "mixed-lab", str(EXAMPLE), "--json", "--placement",
                       "frag-aware", "--frag-mix", "1:0.25:3, 1:1:2, 4:1:1")  # fmt: skip
    assert code == 0, out
    assert {s["job"] for s in json.loads(out)["starts"]} >= {"train-llm", "serve-digits"}
    code, _, err = run("plan", "mixed-lab", str(EXAMPLE), "--placement", "frag-aware",
                       "--frag-mix", "1:0.25:3,2:0.5")  # fmt: skip
    assert code == 2 and "item 2 '2:0.5'" in err and "count:share:weight" in err
    code, _, err = run("plan", "mixed-lab", str(EXAMPLE), "--placement", "frag-aware",
                       "--frag-mix", "2:0.5:1")  # fmt: skip
    assert code == 2 and "fractional share is one" in err
    code, _, err = run("plan", "mixed-lab", str(EXAMPLE), "--frag-mix", "1:1:1")
    assert code == 2 and "--frag-mix is for --placement frag-aware" in err


def test_simulate_takes_the_frag_aware_mix_and_lists_every_placement(tmp_path: Path) -> None:
    code, out, _ = run("simulate", "--help")
    assert code == 0
    for name in ("best-fit", "first-fit", "frag-aware", "comm-aware"):
        assert name in out
    assert "--frag-mix" in out
    trace = tmp_path / "t.csv"
    trace.write_text("id,arrival,gpus,duration\nj0,0,1,10\nj1,1,2,10\n")
    code, out, err = run("simulate", "--fabric", "mixed-lab", "--trace", str(trace),
                         "--placement", "frag-aware", "--frag-mix", "1:1:2,2:1:1")  # fmt: skip
    assert code == 0, err
    code, _, err = run("simulate", "--fabric", "mixed-lab", "--trace", str(trace),
                       "--frag-mix", "1:1:2")  # fmt: skip
    assert code == 2 and "--frag-mix is for --placement frag-aware" in err
    code, _, err = run("simulate", "--fabric", "mixed-lab", "--trace", str(trace),
                       "--placement", "frag-aware", "--frag-mix", "2:0.5")  # fmt: skip
    assert code == 2 and "--frag-mix: job mix item 1" in err


def test_plan_shows_cpu_only_jobs_on_their_host_and_refuses_one_no_host_holds(
    tmp_path: Path,
) -> None:
    fabric = tmp_path / "f.yaml"
    fabric.write_text(
        "name: f\nswitches: [{name: leaf0, kind: leaf}]\n"
        "hosts: [{name: n0, devices: 2xL4, cpus: 8, memory_gb: 32, nics: 1xEth-100G, "
        "network: leaf0}]\n"
    )
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text("jobs:\n  - {name: etl, run: 'true', resources: {cpus: 2, memory_gb: 4}}\n")
    code, out, err = run("plan", str(fabric), str(jobs), "--json")
    assert code == 0, err
    decision = json.loads(out)
    (start,) = decision["starts"]
    assert start["job"] == "etl" and start["devices"] == []
    assert start["hosts"] == [{"host": "n0", "cpus": 2.0, "memory_gb": 4.0}]
    code, out, _ = run("plan", str(fabric), str(jobs))
    assert "host n0 (2 CPUs, 4 GB)" in out
    huge = tmp_path / "huge.yaml"
    huge.write_text("{name: huge, run: 'true', resources: {cpus: 64}}\n")
    code, _, err = run("plan", str(fabric), str(huge))
    assert code == 1
    assert "resources.cpus = 64.0: job huge: needs 64 CPU cores per rank" in err
    assert "the largest host has 8" in err
