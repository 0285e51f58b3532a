"""Jobs that share links slow each other down; shares add up to the link."""

from __future__ import annotations

import pytest

from accelnet.comm import Communicator, CostModel
from accelnet.comm.contention import CommJob, contended, link_shares
from tests.comm.conftest import boxes


def _jobs() -> list[CommJob]:
    fabric = boxes(2, 8, nics=1)  # one NIC per box: jobs spanning both boxes share it
    a = Communicator(fabric, [f"b-{h}/gpu{g}" for h in range(2) for g in range(4)])
    b = Communicator(fabric, [f"b-{h}/gpu{g}" for h in range(2) for g in range(4, 8)])
    return [CommJob("a", a, 256e6, compute_s=0.01), CommJob("b", b, 256e6, compute_s=0.01)]


def test_shares_of_a_shared_link_sum_to_its_capacity() -> None:
    shares = link_shares(CostModel(), _jobs())
    shared = [s for s in shares if len(s.shares) > 1]
    assert shared, "the two jobs cross the same NICs"
    # the NIC is both jobs' bottleneck: full, in equal halves (max-min); links behind it
    # (PCIe to the NIC) carry the same traffic below their capacity
    full = [s for s in shared if s.used == pytest.approx(s.capacity)]
    assert {s.capacity for s in full} == {50e9}
    for s in full:
        assert s.shares["a"] == pytest.approx(s.shares["b"])
    for s in shares:
        assert s.used <= s.capacity * (1 + 1e-9)


def test_sharing_a_nic_slows_both_jobs_and_a_lone_job_not_at_all() -> None:
    model = CostModel()
    jobs = _jobs()
    both = contended(model, jobs)
    for name in ("a", "b"):
        s = both[name]
        assert s.shared.time_s > 1.5 * s.alone.time_s  # the NIC phase dominates: ~2x
        assert s.step_shared_s == pytest.approx(0.01 + s.shared.time_s)
        assert s.factor > 1.3
    alone = contended(model, jobs[:1])["a"]
    assert alone.factor == 1.0
    assert alone.shared.time_s == alone.alone.time_s


def test_jobs_on_disjoint_links_do_not_interfere() -> None:
    fabric = boxes(2, 8, nics=1)
    a = Communicator(fabric, [f"b-0/gpu{g}" for g in range(4)])
    b = Communicator(fabric, [f"b-1/gpu{g}" for g in range(4)])
    out = contended(CostModel(), [CommJob("a", a, 1e8), CommJob("b", b, 1e8)])
    assert out["a"].factor == 1.0
    assert out["b"].factor == 1.0


def test_overlap_hides_communication() -> None:
    model = CostModel()
    job = _jobs()[0]
    hidden = CommJob(job.name, job.comm, job.nbytes, compute_s=0.01, overlap=1.0)
    assert contended(model, [hidden])["a"].step_alone_s == pytest.approx(0.01)


def test_job_names_must_be_unique() -> None:
    a, _ = _jobs()
    with pytest.raises(ValueError, match="given twice: a"):
        contended(CostModel(), [a, a])
