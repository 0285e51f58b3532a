"""The local Ray cluster is on loopback only: every Ray process of the cluster that
``accelnet demo --backend ray`` starts (``--ray-address local-cluster``: local_cluster's
``start_cluster``) listens on 127.0.0.1 (or ::1) and never on the machine's network
address, its address is ``127.0.0.1:port``, and a driver joins it there (accelnet's
own ``RayOptions.connect``: discovery tasks and an agent actor on every node, so the
nodes' worker processes are up while the sockets are listed).
"""

from __future__ import annotations

import contextlib
import ipaddress
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from accelnet.cli.ray_opts import ray_backend
from accelnet.runtime.clock import ManualClock
from accelnet.runtime.ray import connect as ray_connect
from accelnet.runtime.ray.connect import RayOptions
from accelnet.runtime.ray.local_cluster import LOCAL_CLUSTER

ray = pytest.importorskip("ray", reason="the Ray backend needs the ray extra")
pytestmark = pytest.mark.ray


def loopback(ip: str) -> bool:
    """127.0.0.0/8, ::1, or an IPv4-mapped 127.x (a dual-stack socket bound to 127.0.0.1)."""
    addr = ipaddress.ip_address(ip.split("%", 1)[0])
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    return addr.is_loopback


def listening(proc: psutil.Process) -> set[tuple[str, int]]:
    """The addresses ``proc`` listens on (TCP; none if it is gone)."""
    try:
        conns = proc.net_connections(kind="inet")
    except psutil.Error:
        return set()
    return {(c.laddr.ip, c.laddr.port) for c in conns if c.status == psutil.CONN_LISTEN}


def ray_processes(address: str, earlier: set[int]) -> list[psutil.Process]:
    """Every process of the cluster at ``address``: those under this one but for the
    ``earlier`` ones (GCS, raylets, their agents and workers), and any other that names
    the address on its command line, with the processes under it."""
    exact = re.compile(re.escape(address) + r"(?!\d)")
    found = {p.pid: p for p in psutil.Process().children(recursive=True) if p.pid not in earlier}
    for p in psutil.process_iter(["cmdline"]):
        if any(exact.search(part) for part in p.info["cmdline"] or ()):
            found.setdefault(p.pid, p)
            with contextlib.suppress(psutil.Error):
                found.update((q.pid, q) for q in p.children(recursive=True))
    return list(found.values())


def name(proc: psutil.Process) -> str:
    try:
        return proc.name()
    except psutil.Error:
        return "?"


@dataclass(frozen=True)
class Joined:
    options: RayOptions  # as the demo gets them: the cluster's address
    driver: set[tuple[str, int]]  # what this (the driver's) process began to listen on
    earlier: set[int]  # the processes under this one from before the cluster


@pytest.fixture
def joined(tmp_path: Path) -> Iterator[Joined]:
    """The demo's cluster, joined as the demo joins it."""
    me = psutil.Process()
    before = listening(me)
    earlier = {p.pid for p in me.children(recursive=True)}
    with ray_backend("ray", None, LOCAL_CLUSTER) as options:
        assert options is not None
        backend = options.connect(None, tmp_path / "work", ManualClock(1000.0))
        try:
            yield Joined(options, listening(me) - before, earlier)
        finally:
            backend.close()


def test_every_ray_process_listens_on_loopback_only(joined: Joined) -> None:
    options, driver = joined.options, joined.driver
    procs = ray_processes(options.address, joined.earlier)
    sockets = {(p.pid, name(p)): listening(p) for p in procs}
    names = [n for (_, n), socks in sockets.items() if socks]
    assert "gcs_server" in names, sockets  # not vacuous: the cluster's processes were found
    assert names.count("raylet") == 3, sockets  # one per node of the demo
    exposed = {
        who: sorted(a for a in socks if not loopback(a[0]))
        for who, socks in sockets.items()
        if any(not loopback(a[0]) for a in socks)
    }
    assert not exposed, f"Ray processes listening beyond loopback: {exposed}"
    assert all(loopback(ip) for ip, _ in driver), driver
    host, port = options.address.rsplit(":", 1)  # what the demo prints
    assert host == "127.0.0.1" and port.isdigit(), options.address
    nodes = [n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"]]
    assert nodes == ["127.0.0.1"] * 3, nodes  # every node advertises 127.0.0.1


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("127.0.0.1:6379", True),
        ("localhost:6379", True),
        ("[::1]:6379", True),
        ("127.0.0.2:6379", True),
        ("192.0.2.7:6379", False),
        ("head.example:6379", False),
        ("auto", False),
        ("ray://127.0.0.1:10001", False),
    ],
)
def test_loopback_addresses(address: str, expected: bool) -> None:
    assert ray_connect.is_loopback_address(address) is expected
