"""Tasks of a mapped tenant run as an unprivileged user (accelnet.runtime.local.runas): commands
and Python payloads, in their own 0700 scratch folder, unable to read the service's files.
The backend tests need root (the service must be root to switch users); they are skipped
elsewhere, and the mapping's own checks run everywhere."""

from __future__ import annotations

import dataclasses
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from accelnet.fabric import load_preset
from accelnet.runtime.backend import TaskEventKind
from accelnet.runtime.clock import ManualClock
from accelnet.runtime.local.backend import LocalBackend
from accelnet.runtime.local.runas import (
    SERVICE_TENANT,
    OsUser,
    RunAsError,
    TenantUsers,
    hand_over,
    parse_run_as,
    tenant_user_name,
    untraversable,
)
from tests.runtime.backend_contract import T0, pickled_by_value, run, task

DEVICES = load_preset("pcie-4xL4").devices
GPU0, GPU1 = "l4box/gpu0", "l4box/gpu1"
ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT, reason="switching users needs root")


@pytest.fixture(autouse=True, scope="module")
def _pickle_this_module_by_value() -> Iterator[None]:
    with pickled_by_value(__name__):
        yield


def test_parse_run_as_maps_tenants_and_names_what_is_wrong() -> None:
    users = parse_run_as(["vision=nobody"], euid=0)
    assert users["vision"].uid == 65534
    assert TenantUsers(users).get("vision") == users["vision"]
    assert TenantUsers(users).get("speech") is None  # not made: the service's own user
    made: list[str] = []

    def make(name: str) -> OsUser:
        made.append(name)
        return OsUser(name, 5000 + len(made), 5000 + len(made), "/nonexistent")

    auto = TenantUsers(users, auto=True, make=make)
    assert auto.get("vision") == users["vision"] and made == []  # the mapping comes first
    speech = auto.get("speech")
    assert speech is not None and speech.name == tenant_user_name("speech")
    assert auto.get("speech") is speech and auto.get("audio") != speech  # made once each
    assert made == [tenant_user_name("speech"), tenant_user_name("audio")]
    assert auto.get(SERVICE_TENANT) is None  # the service's probes run as the service
    for bad in (["*=nobody"], ["vision=nobody", "speech=65534"], ["vision=0"]):
        with pytest.raises(RunAsError):  # one user for two tenants, or root: never
            parse_run_as(bad, euid=0)
    with pytest.raises(RunAsError, match=r"'vision': expected TENANT=USER"):
        parse_run_as(["vision"], euid=0)
    with pytest.raises(RunAsError, match=r"no user 'no-such-user-x' on this machine"):
        parse_run_as(["vision=no-such-user-x"], euid=0)
    with pytest.raises(RunAsError, match=r"tenant 'vision' is mapped twice"):
        parse_run_as(["vision=nobody", "vision=root"], euid=0)
    with pytest.raises(RunAsError, match=r"needs the service to run as root \(it runs as uid 1000"):
        parse_run_as(["vision=nobody"], euid=1000)
    assert parse_run_as([], euid=1000) == {}


@needs_root
def test_hand_over_gives_the_folder_and_makes_parents_passable(tmp_path: Path) -> None:
    root = tmp_path / "work"
    root.mkdir(mode=0o700)
    nobody = OsUser.named("nobody")
    leaf = root / "scratch" / "host" / "gpu0"
    hand_over(leaf, nobody, root)
    st = leaf.stat()
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (nobody.uid, nobody.gid, 0o700)
    for parent in (root / "scratch" / "host", root / "scratch", root):
        assert stat.S_IMODE(parent.stat().st_mode) == 0o711, parent  # pass, never list
    assert stat.S_IMODE(tmp_path.stat().st_mode) & 0o077 == 0  # above the root: untouched
    blocked = untraversable(tmp_path)  # pytest's folders are root's only: tasks cannot pass
    assert blocked is not None and (blocked == tmp_path or blocked in tmp_path.parents)
    assert untraversable(Path("/")) is None


def ids_and_place() -> dict[str, object]:
    scratch = os.environ["ACCELNET_SCRATCH"]
    Path("mine").write_text("x")
    return {
        "uid": os.getuid(),
        "gid": os.getgid(),
        "groups": os.getgroups(),
        "cwd": os.getcwd(),
        "scratch": scratch,
        "mode": stat.S_IMODE(os.stat("mine").st_mode),
        "user": os.environ.get("USER"),
    }


@pytest.fixture
def passable(tmp_path: Path) -> Iterator[Path]:
    """A folder other users can pass (pytest's own tmp folders are root's only)."""
    base = Path(tempfile.mkdtemp(prefix="accelnet-runas-"))
    base.chmod(0o711)
    yield base
    import shutil

    shutil.rmtree(base, ignore_errors=True)


@needs_root
def test_a_mapped_tenants_command_and_payload_run_as_its_user(passable: Path) -> None:
    nobody = OsUser.named("nobody")
    secret = passable / "service-secret"
    secret.write_text("tokens")
    secret.chmod(0o600)
    logs = passable / "logs"
    b = LocalBackend(DEVICES, passable / "work", ManualClock(T0), emulated=True,
                     run_as={"vision": nobody})  # fmt: skip
    try:
        cmd = (f'id -u; id -g; id -G; pwd; echo "$USER $HOME"; umask; touch mine; '
               f'cat {secret} || echo DENIED; ls {logs} || echo NOLIST')  # fmt: skip
        vision = dataclasses.replace(task("c", GPU0, logs, cmd, job="j1"), tenant="vision")
        other = dataclasses.replace(task("r", GPU1, logs, "id -u", job="j2"), tenant="speech")
        done = run(b, vision, other)
        assert done["c"].kind is TaskEventKind.SUCCEEDED, done["c"]
        out = (logs / "c.out").read_text().split("\n")
        scratch = str(b.scratch_dir(GPU0))
        assert out[:4] == [str(nobody.uid), str(nobody.gid), str(nobody.gid), scratch]
        assert out[4] == f"nobody {scratch}"  # nobody's home does not exist: the scratch
        assert out[5] == "0077" and "DENIED" in out and "NOLIST" in out
        assert "tokens" not in (logs / "c.out").read_text()
        assert Path(scratch, "mine").stat().st_uid == nobody.uid
        assert (logs / "r.out").read_text().strip() == "0"  # an unmapped tenant: the service's

        pay = dataclasses.replace(task("p", GPU0, logs, None, ids_and_place, job="j3"),
                                  tenant="vision")  # fmt: skip
        done = run(b, pay)
        assert done["p"].kind is TaskEventKind.SUCCEEDED, done["p"]
        got = done["p"].result
        assert got["uid"] == nobody.uid and got["gid"] == nobody.gid and got["groups"] == []
        assert got["cwd"] == got["scratch"] and got["mode"] == 0o600 and got["user"] == "nobody"
        assert os.getuid() == 0  # the worker (and this process) stayed root
    finally:
        b.close()


@needs_root
def test_a_tenants_shared_memory_folder_is_its_own_and_private(passable: Path) -> None:
    # the attempt's folder is made by the backend (a random name, 0700) and given to the
    # task's user: another tenant sharing /dev/shm can neither guess it nor make it first
    nobody = OsUser.named("nobody")
    shm = passable / "shm"
    shm.mkdir()
    shm.chmod(0o1777)  # like /dev/shm
    logs = passable / "logs"
    b = LocalBackend(DEVICES, passable / "work", ManualClock(T0), emulated=True,
                     shm_base=shm, run_as={"vision": nobody})  # fmt: skip
    try:
        cmd = 'stat -c "%u %a" "$ACCELNET_SHM"; echo x > "$ACCELNET_SHM/data" && echo WROTE'
        t = dataclasses.replace(task("m", GPU0, logs, cmd, job="j1"), tenant="vision", share=0.5)
        assert run(b, t)["m"].kind is TaskEventKind.SUCCEEDED
        assert (logs / "m.out").read_text().split("\n")[:2] == [f"{nobody.uid} 700", "WROTE"]
    finally:
        b.close()


def test_tenant_user_names_are_valid_distinct_and_short() -> None:
    names = [tenant_user_name(t) for t in ("vision", "Vision", "a b", "a_b", "x" * 80, "ü")]
    assert len(set(names)) == len(names)  # names differing only in case or symbols too
    for name in names:
        assert len(name) <= 31 and name.startswith("acn-")
        assert all(c.islower() or c.isdigit() or c in "-_" for c in name), name


@needs_root
def test_a_tenant_user_is_made_once_and_found_again(tmp_path: Path) -> None:
    from accelnet.runtime.local.runas import make_system_user

    name = tenant_user_name("accelnet-test-tenant")
    first = make_system_user(name)
    again = make_system_user(name)
    assert first == again and first.uid != 0 and first.name == name
