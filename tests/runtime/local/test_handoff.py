"""The backend's side of data hand-off: output folders by reference, an attempt's shared
memory gone with its last task, leftovers of dead backends swept."""

from __future__ import annotations

import fcntl
import os
import re
from pathlib import Path

import pytest

from accelnet.runtime.backend import TaskSpec
from accelnet.runtime.local.handoff import HandoffArea, input_dirs, output_dir, shm_dir, sweep


def task(rank: int, world: int = 2, attempt: int = 1, **inputs: str) -> TaskSpec:
    return TaskSpec(f"j.{attempt}.{rank}", "j", rank, world, f"h/cpu{rank}", ("h/cpu0",),
                    payload=b"x", attempt=attempt, inputs=dict(inputs))  # fmt: skip


def test_task_variables_name_outputs_inputs_and_shared_memory(tmp_path: Path) -> None:
    area = HandoffArea(tmp_path / "w", base=tmp_path / "shm")
    env = area.task_env(task(0, tiles="render-1", parts="data-2"))
    assert env["ACCELNET_OUTPUT"] == str((tmp_path / "w" / "outputs" / "j").resolve())
    assert env["ACCELNET_INPUTS"] == "parts,tiles"
    assert env["ACCELNET_INPUT_TILES"].endswith("/outputs/render-1")
    assert env["ACCELNET_INPUT_PARTS"].endswith("/outputs/data-2")
    assert not Path(env["ACCELNET_OUTPUT"]).exists()  # made by the task that writes to it
    same = area.task_env(task(1))
    assert same["ACCELNET_SHM"] == env["ACCELNET_SHM"]  # one folder per attempt
    assert area.task_env(task(0, attempt=2))["ACCELNET_SHM"] != env["ACCELNET_SHM"]
    assert area.output("../x y") == area.outputs / ".._x_y"
    assert area.output("..") == area.outputs / "_"


def test_shared_memory_goes_with_the_attempts_last_task(tmp_path: Path) -> None:
    area = HandoffArea(tmp_path / "w", base=tmp_path / "shm")
    shm = Path(area.task_env(task(0))["ACCELNET_SHM"])
    area.task_env(task(1))
    # named under the backend's base, with a part no one sharing the base can guess; the
    # task's worker makes it as the task starts (tests/runtime/local/test_rendezvous.py)
    assert shm.parent == tmp_path / "shm" and not shm.exists()
    shm.mkdir(mode=0o700)
    (shm / "hop0.ring").write_bytes(b"x" * 100)
    area.task_ended("j.1.0")
    area.task_ended("j.1.0")  # idempotent
    assert shm.exists() and area.live_shm() == [shm]
    area.task_ended("j.1.1")
    assert not shm.exists() and area.live_shm() == []
    other = Path(area.task_env(task(0, attempt=2))["ACCELNET_SHM"])
    assert re.fullmatch(r"[0-9a-f]{16}", other.name.rsplit("-", 1)[1])
    area.task_ended("j.2.0")  # an attempt whose task never made its folder: nothing to do
    third = Path(area.task_env(task(0, attempt=3))["ACCELNET_SHM"])
    third.mkdir()
    (third / "left").write_bytes(b"x")
    area.close()
    assert not third.exists()


def test_where_tasks_run_as_users_the_folder_is_made_fresh_and_handed_over_safely(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    area = HandoffArea(tmp_path / "w", base=tmp_path / "shm")
    tokens = iter(["0" * 16, "1" * 16])
    monkeypatch.setattr(area, "_token", lambda: next(tokens))
    squatted = tmp_path / "shm" / f"{area._stem}-1-{'0' * 16}"
    squatted.mkdir(parents=True)  # someone made the first attempt's name first
    shm = Path(area.task_env(task(0), make=True)["ACCELNET_SHM"])
    assert shm != squatted and shm.name.endswith("1" * 16)  # never used: another name
    assert shm.is_dir() and shm.stat().st_mode & 0o777 == 0o700
    me, group = os.geteuid(), os.getegid()
    area.give(str(shm), me, group)  # the backend's: handed over (to itself here)
    area.give(str(shm), me, group)  # and again, for a later rank of the attempt
    area.give(str(tmp_path / "shm" / "never-made"), me, group)  # nothing to hand over
    link = tmp_path / "shm" / "link"
    link.symlink_to(shm)
    with pytest.raises(PermissionError):
        area.give(str(link), me, group)  # never through a link
    loose = tmp_path / "shm" / "loose"
    loose.mkdir(mode=0o755)
    loose.chmod(0o755)
    with pytest.raises(PermissionError, match="refusing"):
        area.give(str(loose), me, group)  # others may enter it: not one the backend made
    area.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="handing a folder to another user needs root")
def test_a_handed_over_folder_is_handed_over_again_only_while_it_is_that_users(
    tmp_path: Path,
) -> None:
    area = HandoffArea(tmp_path / "w", base=tmp_path / "shm")
    shm = area.task_env(task(0), make=True)["ACCELNET_SHM"]
    area.give(shm, 65534, 65534)
    area.give(shm, 65534, 65534)  # a later rank: that user's, as given
    os.chown(shm, 0, 0)  # the backend's again: not as the backend left it
    with pytest.raises(PermissionError, match="as the backend left it"):
        area.give(shm, 65534, 65534)
    area.close()


def test_a_rank_whose_hand_off_fails_still_counts_for_its_attempt(tmp_path: Path) -> None:
    base = tmp_path / "shm"
    base.write_text("x")  # no base yet: the first rank's hand-off fails
    area = HandoffArea(tmp_path / "w", base=base)
    with pytest.raises(OSError):
        area.task_env(task(0))
    area.task_ended("j.1.0")  # its launch failed
    base.unlink()
    shm = Path(area.task_env(task(1))["ACCELNET_SHM"])  # the base can be made now
    shm.mkdir()  # as its worker does
    assert area.live_shm() == [shm]
    area.task_ended("j.1.1")  # the attempt's last rank: its folder goes
    assert area.live_shm() == [] and not shm.exists()
    area.close()


def test_an_owner_file_that_cannot_be_locked_leaves_nothing_half_made(tmp_path: Path) -> None:
    base = tmp_path / "shm"
    area = HandoffArea(tmp_path / "w", base=base)
    base.mkdir()
    half = base / f"{area._stem}.owner.new"
    held = os.open(half, os.O_RDWR | os.O_CREAT)
    fcntl.flock(held, fcntl.LOCK_EX)  # someone holds the file the claim locks
    try:
        with pytest.raises(OSError):
            area.task_env(task(0))
        assert not half.exists()  # removed, not left behind
    finally:
        os.close(held)
    area.close()


def test_a_new_backend_sweeps_what_dead_ones_left(tmp_path: Path) -> None:
    base = tmp_path / "shm"
    live = HandoffArea(tmp_path / "a", base=base)
    mine = Path(live.task_env(task(0))["ACCELNET_SHM"])
    mine.mkdir()  # as its worker does
    crashed = base / "accelnet-99-dead"  # its owner file exists, nobody holds it
    (base / "accelnet-99-dead.owner").touch()
    for folder in (crashed.with_name(crashed.name + "-1"), crashed.with_name(crashed.name + "-7")):
        (folder / "hop0.ring").parent.mkdir()
        (folder / "hop0.ring").write_bytes(b"x")
    unrelated = base / "somebody-else"
    unrelated.mkdir()
    other = HandoffArea(tmp_path / "b", base=base)  # sweeps as it starts
    assert sorted(p.name for p in base.iterdir()) == sorted(
        [mine.name, unrelated.name, f"{mine.name.rsplit('-', 2)[0]}.owner"]
    )
    assert sweep(base) == []  # the live backend's folder is held
    live.close()
    assert sorted(p.name for p in base.iterdir()) == [unrelated.name]
    other.close()


def test_task_helpers_read_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ACCELNET_OUTPUT", raising=False)
    with pytest.raises(RuntimeError, match="ACCELNET_OUTPUT is not set"):
        output_dir()
    monkeypatch.setenv("ACCELNET_OUTPUT", str(tmp_path / "out"))
    monkeypatch.setenv("ACCELNET_SHM", str(tmp_path / "shm"))
    monkeypatch.setenv("ACCELNET_INPUTS", "tiles")
    monkeypatch.setenv("ACCELNET_INPUT_TILES", str(tmp_path / "in"))
    assert output_dir().is_dir() and shm_dir().is_dir()
    assert input_dirs() == {"tiles": tmp_path / "in"}


def test_a_shared_memory_folder_someone_else_could_enter_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # under a shared /dev/shm, a folder another user made (or left open) could be read by
    # them: the task's helper refuses it rather than write there
    loose = tmp_path / "loose"
    loose.mkdir()
    loose.chmod(0o777)
    monkeypatch.setenv("ACCELNET_SHM", str(loose))
    with pytest.raises(PermissionError, match="not this user's private folder"):
        shm_dir()
    loose.chmod(0o700)
    assert shm_dir() == loose
    fresh = tmp_path / "fresh"
    monkeypatch.setenv("ACCELNET_SHM", str(fresh))
    assert shm_dir() == fresh and fresh.stat().st_mode & 0o777 == 0o700
