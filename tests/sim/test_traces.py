"""Trace loaders and generators: exact values on small inline files, every error naming
file:line, field and value; the real Gavel and Philly files when /work/shared is there."""

from __future__ import annotations

import itertools
import json
import math
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from accelnet.sim.failures import load_failures, mtbf_failures
from accelnet.sim.traces import (
    PhillyTrace,
    TraceError,
    generate_gavel,
    load_gavel_trace,
    load_jobs,
    load_philly,
    load_trace,
)
from accelnet.sim.workload import DeviceFailure

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
GAVEL = DATA / "gavel" / "traces" / "max_min_fairness.trace"
PHILLY = DATA / "philly" / "philly.csv"


class FakeRates:
    """A rate model over an explicit table: (job type, gpus) -> steps/s."""

    reference = "V100"

    def __init__(self, table: dict[tuple[str, int], float]) -> None:
        self.table = table

    def job_types(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(t for t, _ in self.table))

    def reference_rate(self, job_type: str, gpus: int) -> float:
        return self.table[(job_type, gpus)]  # KeyError: no rate


def fake() -> FakeRates:
    """ResNet and LM run on 1-8 GPUs; A3C on one only; ``generic`` on any count up to 8."""
    table: dict[tuple[str, int], float] = {}
    for g in (1, 2, 4, 8):
        table[("ResNet-18 (batch size 128)", g)] = 10.0 * g
        table[("LM (batch size 20)", g)] = 4.0 * g
        table[("generic", g)] = 1.0 * g
    table[("A3C", 1)] = 2.0
    return FakeRates(table)


def gavel_names() -> FakeRates:
    """Every job type of Gavel's traces, 1.0 step/s on 1, 2, 4 and 8 GPUs."""
    names = [f"ResNet-18 (batch size {b})" for b in (16, 32, 64, 128, 256)]
    names += [f"ResNet-50 (batch size {b})" for b in (16, 32, 64, 128)]
    names += [f"Transformer (batch size {b})" for b in (16, 32, 64, 128, 256)]
    names += [f"LM (batch size {b})" for b in (5, 10, 20, 40, 80)]
    names += [f"Recommendation (batch size {b})" for b in (512, 1024, 2048, 4096, 8192)]
    names += ["A3C", "CycleGAN"]
    return FakeRates({(n, g): 1.0 for n in names for g in (1, 2, 4, 8)})


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def raises(match: str) -> pytest.RaisesExc[TraceError]:
    """A TraceError whose message starts with exactly ``match``."""
    return pytest.raises(TraceError, match="^" + re.escape(match))


def gavel_line(
    job_type: str = "A3C",
    steps: str = "1000",
    gpus: str = "1",
    weight: str = "1",
    slo: str = "-1.000000",
    arrival: str = "0",
) -> str:
    return "\t".join(
        [job_type, "python3 main.py", "rl", "--max-steps", "0", steps, gpus, weight, slo, arrival]
    )


# ---------------------------------------------------------------- Gavel traces


def test_gavel_trace_exact_values(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "t.trace",
        "\n".join(
            [
                gavel_line("ResNet-18 (batch size 128)", "925982", "4", "1", "-1.000000", "0"),
                "",
                gavel_line("LM (batch size 20)", "8000", "2", "2.5", "2.0", "120.5"),
                gavel_line("A3C", "300", "1", "1", "-1", "7"),
            ]
        )
        + "\n",
    )
    jobs = load_gavel_trace(path, fake())
    assert [j.id for j in jobs] == ["gavel-00000", "gavel-00001", "gavel-00002"]
    first, lm, a3c = jobs
    assert (first.job_type, first.work, first.gpus, first.arrival) == (
        "ResNet-18 (batch size 128)",
        925982.0,
        4,
        0.0,
    )
    assert first.deadline is None and first.weight == 1.0
    # SLO 2.0: twice the run time alone on the reference model (8000 steps / 8 steps/s)
    assert lm.weight == 2.5 and lm.arrival == 120.5
    assert lm.deadline == pytest.approx(120.5 + 2.0 * 8000 / 8.0)
    assert (a3c.job_type, a3c.work, a3c.arrival, a3c.deadline) == ("A3C", 300.0, 7.0, None)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (gavel_line("Foo (batch size 1)"), "t.trace:2: job_type = 'Foo (batch size 1)': unknown"),
        ("A3C\tcmd\t1\t2", "t.trace:2: fields = 4: a Gavel trace line has 10"),
        (gavel_line(steps="abc"), "t.trace:2: total_steps = 'abc': must be a number"),
        (gavel_line(steps="0"), "t.trace:2: total_steps = '0': must be > 0"),
        (gavel_line(gpus="0"), "t.trace:2: scale_factor = '0': must be a whole number >= 1"),
        (gavel_line(gpus="1.5"), "t.trace:2: scale_factor = '1.5': must be a whole number"),
        (gavel_line(weight="-1"), "t.trace:2: priority_weight = '-1': must be > 0"),
        (gavel_line(arrival="-5"), "t.trace:2: arrival_time = '-5': must be >= 0"),
        (gavel_line(arrival="nan"), "t.trace:2: arrival_time = 'nan': must be a finite number"),
        (gavel_line(slo="0"), "t.trace:2: SLO = '0': must be > 0"),
        (gavel_line(gpus="2", slo="1.5"), "t.trace:2: job_type = 'A3C': the rate model has no"),
    ],
)
def test_gavel_trace_errors(tmp_path: Path, line: str, message: str) -> None:
    path = write(tmp_path, "t.trace", gavel_line() + "\n" + line + "\n")
    with raises(str(tmp_path / message)):
        load_gavel_trace(path, fake())


def test_gavel_trace_missing_file(tmp_path: Path) -> None:
    with raises(f"{tmp_path / 'nope.trace'}: no such file"):
        load_gavel_trace(tmp_path / "nope.trace", fake())


def test_real_gavel_trace() -> None:
    if not GAVEL.is_file():
        pytest.skip(f"{GAVEL} is absent (shared data not checked out)")
    jobs = load_gavel_trace(GAVEL, gavel_names())
    assert len(jobs) == 96
    first = jobs[0]
    assert (first.id, first.job_type, first.work, first.gpus, first.arrival) == (
        "gavel-00000",
        "ResNet-18 (batch size 128)",
        925982.0,
        4,
        0.0,
    )
    assert all(j.deadline is None for j in jobs)
    assert max(j.arrival for j in jobs) == pytest.approx(46317, abs=1)


def test_real_gavel_trace_with_the_throughput_model() -> None:
    if not GAVEL.is_file():
        pytest.skip(f"{GAVEL} is absent (shared data not checked out)")
    throughput = pytest.importorskip("accelnet.sim.throughput")
    cls = throughput.ThroughputModel
    makers = [getattr(cls, name) for name in ("gavel", "default", "load") if hasattr(cls, name)]
    for make in [*makers, cls]:
        try:
            model = make()
            break
        except TypeError:  # needs arguments: try the next constructor
            continue
    else:
        pytest.skip("no argument-free way to build a ThroughputModel (gavel/default/load)")
    jobs = load_gavel_trace(GAVEL, model)
    assert len(jobs) == 96 and jobs[0].work == 925982.0


# ---------------------------------------------------------------- Gavel's generator


def test_generator_distributions() -> None:
    rates = fake()
    n, lam = 20_000, 60.0
    jobs = generate_gavel(n, lam, seed=7, rates=rates)
    assert len(jobs) == n and jobs[0].arrival == 0.0 and jobs[0].id == "gen-00000"
    arrivals = [j.arrival for j in jobs]
    assert arrivals == sorted(arrivals)
    assert arrivals[-1] / (n - 1) == pytest.approx(lam, rel=0.03)
    counts = Counter(j.gpus for j in jobs)
    for gpus, share in {1: 0.70, 2: 0.10, 4: 0.15, 8: 0.05}.items():
        assert counts[gpus] / n == pytest.approx(share, abs=0.015)
    minutes = [j.work / rates.reference_rate(j.job_type, j.gpus) / 60 for j in jobs]
    assert all(10**1.5 * (1 - 1e-9) <= m <= 10**4 * (1 + 1e-9) for m in minutes)
    assert sum(m < 10**3 for m in minutes) / n == pytest.approx(0.8, abs=0.015)
    # types uniform among those with a rate for the gang: A3C (one GPU only) never in a gang
    assert all(j.job_type != "A3C" for j in jobs if j.gpus > 1)
    singles = Counter(j.job_type for j in jobs if j.gpus == 1)
    total = sum(singles.values())
    assert set(singles) == set(rates.job_types())
    assert all(k / total == pytest.approx(0.25, abs=0.02) for k in singles.values())
    multi = Counter(j.job_type for j in jobs if j.gpus > 1)
    assert set(multi) == {"ResNet-18 (batch size 128)", "LM (batch size 20)", "generic"}


def test_generator_is_deterministic() -> None:
    a = generate_gavel(500, 30.0, seed=3, rates=fake())
    assert a == generate_gavel(500, 30.0, seed=3, rates=fake())
    assert a != generate_gavel(500, 30.0, seed=4, rates=fake())


def test_generator_single_gpu_and_edges() -> None:
    assert all(j.gpus == 1 for j in generate_gavel(300, 10.0, 1, fake(), multi_gpu=False))
    assert generate_gavel(0, 10.0, 1, fake()) == []
    assert {j.arrival for j in generate_gavel(50, 0.0, 1, fake())} == {0.0}
    with pytest.raises(ValueError, match=r"^lam = -1\.0: "):
        generate_gavel(10, -1.0, 1, fake())
    with pytest.raises(ValueError, match=r"^n = -1: "):
        generate_gavel(-1, 1.0, 1, fake())
    only_one = FakeRates({("A3C", g): 1.0 for g in (1, 2, 4)})
    with pytest.raises(ValueError, match="no job type with a rate on 8 GPU"):
        generate_gavel(200, 1.0, 1, only_one)


# ---------------------------------------------------------------- Philly

PHILLY_SAMPLE = """\
timestamp,duration,num_gpus,gpu_time,cluster
2017-10-09 07:01:55,66.0,1,66.0,11cb48
2017-10-09 06:13:03,2951.0,2,5902.0,6214e9
2017-10-09 07:01:55,10.0,4,40.0,b436b2
2017-10-09 08:00:00,0.0,1,0.0,11cb48
2017-10-09 09:00:00,50.0,0,0.0,11cb48
2017-10-09 09:30:00,50.0,16,800.0,11cb48

2017-10-10 06:13:03,5.5,8,44.0,6214e9
"""


def test_philly_sample_exact(tmp_path: Path) -> None:
    rates = fake()
    trace = load_philly(write(tmp_path, "p.csv", PHILLY_SAMPLE), rates, seed=5)
    assert isinstance(trace, PhillyTrace)
    jobs = trace.jobs
    assert [j.id for j in jobs] == [f"philly-0000{i}" for i in range(4)]
    # sorted by arrival; the two at 07:01:55 keep their file order (rows 2 then 4)
    assert [j.arrival for j in jobs] == [0.0, 2932.0, 2932.0, 86400.0]
    assert [j.tenant for j in jobs] == ["6214e9", "11cb48", "b436b2", "6214e9"]
    assert [j.gpus for j in jobs] == [2, 1, 4, 8]
    durations = [2951.0, 66.0, 10.0, 5.5]
    for job, duration in zip(jobs, durations, strict=True):
        assert job.work == pytest.approx(duration * rates.reference_rate(job.job_type, job.gpus))
        assert job.gpus == 1 or job.job_type != "A3C"
    assert (trace.rows, trace.dropped) == (7, 3)
    assert trace.notes[0].startswith("job types: one uniform draw per job in arrival order")
    assert "default_rng(5)" in trace.notes[0]
    assert (
        "7 rows; 4 jobs kept; 3 dropped (1 with duration <= 0, 1 with num_gpus <= 0, "
        "1 whose GPU count no job type has a rate for; 1 x 16 GPUs)"
    ) in trace.notes[1]


def test_philly_types_seeded_scale_and_limit(tmp_path: Path) -> None:
    path = write(tmp_path, "p.csv", PHILLY_SAMPLE)
    full = load_philly(path, fake(), seed=5)
    assert full == load_philly(path, fake(), seed=5)
    fast = load_philly(path, fake(), seed=5, time_scale=10, limit=2)
    assert [j.arrival for j in fast.jobs] == [0.0, 293.2]
    assert [j.job_type for j in fast.jobs] == [j.job_type for j in full.jobs[:2]]
    assert [j.work for j in fast.jobs] == [j.work for j in full.jobs[:2]]
    assert "arrivals replayed 10x faster (run times unchanged)" in fast.notes
    assert "limited to the first 2 of 4 jobs by arrival" in fast.notes
    many = [load_philly(path, fake(), seed=s).jobs for s in range(20)]
    assert len({tuple(j.job_type for j in jobs) for jobs in many}) > 1


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("yesterday,1,1,1,a", "p.csv:3: timestamp = 'yesterday': must be a date and time"),
        ("2017-10-09 07:01:55,x,1,1,a", "p.csv:3: duration = 'x': must be a number"),
        ("2017-10-09 07:01:55,inf,1,1,a", "p.csv:3: duration = 'inf': must be a finite"),
        ("2017-10-09 07:01:55,1,two,1,a", "p.csv:3: num_gpus = 'two': must be a number"),
        ("2017-10-09 07:01:55,1,1.5,1,a", "p.csv:3: num_gpus = '1.5': must be a whole number"),
        ("2017-10-09 07:01:55,1,1,1", "p.csv:3: columns = 4: expected 5"),
        ("2017-10-09 07:01:55,1,1,1,a b", "p.csv:3: cluster = 'a b': must be a name"),
    ],
)
def test_philly_errors(tmp_path: Path, row: str, message: str) -> None:
    text = "timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-09 07:01:55,1,1,1,a\n"
    path = write(tmp_path, "p.csv", text + row + "\n")
    with raises(str(tmp_path / message)):
        load_philly(path, fake())


def test_philly_header_errors(tmp_path: Path) -> None:
    path = write(tmp_path, "p.csv", "timestamp,duration,gpus,cluster\n")
    with raises(f"{path}:1: columns = ['gpus']: unknown column(s); allowed: timestamp,"):
        load_philly(path, fake())
    path = write(tmp_path, "p.csv", "timestamp,duration,cluster\n")
    with raises(f"{path}:1: columns = ['timestamp', 'duration', 'cluster']: missing required"):
        load_philly(path, fake())
    path = write(tmp_path, "p.csv", "")
    with raises(f"{path}: empty file"):
        load_philly(path, fake())


def test_real_philly() -> None:
    if not PHILLY.is_file():
        pytest.skip(f"{PHILLY} is absent (shared data not checked out)")
    trace = load_philly(PHILLY, fake(), seed=0)
    assert trace.rows == 82_247
    assert len(trace.jobs) + trace.dropped == 82_247
    arrivals = [j.arrival for j in trace.jobs]
    assert arrivals[0] == 0.0 and arrivals == sorted(arrivals)
    assert len({j.tenant for j in trace.jobs}) == 15
    assert all(j.gpus <= 8 for j in trace.jobs)  # the fake has no rate above 8 GPUs


# ---------------------------------------------------------------- accelnet's own format

JOBS_CSV = """\
id,arrival,gpus,job_type,work,duration,tenant,priority,weight,deadline,accelerators,checkpointable,max_retries
a,0,2,LM (batch size 20),5000,,vision,5,2,100,H100:2,false,1
,10.5,1,,,30,,,,,,1,
b,20,4,ResNet-18 (batch size 128),,60,,,,,any:4,TRUE,0
"""


def test_load_jobs_csv(tmp_path: Path) -> None:
    a, anon, b = load_jobs(write(tmp_path, "jobs.csv", JOBS_CSV), fake())
    assert (a.id, a.arrival, a.gpus, a.work) == ("a", 0.0, 2, 5000.0)
    assert a.job_type == "LM (batch size 20)"
    assert (a.tenant, a.priority, a.weight, a.deadline) == ("vision", 5, 2.0, 100.0)
    assert (a.accelerators, a.checkpointable, a.max_retries) == ("H100:2", False, 1)
    assert (anon.id, anon.arrival, anon.job_type, anon.work) == ("job-1", 10.5, "generic", 30.0)
    assert (anon.tenant, anon.checkpointable, anon.max_retries) == ("default", True, 3)
    assert (b.job_type, b.work, b.accelerators, b.max_retries) == (
        "ResNet-18 (batch size 128)",
        60 * 40.0,
        "any:4",
        0,
    )


def test_a_fractional_jobs_duration_is_wall_time_at_its_share(tmp_path: Path) -> None:
    # issue 25 item 5: a 0.46 share of a device runs at 46 % of its rate, so a GPU-sharing
    # trace's duration (wall time) is 0.46 x duration of the device's work
    text = ("id,arrival,gpus,duration,accelerators\n"
            "part,0,1,100,T4:0.46\nwhole,0,1,100,T4:1\nplain,0,1,100,\n")  # fmt: skip
    part, whole, plain = load_jobs(write(tmp_path, "share.csv", text), fake())
    assert part.work == pytest.approx(0.46 * 100 * 1.0)
    assert whole.work == plain.work == pytest.approx(100 * 1.0)


def test_load_jobs_json(tmp_path: Path) -> None:
    doc = {
        "schema": "accelnet.trace/v1",
        "jobs": [
            {"id": "x", "arrival": 1, "gpus": 1, "job_type": "A3C", "work": 10},
            {"arrival": 2.5, "gpus": 8, "duration": 100, "deadline": None, "checkpointable": 0},
            {"arrival": 3, "gpus": 2, "job_type": "LM (batch size 20)", "duration": 10},
        ],
    }
    x, anon, lm = load_jobs(write(tmp_path, "jobs.json", json.dumps(doc)), fake())
    assert (x.id, x.arrival, x.gpus, x.job_type, x.work) == ("x", 1.0, 1, "A3C", 10.0)
    assert (anon.id, anon.job_type, anon.work, anon.deadline) == ("job-1", "generic", 800.0, None)
    assert anon.checkpointable is False
    assert (lm.id, lm.work) == ("job-2", 80.0)


HEADER = "id,arrival,gpus,job_type,work,duration,deadline,checkpointable,accelerators,tenant\n"


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("a,,1,,,5,,,,", "j.csv:3: arrival = None: required"),
        ("a,-1,1,,,5,,,,", "j.csv:3: arrival = '-1': must be >= 0"),
        ("a,0,0,,,5,,,,", "j.csv:3: gpus = '0': must be a whole number >= 1"),
        ("a,0,1,A3C,5,5,,,,", "j.csv:3: duration = '5': give either work (steps) or duration"),
        ("a,0,1,,5,,,,,", "j.csv:3: job_type = None: required with work"),
        ("a,0,1,,,,,,,", "j.csv:3: work = None: give work (steps, with job_type) or duration"),
        ("a,0,1,Nope,5,,,,,", "j.csv:3: job_type = 'Nope': unknown job type; the rate model"),
        ("a,0,2,A3C,,5,,,,", "j.csv:3: job_type = 'A3C': the rate model has no rate for it on 2"),
        ("a,0,1,,,-5,,,,", "j.csv:3: duration = '-5': must be > 0"),
        ("a,9,1,,,5,3,,,", "j.csv:3: deadline = '3': must be >= 9"),
        ("a,0,1,,,5,,maybe,,", "j.csv:3: checkpointable = 'maybe': must be true, false, 1 or 0"),
        ("a,0,2,,,5,,,H100:4,", "j.csv:3: accelerators = 'H100:4': asks for 4 devices but gpus"),
        ("a,0,1,,,5,,,H100:x,", "j.csv:3: accelerators = 'H100:x': 'H100:x': 'x' is not a"),
        ("a,0,1,,,5,,,,a b", "j.csv:3: tenant = 'a b': must be a name"),
        ("z,0,1,,,5,,,,", "j.csv:3: id = 'z': duplicate job id (first at "),
        ("a,0,1", "j.csv:3: columns = 3: expected 10"),
    ],
)
def test_load_jobs_csv_errors(tmp_path: Path, row: str, message: str) -> None:
    path = write(tmp_path, "j.csv", HEADER + "z,0,1,,,5,,,,\n" + row + "\n")
    with raises(str(tmp_path / message)):
        load_jobs(path, fake())


def test_load_jobs_csv_header_errors(tmp_path: Path) -> None:
    path = write(tmp_path, "j.csv", "arrival,gpus,duraton\n0,1,5\n")
    with raises(f"{path}:1: columns = ['duraton']: unknown column(s); allowed: id, arrival,"):
        load_jobs(path, fake())
    path = write(tmp_path, "j.csv", "arrival,duration\n0,5\n")
    with raises(f"{path}:1: columns = ['arrival', 'duration']: missing required column(s): gpus"):
        load_jobs(path, fake())
    path = write(tmp_path, "j.csv", "arrival,gpus,gpus\n0,1,1\n")
    with raises(f"{path}:1: columns = ['gpus']: column(s) given twice"):
        load_jobs(path, fake())
    with raises(f"{tmp_path / 'j.txt'}: accelnet job logs are .csv or .json files"):
        load_jobs(write(tmp_path, "j.txt", "x"), fake())


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ('{"schema": "accelnet.trace/v1", "jobs": [}', "j.json:1: invalid JSON"),
        ("[]", "j.json: document = 'list': must be an object"),
        ('{"schema": "v0", "jobs": []}', "j.json: schema = 'v0': must be \"accelnet.trace/v1\""),
        ('{"jobs": []}', "j.json: schema = None: must be"),
        ('{"schema": "accelnet.trace/v1", "jobs": [], "x": 1}', "j.json: keys = ['x']: unknown"),
        ('{"schema": "accelnet.trace/v1", "jobs": {}}', "j.json: jobs = {}: must be a list"),
        (
            '{"schema": "accelnet.trace/v1", "jobs": [{"arrival": 0, "gpus": 1, "duration": 1},'
            ' {"arrival": 0, "gpus": 1, "duraton": 1}]}',
            "j.json:jobs[1]: duraton = 1: unknown key; allowed: id, arrival, gpus,",
        ),
        (
            '{"schema": "accelnet.trace/v1", "jobs": [{"arrival": 0, "gpus": "two", "work": 1}]}',
            "j.json:jobs[0]: gpus = 'two': must be a number",
        ),
        (
            '{"schema": "accelnet.trace/v1", "jobs": [{"arrival": true, "gpus": 1, "work": 1}]}',
            "j.json:jobs[0]: arrival = True: must be a number",
        ),
        (
            '{"schema": "accelnet.trace/v1", "jobs": [{"arrival": 0, "gpus": 1, "duration": 1,'
            ' "checkpointable": "yes"}]}',
            "j.json:jobs[0]: checkpointable = 'yes': must be true, false, 1 or 0",
        ),
        (
            '{"schema": "accelnet.trace/v1", "jobs": [{"id": "a", "arrival": 0, "gpus": 1,'
            ' "duration": 1}, {"id": "a", "arrival": 0, "gpus": 1, "duration": 1}]}',
            "j.json:jobs[1]: id = 'a': duplicate job id (first at ",
        ),
        ('{"schema": "accelnet.trace/v1", "jobs": [3]}', "j.json:jobs[0]: job = 3: must be an"),
    ],
)
def test_load_jobs_json_errors(tmp_path: Path, document: str, message: str) -> None:
    path = write(tmp_path, "j.json", document)
    with raises(str(tmp_path / message)):
        load_jobs(path, fake())


# ---------------------------------------------------------------- failures


def test_load_failures(tmp_path: Path) -> None:
    path = write(tmp_path, "f.csv", "at,device,repair_s\n50,h1/gpu0,\n10,,600\n10,h2/gpu1,never\n")
    assert load_failures(path) == [
        DeviceFailure(at=10.0, device=None, repair_s=600.0),
        DeviceFailure(at=10.0, device="h2/gpu1", repair_s=None),
        DeviceFailure(at=50.0, device="h1/gpu0", repair_s=None),
    ]
    only_at = write(tmp_path, "g.csv", "at\n5\n")
    assert load_failures(only_at) == [DeviceFailure(at=5.0, device=None, repair_s=3600.0)]


def test_load_failures_errors(tmp_path: Path) -> None:
    path = write(tmp_path, "f.csv", "at,device,repair_s\n1,a,\n-3,b,\n")
    with raises(f"{path}:3: at = '-3': must be >= 0"):
        load_failures(path)
    path = write(tmp_path, "f.csv", "at,device,repair_s\n1,a,soon\n")
    with raises(f"{path}:2: repair_s = 'soon': must be a number"):
        load_failures(path)
    path = write(tmp_path, "f.csv", "device,repair_s\na,1\n")
    with raises(f"{path}:1: columns = ['device', 'repair_s']: missing required column(s): at"):
        load_failures(path)
    path = write(tmp_path, "f.csv", "at,node\n1,a\n")
    with raises(f"{path}:1: columns = ['node']: unknown column(s); allowed: at, device, repair"):
        load_failures(path)


def test_mtbf_failures_rate_and_determinism() -> None:
    devices = [f"d{i}" for i in range(50)]
    failures = mtbf_failures(devices, mtbf_s=1000.0, horizon_s=100_000.0, seed=1, repair_s=0.0)
    assert failures == mtbf_failures(devices, 1000.0, 100_000.0, 1, repair_s=0.0)
    assert failures != mtbf_failures(devices, 1000.0, 100_000.0, 2, repair_s=0.0)
    # 50 devices x 100 expected failures each (Poisson: sd ~ 71)
    assert len(failures) == pytest.approx(5000, rel=0.05)
    times = [f.at for f in failures]
    assert times == sorted(times) and times[0] >= 0 and times[-1] < 100_000
    per_device = Counter(f.device for f in failures)
    assert set(per_device) == set(devices)
    # a device's failures depend only on the seed and its position
    first3 = mtbf_failures(devices[:3], 1000.0, 100_000.0, 1, repair_s=0.0)
    assert first3 == [f for f in failures if f.device in devices[:3]]


def test_mtbf_failures_repairs() -> None:
    devices = [f"d{i}" for i in range(40)]
    never = mtbf_failures(devices, 100.0, 10_000.0, seed=3, repair_s=None)
    assert len(never) == len({f.device for f in never}) == 40
    assert all(f.repair_s is None for f in never)
    # down 900 s after each failure: mean cycle 1000 s, about 10 failures per device
    slow = mtbf_failures(devices, 100.0, 10_000.0, seed=3, repair_s=900.0)
    assert len(slow) / 40 == pytest.approx(10, rel=0.15)
    for d in devices:
        ts = [f.at for f in slow if f.device == d]
        assert all(b - a >= 900.0 for a, b in itertools.pairwise(ts))
    assert mtbf_failures([], 10.0, 100.0, seed=0) == []
    with pytest.raises(ValueError, match=r"^mtbf_s = 0\.0: "):
        mtbf_failures(devices, 0.0, 100.0, seed=0)
    with pytest.raises(ValueError, match=r"^devices = \['a'\]: "):
        mtbf_failures(["a", "a"], 10.0, 100.0, seed=0)
    assert math.isfinite(sum(f.at for f in slow))


# ---------------------------------------------------------------- the dispatcher


def test_load_trace_dispatch(tmp_path: Path) -> None:
    rates = fake()
    trace = write(tmp_path, "t.trace", gavel_line() + "\n")
    jobs, notes = load_trace(str(trace), rates)
    assert [j.id for j in jobs] == ["gavel-00000"] and "Gavel trace" in notes[0]

    sample = write(tmp_path, "philly_sample.csv", PHILLY_SAMPLE)
    jobs, notes = load_trace(str(sample), rates, seed=5)
    assert jobs == load_philly(sample, rates, seed=5).jobs
    assert notes[0].startswith("job types:")
    jobs, notes = load_trace(f"philly:{sample},scale=10,limit=2", rates, seed=5)
    assert [j.arrival for j in jobs] == [0.0, 293.2]
    assert load_trace(f"philly:{sample},seed=5", rates)[0] == load_philly(sample, rates, 5).jobs

    jobs, notes = load_trace("gavel-gen:n=100,lam=60", rates, seed=9)
    assert jobs == generate_gavel(100, 60.0, 9, rates)
    assert notes == ["Gavel's generator: n=100, lam=60 s, seed=9, multi-GPU; run times on V100"]
    jobs, _ = load_trace("gavel-gen:n=200,lam=5,single,seed=2", rates)
    assert jobs == generate_gavel(200, 5.0, 2, rates, multi_gpu=False)

    log = write(tmp_path, "jobs.csv", JOBS_CSV)
    jobs, notes = load_trace(str(log), rates)
    assert [j.id for j in jobs] == ["a", "job-1", "b"]
    doc = {"schema": "accelnet.trace/v1", "jobs": [{"arrival": 0, "gpus": 1, "duration": 5}]}
    assert len(load_trace(str(write(tmp_path, "j.json", json.dumps(doc))), rates)[0]) == 1


def test_load_trace_errors(tmp_path: Path) -> None:
    rates = fake()
    with raises(f"{tmp_path / 'nope.csv'}: no such file (trace source"):
        load_trace(str(tmp_path / "nope.csv"), rates)
    with raises(f"{tmp_path / 'p.csv'}: no such file"):
        load_trace(f"philly:{tmp_path / 'p.csv'},scale=2", rates)
    with raises("foo.txt: unknown trace source; accepted: PATH.trace (a Gavel trace); philly:"):
        load_trace("foo.txt", rates)
    with raises("gavel-gen:n=5,lam=1,bogus=2: bogus = '2': unknown option; allowed: lam, n,"):
        load_trace("gavel-gen:n=5,lam=1,bogus=2", rates)
    with raises("gavel-gen:n=5: lam = None: required: gavel-gen:n=N,lam=SECONDS"):
        load_trace("gavel-gen:n=5", rates)
    with raises("gavel-gen:n=five,lam=1: n = 'five': must be a number"):
        load_trace("gavel-gen:n=five,lam=1", rates)
    sample = write(tmp_path, "s.csv", PHILLY_SAMPLE)
    with raises(f"philly:{sample},scale=0: scale = '0': must be > 0"):
        load_trace(f"philly:{sample},scale=0", rates)


def test_trace_error_is_a_value_error(tmp_path: Path) -> None:
    path = write(tmp_path, "t.trace", gavel_line(gpus="0") + "\n")
    with pytest.raises(ValueError) as info:
        load_gavel_trace(path, fake())
    error = info.value
    assert isinstance(error, TraceError)
    assert (error.source, error.line, error.field) == (str(path), 1, "scale_factor")


def test_generated_arrivals_are_exponential() -> None:
    gaps = np.diff([j.arrival for j in generate_gavel(20_000, 10.0, seed=11, rates=fake())])
    # exponential: the standard deviation equals the mean
    assert gaps.std() == pytest.approx(gaps.mean(), rel=0.05)
