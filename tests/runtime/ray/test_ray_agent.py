"""The Ray agent's file moves, without Ray: a folder packed on one node and unpacked on
another, and checkpoint parts from several nodes merged with the newest copy winning; the
events the agent tells the driver keep one shape."""

from __future__ import annotations

import io
import os
import tarfile
import threading
from pathlib import Path

import pytest

from accelnet.runtime.backend import TaskEvent, TaskEventKind
from accelnet.runtime.ray.agent import NodeAgent, pack_folder, unpack_into, unpack_newer


def _write(path: Path, text: str, mtime: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    os.utime(path, (mtime, mtime))


def test_checkpoint_parts_merge_and_the_newest_copy_of_a_file_wins(tmp_path: Path) -> None:
    a, b, here = tmp_path / "a", tmp_path / "b", tmp_path / "here"
    _write(a / "model.pt", "old", 1_000.25)
    _write(a / "shards" / "rank0.pt", "rank 0", 1_000.0)
    _write(b / "model.pt", "new", 1_000.75)  # saved under a second later: still newer
    _write(here / "opt.pt", "mine", 999.0)
    _write(here / "shards" / "rank1.pt", "rank 1", 999.0)
    for src in (b, a):  # the order of arrival does not matter
        blob = pack_folder(src)
        assert blob is not None
        unpack_newer(blob, here)
    got = {str(p.relative_to(here)): p.read_text() for p in here.rglob("*") if p.is_file()}
    assert got == {"model.pt": "new", "opt.pt": "mine", "shards/rank0.pt": "rank 0",
                   "shards/rank1.pt": "rank 1"}  # fmt: skip
    assert (here / "model.pt").stat().st_mtime == pytest.approx(1_000.75, abs=1e-3)
    assert unpack_newer(pack_folder(a) or b"", here) == 0  # nothing newer: nothing written


def test_a_missing_folder_packs_to_nothing(tmp_path: Path) -> None:
    assert pack_folder(tmp_path / "none") is None


@pytest.mark.parametrize("unpack", [unpack_into, unpack_newer])
def test_a_hostile_pack_cannot_write_outside_the_folder(unpack: object, tmp_path: Path) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("../escaped.txt")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"bad"))
    with pytest.raises(tarfile.OutsideDestinationError):
        unpack(buf.getvalue(), tmp_path / "in")  # type: ignore[operator]
    assert not (tmp_path / "escaped.txt").exists()


def test_the_agents_own_outcomes_have_the_shape_of_every_event(tmp_path: Path) -> None:
    # a cancel that overtook its launch, a launch that raised: the agent says so itself,
    # in the tuple the driver unpacks (RayBackend._on_batch) like any task's end
    agent = object.__new__(NodeAgent)  # its parts for events only: no Ray, no workers
    agent._ready = threading.Condition()
    agent._events, agent._shipped, agent._logs = [], set(), tmp_path
    agent._tell("t1", TaskEventKind.CANCELLED, "cancelled")
    ended = TaskEvent("t2", TaskEventKind.FAILED, 0.0, exit_code=3, error="x", timed_out=True)
    agent._events.append((*agent._outgoing(ended), (True, "refreshed")))
    told, normal = agent._events
    assert len(told) == len(normal)
    task_id, kind, _code, error, _result, _logs, timed_out, fresh = told
    assert (task_id, kind, error) == ("t1", "cancelled", "cancelled")
    assert (timed_out, fresh) == (False, None)
    assert normal[6] is True  # a timeout travels to the driver
