"""The result type of the RASS rank-weight solvers and the certificates they share
(:mod:`speccheck.theory.rass` for K <= 16, :mod:`speccheck.theory.rass.dual` above): the piecewise
certificate, the set margins of weak duality and the set bound moved to its maximin. A module of
its own so that both import it and neither imports the other's caller."""

from __future__ import annotations

import contextlib
import functools
import math
from typing import Callable, NamedTuple

import numpy as np
from scipy import special

from speccheck.theory import exact
from speccheck.theory.exact import DELTA_UNDERFLOW
from speccheck.theory.normal import log_phi, normal_mass, normal_mass_below, normal_mass_small

MAXIMIN_STEPS = 8  # Newton steps of maximin_set_bound
SUBNORMAL_DELTA = float(np.finfo(np.float64).tiny)  # 2.2e-308
MARKOV_DELTA = 1e-3  # with_markov_bound tightens gaps at and below this delta (the bound: O(delta) relative)
MARKOV_CANDIDATE_DELTA = 1e-6  # ... and offers markov_solution's weights at and below this one
MARKOV_CERTIFIED_DELTA = 1e-9  # markov_solution(only_certified=True) is tried at and below this one
EVAL_ULPS = 0.25  # evaluation_floor's ulps per crossing
MARKOV_GAP = 1e-10  # markov_solution's gap (relative to 1 - A) that makes it the answer (no solver runs)
_GL16_X, _GL16_W = np.polynomial.legendre.leggauss(16)
ACTIVE_SET_CHANGES = 8  # ranks entering or leaving the active set per step, at most
LINE_SEARCH = 12  # step halvings of maximin_set_bound


def one_blas_thread() -> contextlib.AbstractContextManager:
    """A context in which BLAS/LAPACK run on one thread (threadpoolctl, where installed; else a
    no-op). The solvers' linear algebra is small (K <= 129 square least squares, (cells, K)
    products), where OpenBLAS's threads only spin: at K = 128, delta = 1e-6 they cost 1.8 s of
    the 4.6 s of CPU of one round on a 2-core machine. Results do not depend on it beyond the
    last bits of a least-squares step, and every gap is certified on the values actually used."""
    controller = _blas_controller()
    return contextlib.nullcontext() if controller is None else controller.limit(limits=1, user_api="blas")


@functools.lru_cache(maxsize=1)
def _blas_controller():
    """threadpoolctl's controller of the loaded BLAS/LAPACK libraries, made once (making one scans
    the process's loaded libraries: ~1 ms, a sixth of a K = 8 solve); None without threadpoolctl."""
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:  # an optional speed-up
        return None
    return ThreadpoolController()


class RankWeightSolution(NamedTuple):
    """Optimal RASS weights with their certificate.

    deviation: the weights as the solver holds them, omega - 1/K (exact; ranks of weight 0 have
    -1/K); omega: 1/K + deviation rounded to float64 (its ~1e-17 per weight moves a tiny 1 - A:
    e.g. 20% at delta = 1e-14, K = 16, and at delta <~ 1e-16 it cannot differ from uniform);
    acceptance, rejection: A and 1 - A at 1/K + deviation, exactly as
    ``acceptance_rass(delta, K, deviation=deviation)`` evaluates them (closed-form masses: ~1e-14
    relative where the deviations are of the order of 1 - A, else ~(crossings) ulp(sum |deviation|)
    absolute, e.g. 5e-6 relative at K = 128, delta = 5e-7, where weights of 0 sit beside 1 - A ~ 4e-11;
    the gap allows for it); gap: a certified upper bound on (claimed 1 - A) - (optimal 1 - A),
    = A* - A (Frank-Wolfe gap max_r g_r - g . omega, piecewise certificate, set and LP-dual
    bounds, and Markov's bound, which keeps relative precision where 1 - A ~ 1e-300; see the
    solver modules); relative_gap: gap / min(A, 1 - A), the gap relative to the smaller of A
    and 1 - A; upper_bound = acceptance + gap; crossings of q and p_omega; iterations of the solver;
    deviation_tail: None, or where the weights need more than float64 to state (Markov's small-delta
    weights, K >= ~24 at delta <~ 1e-9: ``rass.precise``; at K = 128 they need ~40 digits) the further
    components of an expansion (shape (m, K)): the weights are exactly 1/K + deviation +
    deviation_tail.sum(axis=0), and acceptance and rejection are theirs (``deviation_expansion``
    passed as ``acceptance_rass(..., deviation=...)`` evaluates them).
    """
    omega: np.ndarray
    acceptance: float
    rejection: float
    gap: float
    upper_bound: float
    deviation: np.ndarray
    crossings: np.ndarray
    iterations: int
    deviation_tail: np.ndarray | None = None

    @property
    def deviation_expansion(self) -> np.ndarray:
        """The weights' deviations from 1/K as an expansion of shape (m, K) (m = 1 without a tail):
        the exact deviation of rank r is the sum of column r."""
        if self.deviation_tail is None:
            return self.deviation[None, :].copy()
        return np.vstack([self.deviation[None, :], self.deviation_tail])

    @property
    def relative_gap(self) -> float:
        """gap / min(acceptance, rejection) (0 where the gap is 0)."""
        scale = min(self.acceptance, self.rejection)
        return 0.0 if self.gap == 0.0 else (self.gap / scale if scale > 0.0 else float("inf"))


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


def closed_form_solution(d: float, K: int,
                         normal: Callable[[], RankWeightSolution] | None = None) -> RankWeightSolution | None:
    """The optimum where it is known in closed form: delta = 0 (uniform weights, A = 1), K = 1
    (RMC: A = 2 Phi(-delta / 2)), delta > DELTA_UNDERFLOW (A < 1e-340: the top rank), subnormal
    delta (:func:`_subnormal_solution`, from ``normal()``: the solver's answer at SUBNORMAL_DELTA,
    when given); else None."""
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
    if d < SUBNORMAL_DELTA:
        return _subnormal_solution(d, K, None if normal is None else normal())
    return None


def _subnormal_solution(d: float, K: int, normal: RankWeightSolution | None = None) -> RankWeightSolution:
    """delta subnormal (< 2.2e-308; every 1 - A is below 1e-308, where float64 has lost its relative
    precision and no solver's arithmetic means anything): the best in 1 - A of uniform weights
    (p = phi: 1 - A = P(-delta/2 < Z < delta/2), as RMC), :func:`markov_solution` and ``normal``
    (the solution at SUBNORMAL_DELTA = 2^-1022) scaled to delta.

    Scaling: below delta ~1e-150 the optimum is in its linear regime, 1 - A(1/K + delta e) =
    delta J(e) (1 + O(delta)), so the weights 1/K + (delta / 2^-1022) eps_n give 1 - A =
    (delta / 2^-1022) (1 - A_n) (ratio exact: a power of two times delta) up to the rounding of
    the products onto the subnormal grid: each deviation moves by <= 2^-1075, 1 - A by at most
    sum_r |d eps_r| <= K 2^-1075, the product 1 - A by 2^-1075; the lower bound on 1 - A* scales
    likewise (1 - A*_n >= 1 - A_n - gap_n). At K = 22, delta = 2.5e-320 uniform weights were ~20x
    D-GRS's 1 - A (K = 128: ~135x): the float evaluator cannot place the crossings there, and
    markov_solution's deviations underflow."""
    rej = float(normal_mass(-0.5 * d, 0.5 * d))
    sol = RankWeightSolution(np.full(K, 1.0 / K), 1.0 - rej, rej, rej, 1.0, np.zeros(K), np.array([0.5 * d]), 0)
    markov = markov_solution(d, K)
    if markov is not None and markov.rejection < rej:
        sol = markov
    gap = min(sol.rejection, max(sol.rejection - markov_lower_bound(d, K), 0.0) + 64.0 * 2.0 ** -52 * sol.rejection)
    sol = sol._replace(gap=gap, upper_bound=sol.acceptance + gap)
    if normal is not None and normal.acceptance >= 0.5:
        ratio = d / SUBNORMAL_DELTA
        # (below the smallest double, e.g. ~7e-325 at K = 128, delta = 2.5e-320: reported as 2^-1074)
        scaled_rej = max(normal.rejection * ratio, 2.0 ** -1074) if normal.rejection > 0.0 else 0.0
        if 0.0 < scaled_rej < sol.rejection:
            eps = normal.deviation * ratio
            tail = None if normal.deviation_tail is None else normal.deviation_tail * ratio
            allowance = (K * (1 if tail is None else 1 + tail.shape[0]) + 2) * 2.0 ** -1074
            lower = max((normal.rejection - normal.gap) * ratio - allowance, markov_lower_bound(d, K), 0.0)
            gap = min(scaled_rej + allowance, max(scaled_rej - lower, 0.0) + allowance)
            omega = np.where(normal.omega == 0.0, 0.0, 1.0 / K + eps)
            sol = RankWeightSolution(omega / omega.sum(), 1.0 - scaled_rej, scaled_rej, gap, 1.0 - scaled_rej + gap,
                                     eps, normal.crossings.copy(), normal.iterations, tail)
    return sol


@functools.lru_cache(maxsize=256)
def markov_edges(K: int) -> np.ndarray:
    """z_k = Phi^-1(u_k), u_k = (1 - cos(k pi / (n + 1))) / 2, k = 1..n (the zeros of the
    Chebyshev polynomial U_n(1 - 2u)), n = K for odd K and K + 1 for even K (n odd). Each with
    relative precision: u_k = sin^2(k pi / (2 (n + 1))) from the lower tail, z_{n+1-k} = -z_k
    (the middle z = 0 exactly). Read-only."""
    n = K if K % 2 else K + 1
    k = np.arange(1, (n - 1) // 2 + 1, dtype=np.float64)
    lower = special.ndtri(np.sin(0.5 * k * np.pi / (n + 1)) ** 2)
    out = np.concatenate([lower, [0.0], -lower[::-1]])
    out.flags.writeable = False
    return out


def markov_lower_bound(d: float, K: int) -> float:
    """A lower bound on 1 - A* with RELATIVE precision at any delta > 0 (also where 1 - A* ~ 1e-300):
    L = Q(S) - Phi(S), S = the cells (z_{2i-1}, z_{2i}] and (z_n, inf) between the points of
    :func:`markov_edges` (y = 1 there, 0 on the others, y = 0 on the first cell).

    Why it bounds: weak duality gives 1 - A* >= int y (q - phi) - max_r int y (p_r - phi) for any
    y in [0, 1]. In u = Phi(z), p_r dz = b_r(u) du with b_r a polynomial of degree K - 1 < n, and
    sign(U_n(1 - 2u)) is orthogonal on [0, 1] to every polynomial of degree < n (Markov; U_n's
    sign changes at its zeros u_k), so int y p_r = int_S b_r du = 1/2 = int y phi for every rank:
    the max term is exactly 0 (at the exact z_k; at the float z_k it is ~1e-16, so the bound is
    taken as the exact-edge L less the edges' rounding effect on it, not as weak duality at the
    float edges) and L = int_S (q - phi) = sum over S's cells of
    int_cell (q - phi), each from the deviation q / phi - 1 (no
    cancellation with 1; 16 ulp of their magnitudes allowed). As delta -> 0 it is tight where the optimum's weights are
    1/K + delta e* with e* interpolating Phi^-1 at the u_k (:func:`markov_deviation`) and
    omega >= 0 does not bind."""
    if not d > 0.0:
        return 0.0
    z = markov_edges(K)
    # S's bounded cells (z_1, z_2], (z_3, z_4], ...: int (q - phi) = int phi (e^{delta z - delta^2/2} - 1)
    # by 16-point Gauss-Legendre (cells of width <~ 1, an entire integrand: exact to rounding),
    # each with relative precision; the last, (z_n, inf): P(z_n - delta < Z < z_n)
    a, b = z[0:-1:2], z[1::2]
    half = 0.5 * (b - a)
    nodes = 0.5 * (a + b)[:, None] + half[:, None] * _GL16_X[None, :]
    with np.errstate(over="ignore"):
        cells = half * ((np.exp(log_phi(nodes)) * np.expm1(d * nodes - 0.5 * d * d)) @ _GL16_W)
    terms = np.concatenate([cells, normal_mass_below(z[-1:], d)])
    if not np.all(np.isfinite(terms)):
        return 0.0
    # the edges are z_k rounded (u_k and Phi^-1 to a few ulp): the exact-edge L, which the
    # argument bounds by, differs by at most sum_k |q - phi|(z_k) dz_k, dz_k = 16 ulp of
    # max(|z_k|, min(u_k, 1 - u_k) / phi(z_k)) (u's relative error carried through Phi^-1)
    with np.errstate(over="ignore"):
        gap_density = np.exp(log_phi(z)) * np.abs(np.expm1(d * z - 0.5 * d * d))
    dz = 16.0 * 2.0 ** -52 * np.maximum(np.abs(z), np.exp(special.log_ndtr(-np.abs(z)) - log_phi(z)))
    allowance = 16.0 * 2.0 ** -52 * float(np.sum(np.abs(terms))) + float(np.sum(gap_density * dz))
    if not np.isfinite(allowance):
        return 0.0
    return max(math.fsum(terms.tolist()) - allowance, 0.0)


@functools.lru_cache(maxsize=256)
def markov_deviation(K: int) -> np.ndarray:
    """e* (sum 0) with sum_r e_r b_r(u_k) = Phi^-1(u_k) at the points of :func:`markov_edges`:
    the weights 1/K + delta e* cross q at those points to first order in delta, and as
    delta -> 0 attain :func:`markov_lower_bound` (the best L1 approximation of Phi^-1 by the
    polynomials sum e_r b_r: Markov's canonical points). Least squares in float64 (the
    Bernstein system is ill-conditioned above K ~ 40, where e* reaches ~1e8 and only a
    candidate results: every use evaluates it exactly). Read-only."""
    z = markov_edges(K)
    u = special.ndtr(z)
    low, high = exact.rank_exponents(K)
    B = np.exp(exact.log_coef(K) + low * np.log(u)[:, None] + high * np.log1p(-u)[:, None])
    M = np.vstack([B, np.ones(K)])
    scale = np.abs(M).max(axis=0)
    e = np.linalg.lstsq(M / scale, np.concatenate([z, [0.0]]), rcond=None)[0] / scale
    e = e - e.mean()
    e.flags.writeable = False
    return e


def markov_candidate(d: float, K: int) -> tuple[np.ndarray, np.ndarray] | None:
    """(eps, zero): the weights 1/K + delta e* (:func:`markov_deviation`), where they are in the
    simplex; None where some weight would be negative (omega >= 0 binds: not the optimum's form)
    or delta e* is not finite."""
    eps = d * markov_deviation(K)
    if not np.all(np.isfinite(eps)) or np.any(1.0 / K + eps < 0.0):
        return None
    return eps, np.zeros(K, bool)


def markov_solution(d: float, K: int, only_certified: bool = False) -> RankWeightSolution | None:
    """The weights of :func:`markov_candidate` evaluated exactly, with the gap certified by
    :func:`markov_lower_bound` (1 - A(omega) - L, plus 64 ulp of 1 - A for the evaluation);
    None where the candidate is not in the simplex, or (``only_certified``) where that gap is
    above MARKOV_GAP relative to 1 - A. At small delta the gap is O(delta) relative to 1 - A:
    where it is <= MARKOV_GAP (e.g. K <= 40 at delta <= 1e-14, down to delta = 1e-300) no solver runs."""
    if not 0.0 < d <= (MARKOV_CERTIFIED_DELTA if only_certified else MARKOV_CANDIDATE_DELTA):
        return None
    cand = markov_candidate(d, K)
    if cand is None:
        return None
    law = exact.law_from_eps(*cand)
    res = exact.exact_acceptance(law, np.array([d]))
    acc, rej = float(res.acceptance[0]), float(res.rejection[0])
    if not (np.isfinite(rej) and rej > 0.0):
        return None
    gap = max(rej - markov_lower_bound(d, K), 0.0) + 64.0 * 2.0 ** -52 * rej
    roots = res.crossings[0]
    sol = RankWeightSolution(law.omega.copy(), acc, rej, gap, acc + gap, law.eps.copy(), roots[np.isfinite(roots)], 0)
    if only_certified and gap + evaluation_floor(sol) > MARKOV_GAP * rej:
        return None
    return sol


def with_markov_bound(d: float, K: int, sol: RankWeightSolution) -> RankWeightSolution:
    """``sol`` with its gap tightened by :func:`markov_lower_bound` (relative precision where
    1 - A is tiny, where the other certificates are absolute: 1 - A* >= L, so the gap is at most
    1 - A - L, plus 64 ulp of 1 - A for the evaluation); and replaced by :func:`markov_solution`
    where that is better in 1 - A (its gap: the smaller of its own and ``sol``'s, valid for
    better weights: A* - A' <= A* - A(sol) when A' >= A(sol))."""
    if not 0.0 < d <= MARKOV_DELTA or sol.acceptance < 0.5:
        return sol
    cand = markov_solution(d, K) if d <= MARKOV_CANDIDATE_DELTA else None
    if cand is not None and cand.rejection < sol.rejection:
        sol = cand._replace(gap=min(cand.gap, sol.gap))
    gap = min(sol.gap, max(sol.rejection - markov_lower_bound(d, K), 0.0) + 64.0 * 2.0 ** -52 * sol.rejection)
    return sol._replace(gap=gap, upper_bound=sol.acceptance + gap)


def evaluation_floor(sol: RankWeightSolution) -> float:
    """The float64 evaluator's error allowance for 1 - A at ``sol``'s weights (0 where A < 1/2, whose
    masses keep relative precision): EVAL_ULPS ulp of sum |deviation| + 1 - A per crossing (1 - A is
    summed from deviations: tiny 1 - A beside large deviations loses relative precision; measured
    against mpmath at K = 8..64, delta = 1e-9..2: <= 0.1 of ulp (crossings + 1) (sum |deviation| + 1 - A))."""
    if sol.acceptance < 0.5:
        return 0.0
    return EVAL_ULPS * 2.0 ** -52 * (sol.crossings.size + 1) * (float(np.abs(sol.deviation).sum()) + sol.rejection)


def evaluated(d: float, sol: RankWeightSolution) -> RankWeightSolution:
    """``sol`` with A and 1 - A re-evaluated at 1/K + deviation by the evaluation path of
    ``acceptance_rass(..., deviation=...)`` (the solvers' own, with gradients, rounds differently:
    up to ~ulp(sum |deviation|) per crossing), omega and deviation as that law holds them, and the
    gap grown by any loss in the claimed value (the bound on the optimum is unchanged) and by
    :func:`evaluation_floor`, so that the reported numbers are those of the returned weights and
    the gap also covers the evaluator's rounding of them."""
    K = sol.deviation.size
    # the paths agree to ~(crossings) ulp(sum |deviation|): re-evaluated only where that is above
    # 1e-13 relative (tiny 1 - A beside large deviations); elsewhere nothing to gain
    floor = 2.0 ** -52 * (sol.crossings.size + 1) * (float(np.abs(sol.deviation).sum()) + min(sol.acceptance,
                                                                                            sol.rejection))
    if floor >= 1e-13 * min(sol.acceptance, sol.rejection):
        zero = 1.0 / K + sol.deviation <= 1e-15
        law = exact.law_from_eps(np.where(zero, -1.0 / K, sol.deviation), zero)
        res = exact.exact_acceptance(law, np.array([d]))
        acc, rej = float(res.acceptance[0]), float(res.rejection[0])
        loss = rej - sol.rejection if sol.acceptance >= 0.5 else sol.acceptance - acc
        sol = sol._replace(omega=law.omega.copy(), acceptance=acc, rejection=rej, gap=sol.gap + max(loss, 0.0),
                           deviation=law.eps.copy())
    gap = min(sol.gap + evaluation_floor(sol), 1.0)
    return sol._replace(gap=gap, upper_bound=sol.acceptance + gap)


def weights_gap(delta: float, K: int, omega: np.ndarray) -> tuple[float, float]:
    """(1 - A(omega), a certified upper bound on A* - A(omega)) at one delta > 0, for any
    probability vector omega of length K: the exact masses at omega's crossings and the
    piecewise :func:`certificate`. Checks weights that were not solved here (a cache file)
    without solving: at the optimum the bound is ~0, at weights that lose acceptance it is at
    least what they lose."""
    law = exact.law_from_omega(np.asarray(omega, np.float64))
    res = exact.exact_acceptance(law, np.array([float(delta)]), gradient=True)
    rejection = float(res.rejection[0])
    if float(delta) > DELTA_UNDERFLOW:  # every acceptance is 0 there: nothing to lose
        return rejection, 0.0
    return rejection, certificate(res.pieces, law.omega).bound if res.pieces is not None else np.inf


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
    low, high = exact.rank_exponents(K)
    log_u, log_v = special.log_ndtr(c)[:, None], special.log_ndtr(-c)[:, None]
    p = np.exp(log_phi(c)[:, None] + exact.log_coef(K) + low * log_u + high * log_v)
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
                      steps: int = MAXIMIN_STEPS, margins_at: Callable | None = None) -> tuple[float, np.ndarray]:
    """max over the boundaries c of the set S of min_r h_r(c) (:func:`set_margins`), by
    active-set Newton from (crossings, omega): the set bound 1 - A* >= min_r h_r made as tight as
    the set's shape allows. Returns (the best min_r h_r found, its boundaries); every trial is
    evaluated exactly, so the value is a valid lower bound on 1 - A* whatever the steps do.

    At the maximin, with multipliers lambda on the simplex (the optimal weights), h_r = t on the
    support T of lambda, h_r >= t off it, and sum_r lambda_r dh_r/dc_j = 0, i.e.
    q(c_j) = p_lambda(c_j) at every boundary: Newton on that system (:func:`_kkt_step`, the
    Lagrangian's curvature sum_r lambda_r d^2 h_r / dc_j^2 is diagonal: c_j only moves its two
    pieces), with the active set T kept consistent (:func:`_active_set_step`) and the step halved
    until the exact min_r h_r increases. ``margins_at(d, K, edges, in_set)``: how the margins are
    evaluated (default :func:`set_margins`; ``rass.precise.set_margins_precise`` where float64's
    absolute precision is too coarse for 1 - A*)."""
    c = np.asarray(crossings, np.float64)
    side = in_set[:-1].astype(np.float64) - in_set[1:].astype(np.float64)
    move = side != 0.0  # a boundary between two pieces on the same side does not change S
    lam = np.array(omega, np.float64)

    evaluate = set_margins if margins_at is None else margins_at

    def margins(bounds: np.ndarray) -> np.ndarray:
        return evaluate(d, K, np.concatenate([[-np.inf], bounds, [np.inf]]), in_set)

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
