"""Ring ordering: optimal against brute force on small fabrics; sensible on large ones."""

from __future__ import annotations

import itertools
import random

import pytest

from accelnet.comm import Communicator, CostModel
from accelnet.comm.ring import ring_order, ring_score
from accelnet.fabric import Fabric, load_fabric
from tests.comm.conftest import boxes, star


def _brute(comm: Communicator, model: CostModel) -> tuple[float, float, float]:
    """The best score over every ring (rank 0 fixed: rotations are the same ring)."""
    return max(
        ring_score(comm, (0, *perm), model) for perm in itertools.permutations(range(1, comm.size))
    )


def _cases() -> list[tuple[str, Fabric, list[str]]]:
    rng = random.Random(7)
    out = []
    for name in ("dgx-h100", "dgx1-v100", "pcie-4xL4", "hgx-b200"):
        fabric = load_fabric(name)
        devices = list(fabric.devices)
        rng.shuffle(devices)
        out.append((name, fabric, devices[:8]))
    for name, size in (("mixed-lab", 8), ("mixed-lab", 6), ("gavel-48", 7), ("dgx1-v100", 5)):
        fabric = load_fabric(name)
        out.append((f"{name}/{size}", fabric, rng.sample(list(fabric.devices), size)))
    two = boxes(2, 4, nics=2)
    out.append(("boxes-2x4", two, rng.sample(list(two.devices), 8)))
    return out


@pytest.mark.parametrize(("name", "fabric", "devices"), _cases(), ids=lambda c: str(c)[:20])
def test_ring_order_is_optimal_up_to_8_devices(
    name: str, fabric: Fabric, devices: list[str]
) -> None:
    model = CostModel()
    comm = Communicator(fabric, devices)
    best = _brute(comm, model)
    found = ring_order(comm, model)
    assert sorted(found.ranks) == sorted(comm.ranks)
    assert found.ranks[0] == comm.ranks[0]
    assert ring_score(found, range(found.size), model) == pytest.approx(best)


def test_dgx1_ring_uses_nvlink_neighbours_only() -> None:
    # the hybrid cube mesh: a Hamiltonian cycle over NVLink exists; a bad order leaves it
    fabric = load_fabric("dgx1-v100")
    comm = Communicator(fabric, [f"gpu{i}" for i in (0, 5, 2, 7, 4, 1, 6, 3)])
    found = ring_order(comm)
    for i in range(8):
        assert found.route(i, (i + 1) % 8).level.name == "NVLINK"
    assert ring_score(found, range(8)) > ring_score(comm, range(8))


def test_large_rings_cross_each_host_boundary_once() -> None:
    fabric = boxes(4, 8, nics=8)
    devices = list(fabric.devices)
    random.Random(3).shuffle(devices)
    found = ring_order(Communicator(fabric, devices))
    crossings = sum(
        found.route(i, (i + 1) % 32).level.name.startswith("NETWORK") for i in range(32)
    )
    assert crossings == 4
    # no two hops share a NIC direction: the ring runs at the NIC's full speed
    assert ring_score(found, range(32))[0] == pytest.approx(50e9)


def test_tiny_rings_are_left_alone() -> None:
    comm = Communicator(star(2), ["h-1/gpu0", "h-0/gpu0"])
    assert ring_order(comm).ranks == comm.ranks
