"""Allocation LPs over (job, model) pairs, solved with HiGHS (scipy.optimize.linprog).

Variables are ``x[j][m]`` for every pair a job may use (its rate there is positive), plus
any extra columns a policy adds (a level ``t``). The shared constraints are Gavel's: a job
gets at most all of its time (``sum_m x[j][m] <= 1``) and a model's devices are not
over-committed (``sum_j gang_j x[j][m] <= capacity_m``). Matrices are sparse, so a round
of thousands of jobs is one sparse LP; above :data:`CLASSES_ABOVE` active jobs, policies
solve over classes of jobs alike instead (:func:`group`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from typing import TypeVar

import numpy as np
from scipy.optimize import linprog
from scipy.sparse import coo_matrix, csc_matrix, csr_matrix, hstack, vstack

from accelnet.sched.policies.highs import HIGHS_DIRECT, solve_direct
from accelnet.sched.policies.highs import solve_csc as highs_csc
from accelnet.sched.policies.memo import Memo
from accelnet.sched.rounds import Allocation, RoundContext
from accelnet.sched.snapshot import JobView


@dataclass
class Pairs:
    """The LP's (job, model) columns and the shared rows: one per job (its time, at most
    ``b_shared``'s 1 or its class's size), then one per model (its capacity). Per column:
    its job's index, its model's index (in the context's order of models) and its job's
    gang, from which the shared rows are built, as CSR (:attr:`a_shared`, on first use) or
    as CSC arrays (:meth:`shared_csc`)."""

    jobs: list[str]
    pairs: list[tuple[int, str]]  # (job index, model) per column
    rate: np.ndarray  # gang rate of each pair
    b_shared: np.ndarray
    index: np.ndarray  # each column's job index (int32)
    model: np.ndarray  # each column's model index (int32)
    gang: np.ndarray  # each column's job's gang (float)

    @property
    def n(self) -> int:
        """Number of pair columns."""
        return len(self.pairs)

    @property
    def models(self) -> int:
        """Number of models (capacity rows)."""
        return int(self.b_shared.size) - len(self.jobs)

    @cached_property
    def a_shared(self) -> csr_matrix:
        """The shared rows in CSR form, built directly (what a COO build would give,
        without its sort): each job's row holds its run of consecutive columns, a model's
        row the columns on it, with their jobs' gangs."""
        n_jobs, n = len(self.jobs), self.n
        on = np.argsort(self.model, kind="stable")  # each model's columns, in order
        counts = np.concatenate([np.bincount(self.index, minlength=n_jobs),
                                 np.bincount(self.model, minlength=self.models)])  # fmt: skip
        indptr = np.zeros(counts.size + 1, dtype=np.int32)
        np.cumsum(counts, out=indptr[1:])
        indices = np.concatenate([np.arange(n, dtype=np.int32), on.astype(np.int32)])
        data = np.concatenate([np.ones(n), self.gang[on]])
        return csr_matrix((data, indices, indptr), shape=(n_jobs + self.models, n))

    def shared_csc(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The shared rows as CSC arrays ``(indptr, indices, data)``: per column its job's
        time row (1) and its model's capacity row (its gang), what ``a_shared.tocsc()``
        gives, without building a matrix."""
        n = self.n
        rows = np.empty((n, 2), dtype=np.int32)
        rows[:, 0] = self.index
        rows[:, 1] = len(self.jobs) + self.model
        values = np.empty((n, 2))
        values[:, 0], values[:, 1] = 1.0, self.gang
        return np.arange(0, 2 * n + 1, 2, dtype=np.int32), rows.ravel(), values.ravel()


class SpeedRows:
    """The shared rows and a speed row per job as CSC arrays, built at once
    (``scipy.sparse`` blocks cost more than a small LP's solve): per pair column, its job's
    time row (1), its model's capacity row (the gang) and its job's speed row (``-speed``
    of the pair: its rate, or another per-pair measure such as finish-time-fair's rate
    in equal shares); :meth:`with_theta` adds a last column (a level: min-makespan's
    ``theta``, finish-time-fair's ``lambda``) with each job's need in its speed row. The
    arrays are those ``tocsc()`` of the stacked blocks gives (rows sorted within each
    column), so HiGHS gets the same model."""

    def __init__(self, p: Pairs, rows: np.ndarray, values: np.ndarray) -> None:
        self.p, self.rows, self.values = p, rows, values

    @classmethod
    def of(cls, p: Pairs, speed: np.ndarray | None = None) -> SpeedRows:
        """``p``'s rows, each pair's speed ``speed`` (its rate when None)."""
        jobs, n = len(p.jobs), p.n
        rows = np.empty((n, 3), dtype=np.int32)
        rows[:, 0] = p.index
        rows[:, 1] = jobs + p.model
        rows[:, 2] = jobs + p.models + p.index
        values = np.empty((n, 3))
        values[:, 0], values[:, 1] = 1.0, p.gang
        values[:, 2] = -(p.rate if speed is None else speed)
        return cls(p, rows, values)

    def csc(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The matrix without the level: the shared rows and the speed rows."""
        start = np.arange(0, 3 * self.p.n + 1, 3, dtype=np.int32)
        return start, self.rows.ravel(), self.values.ravel()

    @cached_property
    def _theta_structure(self) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`with_theta`'s column starts and row indices (the same for every need)."""
        start, rows, _ = self.csc()
        jobs = len(self.p.jobs)
        first = self.p.b_shared.size  # the first speed row
        speed_rows = np.arange(first, first + jobs, dtype=np.int32)
        return np.append(start, 3 * self.p.n + jobs).astype(np.int32), np.concatenate(
            [rows, speed_rows]
        )

    def with_theta(self, need: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`csc` and the level's column, ``need`` in each speed row (a bisection
        calls it once per LP: only the values are new each time)."""
        start, rows = self._theta_structure
        return start, rows, np.concatenate([self.values.ravel(), need])


def pairs_of(ctx: RoundContext) -> Pairs:
    """The columns and the shared rows of ``ctx``. Jobs that can run on no model here (no
    positive rate) are left out: a row they could never satisfy would hold every other
    job's level at zero. Columns come in job order."""
    jobs = [j.id for j in ctx.jobs if any(r > 0 for r in ctx.tput[j.id].values())]
    order = {m: k for k, m in enumerate(ctx.models)}
    pairs: list[tuple[int, str]] = []
    rate: list[float] = []
    index: list[int] = []
    model: list[int] = []
    gang: list[float] = []
    for i, jid in enumerate(jobs):
        g = float(ctx.gang[jid])
        for m, r in ctx.tput[jid].items():
            if r > 0:
                pairs.append((i, m))
                rate.append(r)
                index.append(i)
                model.append(order[m])
                gang.append(g)
    b = np.concatenate([np.ones(len(jobs)), [float(ctx.capacity[m]) for m in ctx.models]])
    return Pairs(jobs, pairs, np.asarray(rate, dtype=float), b,
                 np.asarray(index, dtype=np.int32), np.asarray(model, dtype=np.int32),
                 np.asarray(gang, dtype=float))  # fmt: skip


@dataclass
class PairColumns:
    """Packed-pair columns appended to a :class:`Pairs` LP: ``(a, b, model)`` by job index,
    each member's gang rate there while packed (its rate alone times the fraction it
    keeps), and the block of the shared rows (both jobs' time rows, the model's capacity
    row at one gang)."""

    cols: list[tuple[int, int, str]]
    ra: np.ndarray
    rb: np.ndarray
    a_shared: csr_matrix
    rows: np.ndarray  # per column its three rows of a_shared, in order
    values: np.ndarray  # and their values (1, 1, the gang)

    @property
    def n(self) -> int:
        """Number of pair columns."""
        return len(self.cols)

    def shared_csc(self, p: Pairs) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``p``'s shared rows and these columns' beside them as CSC arrays, what
        ``side_by_side(p.a_shared, self.a_shared).tocsc()`` gives, without building it."""
        start, rows, values = p.shared_csc()
        more = start[-1] + np.arange(3, 3 * self.n + 1, 3, dtype=np.int32)
        return (np.concatenate([start, more]).astype(np.int32),
                np.concatenate([rows, self.rows.ravel()]),
                np.concatenate([values, self.values.ravel()]))  # fmt: skip


PAIR_JOBS = 100  # the jobs (first in queue order) whose pairs an LP considers packing


def pair_columns(ctx: RoundContext, p: Pairs, limit: int = PAIR_JOBS) -> PairColumns | None:
    """Every pair of ``p``'s first ``limit`` jobs that may share a model's devices with a
    gain (the two keep more than one job's worth of their rates together, as
    ``ctx.colocated`` says), where both can run on that model; None if there is none. The
    limit keeps a round's LP small (100 jobs: at most 14,850 pair columns on three
    models)."""
    fn = ctx.colocated
    if fn is None:
        return None
    models = {m: k for k, m in enumerate(ctx.models)}
    cols: list[tuple[int, int, str]] = []
    ra: list[float] = []
    rb: list[float] = []
    first = min(limit, len(p.jobs))
    # each job's models with a positive rate, in name order (a pair's models: the first
    # job's that the second has too)
    runs = [sorted(m for m, r in ctx.tput[j].items() if r > 0) for j in p.jobs[:first]]
    for i, a in enumerate(p.jobs[:first]):
        rate_a = ctx.tput[a]
        for k in range(i + 1, first):
            b = p.jobs[k]
            rate_b = ctx.tput[b]
            for model in runs[i]:
                if rate_b.get(model, 0.0) <= 0:
                    continue
                f = fn(a, b, model)
                if f is not None and f[0] + f[1] > 1 + 1e-9:
                    cols.append((i, k, model))
                    ra.append(f[0] * rate_a[model])
                    rb.append(f[1] * rate_b[model])
    if not cols:
        return None
    rows, cc, vals = [], [], []
    for c, (i, k, model) in enumerate(cols):
        rows += [i, k, len(p.jobs) + models[model]]
        cc += [c, c, c]
        vals += [1.0, 1.0, float(ctx.gang[p.jobs[i]])]
    shape = (len(p.jobs) + len(models), len(cols))
    a = coo_matrix((vals, (rows, cc)), shape=shape).tocsr()
    # i < k < the capacity rows: each column's rows are in order already
    return PairColumns(cols, np.asarray(ra), np.asarray(rb), a,
                       np.asarray(rows, dtype=np.int32), np.asarray(vals, dtype=float))  # fmt: skip


T = TypeVar("T")
Kept = Memo[tuple[T, tuple[object, ...]]]  # an answer, and what its key names by identity
KeptPairs = Kept[PairColumns | None]


def kept(
    memo: Kept[T], ctx: RoundContext, jobs: Sequence[JobView], shape: Hashable,
    make: Callable[[], T],
) -> T:  # fmt: skip
    """``make()``, kept in ``memo`` for the rounds that ask for it again, for an answer
    that depends on the pair rates: a function of ``jobs`` in order (each one's rates in
    their order, gang, weight, size and spec, which its pairs' rates and whether it packs
    come from), of ``shape`` (what else it reads: the models, their devices...) and of
    where the pair rates come from (``ctx.pair_source``; without one it is made each
    time). The specs and the source are in the key by identity, and the kept entry holds
    them (no other object takes their identity while it is kept). Not to be changed."""
    source = ctx.pair_source
    if source is None:
        return make()
    key = (id(source), shape, tuple(
        (j.id, id(j.spec), tuple(ctx.tput[j.id].items()), ctx.gang[j.id],
         ctx.weights.get(j.id, 1.0), ctx.size.get(j.id))
        for j in jobs
    ))  # fmt: skip
    found = memo.get(key)
    if found is None:
        found = (make(), (source, *(j.spec for j in jobs)))
        memo.put(key, found)
    return found[0]


def kept_pair_columns(ctx: RoundContext, p: Pairs, memo: KeptPairs) -> PairColumns | None:
    """:func:`pair_columns`, kept in ``memo`` (:func:`kept`): they read ``p``'s first
    :data:`PAIR_JOBS` jobs, the number of its jobs and the models."""
    views = {j.id: j for j in ctx.jobs}
    first = [views[jid] for jid in p.jobs[:PAIR_JOBS]]
    return kept(memo, ctx, first, (len(p.jobs), tuple(ctx.models)),
                lambda: pair_columns(ctx, p))  # fmt: skip


def pair_allocation(
    p: Pairs, pc: PairColumns, z: np.ndarray
) -> dict[tuple[str, str], dict[str, float]]:
    """The pair columns' values as ``(a, b) -> model -> time together`` (tiny ones dropped)."""
    out: dict[tuple[str, str], dict[str, float]] = {}
    for (i, k, model), value in zip(pc.cols, z, strict=True):
        if value > 1e-7:
            out.setdefault((p.jobs[i], p.jobs[k]), {})[model] = float(min(1.0, value))
    return out


def solve(
    c: np.ndarray,
    a_ub: csr_matrix,
    b_ub: np.ndarray,
    bounds: Sequence[tuple[float | None, float | None]],
    ipm: bool = False,
) -> np.ndarray | None:
    """Minimise ``c @ v`` s.t. ``a_ub @ v <= b_ub`` within ``bounds``; None if HiGHS finds no
    optimum (infeasible or unbounded: callers fall back). HiGHS is called directly, with
    the model and options ``linprog(method="highs")`` gives it (:mod:`.highs`), so the
    answer is linprog's without its input checks (~2 ms a call, 80 % of a small round's LP
    time); where scipy's HiGHS binding is not there, through linprog. ``ipm``: HiGHS's
    interior-point method, as ``linprog(method="highs-ipm")``. The objective is scaled
    first (:func:`unit_costs`)."""
    c = unit_costs(c)
    if HIGHS_DIRECT:
        return solve_direct(c, a_ub, b_ub, bounds, ipm=ipm)
    return solve_linprog(c, a_ub, b_ub, bounds, ipm=ipm)


def unit_costs(c: np.ndarray) -> np.ndarray:
    """``c`` divided by the geometric mean of its smallest and largest non-zero magnitudes
    (the same optimum), so its costs span ``[1/sqrt(R), sqrt(R)]`` for a range ``R``.
    HiGHS takes a cost under its dual tolerance (1e-7) for zero: hetero-jct's progress
    terms (a rate over millions of steps left) are 1e-9 to 1e-6, and unscaled, a long job's
    columns were all "zero", the solver left it out and moved it and another job back and
    forth at every round (issue 27). Scaling the largest to 1 instead would lose the long
    jobs beside a nearly finished one (a cost of 1e4). ``c`` itself when it has no
    non-zero cost, a non-finite one, or is scaled already."""
    mags = np.abs(c[c != 0])
    if mags.size == 0 or not np.all(np.isfinite(mags)):
        return c
    scale = math.sqrt(float(mags.min()) * float(mags.max()))
    if scale in {0.0, 1.0}:
        return c
    return np.asarray(c, dtype=float) / scale


def solve_csc(
    c: np.ndarray,
    csc: tuple[np.ndarray, np.ndarray, np.ndarray],
    rhs: np.ndarray,
    lb: np.ndarray,
    ub: np.ndarray,
    ipm: bool = False,
) -> np.ndarray | None:
    """:func:`solve` with the matrix as CSC arrays ``(indptr, indices, data)``, rows sorted
    within each column, and the bounds as arrays (``inf``: none): no ``scipy.sparse``
    object is built on the direct path. The objective is scaled first (:func:`unit_costs`);
    ``ipm``: HiGHS's interior-point method."""
    c = unit_costs(c)
    if HIGHS_DIRECT:
        return highs_csc(c, csc, rhs, lb, ub, ipm=ipm)
    a = csc_matrix((csc[2], csc[1], csc[0]), shape=(rhs.size, c.size))
    bounds = [(None if np.isinf(lo) else float(lo), None if np.isinf(hi) else float(hi))
              for lo, hi in zip(lb, ub, strict=True)]  # fmt: skip
    return solve_linprog(c, csr_matrix(a), rhs, bounds, ipm=ipm)


def solve_linprog(
    c: np.ndarray,
    a_ub: csr_matrix,
    b_ub: np.ndarray,
    bounds: Sequence[tuple[float | None, float | None]],
    ipm: bool = False,
) -> np.ndarray | None:
    """:func:`solve` through ``scipy.optimize.linprog``."""
    method = "highs-ipm" if ipm else "highs"
    res = linprog(c, A_ub=a_ub, b_ub=b_ub, bounds=list(bounds), method=method)
    if res.status != 0 or res.x is None:
        return None
    return np.asarray(res.x, dtype=float)


def extra_columns(a: csr_matrix, extra: int) -> csr_matrix:
    """``a`` with ``extra`` zero columns appended."""
    rows, cols = a.shape
    return csr_matrix((a.data, a.indices, a.indptr), shape=(rows, cols + extra))


def stack(*blocks: csr_matrix) -> csr_matrix:
    """Rows of several sparse blocks."""
    return csr_matrix(vstack(blocks))


def side_by_side(*blocks: csr_matrix) -> csr_matrix:
    """Columns of several sparse blocks."""
    return csr_matrix(hstack(blocks))


def allocation(p: Pairs, x: np.ndarray) -> Allocation:
    """The pair values as ``X[job][model]`` (tiny values dropped)."""
    out: dict[str, dict[str, float]] = {}
    for (i, model), value in zip(p.pairs, x[: p.n], strict=True):
        if value > 1e-7:
            out.setdefault(p.jobs[i], {})[model] = float(min(1.0, value))
    return out


def job_rows(p: Pairs, coef: np.ndarray) -> csr_matrix:
    """One row per job: ``sum_m coef[pair] * x[pair]`` over the job's pairs."""
    rows = [i for i, _ in p.pairs]
    return coo_matrix((coef, (rows, range(p.n))), shape=(len(p.jobs), p.n)).tocsr()


CLASSES_ABOVE = 500  # active jobs from which the LP policies solve over classes of jobs alike


@dataclass
class Grouped:
    """Jobs alike (the same rates on every model, gang, weight, size and ``extra``) as
    classes, each represented by its first member in queue order: ``ctx`` holds the
    representatives only, ``members`` each class in queue order.

    An LP over classes has one column per class and model, ``y``: the members' summed
    time fractions, at most the class's size. Objectives and rows that treat the members
    alike keep their optimum (by symmetry and convexity, averaging the members' columns
    of any optimum is an optimum), so a queue of 100,000 jobs of a few dozen kinds is an
    LP of a few hundred columns."""

    ctx: RoundContext
    members: dict[str, list[str]]

    def sizes(self, p: Pairs) -> np.ndarray:
        """Each class's size, aligned with ``p.jobs``."""
        return np.array([float(len(self.members[j])) for j in p.jobs])


def group(ctx: RoundContext, extra: Mapping[str, object] | None = None) -> Grouped:
    """``ctx``'s jobs as classes of jobs alike (see :class:`Grouped`)."""
    classes: dict[tuple[object, ...], list[str]] = {}
    for job in ctx.jobs:
        jid = job.id
        key = (tuple(sorted(ctx.tput[jid].items())), ctx.gang[jid], ctx.weights.get(jid, 1.0),
               ctx.size.get(jid), None if extra is None else extra[jid])  # fmt: skip
        classes.setdefault(key, []).append(jid)
    members = {ids[0]: ids for ids in classes.values()}
    return Grouped(replace(ctx, jobs=[j for j in ctx.jobs if j.id in members]), members)


def class_pairs(grouped: Grouped) -> tuple[Pairs, np.ndarray]:
    """The representatives' pairs with each class's time row at its size, and the size of
    each column's class."""
    p = pairs_of(grouped.ctx)
    size = grouped.sizes(p)
    p.b_shared[: len(p.jobs)] = size
    return p, size[[i for i, _ in p.pairs]]


def split(
    grouped: Grouped, p: Pairs, y: np.ndarray, serial: bool = False
) -> dict[str, dict[str, float]]:
    """Each member's allocation from the classes' column values ``y``: an equal share of
    its class's, or with ``serial``, the class's time handed out member by member in queue
    order (each up to all of its time, fastest model first), so that jobs alike run one
    after the other rather than all at a fraction (better for completion times)."""
    per_class: dict[str, dict[str, float]] = {}
    for (i, model), value in zip(p.pairs, y[: p.n], strict=True):
        if value > 1e-7:
            per_class.setdefault(p.jobs[i], {})[model] = float(value)
    out: dict[str, dict[str, float]] = {}
    for rep, totals in per_class.items():
        ids = grouped.members[rep]
        if not serial:
            share = {m: min(1.0, v / len(ids)) for m, v in totals.items()}
            for jid in ids:
                out[jid] = dict(share)
            continue
        rates = grouped.ctx.tput[rep]
        left = dict(totals)
        models = sorted(left, key=lambda m: (-rates.get(m, 0.0), m))
        for jid in ids:
            room = 1.0
            for m in models:
                take = min(room, left[m])
                if take > 1e-7:
                    out.setdefault(jid, {})[m] = take
                    left[m] -= take
                    room -= take
                if room <= 1e-7:
                    break
            if all(v <= 1e-7 for v in left.values()):
                break
    return out
