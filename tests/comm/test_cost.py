"""The alpha-beta cost model against hand computations."""

from __future__ import annotations

import pytest

from accelnet.comm import Algorithm, CommError, Communicator, CostModel, busbw_factor
from accelnet.comm.algorithms import Collective, phases
from accelnet.fabric import load_fabric
from tests.comm.conftest import boxes, star


def _alpha_b(comm: Communicator, model: CostModel) -> tuple[float, float]:
    """Per-step latency and bottleneck bandwidth (bytes/s) of hop 0 -> 1."""
    route = comm.route(0, 1)
    return route.latency_us * 1e-6 + model.step_us * 1e-6, route.bandwidth_gbps * 1e9


def test_ring_allreduce_matches_the_formula_on_a_star() -> None:
    # every hop crosses its own NIC each way: the ring runs at the NIC's speed
    comm = Communicator(star(5), [f"h-{i}/gpu0" for i in range(5)])
    model = CostModel()
    alpha, b = _alpha_b(comm, model)
    assert b == 1.25e9  # 10GbE
    n, p = 100e6, 5
    est = model.estimate(comm, "allreduce", n, "ring")
    expected = 5e-6 + 2 * (p - 1) * alpha + 2 * (p - 1) / p * n / b
    assert est.time_s == pytest.approx(expected, rel=1e-12)
    assert est.latency_s == pytest.approx(5e-6 + 2 * (p - 1) * alpha)
    assert est.algbw_gbps == pytest.approx(n / expected / 1e9)
    assert est.busbw_gbps == pytest.approx(est.algbw_gbps * 2 * 4 / 5)


def test_reduce_scatter_allgather_and_broadcast_formulas() -> None:
    comm = Communicator(star(4), [f"h-{i}/gpu0" for i in range(4)])
    model = CostModel(launch_us=0.0)
    alpha, b = _alpha_b(comm, model)
    n = 8e6
    rs = model.estimate(comm, "reduce_scatter", n, "ring")
    ag = model.estimate(comm, "allgather", n, "ring")
    assert rs.time_s == pytest.approx(3 * (alpha + n / 4 / b))
    assert ag.time_s == pytest.approx(rs.time_s)
    bc = model.estimate(comm, "broadcast", n, "ring")  # pipelined chain of 3 hops
    assert bc.time_s == pytest.approx(3 * alpha + n / b)
    hd = model.estimate(comm, "allreduce", n, "halving_doubling")
    # 2 log2(4) steps; bytes n/2 + n/4 halving, then n/4 + n/2 doubling
    assert hd.time_s == pytest.approx(4 * alpha + 1.5 * n / b)


def test_alltoall_shares_each_nic_among_the_other_ranks() -> None:
    comm = Communicator(star(4), [f"h-{i}/gpu0" for i in range(4)])
    model = CostModel(launch_us=0.0)
    alpha, b = _alpha_b(comm, model)
    n = 12e6
    est = model.estimate(comm, "alltoall", n)
    # each rank sends n/4 to three others at once through its NIC: each gets b/3
    assert est.time_s == pytest.approx(alpha + (n / 4) / (b / 3))
    assert est.busbw_gbps == pytest.approx(est.algbw_gbps * 3 / 4)


def test_busbw_factors_are_nccl_tests() -> None:
    assert busbw_factor(Collective.ALLREDUCE, 8) == pytest.approx(1.75)
    assert busbw_factor(Collective.ALLGATHER, 8) == pytest.approx(0.875)
    assert busbw_factor(Collective.REDUCE_SCATTER, 4) == pytest.approx(0.75)
    assert busbw_factor(Collective.BROADCAST, 8) == 1.0
    assert busbw_factor(Collective.ALLREDUCE, 1) == 1.0


def test_tree_beats_ring_below_the_crossover_and_loses_above() -> None:
    # 6 ranks (no halving-doubling): ring 10a + (5/3) n/B; double binary tree: height 2,
    # depth 4, busiest rank has 4 flows each way of n/2 at B/4: 4a + 2 n/B.
    # Equal at 6a = n/(3B): n* = 18 a B.
    comm = Communicator(star(6), [f"h-{i}/gpu0" for i in range(6)])
    model = CostModel()
    alpha, b = _alpha_b(comm, model)
    crossover = 18 * alpha * b
    ring = model.estimate(comm, "allreduce", crossover, "ring")
    tree = model.estimate(comm, "allreduce", crossover, "tree")
    assert ring.time_s == pytest.approx(tree.time_s, rel=1e-9)
    assert model.estimate(comm, "allreduce", crossover * 0.9).algorithm is Algorithm.TREE
    assert model.estimate(comm, "allreduce", crossover * 1.1).algorithm is Algorithm.RING
    assert model.estimate(comm, "allreduce", 1024).algorithm is Algorithm.TREE


def test_hierarchical_wins_large_messages_across_boxes_with_rails() -> None:
    comm = Communicator(boxes(2, 4, nics=4), [f"b-{h}/gpu{g}" for h in range(2) for g in range(4)])
    model = CostModel()
    big = model.estimates(comm, "allreduce", 1e9)
    assert big[0].algorithm is Algorithm.HIERARCHICAL
    ring = next(e for e in big if e.algorithm is Algorithm.RING)
    # a flat ring crosses one NIC each way; the hierarchical one uses all four rails
    assert big[0].busbw_gbps > 2 * ring.busbw_gbps
    assert model.estimate(comm, "allreduce", 1e3).algorithm is not Algorithm.HIERARCHICAL


def test_a_flat_ring_on_one_nvswitch_box_runs_at_link_speed() -> None:
    fabric = load_fabric("dgx-h100")
    comm = Communicator(fabric, [f"gpu{i}" for i in range(8)])
    est = CostModel(launch_us=0.0, step_us=0.0).estimate(comm, "allreduce", 1e12, "ring")
    assert est.busbw_gbps == pytest.approx(450.0, rel=1e-3)


def test_phase_plans_cover_every_collective() -> None:
    comm = Communicator(star(4), [f"h-{i}/gpu0" for i in range(4)])
    for coll in Collective:
        est = CostModel().estimate(comm, coll, 1e6)
        assert est.time_s > 0
    three = Communicator(star(3), ["h-0/gpu0", "h-1/gpu0", "h-2/gpu0"])
    assert phases(Algorithm.HALVING_DOUBLING, Collective.ALLREDUCE, three, 1.0) is None
    assert phases(Algorithm.HIERARCHICAL, Collective.ALLREDUCE, comm, 1.0) is None
    single = Communicator(star(1), ["h/gpu0"])
    assert CostModel().estimate(single, "allreduce", 1e6).time_s == 0.0


def test_bad_requests_name_what_is_wrong() -> None:
    fabric = star(3)
    with pytest.raises(CommError, match="appears twice"):
        Communicator(fabric, ["h-0/gpu0", "h-0/gpu0"])
    with pytest.raises(CommError, match="no device 'nope'"):
        Communicator(fabric, ["nope"])
    with pytest.raises(CommError, match="at least one"):
        Communicator(fabric, [])
    comm = Communicator(fabric, ["h-0/gpu0", "h-1/gpu0", "h-2/gpu0"])
    with pytest.raises(CommError, match="unknown collective 'allsum'; known: allreduce"):
        CostModel().estimate(comm, "allsum", 1.0)
    with pytest.raises(CommError, match=r"'halving_doubling' does not apply.*applicable: "):
        CostModel().estimate(comm, "allreduce", 1.0, "halving_doubling")
    with pytest.raises(CommError, match=">= 0 bytes"):
        CostModel().estimate(comm, "allreduce", -1.0)


def test_parallel_cables_are_two_resources() -> None:
    from accelnet.fabric.build import build_fabric, parse_spec

    spec = {
        "name": "par",
        "switches": [{"name": "l0", "kind": "leaf"}, {"name": "l1", "kind": "leaf"},
                     {"name": "sp", "kind": "spine"}],
        "hosts": [{"name": "a", "count": 2, "devices": "V100", "nics": "IB-EDR", "network": "l0"},
                  {"name": "b", "count": 2, "devices": "V100", "nics": "IB-EDR", "network": "l1"}],
        "links": [{"a": "l0", "b": "sp", "type": "IB-EDR"}] * 2
        + [{"a": "l1", "b": "sp", "type": "IB-EDR"}] * 2,
    }  # fmt: skip
    fabric = build_fabric(parse_spec(spec, "<par>"))
    comm = Communicator(fabric, ["a-0/gpu0", "b-0/gpu0", "a-1/gpu0", "b-1/gpu0"])
    model = CostModel()
    from accelnet.comm import max_min_rates

    paths = [model.path(comm, 0, 1), model.path(comm, 2, 3)]
    uplinks = [next(h for h in p.hops if h[:2] == ("l0", "sp")) for p in paths]
    assert uplinks[0] != uplinks[1]  # the router spreads them over the two cables (lanes)
    assert max_min_rates(paths) == [12.5e9, 12.5e9]


def test_calibrated_levels_do_not_share_a_rank_s_resources() -> None:
    from accelnet.comm import Calibration, LevelFit

    fabric = boxes(2, 2)
    comm = Communicator(fabric, ["b-0/gpu0", "b-0/gpu1", "b-1/gpu0"])
    cal = Calibration({"NVLINK": LevelFit(5.0, 100.0), "NETWORK_LEAF": LevelFit(20.0, 10.0)})
    model = CostModel(calibration=cal)
    from accelnet.comm import max_min_rates

    inside, across = model.path(comm, 0, 1), model.path(comm, 0, 2)
    assert max_min_rates([inside, across]) == [100e9, 10e9]
    assert inside.latency_s == pytest.approx(5e-6)


def test_paths_are_cached_per_fabric_object() -> None:
    model = CostModel()
    for nic, gbps in (("IB-NDR", 50.0), ("IB-HDR", 25.0), ("IB-NDR", 50.0)):
        spec = {"name": "p", "switches": [{"name": "leaf", "kind": "leaf"}],
                "hosts": [{"name": "h", "count": 2, "devices": "H100-SXM", "nics": nic,
                           "network": "leaf"}]}  # fmt: skip
        from accelnet.fabric.build import build_fabric, parse_spec

        fabric = build_fabric(parse_spec(spec, "<p>"))
        comm = Communicator(fabric, ["h-0/gpu0", "h-1/gpu0"])
        assert min(model.path(comm, 0, 1).capacity) == gbps * 1e9
