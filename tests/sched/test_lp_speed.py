"""What makes the LP policies fast changes no answer: HiGHS called directly returns
linprog's solution, and hetero-fair's memo of solved LPs gives the allocation a fresh
solve gives."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.sparse import csr_matrix

from accelnet.sched.policies import highs, lp
from accelnet.sched.policies.hetero_fair import HeteroFair
from accelnet.sched.rounds import RoundContext
from tests.sched.test_lp_classes import queue
from tests.sched.test_policies import contexts

pytestmark = pytest.mark.skipif(not highs.HIGHS_DIRECT, reason="scipy's HiGHS binding missing")


Bounds = list[tuple[float, float | None]]


def _random_lp(
    seed: int, rows: int, cols: int
) -> tuple[np.ndarray, csr_matrix, np.ndarray, Bounds]:
    """A random LP ``(c, A, b, bounds)``: sparse, some rows infeasible, some columns
    unbounded above."""
    rng = np.random.default_rng(seed)
    dense = rng.uniform(-1.0, 3.0, (rows, cols)) * (rng.random((rows, cols)) < 0.4)
    b = rng.uniform(-1.0, 10.0, rows)
    c = rng.uniform(-5.0, 1.0, cols)
    bounds: Bounds = [(0.0, None if rng.random() < 0.3 else float(rng.uniform(0.5, 4.0)))
                      for _ in range(cols)]  # fmt: skip
    return c, csr_matrix(dense), b, bounds


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 10**6), rows=st.integers(1, 12), cols=st.integers(1, 30))
def test_direct_highs_returns_linprogs_solution(seed: int, rows: int, cols: int) -> None:
    c, a, b, bounds = _random_lp(seed, rows, cols)
    direct = highs.solve_direct(c, a, b, bounds)
    slow = lp.solve_linprog(c, a, b, bounds)
    assert (direct is None) == (slow is None)
    if direct is not None and slow is not None:
        assert np.array_equal(direct, slow)  # the same solver, model and options


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 10**6), rows=st.integers(1, 12), cols=st.integers(1, 30))
def test_direct_highs_ipm_returns_linprogs_ipm_solution(seed: int, rows: int, cols: int) -> None:
    """finish-time-fair's interior-point LPs: the direct call is linprog's highs-ipm."""
    from scipy.optimize import linprog

    c, a, b, bounds = _random_lp(seed, rows, cols)
    direct = highs.solve_direct(c, a, b, bounds, ipm=True)
    res = linprog(c, A_ub=a, b_ub=b, bounds=bounds, method="highs-ipm")
    slow = None if res.status != 0 or res.x is None else np.asarray(res.x, dtype=float)
    assert (direct is None) == (slow is None)
    if direct is not None and slow is not None:
        assert np.array_equal(direct, slow)  # the same solver, model and options


def test_direct_highs_says_none_where_linprog_does() -> None:
    a = csr_matrix(np.array([[1.0], [-1.0]]))
    infeasible = highs.solve_direct(np.array([1.0]), a, np.array([1.0, -2.0]), [(0.0, None)])
    assert infeasible is None
    unbounded = highs.solve_direct(np.array([-1.0]), csr_matrix((0, 1)), np.zeros(0),
                                   [(0.0, None)])  # fmt: skip
    assert unbounded is None
    assert lp.solve_linprog(np.array([-1.0]), csr_matrix((0, 1)), np.zeros(0),
                            [(0.0, None)]) is None  # fmt: skip


def _fresh(ctx: RoundContext) -> dict[str, dict[str, float]]:
    return {j: dict(s) for j, s in HeteroFair().allocate(ctx).items()}


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(ctx=contexts())
def test_hetero_fair_memo_gives_a_fresh_solves_allocation(ctx: RoundContext) -> None:
    policy = HeteroFair()
    first = {j: dict(s) for j, s in policy.allocate(ctx).items()}
    again = policy.allocate(ctx)  # the same question: answered from the memo
    assert policy._solved.hits == 1
    assert again == first == _fresh(ctx)


def test_hetero_fair_memo_tells_apart_what_the_lp_depends_on() -> None:
    policy = HeteroFair()
    ctx = queue(7, 40, 4)
    policy.allocate(ctx)
    fewer = replace(ctx, jobs=ctx.jobs[:-3])  # other class sizes and equal shares
    smaller = replace(ctx, capacity={**ctx.capacity, "X": ctx.capacity["X"] // 2})
    reordered = replace(ctx, jobs=list(reversed(ctx.jobs)))  # classes in another order
    for other in (fewer, smaller, reordered):
        assert policy.allocate(other) == _fresh(other)
    assert policy._solved.hits == 0
    assert policy.allocate(ctx) == _fresh(ctx)
    assert policy._solved.hits == 1


def test_hetero_fair_memo_keeps_a_few_answers() -> None:
    policy = HeteroFair()
    contexts_ = [queue(seed, 30, 3) for seed in range(20)]
    for ctx in contexts_:
        policy.allocate(ctx)
    assert len(policy._solved._items) == policy._solved.size
    assert policy.allocate(contexts_[-1]) == _fresh(contexts_[-1])
    assert policy._solved.hits == 1


@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
@given(ctx=contexts())
def test_hetero_fair_csc_rows_are_linprogs_rows(
    ctx: RoundContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    direct = _fresh(ctx)
    with monkeypatch.context() as m:  # the CSC arrays through scipy.sparse and linprog
        m.setattr(lp, "HIGHS_DIRECT", False)
        slow = _fresh(ctx)
    assert direct == slow


def _stacked_rows(
    p: lp.Pairs, need: np.ndarray, per_pair: np.ndarray | None = None
) -> tuple[csr_matrix, csr_matrix]:
    """min-makespan's (and finish-time-fair's, ``per_pair`` its rate in equal shares) two
    matrices built as they were before their CSC arrays: scipy.sparse blocks (the shared
    rows, the speed rows, the level's column) stacked."""
    from scipy.sparse import hstack

    speed = lp.job_rows(p, p.rate if per_pair is None else per_pair)
    theta = csr_matrix(need.reshape(-1, 1))
    one = lp.stack(lp.extra_columns(p.a_shared, 1), csr_matrix(hstack([-speed, theta])))
    return one, lp.stack(p.a_shared, -speed)


def _same_csc(arrays: tuple[np.ndarray, np.ndarray, np.ndarray], a: csr_matrix) -> bool:
    csc = a.tocsc()
    return all(np.array_equal(x, y) for x, y in zip(arrays, (csc.indptr, csc.indices, csc.data),
                                                    strict=True))  # fmt: skip


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(ctx=contexts(), kind=st.sampled_from(["jobs", "classes", "fair"]))
def test_csc_speed_rows_are_the_stacked_blocks(ctx: RoundContext, kind: str) -> None:
    """The arrays min-makespan and finish-time-fair (``"fair"``: each pair's rate in equal
    shares) hand HiGHS are those the stacked blocks gave (so the same model, the same
    answer), one job per row (``"jobs"``) or one class per row (``"classes"``)."""
    from accelnet.sched.policies.finish_time_fair import ratios_of
    from accelnet.sched.policies.lp import SpeedRows
    from accelnet.sched.policies.min_makespan import remaining_steps

    left = remaining_steps(ctx)
    if kind == "classes":
        p, _ = lp.class_pairs(lp.group(ctx, left))
    else:
        p = lp.pairs_of(ctx)
    if p.n == 0:
        return
    need = np.array([left[j] for j in p.jobs]) * 0.5
    per_pair = p.rate / ratios_of(ctx).fair[p.index] if kind == "fair" else None
    rows = SpeedRows.of(p, per_pair)
    one, two = _stacked_rows(p, need, per_pair)
    assert _same_csc(rows.with_theta(need), one)
    assert _same_csc(rows.csc(), two)


@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
@given(ctx=contexts(), which=st.sampled_from(["min-makespan", "hetero-jct", "guarded"]))
def test_csc_policies_give_linprogs_allocation(
    ctx: RoundContext, which: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """min-makespan's and hetero-jct's CSC arrays through HiGHS directly, and through
    scipy.sparse and linprog: the same allocation."""
    from accelnet.sched.policies.hetero_jct import HeteroJct
    from accelnet.sched.policies.min_makespan import MinMakespan

    def make() -> MinMakespan | HeteroJct:
        if which == "min-makespan":
            return MinMakespan()
        return HeteroJct(guard=0.5 if which == "guarded" else 0.0)

    direct = make().allocate(ctx)
    with monkeypatch.context() as m:
        m.setattr(lp, "HIGHS_DIRECT", False)
        slow = make().allocate(ctx)
    assert direct == slow


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(ctx=contexts())
def test_shared_rows_are_the_coo_builds(ctx: RoundContext) -> None:
    """The shared rows, as CSR and as CSC arrays, are the matrix a COO build of Gavel's
    rows gives (a job's time row: 1 per column; a model's capacity row: the gang)."""
    from scipy.sparse import coo_matrix

    p = lp.pairs_of(ctx)
    rows, cols, vals = [], [], []
    for c, (i, model) in enumerate(p.pairs):
        rows += [i, len(p.jobs) + ctx.models.index(model)]
        cols += [c, c]
        vals += [1.0, float(ctx.gang[p.jobs[i]])]
    coo = coo_matrix((vals, (rows, cols)), shape=(len(p.jobs) + len(ctx.models), p.n)).tocsr()
    for got, want in ((p.a_shared, coo), (p.a_shared.tocsc(), coo.tocsc())):
        assert np.array_equal(got.indptr, want.indptr)
        assert np.array_equal(got.indices, want.indices)
        assert np.array_equal(got.data, want.data)
    assert _same_csc(p.shared_csc(), coo)


def test_unit_costs_bring_a_costs_range_about_one_and_keep_its_optimum() -> None:
    """The costs are divided by the geometric mean of their smallest and largest non-zero
    magnitudes (a positive factor: the same optimum, the same signs); a cost vector with
    no non-zero or a non-finite cost is handed back as it is."""
    c = np.array([-4e-9, 0.0, -1e-6, 2e-8])
    scaled = lp.unit_costs(c)
    top, low = np.abs(scaled).max(), np.abs(scaled[scaled != 0]).min()
    assert top * low == pytest.approx(1.0) and top == pytest.approx(np.sqrt(1e-6 / 4e-9))
    assert np.array_equal(np.sign(scaled), np.sign(c))
    assert np.allclose(scaled * np.sqrt(4e-9 * 1e-6), c, rtol=1e-12, atol=0.0)
    for same in (np.zeros(3), np.array([0.0, -1.0]), np.array([1.0, np.inf])):
        assert lp.unit_costs(same) is same


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(ctx=contexts(), gain=st.floats(0.3, 0.9))
def test_csc_pair_columns_beside_the_shared_rows_are_the_stacked_blocks(
    ctx: RoundContext, gain: float
) -> None:
    """The arrays hetero-jct-packed hands HiGHS (the shared rows, then a column per pair
    that gains by sharing) are those ``side_by_side`` of the two blocks gave."""
    rated = replace(ctx, colocated=lambda a, b, m: (gain, gain + 0.05))
    p = lp.pairs_of(rated)
    pc = lp.pair_columns(rated, p)
    if pc is None:
        return
    assert pc.n > 0
    assert _same_csc(pc.shared_csc(p), lp.side_by_side(p.a_shared, pc.a_shared))


def test_kept_pair_columns_are_made_anew_when_a_job_or_the_pair_rates_change() -> None:
    from accelnet.sched.policies.memo import Memo
    from tests.sched.test_policies import context, view

    jobs = [view(n, steps=100.0) for n in ("a", "b", "c")]
    table = {"a": {"X": 1.0, "Y": 2.0}, "b": {"X": 1.0}, "c": {"Y": 1.0}}
    source = object()  # a scheduler's pair rate function
    base = replace(context(jobs, table, {"X": 2, "Y": 2}), colocated=lambda a, b, m: (0.7, 0.6),
                   pair_source=source)  # fmt: skip
    memo: lp.KeptPairs = Memo()
    p = lp.pairs_of(base)
    first = lp.kept_pair_columns(base, p, memo)
    assert first is not None and first.cols == [(0, 1, "X"), (0, 2, "Y")]
    assert lp.kept_pair_columns(base, p, memo) is first and memo.hits == 1
    # b replaced by another job under the same name (another spec): made anew
    other = replace(base, jobs=[jobs[0], view("b", steps=5.0), jobs[2]])
    assert lp.kept_pair_columns(other, lp.pairs_of(other), memo) is not first
    # another source of pair rates: made anew, with its rates
    worse = replace(base, colocated=lambda a, b, m: (0.4, 0.4), pair_source=object())
    assert lp.kept_pair_columns(worse, p, memo) is None  # no pair gains
    assert memo.hits == 1
    # no source (rates that may change from call to call): nothing kept
    loose = replace(base, pair_source=None)
    assert lp.kept_pair_columns(loose, p, memo) is not first and memo.hits == 1
