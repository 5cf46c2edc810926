"""The result type of the RASS rank-weight solvers and the piecewise certificate they share
(:mod:`speccheck.theory.rass` for K <= 16, :mod:`speccheck.theory.rass_dual` above): a module of its
own so that both import it and neither imports the other's caller."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy import special

from speccheck.theory import exact
from speccheck.theory.exact import DELTA_UNDERFLOW
from speccheck.theory.normal import normal_mass


class RankWeightSolution(NamedTuple):
    """Optimal RASS weights with their certificate.

    omega: the weights; acceptance, rejection: A and 1 - A at omega (exact); gap: the smallest
    certified bound on the true optimum minus acceptance (Frank-Wolfe gap max_r g_r - g . omega,
    piecewise certificate, set bounds; see the module doc);
    upper_bound = acceptance + gap; deviation: omega - 1/K as the solver holds it (precise at
    tiny delta); crossings of q and p_omega; iterations of the solver.
    """

    omega: np.ndarray
    acceptance: float
    rejection: float
    gap: float
    upper_bound: float
    deviation: np.ndarray
    crossings: np.ndarray
    iterations: int

    @property
    def lp_value(self) -> float:
        """Old name: the solver's value (now exact, so equal to ``acceptance``)."""
        return self.acceptance

    @property
    def quadrature_loss(self) -> float:
        """Old name: no quadrature is involved any more, so 0."""
        return 0.0


class Certificate(NamedTuple):
    """bound >= max over the simplex of A(omega') - A(omega); model_omega: the maximiser of the
    piecewise-linear model behind it; effective_gradient: the gradient that model weighs."""

    bound: float
    model_omega: np.ndarray
    effective_gradient: np.ndarray
    dropped: np.ndarray | None = None  # per piece: theta = 1 (the set bound without that piece)


def certificate(pieces: exact.PieceMasses, omega: np.ndarray) -> Certificate:
    """An upper bound on A* - A(omega), tighter than the Frank-Wolfe gap.

    Per piece I between crossings, int_I min(q, p_omega') is concave in omega'. On a piece where
    q > p_omega its gain is <= min(res_I, a_I . (omega' - omega)) (res_I = int_I (q - p_omega),
    a_I the rank masses on I); where p_omega > q it is <= 0. With min(x, y) <= theta x + (1 - theta) y
    for any theta in [0, 1], for every choice of theta (0/1 per piece here)

        A* - A(omega) <= sum_{I: q>p} [theta_I res_I - (1 - theta_I) a_I . omega] + max_r c_r,
        c = sum_{I: q>p} (1 - theta_I) a_I,

    evaluated exactly. theta = 0 everywhere is the Frank-Wolfe gap max_r g_r - g . omega;
    theta = 1 everywhere gives 1 - A. Coordinate descent over the pieces (two passes) picks
    theta: it matters where a tail piece has rank mass but no residual (large delta: ~1e-6 of
    rank-1 mass where q ~ 1e-300). Any theta gives a valid bound, so the search only tightens it."""
    above = np.nonzero(pieces.q_above)[0]
    a = pieces.rank_mass[above]
    res = pieces.residual[above]
    lin = a @ omega
    theta = np.zeros(above.size, bool)

    def value(th: np.ndarray) -> tuple[float, np.ndarray]:
        c = (~th).astype(np.float64) @ a if th.size else np.zeros(omega.size)
        return float(np.sum(np.where(th, res, -lin)) + c.max()), c

    best, c = value(theta)
    for _ in range(2):
        changed = False
        for i in np.argsort(-(a.max(axis=1) - res)) if above.size else []:
            theta[i] = ~theta[i]
            trial, trial_c = value(theta)
            if trial < best:
                best, c, changed = trial, trial_c, True
            else:
                theta[i] = ~theta[i]
        if not changed:
            break
    model = np.zeros(omega.size)
    model[int(np.argmax(c))] = 1.0
    all_residual = float(np.sum(res))  # theta = 1 everywhere: A* - A <= 1 - A
    dropped = np.zeros(pieces.q_above.size, bool)
    if all_residual < best:
        dropped[above] = True
        return Certificate(all_residual, omega.copy(), np.zeros(omega.size), dropped)
    dropped[above[theta]] = True
    return Certificate(max(best, 0.0), model, c, dropped)


def closed_form_solution(d: float, K: int) -> RankWeightSolution | None:
    """The optimum where it is known in closed form: delta = 0 (uniform weights, A = 1), K = 1
    (RMC: A = 2 Phi(-delta / 2)), delta > DELTA_UNDERFLOW (A < 1e-340: the top rank); else None."""
    if d == 0.0 or K == 1:
        omega = np.full(K, 1.0 / K)
        if d == 0.0:
            return RankWeightSolution(omega, 1.0, 0.0, 0.0, 1.0, np.zeros(K), np.empty(0), 0)
        acc = float(2.0 * special.ndtr(-0.5 * d))
        rej = float(normal_mass(-0.5 * d, 0.5 * d))
        return RankWeightSolution(omega, acc, rej, 0.0, acc, np.zeros(K), np.array([0.5 * d]), 0)
    if d > DELTA_UNDERFLOW:
        omega = np.zeros(K)
        omega[-1] = 1.0
        return RankWeightSolution(omega, 0.0, 1.0, 0.0, 0.0, omega - 1.0 / K, np.empty(0), 0)
    return None
