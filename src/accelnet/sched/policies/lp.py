"""Allocation LPs over (job, model) pairs, solved with HiGHS (scipy.optimize.linprog).

Variables are ``x[j][m]`` for every pair a job may use (its rate there is positive), plus
any extra columns a policy adds (a level ``t``). The shared constraints are Gavel's: a job
gets at most all of its time (``sum_m x[j][m] <= 1``) and a model's devices are not
over-committed (``sum_j gang_j x[j][m] <= capacity_m``). Matrices are sparse, so a round
of thousands of jobs is one sparse LP.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import linprog
from scipy.sparse import coo_matrix, csr_matrix, vstack

from accelnet.sched.rounds import Allocation, RoundContext


@dataclass
class Pairs:
    """The LP's (job, model) columns and the shared rows."""

    jobs: list[str]
    pairs: list[tuple[int, str]]  # (job index, model) per column
    rate: np.ndarray  # gang rate of each pair
    a_shared: csr_matrix  # rows: one per job (time), one per model (capacity)
    b_shared: np.ndarray

    @property
    def n(self) -> int:
        """Number of pair columns."""
        return len(self.pairs)


def pairs_of(ctx: RoundContext) -> Pairs:
    """The columns and the shared rows of ``ctx``. Jobs that can run on no model here (no
    positive rate) are left out: a row they could never satisfy would hold every other
    job's level at zero."""
    jobs = [j.id for j in ctx.jobs if any(r > 0 for r in ctx.tput[j.id].values())]
    pairs: list[tuple[int, str]] = []
    rate: list[float] = []
    for i, jid in enumerate(jobs):
        for model, r in ctx.tput[jid].items():
            if r > 0:
                pairs.append((i, model))
                rate.append(r)
    models = {m: k for k, m in enumerate(ctx.models)}
    rows, cols, vals = [], [], []
    for c, (i, model) in enumerate(pairs):
        rows += [i, len(jobs) + models[model]]
        cols += [c, c]
        vals += [1.0, float(ctx.gang[jobs[i]])]
    shape = (len(jobs) + len(models), len(pairs))
    a = coo_matrix((vals, (rows, cols)), shape=shape).tocsr()
    b = np.concatenate([np.ones(len(jobs)), [float(ctx.capacity[m]) for m in ctx.models]])
    return Pairs(jobs, pairs, np.asarray(rate, dtype=float), a, b)


def solve(
    c: np.ndarray,
    a_ub: csr_matrix,
    b_ub: np.ndarray,
    bounds: Sequence[tuple[float | None, float | None]],
) -> np.ndarray | None:
    """Minimise ``c @ v`` s.t. ``a_ub @ v <= b_ub`` within ``bounds``; None if HiGHS finds no
    optimum (infeasible or unbounded: callers fall back)."""
    res = linprog(c, A_ub=a_ub, b_ub=b_ub, bounds=list(bounds), method="highs")
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
