"""Shared-memory rings between real processes: frames arrive whole and in order, read in
place; a dead or failing peer is noticed; no file is left behind."""

from __future__ import annotations

import multiprocessing
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from accelnet.runtime.local.handoff import shm_base
from accelnet.runtime.pipeline.channel import ChannelError, RingReceiver, RingSender, abort

FORK = multiprocessing.get_context("fork")


@pytest.fixture
def folder() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="acc-test-", dir=shm_base()))  # short: socket paths
    yield path
    shutil.rmtree(path, ignore_errors=True)


def frame(k: int) -> np.ndarray:
    return np.full((48, 64), k % 251, np.uint8) + np.arange(64, dtype=np.uint8)


def write(folder: str, frames: int, slots: int, die_after: int | None = None) -> None:
    tx = RingSender(Path(folder), "hop", slots=slots, stamps=2)
    for k in range(frames):
        if die_after is not None and k == die_after:
            os._exit(3)  # dies without a word, like a killed process
        slot = tx.acquire((48, 64), np.uint8)
        slot.array[...] = frame(k)
        slot.stamps[:] = (k, time.perf_counter())
        tx.publish(slot, {"k": k})
    tx.finish({"sent": frames})


def test_frames_arrive_whole_in_order_and_in_place(folder: Path) -> None:
    rx = RingReceiver(folder, "hop")
    proc = FORK.Process(target=write, args=(str(folder), 40, 2))
    proc.start()
    got = []
    while (slot := rx.get()) is not None:
        assert not slot.array.flags.writeable and not slot.array.flags.owndata  # a view
        assert sorted(p.name for p in folder.iterdir()) == []  # names unlinked once open
        got.append((slot.seq, slot.meta["k"], int(slot.stamps[0]), slot.array.copy()))
        rx.release(slot)
    proc.join(10)
    rx.close()
    assert proc.exitcode == 0 and rx.final == {"sent": 40}
    assert [g[:3] for g in got] == [(k, k, k) for k in range(40)]
    assert all(np.array_equal(a, frame(k)) for k, *_, a in got)


def test_a_writer_that_dies_ends_the_stream_with_an_error(folder: Path) -> None:
    rx = RingReceiver(folder, "hop")
    proc = FORK.Process(target=write, args=(str(folder), 40, 4, 7))
    proc.start()
    seen = 0
    with pytest.raises(ChannelError, match="ended without finishing the stream"):
        while (slot := rx.get()) is not None:
            seen += 1
            rx.release(slot)
    rx.close()
    proc.join(10)
    assert seen == 7 and proc.exitcode == 3
    assert list(folder.iterdir()) == []


def test_a_peer_waiting_for_a_failed_stage_stops_on_the_abort(folder: Path) -> None:
    rx = RingReceiver(folder, "hop", timeout_s=60)
    abort(folder, "stage decode failed: ValueError: bad camera")
    abort(folder, "a later reason is not kept")
    t0 = time.monotonic()
    with pytest.raises(ChannelError, match="aborted: stage decode failed: ValueError: bad camera"):
        rx.get()
    assert time.monotonic() - t0 < 30  # not the 60 s timeout: the abort woke it
    rx.close()
    tx = RingSender(folder, "other", timeout_s=60)
    with pytest.raises(ChannelError, match="waiting for the reader: the pipeline was aborted"):
        tx.acquire((4,), np.float32)  # the ring is made, then no reader comes
    tx.close()
    assert sorted(p.name for p in folder.iterdir()) == ["abort"]


def test_bad_frames_and_metadata_are_refused(folder: Path) -> None:
    rx = RingReceiver(folder, "hop")
    tx = RingSender(folder, "hop", slots=2, meta_bytes=16)
    slot = tx.acquire((8,), np.float64)
    with pytest.raises(ValueError, match=r"frame metadata of .* bytes exceeds meta_bytes=16"):
        tx.publish(slot, "x" * 100)
    tx.publish(slot, 1)
    with pytest.raises(ValueError, match=r"frames are float64 \(8,\), got float64 \(9,\)"):
        tx.acquire((9,), np.float64)
    got = rx.get()
    assert got is not None and got.meta == 1
    tx.close()
    rx.close()
    assert list(folder.iterdir()) == []
