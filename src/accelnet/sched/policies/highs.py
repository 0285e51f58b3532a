"""HiGHS called the way ``scipy.optimize.linprog(method="highs")`` calls it, without the
input checks and conversions around it.

A round's LP is small (tens to hundreds of columns), so linprog's own work (checking and
converting its inputs, checking every option against HiGHS's table, building the result)
costs four times HiGHS's solve. :func:`solve_direct` hands HiGHS the same model (the
constraint matrix in CSC form, rows ``-inf <= A v <= b``, the same bounds) with the same
options linprog sets (presolve on, dual simplex strategy, no output) and applies linprog's
feasibility check to the answer, so it returns linprog's ``x`` bit for bit (a test
compares them). It uses scipy's private binding of HiGHS; where that is missing
(:data:`HIGHS_DIRECT` false), callers use linprog.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy.sparse import csr_matrix

try:  # scipy's bundled HiGHS (private: what linprog itself calls)
    from scipy.optimize._highspy import _core
except ImportError:  # pragma: no cover - another scipy layout: linprog is used
    _core = None

HIGHS_DIRECT = _core is not None and hasattr(_core, "_Highs")
_TOL = math.sqrt(1e-9) * 10  # linprog's feasibility check of HiGHS's answer (tol 1e-9)


def _options(solver: str | None = None) -> Any:
    opts = _core.HighsOptions()
    opts.presolve = "on"  # linprog: presolve=True
    opts.output_flag = False
    opts.log_to_console = False
    opts.highs_debug_level = 0  # kHighsDebugLevelNone
    opts.simplex_strategy = 1  # kSimplexStrategyDual
    if solver is not None:  # linprog(method="highs-ipm"): solver="ipm" (crossover on)
        opts.solver = solver
    return opts


_OPTIONS = _options() if HIGHS_DIRECT else None  # never changed: HiGHS copies them
_OPTIONS_IPM = _options("ipm") if HIGHS_DIRECT else None


def solve_direct(
    c: np.ndarray,
    a_ub: csr_matrix,
    b_ub: np.ndarray,
    bounds: Sequence[tuple[float | None, float | None]],
    ipm: bool = False,
) -> np.ndarray | None:
    """Minimise ``c @ v`` s.t. ``a_ub @ v <= b_ub`` within ``bounds`` (None: unbounded on
    that side); None if HiGHS reports no optimum or its answer fails linprog's check.
    ``ipm``: HiGHS's interior-point method, as ``linprog(method="highs-ipm")``."""
    n = int(c.size)
    a = a_ub.tocsc()
    box = np.array(bounds, dtype=float).reshape(n, 2)  # None -> nan: no bound on that side
    lb = np.where(np.isnan(box[:, 0]), -np.inf, box[:, 0])
    ub = np.where(np.isnan(box[:, 1]), np.inf, box[:, 1])
    rhs = np.asarray(b_ub, dtype=float)
    return solve_csc(c, (a.indptr, a.indices, a.data), rhs, lb, ub, ipm=ipm)


def solve_csc(
    c: np.ndarray,
    csc: tuple[np.ndarray, np.ndarray, np.ndarray],
    rhs: np.ndarray,
    lb: np.ndarray,
    ub: np.ndarray,
    ipm: bool = False,
) -> np.ndarray | None:
    """:func:`solve_direct` with the matrix as CSC arrays ``(indptr, indices, data)``
    (row indices sorted within each column: what ``tocsc`` gives) and the bounds as
    arrays (``inf`` for none)."""
    indptr, indices, data = csc
    n, rows = int(c.size), int(rhs.size)
    lp = _core.HighsLp()
    lp.num_col_ = n
    lp.num_row_ = rows
    lp.a_matrix_.num_col_ = n
    lp.a_matrix_.num_row_ = rows
    lp.a_matrix_.format_ = _core.MatrixFormat.kColwise
    lp.col_cost_ = np.asarray(c, dtype=float)
    lp.col_lower_ = np.where(np.isinf(lb), -_core.kHighsInf, lb)
    lp.col_upper_ = np.where(np.isinf(ub), _core.kHighsInf, ub)
    lp.row_lower_ = np.full(rows, -_core.kHighsInf)
    lp.row_upper_ = np.where(np.isinf(rhs), _core.kHighsInf, rhs)
    # the matrix's vectors as lists: the binding copies a numpy array into them element
    # by element through Python (40 us for 720 values), a list in C (the same numbers)
    matrix = lp.a_matrix_
    matrix.start_ = indptr.tolist()
    matrix.index_ = indices.tolist()
    matrix.value_ = data.tolist()
    highs = _core._Highs()
    if highs.passOptions(_OPTIONS_IPM if ipm else _OPTIONS) == _core.HighsStatus.kError:
        return None
    if highs.passModel(lp) == _core.HighsStatus.kError:
        return None
    if highs.run() == _core.HighsStatus.kError:
        return None
    if highs.getModelStatus() != _core.HighsModelStatus.kOptimal:
        return None
    solution = highs.getSolution()
    x = np.array(solution.col_value, dtype=float)
    slack = rhs - np.asarray(solution.row_value, dtype=float)
    if np.isnan(x).any() or np.isnan(slack).any():
        return None
    if not np.all((x >= lb - _TOL) & (x <= ub + _TOL)) or (slack < -_TOL).any():
        return None
    return x
