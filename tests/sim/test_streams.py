"""Lazy trace readers: they yield the same jobs as the list loaders, in arrival order, and
reading the head of a huge trace costs only the head."""

from __future__ import annotations

import itertools
import time
from pathlib import Path

import pytest

from accelnet.sim.streams import BLOCK, iter_gavel, read_gavel_trace, stream_philly
from accelnet.sim.throughput import ThroughputModel
from accelnet.sim.traces import (
    TraceError,
    generate_gavel,
    load_gavel_trace,
    load_philly,
    load_trace,
    stream_trace,
)
from tests.sim.test_traces import GAVEL, PHILLY, PHILLY_SAMPLE, fake, gavel_line, write


def test_generator_is_lazy_and_in_arrival_order() -> None:
    t0 = time.perf_counter()
    jobs = iter_gavel(10_000_000, 2.0, seed=1, rates=fake())  # ten million: never made
    head = list(itertools.islice(jobs, 2000))
    assert time.perf_counter() - t0 < 5.0  # one block of draws, 2,000 jobs
    assert [j.id for j in head[:3]] == ["gen-00000", "gen-00001", "gen-00002"]
    arrivals = [j.arrival for j in head]
    assert arrivals[0] == 0.0 and arrivals == sorted(arrivals)


def test_generator_blocks_continue_the_arrivals() -> None:
    n = BLOCK + 500  # two blocks: the second carries on from the first
    jobs = list(iter_gavel(n, 3.0, seed=2, rates=fake()))
    assert len(jobs) == n and len({j.id for j in jobs}) == n
    arrivals = [j.arrival for j in jobs]
    assert arrivals == sorted(arrivals)
    gaps = [b - a for a, b in itertools.pairwise(arrivals[BLOCK - 50 : BLOCK + 50])]
    assert 1.0 < sum(gaps) / len(gaps) < 6.0  # no jump between the blocks
    assert jobs[BLOCK].id == f"gen-{BLOCK:05d}"


def test_generator_list_is_the_stream() -> None:
    assert generate_gavel(700, 5.0, 9, fake()) == list(iter_gavel(700, 5.0, 9, fake()))
    with pytest.raises(ValueError, match=r"^n = -1: "):
        iter_gavel(-1, 1.0, 1, fake())  # checked at once, not when first read


def test_stream_trace_generator_is_lazy() -> None:
    t0 = time.perf_counter()
    stream = stream_trace("gavel-gen:n=1000000,lam=10,seed=4", fake())
    assert stream.count == 1_000_000
    first = list(itertools.islice(stream.jobs, 100))
    assert time.perf_counter() - t0 < 5.0
    assert first[0].id == "gen-00000" and first[-1].id == "gen-00099"


def test_gavel_trace_file_read_line_by_line(tmp_path: Path) -> None:
    lines = [gavel_line(arrival=str(10 * i)) for i in range(5)]
    path = write(tmp_path, "t.trace", "\n".join(lines) + "\n\n")
    jobs = read_gavel_trace(path, fake())
    assert next(jobs).arrival == 0.0
    assert [j.id for j in jobs] == [f"gavel-0000{i}" for i in range(1, 5)]
    assert load_gavel_trace(path, fake()) == list(read_gavel_trace(path, fake()))
    # a bad line is reported when it is read, with its line number
    bad = write(tmp_path, "b.trace", lines[0] + "\nnot a trace line\n")
    reader = read_gavel_trace(bad, fake())
    assert next(reader).id == "gavel-00000"
    with pytest.raises(TraceError, match=r"b\.trace:2: fields = 1: "):
        next(reader)
    with pytest.raises(TraceError, match="no such file"):
        read_gavel_trace(tmp_path / "nope.trace", fake())  # at once


def test_real_gavel_trace_streams_like_the_list() -> None:
    if not GAVEL.is_file():
        pytest.skip(f"{GAVEL} is absent (shared data not checked out)")
    model = ThroughputModel.gavel()
    listed, notes = load_trace(str(GAVEL), model)
    streamed = stream_trace(str(GAVEL), model)
    assert streamed.count == len(listed) == 96 and streamed.notes == notes
    assert list(streamed.jobs) == listed


def test_philly_stream_matches_the_list_and_is_sorted(tmp_path: Path) -> None:
    path = write(tmp_path, "p.csv", PHILLY_SAMPLE)
    stream = stream_philly(path, fake(), seed=5)
    assert stream.count == 4 and (stream.rows, stream.dropped) == (7, 3)
    jobs = list(stream.jobs)
    assert jobs == load_philly(path, fake(), seed=5).jobs
    assert [j.arrival for j in jobs] == sorted(j.arrival for j in jobs)


def test_philly_repeat_plays_the_table_again(tmp_path: Path) -> None:
    path = write(tmp_path, "p.csv", PHILLY_SAMPLE)
    once = load_philly(path, fake(), seed=5)
    thrice = load_philly(path, fake(), seed=5, time_scale=10, repeat=3)
    assert len(thrice.jobs) == 3 * len(once.jobs)
    span = once.jobs[-1].arrival / 10  # 8,640 s
    first = thrice.jobs[:4]
    assert [j.arrival for j in first] == [j.arrival / 10 for j in once.jobs]
    assert [j.job_type for j in first] == [j.job_type for j in once.jobs]  # copy 0 as before
    second = thrice.jobs[4:8]
    assert [j.arrival for j in second] == pytest.approx([j.arrival + span for j in first])
    assert [j.gpus for j in second] == [j.gpus for j in first]
    assert [j.id for j in thrice.jobs] == [f"philly-{i:05d}" for i in range(12)]
    arrivals = [j.arrival for j in thrice.jobs]
    assert arrivals == sorted(arrivals)
    assert any("played 3 times back to back (12 jobs" in n for n in thrice.notes)
    limited = stream_trace(f"philly:{path},repeat=3,limit=5,seed=5", fake())
    assert limited.count == 5 and len(list(limited.jobs)) == 5
    with pytest.raises(TraceError, match="repeat = '0': must be a whole number >= 1"):
        stream_trace(f"philly:{path},repeat=0", fake())


def test_real_philly_head_is_cheap_and_ordered() -> None:
    if not PHILLY.is_file():
        pytest.skip(f"{PHILLY} is absent (shared data not checked out)")
    stream = stream_trace(f"philly:{PHILLY},scale=10,repeat=10", fake())
    assert stream.count % 10 == 0 and stream.count > 800_000  # ten copies of ~82k jobs
    head = list(itertools.islice(stream.jobs, 5000))
    arrivals = [j.arrival for j in head]
    assert arrivals[0] == 0.0 and arrivals == sorted(arrivals)
