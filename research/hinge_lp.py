"""The one builder for the hinge LPs of the research code (the RASS quadrature cross-check, :mod:`research.rass_lp`).

All of them read: maximise sum_m w_m min(f_m, (A x)_m) over x >= 0 with sum_{v in group g} x_v = 1
for every group g (one simplex per policy cell; one group for RASS's omega). As an LP, a hinge
variable h_m <= f_m (a bound) with h_m - (A x)_m <= 0 (a row) per node. Nodes where
f_m >= max_v A[m, v] contribute the linear term w_m (A x)_m and nodes where f_m <= min_v A[m, v]
the constant w_m f_m (when the groups make A x a convex combination of each row's entries,
i.e. with one group); only the others need a hinge variable.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike
from scipy import optimize, sparse


def hinge_lp_highs(f: np.ndarray, A: ArrayLike, w: np.ndarray, groups: np.ndarray, *, method: str = "highs",
                   time_limit: float | None = None) -> tuple[np.ndarray, float]:
    """Solve the hinge LP with HiGHS; returns (x, optimal value). Raises RuntimeError when
    HiGHS does not report an optimum (the message names its status)."""
    groups = np.asarray(groups, np.int64)
    n_var = groups.size
    n_groups = int(groups.max()) + 1
    dense = not sparse.issparse(A)
    offset = 0.0
    lin_cost = np.zeros(n_var)
    if dense and n_groups == 1:
        lin = f >= A.max(axis=1)
        const = f <= A.min(axis=1)
        hinge = ~(lin | const)
        offset = float(w[const] @ f[const])
        lin_cost = w[lin] @ A[lin]
        f, A, w = f[hinge], A[hinge], w[hinge]
    M = f.size
    A_s = sparse.csr_matrix(A)
    cost = np.concatenate([-lin_cost, -w])
    A_ub = sparse.hstack([-A_s, sparse.identity(M, format="csr")], format="csr")
    A_eq = sparse.hstack([sparse.csr_matrix((np.ones(n_var), (groups, np.arange(n_var))), shape=(n_groups, n_var)),
                          sparse.csr_matrix((n_groups, M))], format="csr")
    bounds = np.concatenate([np.column_stack([np.zeros(n_var), np.ones(n_var)]), np.column_stack([np.zeros(M), f])])
    options = {} if time_limit is None else {"time_limit": float(time_limit)}
    res = optimize.linprog(cost, A_ub=A_ub, b_ub=np.zeros(M), A_eq=A_eq, b_eq=np.ones(n_groups), bounds=bounds,
                           method=method, options=options)
    if res.status != 0:
        raise RuntimeError(f"hinge LP failed: {res.message}")
    return res.x[:n_var], offset - float(res.fun)
