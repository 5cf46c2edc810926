"""The result type of the RASS rank-weight solvers and the certificates they share
(:mod:`speccheck.theory.rass` for K <= 16, :mod:`speccheck.theory.rass_dual` above): the piecewise
certificate, the set margins of weak duality and the set bound moved to its maximin. A module of
its own so that both import it and neither imports the other's caller."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy import special

from speccheck.theory import exact
from speccheck.theory.exact import DELTA_UNDERFLOW
from speccheck.theory.normal import log_phi, normal_mass, normal_mass_small

MAXIMIN_STEPS = 8  # Newton steps of maximin_set_bound
ACTIVE_SET_CHANGES = 8  # ranks entering or leaving the active set per step, at most
LINE_SEARCH = 12  # step halvings of maximin_set_bound


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


def set_margins(d: float, K: int, edges: np.ndarray, q_above: np.ndarray) -> np.ndarray:
    """h_r = Q(S) - P(S_(r) in S) for every rank r (shape (K,)), S the union of the pieces
    [edges[i], edges[i + 1]] with q_above[i]. Weak duality: 1 - A* >= min_r h_r for ANY set S."""
    lower, upper = exact.rank_tails(K, edges)  # +-inf ends: (0, 1) and (1, 0)
    i = np.nonzero(q_above)[0]  # piece i is [edges[i], edges[i + 1]]
    lo, hi = edges[i], edges[i + 1]
    rank_mass = np.where((lo >= 0)[:, None], upper[i] - upper[i + 1], lower[i + 1] - lower[i])
    q_mass = normal_mass_small(lo - d, hi - d)
    return np.sum(q_mass[:, None] - rank_mass, axis=0)


def _margin_derivatives(d: float, K: int, c: np.ndarray, side: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """J[r, j] = dh_r / dc_j = s_j (q(c_j) - p_r(c_j)) and W[r, j] = d^2 h_r / dc_j^2 =
    s_j (q'(c_j) - p_r'(c_j)) (h_r depends on c_j only through the two pieces it separates)."""
    low, high = exact._rank_exponents(K)  # noqa: SLF001 (same package)
    log_u, log_v = special.log_ndtr(c)[:, None], special.log_ndtr(-c)[:, None]
    p = np.exp(log_phi(c)[:, None] + exact._log_coef(K) + low * log_u + high * log_v)  # noqa: SLF001
    # p_r' / p_r = -c + (r - 1) phi / Phi - (K - r) phi / (1 - Phi)
    mills_u, mills_v = np.exp(log_phi(c)[:, None] - log_u), np.exp(log_phi(c)[:, None] - log_v)
    dp = p * (-c[:, None] + low * mills_u - high * mills_v)
    q = np.exp(log_phi(c - d))
    dq = -(c - d) * q
    return (side * (q[:, None] - p).T), (side * (dq[:, None] - dp).T)


def _kkt_step(J: np.ndarray, W: np.ndarray, h: np.ndarray, lam: np.ndarray, active: np.ndarray
              ) -> tuple[np.ndarray, float, np.ndarray]:
    """The Newton step of the maximin's KKT system on the active ranks T (``active``): unknowns
    (dc, t, dlambda_T) with h_r + J_r dc = t (r in T), sum_r (lambda_r + dlambda_r) J_rj +
    (lambda W)_j dc_j = 0 (every boundary j), sum dlambda = 0; least squares, minimum norm.
    Returns (dc, t, the new lambda)."""
    T = np.nonzero(active)[0]
    n, m = T.size, J.shape[1]
    M = np.zeros((n + m + 1, m + 1 + n))
    rhs = np.zeros(n + m + 1)
    M[:n, :m], M[:n, m] = J[T], -1.0
    rhs[:n] = -h[T]
    M[n:n + m, :m] = np.diag(lam @ W)
    M[n:n + m, m + 1:] = J[T].T
    rhs[n:n + m] = -(lam @ J)
    M[n + m, m + 1:] = 1.0
    scale = np.maximum(np.abs(M).max(axis=0), 1e-300)
    sol = np.linalg.lstsq(M / scale, rhs, rcond=1e-14)[0] / scale
    new_lam = np.zeros_like(lam)
    new_lam[T] = lam[T] + sol[m + 1:]
    return sol[:m], float(sol[m]), new_lam


def _active_set_step(J: np.ndarray, W: np.ndarray, h: np.ndarray, lam: np.ndarray, active: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_kkt_step` with the active set made consistent: a rank whose new multiplier is
    negative leaves T, a rank whose linearised margin falls below the new t joins it (at most
    2 ACTIVE_SET_CHANGES re-solves). Returns (dc, the new lambda (on the simplex), the final T)."""
    active = active.copy()
    dc, t, new_lam = _kkt_step(J, W, h, lam, active)
    for _ in range(2 * ACTIVE_SET_CHANGES):
        if np.all(np.isfinite(dc)) and np.any(new_lam < 0.0) and active.sum() > 1:
            active[int(np.argmin(np.where(active, new_lam, np.inf)))] = False
        else:
            below = ~active & (h + J @ dc < t - 1e-15 * max(abs(t), 1e-300))
            if not np.any(below):
                break
            active[int(np.argmin(np.where(below, h + J @ dc, np.inf)))] = True
        dc, t, new_lam = _kkt_step(J, W, h, lam, active)
    new_lam = np.maximum(new_lam, 0.0)
    return dc, new_lam / new_lam.sum() if new_lam.sum() > 0 else lam, active


def maximin_set_bound(d: float, K: int, crossings: np.ndarray, in_set: np.ndarray, omega: np.ndarray,
                      steps: int = MAXIMIN_STEPS) -> tuple[float, np.ndarray]:
    """max over the boundaries c of the set S of min_r h_r(c) (:func:`set_margins`), by
    active-set Newton from (crossings, omega): the set bound 1 - A* >= min_r h_r made as tight as
    the set's shape allows. Returns (the best min_r h_r found, its boundaries); every trial is
    evaluated exactly, so the value is a valid lower bound on 1 - A* whatever the steps do.

    At the maximin, with multipliers lambda on the simplex (the optimal weights), h_r = t on the
    support T of lambda, h_r >= t off it, and sum_r lambda_r dh_r/dc_j = 0, i.e.
    q(c_j) = p_lambda(c_j) at every boundary: Newton on that system (:func:`_kkt_step`, the
    Lagrangian's curvature sum_r lambda_r d^2 h_r / dc_j^2 is diagonal: c_j only moves its two
    pieces), with the active set T kept consistent (:func:`_active_set_step`) and the step halved
    until the exact min_r h_r increases."""
    c = np.asarray(crossings, np.float64)
    side = in_set[:-1].astype(np.float64) - in_set[1:].astype(np.float64)
    move = side != 0.0  # a boundary between two pieces on the same side does not change S
    lam = np.array(omega, np.float64)

    def margins(bounds: np.ndarray) -> np.ndarray:
        return set_margins(d, K, np.concatenate([[-np.inf], bounds, [np.inf]]), in_set)

    h = margins(c)
    best, best_c = float(h.min()), c.copy()
    if not np.any(move):
        return best, best_c
    active = lam > 0.0
    for _ in range(steps):
        J, W = _margin_derivatives(d, K, c[move], side[move])
        if not (np.all(np.isfinite(J)) and np.all(np.isfinite(W))):  # a boundary in a tail beyond float range
            break
        dc, new_lam, active = _active_set_step(J, W, h, lam, active | (h <= best))
        edges = np.concatenate([[-np.inf], c, [np.inf]])
        room = 0.5 * np.minimum(np.diff(edges)[:-1], np.diff(edges)[1:])[move]  # keeps the order
        improved = False
        for alpha in min(1.0, float(np.min(room / np.maximum(np.abs(dc), 1e-300)))) * 0.5 ** np.arange(LINE_SEARCH):
            trial_c = c.copy()
            trial_c[move] += alpha * dc
            if not (np.all(np.isfinite(trial_c)) and np.all(np.diff(trial_c) > 0)):
                continue
            trial_h = margins(trial_c)
            if trial_h.min() > best:
                best, best_c, improved = float(trial_h.min()), trial_c, True
                c, h = trial_c, trial_h
                lam = new_lam if alpha == 1.0 else (1.0 - alpha) * lam + alpha * new_lam
                break
        if not improved:
            break
    return best, best_c
