"""RASS (rank-aware selection): selected-draft law, exact acceptance, certified optimal rank weights.

The selected draft S_(r), r ~ omega, has density p_omega(s) = phi(s) sum_r omega_r b_r(Phi(s)),
b_r the Beta(r, K - r + 1) density. P(accept) = A(omega) = integral min(q, p_omega),
q(s) = phi(s - delta), evaluated exactly by :mod:`speccheck.theory.exact` (crossings + closed-form
masses). K ranges over 1..128 (``speccheck.theory.validate.MAX_K``).

Optimal weights (issue 13.2). A is concave in omega, with gradient
g_r = dA/domega_r = P(S_(r) in {q > p_omega}) and Hessian -sum_c q(c) w_c w_c^T / |F'(c)| over the
crossings c (``exact.hessian``). The solver is an active-set Newton method on the simplex with an
exact line search along each direction (A is concave on the line: its slope g . step decreases),
started from the interpolation in delta of the shipped weight table (package data; a degree-5
local polynomial, :func:`table_start`), or else from the best of: uniform weights, the top rank,
and the small-delta solution whose crossings sit at the canonical points
u_j = (1 - cos(j pi / (K + 2))) / 2 (least squares in the Bernstein weights, pulled into the
simplex) (:func:`_starts`). Every start is a pure function of (delta, K). This solver runs for
K <= 16; above, the optimum sits on degenerate faces (the Hessian's rank is at most the number
of crossings) and :mod:`speccheck.theory.rass.dual` (LP duality on refined partitions) solves it.

Certificates (each bounds A* - A(omega) from above; the smallest is reported as ``gap``, and
``upper_bound = acceptance + gap``): the Frank-Wolfe gap max_r g_r - g . omega (for every omega'
in the simplex, A(omega') <= A(omega) + g . (omega' - omega)); the piecewise bound of
:func:`certificate`; and, for K <= 16, the set bound (:func:`set_bound`, weak duality: A(omega')
<= max_r P(S_(r) in S) + Q(S^c) for ANY set S) at the set {q > p} predicted for the Newton point
(:func:`_dual_gap`). The first two are first order in the distance e to the optimum, the last is
second order (~e^2), so near the optimum it certifies 1e-12 where the others would need another
Newton step. Where those stall above 1e-12 (K <= 16, once they are below POLISH_GAP), the set
bound at crossings moved by one Newton step of the dual (:func:`polished_set_gap`): a crossing
where q and p_omega are nearly tangent (|F'| ~ 1e-6, K = 16 at delta ~ 0.03) is only known to
~1e-16 / |F'|, which every bound evaluated at the computed crossings inherits to first order
(~1e-11); so does a weight of ~1e-15 whose gradient rounding cannot settle (K = 16 at
delta ~ 5.4; the polish then leaves that rank's piece out of the set). Every set gives a valid
bound, evaluated exactly; the polish only chooses a better one.

Small delta (all K; ``rass_certificate``): where 1 - A ~ delta c_K is far below the absolute
precision of those certificates (~1e-16; 1 - A ~ 1e-18 at delta = 1e-14, ~1e-303 at 1e-300),
Markov's bound ``markov_lower_bound`` (1 - A* >= Q(S) - Phi(S) on the set between the zeros of
U_n(1 - 2 Phi(z)), exactly, from any delta) certifies with RELATIVE precision, and the weights
1/K + delta e* interpolating Phi^-1 at those points (``markov_solution``) attain it to O(delta):
at delta <= 1e-9 they are the answer where certified to 1e-10 relative (no solver runs: K <= 16
down to delta = 1e-300, where the Newton solver stalls at uniform weights, worse than D-GRS);
elsewhere at delta <= 1e-3 the bound tightens the solver's gap and the weights replace the
solver's where better (``with_markov_bound``). Above K ~ 20 Markov's weights cannot be stated in
float64 (e* reaches 6e12 at K = 64, 7e30 at K = 128, alternating in sign) nor evaluated there:
:mod:`speccheck.theory.rass.precise` holds e* from a 120-digit solve, evaluates 1 - A in extended
precision and certifies with Markov's bound in extended precision; such solutions carry their
weights as an expansion (``RankWeightSolution.deviation_tail``). Where the float certificates
leave more than 1e-10 of 1 - A (K <= 24; K <= 96 in rass_dual's full solve), the set bound is
redone with precise margins (``precise.with_precise_set_bound``: K = 6..17 at delta = 1e-4).
Subnormal delta: the better of uniform weights and
those (``closed_form_solution``). The reported A and 1 - A are re-evaluated by the path of
``acceptance_rass(delta, K, deviation=...)`` (``certificate.evaluated``) and the gap allows
for the evaluator's rounding (``evaluation_floor``), so the numbers are those of the returned weights.

Stopping (K <= 16): the gap is <= GAP_TOL = 1e-12 absolute AND either <= 1e-12 min(1, A, 1 - A),
or the Newton model's predicted gain is <= VALUE_TOL = 1e-12 min(1, A, 1 - A), so A and 1 - A
keep their relative precision (from the exact evaluation at the returned weights) where a
certificate cannot show it (1 - A ~ 1e-15 at delta = 1e-12). From the table's start most deltas
stop at the first exact evaluation. Pure function of (delta, K): no warm starts from earlier
calls, so two processes give identical weights in any call order.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path
from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike
from scipy import special

from speccheck.errors import InputError
from speccheck.theory import exact
from speccheck.theory.exact import DELTA_UNDERFLOW, RankLaw, exact_acceptance, law_from_eps, law_from_omega
from speccheck.theory.normal import log_phi
from speccheck.theory.rass.certificate import (
    SUBNORMAL_DELTA,
    Certificate,
    RankWeightSolution,
    certificate,
    closed_form_solution,
    evaluated,
    markov_solution,
    one_blas_thread,
    set_margins,
    with_markov_bound,
)
from speccheck.theory.rass.precise import with_precise_rejection, with_precise_set_bound
from speccheck.theory.validate import check_delta, check_K, check_omega

GAP_TOL = 1e-12  # stated optimality gap (absolute, in acceptance)
VALUE_TOL = 1e-12  # A and 1 - A optimal to this relative precision (Newton model)
MAX_ITER = 200
# the Newton solver here runs up to K = LARGE_K; above, its degenerate faces (rank-deficient
# Hessian) need the LP-duality solver of rass_dual
LARGE_K = 16
TABLE_STENCIL = 6  # grid points of the shipped table's interpolating polynomial (table_start)
POLISH_GAP = 1e-7  # the polished set bound (polished_set_gap) once the other bounds are below this
POLISH_BAND = 1e-7  # ranks within this of the smallest set margin are equalised by the polish
STALL_GAP, STALL_ITER = 1e-9, 25  # stop once a gap <= STALL_GAP has not halved in STALL_ITER


# ----------------------------------------------------------------- the selected-draft law
@functools.lru_cache(maxsize=256)
def _log_beta_coef(K: int) -> np.ndarray:
    """log K! / ((r-1)! (K-r)!) for r = 1..K."""
    r = np.arange(1, K + 1)
    return special.gammaln(K + 1) - special.gammaln(r) - special.gammaln(K - r + 1)


def log_rank_terms(s: ArrayLike, K: int) -> np.ndarray:
    """log [phi(s) b_r(Phi(s))], shape s.shape + (K,)."""
    s = np.asarray(s, np.float64)[..., None]
    r = np.arange(1, K + 1)
    with np.errstate(divide="ignore"):
        return (log_phi(s) + _log_beta_coef(K) + (r - 1) * special.log_ndtr(s) + (K - r) * special.log_ndtr(-s))




def log_p_omega(s: ArrayLike, K: int, omega: ArrayLike) -> np.ndarray:
    """log p_omega(s), the log density of the rank-selected draft (shape of ``s``)."""
    K = check_K(K)
    w = check_omega(omega, K)
    with np.errstate(divide="ignore"):
        return special.logsumexp(log_rank_terms(s, K) + np.log(w), axis=-1)


def cdf_p_omega(s: ArrayLike, K: int, omega: ArrayLike) -> np.ndarray:
    """P(S_(r) <= s) = sum_r omega_r I_{Phi(s)}(r, K - r + 1)."""
    K = check_K(K)
    w = check_omega(omega, K)
    s = np.asarray(s, np.float64)[..., None]
    r = np.arange(1, K + 1)
    return special.betainc(r, K - r + 1, special.ndtr(s)) @ w


def sf_p_omega(s: ArrayLike, K: int, omega: ArrayLike) -> np.ndarray:
    """P(S_(r) > s), accurate in the upper tail: I_{1 - u}(b, a) = 1 - I_u(a, b)."""
    K = check_K(K)
    w = check_omega(omega, K)
    s = np.asarray(s, np.float64)[..., None]
    r = np.arange(1, K + 1)
    return special.betainc(K - r + 1, r, special.ndtr(-s)) @ w


# ----------------------------------------------------------------- crossings and residual intervals
class ResidualInterval(NamedTuple):
    """(lo, hi) where q > p_omega, and mass = integral_lo^hi (q - p_omega) ds."""

    lo: float
    hi: float
    mass: float


def crossings(delta: float, K: int, omega: ArrayLike, *, lo: float = -40.0, hi: float | None = None) -> np.ndarray:
    """Sorted points in [lo, hi] (default hi = delta + 40) where q = p_omega: every crossing
    (convexity-piece search of :mod:`speccheck.theory.exact`)."""
    d = float(check_delta(delta))
    K = check_K(K)
    w = check_omega(omega, K)
    hi = d + 40.0 if hi is None else hi
    if d == 0.0 or d > DELTA_UNDERFLOW:
        return np.empty(0)
    roots = exact.crossings_batch(law_from_omega(w), np.array([d]))[0]
    roots = roots[np.isfinite(roots)]
    return roots[(roots >= lo) & (roots <= hi)]


def residual_intervals(delta: float, K: int, omega: ArrayLike) -> list[ResidualInterval]:
    """The intervals where q(s) > p_omega(s) with their residual masses (closed form, from the
    deviations of q from phi and of omega from uniform: sum(mass) = 1 - A to ~1e-12 relative)."""
    d = float(check_delta(delta))
    K = check_K(K)
    w = check_omega(omega, K)
    if d == 0.0:
        return []
    law = law_from_omega(w)
    roots = crossings(d, K, w)
    edges = np.concatenate([[-np.inf], roots, [np.inf]])
    lo, hi = edges[:-1], edges[1:]
    mid = np.where(np.isfinite(lo) & np.isfinite(hi), 0.5 * (lo + hi),
                   np.where(np.isfinite(lo), lo + 1.0, np.where(np.isfinite(hi), hi - 1.0, 0.0)))
    F_mid = exact.curve(law, mid, derivatives=0).L - d * mid + 0.5 * d * d
    out = []
    lo_f = np.where(np.isfinite(lo), lo, 0.0)
    hi_f = np.where(np.isfinite(hi), hi, 0.0)
    lower_lo, upper_lo = exact.rank_tails(law.K, lo_f)
    lower_hi, upper_hi = exact.rank_tails(law.K, hi_f)
    dd = np.full(lo.shape, d)
    G_hi = exact.cumulative_residual(law, hi, dd, lower_hi, upper_hi)
    G_lo = exact.cumulative_residual(law, lo, dd, lower_lo, upper_lo)
    for i in np.nonzero(F_mid < 0)[0]:
        out.append(ResidualInterval(float(lo[i]), float(hi[i]), max(float(G_hi[i] - G_lo[i]), 0.0)))
    return out


# ----------------------------------------------------------------- exact acceptance at fixed omega
def _fixed(d: np.ndarray, K: int, w: np.ndarray) -> exact.ExactAcceptance:
    return _fixed_law(d, law_from_omega(w))


def _fixed_law(d: np.ndarray, law: RankLaw) -> exact.ExactAcceptance:
    flat = d.ravel()
    zero = flat == 0.0
    acc = np.empty(flat.size)
    rej = np.empty(flat.size)
    if np.any(zero):  # delta = 0: q = phi, A = 1 - TV(phi, p_omega) (crossing at P = 1, no line)
        acc[zero], rej[zero] = _delta_zero(law)
    if np.any(~zero):
        res = exact_acceptance(law, flat[~zero])
        acc[~zero], rej[~zero] = res.acceptance, res.rejection
    return exact.ExactAcceptance(acc.reshape(d.shape), rej.reshape(d.shape), np.empty(0), None)


def _delta_zero(law: RankLaw) -> tuple[float, float]:
    """A = 1 - integral (phi - p_omega)_+ at delta = 0, by the limit of tiny delta (exact for
    uniform omega, where it is 1)."""
    if np.all(law.eps == 0.0):
        return 1.0, 0.0
    res = exact_acceptance(law, np.array([1e-300]))
    return float(res.acceptance[0]), float(res.rejection[0])


def check_deviation(deviation: ArrayLike, K: int) -> tuple[np.ndarray, np.ndarray]:
    """(eps, zero) from weights given as deviations eps = omega - 1/K (``RankWeightSolution.deviation``):
    finite, length K, summing to 0 within 1e-9, every 1/K + eps_r >= -1e-9; ranks with
    1/K + eps_r <= 1e-15 are weight 0 (eps_r = -1/K)."""
    try:
        eps = np.asarray(deviation, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InputError(f"deviation must be a vector of length {K}, got deviation={deviation!r}") from exc
    if eps.shape != (K,) or not np.all(np.isfinite(eps)):
        raise InputError(f"deviation must be a finite vector of shape ({K},) for K={K}, got shape {eps.shape}")
    if abs(math.fsum(eps.tolist())) > 1e-9 or np.any(1.0 / K + eps < -1e-9):
        raise InputError(f"deviation must sum to 0 with 1/K + deviation >= 0 (weights omega = 1/K + deviation), "
                         f"got deviation={eps.tolist()}")
    zero = 1.0 / K + eps <= 1e-15
    return np.where(zero, -1.0 / K, eps), zero


def _per_delta(delta: ArrayLike, K: int, omega: ArrayLike | None, field: str,
               deviation: ArrayLike | None = None) -> np.ndarray | float:
    """``field`` ("acceptance" or "rejection") of RASS at the optimal weights (omega and deviation
    None), at ``omega`` or at 1/K + ``deviation``, per delta; a float for scalar delta."""
    d = check_delta(delta)
    K = check_K(K)
    if omega is not None and deviation is not None:
        raise InputError("give omega or deviation, not both")
    if deviation is not None:
        out = _per_delta_deviation(d, K, deviation, field)
    elif omega is None:
        out = np.vectorize(lambda x: getattr(_solution(float(x), K), field), otypes=[np.float64])(d)
    else:
        out = getattr(_fixed(d, K, check_omega(omega, K)), field)
    return float(out) if d.ndim == 0 else out


def _per_delta_deviation(d: np.ndarray, K: int, deviation: ArrayLike, field: str) -> np.ndarray:
    """``field`` at weights 1/K + ``deviation`` (shape (K,), or an expansion (m, K) whose column
    sums are the deviations: ``RankWeightSolution.deviation_expansion``), ranks with
    1/K + deviation <= 1e-15 weight 0. The float evaluator; at 0 < delta <= 1, where the weights
    are an expansion or its allowance (``certificate.evaluation_floor``'s form) exceeds
    ``precise.PRECISE_REJECTION`` of 1 - A (tiny 1 - A beside large deviations), 1 - A by
    :func:`speccheck.theory.rass.precise.precise_rejection` (its zeros refined from the float
    crossings and, for an expansion, Markov's points; where that fails, the float value): the
    values ``rank_weight_solution`` reports for its weights."""
    from speccheck.theory.rass.certificate import EVAL_ULPS, markov_edges
    from speccheck.theory.rass.precise import PRECISE_REJECTION, precise_rejection

    try:
        expansion = np.asarray(deviation, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InputError(f"deviation must be a vector of length {K} or an expansion of shape (m, {K}), "
                         f"got deviation={deviation!r}") from exc
    if expansion.ndim == 1:
        eps, zero = check_deviation(expansion, K)
        expansion = expansion[None, :]
    elif expansion.ndim == 2 and expansion.shape[1] == K and expansion.shape[0] >= 1 and np.all(np.isfinite(expansion)):
        eps, zero = check_deviation(np.array([math.fsum(expansion[:, r].tolist()) for r in range(K)]), K)
    else:
        raise InputError(f"deviation must be a finite vector of shape ({K},) or an expansion of shape (m, {K}), "
                         f"got shape {expansion.shape}")
    law = law_from_eps(eps, zero)
    float_res = _fixed_law(d, law)
    out = np.array(getattr(float_res, field), dtype=np.float64).reshape(d.shape)
    flat, acc, rej = out.reshape(-1), float_res.acceptance.reshape(-1), float_res.rejection.reshape(-1)
    for i, x in enumerate(d.reshape(-1)):
        x = float(x)
        if not (0.0 < x <= 1.0 and acc[i] >= 0.5):
            continue
        roots = exact.crossings_batch(law, np.array([x]))[0]
        roots = roots[np.isfinite(roots)]
        allowance = EVAL_ULPS * 2.0 ** -52 * (roots.size + 1) * (float(np.abs(eps).sum()) + rej[i])
        if expansion.shape[0] == 1 and allowance <= PRECISE_REJECTION * rej[i]:
            continue
        guesses = roots if expansion.shape[0] == 1 else np.concatenate([roots, markov_edges(K)])
        res = precise_rejection(x, expansion, guesses, strict=False, zero=zero)
        if res is not None:
            flat[i] = res.rejection if field == "rejection" else 1.0 - res.rejection
    return out


def acceptance_rass(delta: ArrayLike, K: int, omega: ArrayLike | None = None, *,
                    deviation: ArrayLike | None = None) -> np.ndarray | float:
    """integral min(q, p_omega), exact (crossings and closed-form masses, no quadrature), for
    delta of any shape; omega=None uses the certified optimal weights at each delta.

    delta finite >= 0 (beyond 80 every acceptance is < 1e-340 and 0 is returned); K in 1..128;
    omega a probability vector of length K, or ``deviation`` = omega - 1/K (e.g.
    ``rank_weight_solution(...).deviation``: the weights exactly as the solver returns them; a
    float omega near 1/K carries ~1e-17 of rounding per weight, which moves a tiny 1 - A, e.g.
    by 20% at delta = 1e-14, K = 16), or an expansion of shape (m, K) whose column sums are the
    deviations (``rank_weight_solution(...).deviation_expansion``: weights that float64 cannot
    state, Markov's at K >= 24 and tiny delta; evaluated in extended precision by
    :mod:`speccheck.theory.rass.precise` at 0 < delta <= 1, as are deviations whose float
    evaluation would carry more than 1e-10 of a tiny 1 - A: ~0.01-1 s per such delta, growing
    with K). Returns a float for scalar delta."""
    return _per_delta(delta, K, omega, "acceptance", deviation)


def rejection_rass(delta: ArrayLike, K: int, omega: ArrayLike | None = None, *,
                   deviation: ArrayLike | None = None) -> np.ndarray | float:
    """1 - acceptance_rass(delta, K, omega, deviation=deviation), computed directly (keeps ~1e-12
    relative precision when it is tiny, e.g. ~1e-13 at delta = 1e-12, for weights near uniform;
    weights with deviations |eps| >> 1 - A carry ~ulp(|eps|) absolute, see
    ``RankWeightSolution``; a ``deviation`` expansion keeps ~1e-15 relative there)."""
    return _per_delta(delta, K, omega, "rejection", deviation)


# ----------------------------------------------------------------- certified optimal weights
def _gain(new: exact.ExactAcceptance, old: exact.ExactAcceptance) -> float:
    """A(new) - A(old), from A where both are small and from 1 - A otherwise."""
    if new.acceptance[0] < 0.5 and old.acceptance[0] < 0.5:
        return float(new.acceptance[0] - old.acceptance[0])
    return float(old.rejection[0] - new.rejection[0])


def _evaluate(d: float, eps: np.ndarray, zero: np.ndarray) -> tuple[np.ndarray, np.ndarray, RankLaw,
                                                                      exact.ExactAcceptance]:
    law = law_from_eps(eps, zero)
    return law.eps, zero, law, exact_acceptance(law, np.array([d]), gradient=True)


def _canonical_start(d: float, K: int) -> np.ndarray:
    """eps whose P(u) - 1 fits exp(delta z - delta^2/2) - 1 at u_j = (1 - cos(j pi/(K+2)))/2,
    j = 1..K+1 (least squares with sum eps = 0): at small delta the optimum crosses exactly
    there (L1-approximation canonical points); scaled into the simplex if needed."""
    j = np.arange(1, K + 2)
    u = 0.5 * (1.0 - np.cos(np.pi * j / (K + 2)))
    z = special.ndtri(u)
    r = np.arange(1, K + 1)
    B = np.exp(exact.log_coef(K) + (r - 1) * np.log(u)[:, None] + (K - r) * np.log1p(-u)[:, None])
    target = np.expm1(d * z - 0.5 * d * d)
    scale = np.abs(B).max()
    M = np.zeros((K + 1, K + 1))
    M[:K, :K] = (B.T @ B) / scale ** 2
    M[:K, K] = M[K, :K] = 1.0
    eps = np.linalg.lstsq(M, np.concatenate([B.T @ target / scale ** 2, [0.0]]), rcond=None)[0][:K]
    neg = eps < 0
    if np.any(neg):
        shrink = float(np.min((1.0 / K) / -eps[neg]))
        if shrink < 1.0:
            eps = eps * shrink * (1.0 - 1e-9)
    return eps


def _newton_direction(H: np.ndarray, g: np.ndarray, S: np.ndarray) -> np.ndarray:
    """Maximiser of g.x + x.H.x/2 on {sum x = 0, x_r = 0 off S}, H slightly regularised
    (H is only rank <= #crossings); the bordered KKT system is scaled by max |H_rr|."""
    idx = np.nonzero(S)[0]
    m = idx.size
    hs = float(np.abs(H.diagonal()).max()) + 1e-300
    M = np.zeros((m + 1, m + 1))
    M[:m, :m] = (H if m == H.shape[0] else H[idx][:, idx]) / hs
    diagonal = np.arange(m)
    M[diagonal, diagonal] -= 1e-9
    M[:m, m] = M[m, :m] = 1.0
    rhs = np.concatenate([-g[idx] / hs, [0.0]])
    try:
        sol = np.linalg.solve(M, rhs)
    except np.linalg.LinAlgError:
        sol = np.linalg.lstsq(M, rhs, rcond=None)[0]
    step = np.zeros(H.shape[0])
    if np.isfinite(sol).all():
        step[idx] = sol[:m] - sol[:m].sum() / m
    return step


def _line_search(d: float, eps: np.ndarray, zero: np.ndarray, step: np.ndarray, t_max: float,
                 block: int, current: exact.ExactAcceptance):
    """Along eps + t step (A concave in t, slope g(t).step decreasing): accept t = t_max when
    the slope there is still >= 0, or the first t with |slope| <= slope(0)/10 (strong Wolfe);
    safeguarded Newton on the slope in between. None when the direction does not ascend."""
    slope0 = float(current.gradient[0] @ step)
    if not slope0 > 0:
        return None
    lo, hi = 0.0, t_max
    t = min(1.0, t_max)
    best = None
    for _ in range(16):
        at_max = t >= t_max
        z = zero.copy()
        if at_max and block >= 0:
            z[block] = True
        trial_eps = np.where(z, -1.0 / eps.size, eps + t * step)
        state = _evaluate(d, trial_eps, z)
        slope = float(state[3].gradient[0] @ step)
        if slope >= -0.1 * slope0:
            best = state
        if (slope >= 0 and at_max) or abs(slope) <= 0.1 * slope0:
            return best
        if slope > 0:
            lo = t
        else:
            hi = t
        curv = float(step @ exact.hessian(state[2], d, state[3].crossings[0]) @ step)
        t_new = t - slope / curv if curv < 0 else np.inf
        if not lo < t_new < hi:
            t_new = 4.0 * t if not np.isfinite(hi) else (hi / 8.0 if lo == 0.0 else 0.5 * (lo + hi))
        if hi - lo <= 1e-14 * hi:
            break
        t = t_new
    return best


SHIPPED_WEIGHTS = Path(__file__).resolve().parents[2] / "data" / "rass_weights.npz"
"""The shipped optimal-weight tables (``grid`` and ``K{K}`` arrays, written by
``speccheck.verifiers.rass.build_weight_data``); read here only for starting points."""


@functools.lru_cache(maxsize=None)
def _shipped_table(K: int) -> tuple[np.ndarray, np.ndarray] | None:
    """(delta grid, weights [grid, K]) for K from the package data, or None (no file, no K,
    or a row that is not a probability vector)."""
    try:
        with np.load(SHIPPED_WEIGHTS) as data:
            if f"K{K}" not in data.files:
                return None
            grid, table = np.array(data["grid"], np.float64), np.array(data[f"K{K}"], np.float64)
    except (OSError, ValueError, KeyError):
        return None
    ok = (table.shape == (grid.size, K) and np.all(np.diff(grid) > 0) and np.all(table >= 0)
          and np.allclose(table.sum(axis=1), 1.0, atol=1e-9))
    return (grid, table) if ok else None


def table_start(d: float, K: int) -> tuple[np.ndarray, np.ndarray] | None:
    """(eps, zero): the shipped table's weights interpolated in delta by the polynomial through
    the TABLE_STENCIL nearest grid points (three on each side of delta, fewer at the grid's
    ends), clipped into the simplex (zero where it is <= 0) and renormalised; or None when K is
    not shipped. The optimum is smooth
    in delta away from active-set changes, so the error is
    O(h^6): at K = 8 the start's A is within ~1e-13 relative of the optimum at most deltas in
    [0.05, 3] (linear interpolation: ~1e-5), often close enough that the first evaluation is
    the answer. A pure function of (delta, K) and the package data: never of the call history."""
    shipped = _shipped_table(K)
    if shipped is None:
        return None
    grid, table = shipped
    hi = min(max(int(grid.searchsorted(d, side="right")), 1), grid.size - 1)
    half = TABLE_STENCIL // 2
    nodes = np.arange(max(hi - half, 0), min(hi + half, grid.size))
    x = min(max(float(d), float(grid[0])), float(grid[-1]))
    # Lagrange form: basis_i = prod_{j != i} (x - x_j) / (x_i - x_j) (diagonal factors set to 1)
    nodes_x = grid[nodes]
    diagonal = np.arange(nodes.size)
    diff = nodes_x[:, None] - nodes_x[None, :]
    diff[diagonal, diagonal] = 1.0
    factors = (x - nodes_x)[None, :] / diff
    factors[diagonal, diagonal] = 1.0
    omega = np.prod(factors, axis=1) @ table[nodes]
    zero = omega <= 0.0
    omega = np.where(zero, 0.0, omega)
    omega = omega / omega.sum()
    return np.where(zero, -1.0 / K, omega - 1.0 / K), zero


def _starts(d: float, K: int, use_table: bool) -> list[tuple[np.ndarray, np.ndarray]]:
    """Starting points, all pure functions of (delta, K); the best (first on ties) is used. The
    shipped table's interpolation when there is one (near the optimum: a few Newton steps), else
    uniform, the top rank and the small-delta canonical solution."""
    top = np.full(K, -1.0 / K)
    top[-1] = 1.0 - 1.0 / K
    top = (top, np.arange(K) < K - 1)
    start = table_start(d, K) if use_table else None
    if start is not None:
        return [start]
    return [(np.zeros(K), np.zeros(K, bool)), top, (_canonical_start(d, K), np.zeros(K, bool))]


def _face_newton_step(H: np.ndarray, g: np.ndarray, omega: np.ndarray, zero: np.ndarray) -> np.ndarray:
    """The Newton step on the current face plus the best entering rank (g_r > g . omega)."""
    face = ~zero
    entering = np.nonzero(zero & (g > float(g @ omega)))[0]
    if entering.size:
        face = face.copy()
        face[entering[np.argmax(g[entering])]] = True
    return _newton_direction(H, g, face)


def set_bound(d: float, K: int, edges: np.ndarray, q_above: np.ndarray) -> float:
    """Weak duality: for ANY set S (here the union of the pieces [edges[i], edges[i+1]] with
    q_above[i]) and every omega' in the simplex,

        A(omega') = int min(q, p_omega') <= P_omega'(S) + Q(S^c) <= max_r P(S_(r) in S) + Q(S^c),

    so the right side bounds the optimum A*. Returned as 1 - bound = min_r sum_{I in S}
    (Q(I) - P(S_(r) in I)) (closed-form masses; absolute precision ~1e-16). S = {q > p_omega}
    gives the Frank-Wolfe bound; sets near the optimum's give bounds second-order close to A*."""
    return float(np.min(set_margins(d, K, edges, q_above)))


def polished_set_gap(d: float, law: RankLaw, rejection: float, roots: np.ndarray, q_above: np.ndarray,
                     steps: int = 1, dropped: np.ndarray | None = None) -> float:
    """A certified bound on A* - A(omega) that does not inherit the crossings' rounding error:
    the set bound (:func:`set_bound`, valid for ANY set) at crossings moved to maximise
    min_r h_r (:func:`set_margins`) to first order, evaluated exactly there.

    Why: a crossing c where F = L - delta z + delta^2/2 is nearly tangent (|F'(c)| ~ 1e-6, e.g.
    K = 16 at delta ~ 0.03) is only known to ~1e-16 / |F'| ~ 1e-10; each h_r moves by
    (q(c) - phi(c) b_r(Phi(c))) dc, first order, so the set bound at the computed crossings
    (and the Frank-Wolfe gap) carries ~1e-11 of noise. Only the omega-weighted sum is stationary
    (q = p_omega at c). With dh_r/dc_j = s_j (q(c_j) - phi(c_j) b_r(Phi(c_j))) (s_j = +1 when the
    piece left of c_j is in S, -1 when the piece right of it is), the minimum-norm dc that makes
    h_r + J_r dc equal for the ranks in omega's support (all equal to omega . h: omega^T J = 0
    at q = p) is one Newton step of the dual; its error is second order in dc (~1e-20 here),
    and the bound is evaluated exactly at the moved crossings, so it is valid whatever dc is.

    ``dropped`` (from :func:`certificate`): pieces of {q > p} left out of S (tail pieces with
    rank mass but hardly any residual, e.g. K = 16 at delta ~ 5.4, where a weight ~1e-15 sits
    on rank 1 and its gradient exceeds the others' by 1e-4). The ranks equalised are omega's
    support within POLISH_BAND of the smallest margin (the others are not binding there).
    inf when no crossing or an update leaves the crossings unsorted."""
    c = np.asarray(roots, np.float64)
    c = c[np.isfinite(c)]
    K = law.K
    if c.size == 0 or q_above.size != c.size + 1:
        return np.inf
    in_set = q_above & ~dropped if dropped is not None else q_above
    side = in_set[:-1].astype(np.float64) - in_set[1:].astype(np.float64)  # s_j
    best = np.inf
    for _ in range(steps + 1):
        edges = np.concatenate([[-np.inf], c, [np.inf]])
        h = set_margins(d, K, edges, in_set)
        low = float(h.min())
        best = min(best, max(rejection - low, 0.0))
        binding = (law.omega > 0.0) & (h <= low + POLISH_BAND)
        if best <= 0.0 or _ == steps or not np.any(side != 0.0):
            break
        low_rank, high_rank = exact.rank_exponents(K)
        log_b = law.log_coef + low_rank * special.log_ndtr(c)[:, None] + high_rank * special.log_ndtr(-c)[:, None]
        rank_density = np.exp(log_phi(c)[:, None] + log_b)  # (m, K)
        J = (side * np.exp(log_phi(c - d)))[None, :] - (side[:, None] * rank_density).T  # (K, m)
        # h_r + J_r dc = low + t for the binding ranks: unknowns (dc, t), minimum norm
        system = np.column_stack([J[binding], -np.ones(int(binding.sum()))])
        dc = np.linalg.lstsq(system, low - h[binding], rcond=None)[0][:-1]
        new_c = c + dc
        if not (np.all(np.isfinite(new_c)) and np.all(np.diff(new_c) > 0)):
            break
        c = new_c
    return best


def _dual_gap(d: float, law: RankLaw, ev: exact.ExactAcceptance, step: np.ndarray) -> float:
    """A certified bound on A* - A(omega) that is second order in the distance to the optimum
    (the Frank-Wolfe gap is first order): the set bound of :func:`set_bound` at the set
    {q > p} predicted for the Newton point omega + step (its crossings: one Newton step from
    omega's on F = L - delta z + delta^2/2, keeping omega's side pattern). inf when the
    prediction is not usable (the step leaves the simplex, a crossing does not converge)."""
    roots = ev.crossings[0]
    roots = roots[np.isfinite(roots)]
    omega_new = law.omega + step
    if roots.size == 0 or ev.pieces is None or not (omega_new >= 0.0).all() or not np.isfinite(step).all():
        return np.inf
    new = law_from_eps(law.eps + step, omega_new <= 0.0)
    # one Newton step: F_new(roots) = O(|step|), so the predicted crossings are O(|step|^2) off
    cv = exact.curve(new, roots, derivatives=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        c = roots - (cv.L - d * roots + 0.5 * d * d) / (cv.dL - d)
    if not (np.isfinite(c).all() and (c[1:] > c[:-1]).all() and np.abs(c - roots).max() < 0.1):
        return np.inf
    edges = np.concatenate([[-np.inf], c, [np.inf]])
    return max(float(ev.rejection[0]) - set_bound(d, law.K, edges, ev.pieces.q_above), 0.0)


def _polished(d: float, law: RankLaw, ev: exact.ExactAcceptance, cert: Certificate | None) -> float:
    """The smallest :func:`polished_set_gap` at omega's crossings over a few sets S: all of
    {q > p}; without the pieces the piecewise certificate drops; and (when those do not reach
    GAP_TOL) each of these with one more or one fewer piece of residual <= POLISH_GAP (a piece
    that only a rank of negligible weight is fond of, e.g. K = 16 at delta ~ 5.4: weight 1e-15 on
    rank 1 with a gradient 1e-4 above the others; a piece dropped costs at least its residual).
    Every S gives a valid bound, so the search only tightens it."""
    if ev.pieces is None:
        return np.inf
    rej, roots, q_above = float(ev.rejection[0]), ev.crossings[0], ev.pieces.q_above
    cert = certificate(ev.pieces, law.omega) if cert is None else cert
    none = np.zeros(q_above.size, bool)
    bases = [none] + ([cert.dropped] if cert.dropped is not None and np.any(cert.dropped) else [])
    gap = min(polished_set_gap(d, law, rej, roots, q_above, dropped=base) for base in bases)
    if gap > GAP_TOL:
        cheap = np.nonzero(q_above & (ev.pieces.residual <= POLISH_GAP))[0]
        for base in bases:
            for i in cheap:
                trial = base.copy()
                trial[i] = ~trial[i]
                gap = min(gap, polished_set_gap(d, law, rej, roots, q_above, dropped=trial))
                if gap <= GAP_TOL:
                    return gap
    return gap


def _converged(H: np.ndarray, g: np.ndarray, omega: np.ndarray, zero: np.ndarray, scale: float,
               step: np.ndarray | None = None) -> bool:
    """The Newton model's predicted gain is below VALUE_TOL * scale (scale = min(1, A, 1 - A)).

    Near the optimum A is quadratic in omega, so the gain g . s of the Newton step s (on the
    current face, plus the best entering rank) predicts A* - A(omega) to second order (it is
    twice the model's gain): A and 1 - A are then optimal to VALUE_TOL relative, even where the
    certified gap (rounding-limited at ~1e-16) cannot show it."""
    step = _face_newton_step(H, g, omega, zero) if step is None else step
    predicted = float(g @ step)
    return 0.0 <= predicted <= VALUE_TOL * scale


def _ascent_step(d: float, eps: np.ndarray, zero: np.ndarray, law: RankLaw, ev: exact.ExactAcceptance,
                 H: np.ndarray, effective: np.ndarray, model: np.ndarray | None):
    """One ascent step from omega: the first direction whose exact line search ascends, of the
    Newton step on the face (plus the best entering rank by the gradient, then by the piecewise
    certificate's effective gradient), the certificate's model weights, and the projected
    gradient; None when none ascends."""
    g = ev.gradient[0]
    for direction in ("newton", "newton-effective", "model", "gradient"):
        S = ~zero
        if direction.startswith("newton"):
            grad_for_entry = g if direction == "newton" else effective
            lam_entry = float(grad_for_entry @ law.omega)
            entering = np.nonzero(zero & (grad_for_entry > lam_entry))[0]
            if entering.size:
                S = S.copy()
                S[entering[np.argmax(grad_for_entry[entering])]] = True
            elif direction == "newton-effective":
                continue
            step = _newton_direction(H, g, S)
            leaving = S & zero & (step < 0)
            if np.any(leaving):
                S = S & ~leaving
                step = _newton_direction(H, g, S)
        elif direction == "model":
            if model is None:
                continue
            S = ~zero | (model > 0)
            step = np.where(S, model - law.omega, 0.0)
        else:
            step = np.where(S, g - g[S].mean(), 0.0)
        neg = (step < 0) & S & ~zero
        t_max, block = np.inf, -1
        if np.any(neg):
            ratios = np.where(neg, law.omega / np.where(neg, -step, 1.0), np.inf)
            block = int(np.argmin(ratios))
            t_max = float(ratios[block])
        res = _line_search(d, eps, zero & ~S, step, t_max, block, ev)
        if res is not None:
            return res
    return None


class _Bounds(NamedTuple):
    """The certificates of one iterate: the gap, the piecewise certificate's model weights and
    effective gradient (None / the gradient when it was not needed), the Hessian and Newton
    step (None when the Frank-Wolfe gap already certifies), the piecewise certificate."""

    gap: float
    model: np.ndarray | None
    effective: np.ndarray
    H: np.ndarray | None
    newton_step: np.ndarray | None
    cert: Certificate | None


def _iterate_bounds(d: float, law: RankLaw, ev: exact.ExactAcceptance, zero: np.ndarray, fw: float) -> _Bounds:
    """The smallest certified gap at omega: Frank-Wolfe, then the second-order set bound at the
    Newton point's set, the piecewise certificate only where those do not certify, and the
    polished set bound once below POLISH_GAP (see the module doc)."""
    g = ev.gradient[0]
    acc, rej = float(ev.acceptance[0]), float(ev.rejection[0])
    gap, model, effective = fw, None, g
    H = newton_step = None
    if fw > GAP_TOL * min(1.0, acc, rej):
        H = exact.hessian(law, d, ev.crossings[0])
        newton_step = _face_newton_step(H, g, law.omega, zero)
        if fw > GAP_TOL:
            gap = min(gap, _dual_gap(d, law, ev, newton_step))
    cert = None
    if fw > GAP_TOL * min(1.0, acc) and (gap > GAP_TOL or gap > rej):
        cert = certificate(ev.pieces, law.omega)
        if cert.bound < gap:
            gap, model, effective = cert.bound, cert.model_omega, cert.effective_gradient
    if GAP_TOL < gap <= POLISH_GAP:
        # near-tangent crossings, or tiny weights whose gradient is set by rounding: the
        # crossings' rounding error is first order in the other bounds; the polish removes it
        gap = min(gap, _polished(d, law, ev, cert))
    return _Bounds(gap, model, effective, H, newton_step, cert)


def _final_gap(d: float, law: RankLaw, ev: exact.ExactAcceptance, gap: float) -> float:
    """The last iterate's gap (``gap``: the bounds found for it, else its Frank-Wolfe gap),
    tightened by the piecewise certificate and the polished set bound where needed."""
    acc, rej = float(ev.acceptance[0]), float(ev.rejection[0])
    if ev.pieces and gap > GAP_TOL * min(1.0, acc, rej) and (gap > GAP_TOL or gap > rej):
        gap = min(gap, certificate(ev.pieces, law.omega).bound)
    if ev.pieces and GAP_TOL < gap <= POLISH_GAP:
        gap = min(gap, _polished(d, law, ev, None))
    return gap


def _optimise(d: float, K: int, max_iter: int = MAX_ITER, use_table: bool = True) -> RankWeightSolution:
    """Active-set Newton ascent of the exact A (K <= LARGE_K) with its certificates; see the module doc."""
    state = None
    for eps0, zero0 in _starts(d, K, use_table):
        trial = _evaluate(d, eps0, zero0)
        if state is None or _gain(trial[3], state[3]) > 0:
            state = trial
    eps, zero, law, ev = state
    best_fw, stall, it = np.inf, 0, 0
    best_gap, gap_stall = np.inf, 0
    best_state = (np.inf, law, ev)  # the best-certified state (returned if the last is worse)
    final_gap = (-1, np.inf)  # (iteration, the bound found there beyond Frank-Wolfe)
    for it in range(max_iter):
        g = ev.gradient[0]
        fw = float(g.max() - g @ law.omega)  # Frank-Wolfe gap: the KKT residual
        acc, rej = float(ev.acceptance[0]), float(ev.rejection[0])
        bounds = _iterate_bounds(d, law, ev, zero, fw)
        gap = bounds.gap
        if gap < fw:
            final_gap = (it, gap)
        if gap < best_state[0]:
            best_state = (gap, law, ev)
        # stop: certified to 1e-12 relative in both A and 1 - A (so <= GAP_TOL absolute), or the
        # KKT residual is below 1e-12 and at the rounding floor of the gradient (stopped shrinking),
        # or certified to GAP_TOL absolute with the Newton model's predicted gain
        # below VALUE_TOL relative (A and 1 - A optimal to that precision)
        if gap <= GAP_TOL * min(1.0, acc, rej):
            break
        stall = stall + 1 if fw > 0.5 * best_fw else 0
        best_fw = min(best_fw, fw)
        if fw <= 1e-15 or (fw <= 1e-13 and stall >= 1) or (fw <= GAP_TOL and stall >= 2):
            break
        # the certified gap has stopped shrinking at its rounding floor (ill-conditioned
        # optima, e.g. K = 16 at delta ~ 0.03: crossings with |F'| ~ 1e-6, gap ~1e-11): stop, report it
        gap_stall = gap_stall + 1 if gap > 0.5 * best_gap else 0
        best_gap = min(best_gap, gap)
        if best_gap <= STALL_GAP and gap_stall >= STALL_ITER:
            break
        H = bounds.H if bounds.H is not None else exact.hessian(law, d, ev.crossings[0])
        if gap <= GAP_TOL and _converged(H, g, law.omega, zero, min(1.0, acc, rej), bounds.newton_step):
            break
        res = _ascent_step(d, eps, zero, law, ev, H, bounds.effective, bounds.model)
        if res is None:
            break
        eps, zero, law, ev = res
    acc, rej = float(ev.acceptance[0]), float(ev.rejection[0])
    roots = ev.crossings[0]
    g = ev.gradient[0]
    fw = float(g.max() - g @ law.omega)
    gap = _final_gap(d, law, ev, min(fw, final_gap[1]) if final_gap[0] == it else fw)
    if best_state[0] < gap:  # an earlier state was certified closer (the gap is at its rounding floor)
        gap, law, ev = best_state
        acc, rej = float(ev.acceptance[0]), float(ev.rejection[0])
        roots = ev.crossings[0]
    gap = max(gap, 0.0)
    return RankWeightSolution(law.omega.copy(), acc, rej, gap, acc + gap, law.eps.copy(),
                              roots[np.isfinite(roots)], it)


def _large_k_solution(d: float, K: int, max_rounds: int | None = None) -> RankWeightSolution:
    """K > LARGE_K: LP duality on graded partitions with exact cell masses
    (:func:`speccheck.theory.rass.dual.certified_rank_weights`; ``max_rounds``: its anytime form)."""
    from speccheck.theory.rass.dual import certified_rank_weights

    sol = certified_rank_weights(d, K, max_rounds=max_rounds)
    gap = min(sol.gap, sol.rejection)  # A* <= 1: never looser than the trivial bound (rounding of the allowance)
    return sol._replace(gap=gap, upper_bound=sol.acceptance + gap)


def _solve(d: float, K: int, max_iter: int | None = None, use_table: bool = True) -> RankWeightSolution:
    """Closed form; else the small-delta weights of ``markov_solution`` where they are certified
    to MARKOV_GAP relative; else the solver for K (``max_iter``: its budget), its gap tightened
    (and its weights replaced where better) by ``with_markov_bound``."""
    closed = closed_form_solution(d, K, lambda: _solve(SUBNORMAL_DELTA, K, max_iter, use_table))
    if closed is not None:
        return closed
    if K > LARGE_K:  # rass_dual applies the Markov steps itself
        from speccheck.theory.rass.dual import MAX_ROUNDS

        return _large_k_solution(d, K, None if max_iter is None else min(max(max_iter, 1), MAX_ROUNDS))
    with one_blas_thread():
        markov = markov_solution(d, K, only_certified=True)
        if markov is not None:
            return with_precise_rejection(d, evaluated(d, markov))
        sol = _optimise(d, K, MAX_ITER if max_iter is None else max_iter, use_table=use_table)
        return with_precise_set_bound(d, with_precise_rejection(d, evaluated(d, with_markov_bound(d, K, sol))))


@functools.lru_cache(maxsize=4096)
def _solution(d: float, K: int) -> RankWeightSolution:
    """The full solve, memoised (a pure function of (delta, K): a budgeted call never reads it,
    so no answer depends on which calls came before)."""
    return _solve(d, K)


def rank_weight_solution(delta: float, K: int, *, max_iter: int | None = None) -> RankWeightSolution:
    """Certified optimal RASS weights at one delta (finite >= 0; K in 1..128): weights, exact
    acceptance and rejection, optimality gap and the upper bound beside it. K <= 16: the Newton
    solver, gap <= 1e-12 absolute (a 2000-delta scan per K), and <= 1e-10 relative to 1 - A at
    delta <= 1e-9 (``relative_gap``: Markov's bound, module doc); above, the LP-duality solver of
    :mod:`speccheck.theory.rass.dual` (gap <= 1e-12 on every cell measured:
    ``theory/rass_dual_survey.md``; the reported gap is what is certified). ``max_iter`` caps
    the solver's iterations (an anytime answer: acceptance is achieved by the returned weights,
    upper_bound bounds the optimum): Newton iterations at K <= 16, partition rounds of rass_dual
    above (clipped to 1..MAX_ROUNDS there); None: solve to the gap (cached per (delta, K))."""
    d = float(check_delta(delta))
    K = check_K(K)
    if max_iter is not None:
        if isinstance(max_iter, bool) or not isinstance(max_iter, int) or max_iter < 0:
            raise InputError(f"max_iter must be an integer >= 0 or None, got max_iter={max_iter!r}")
        sol = _solve(d, K, max_iter)
    else:
        sol = _solution(d, K)
    return sol._replace(omega=sol.omega.copy(), deviation=sol.deviation.copy(), crossings=sol.crossings.copy(),
                        deviation_tail=None if sol.deviation_tail is None else sol.deviation_tail.copy())


def cold_rank_weight_solution(delta: float, K: int) -> RankWeightSolution:
    """The solution from the starting points that do not read the shipped table (what
    ``build_weight_data`` writes into it: rebuilding the table does not depend on its old
    content); not cached."""
    d = float(check_delta(delta))
    K = check_K(K)
    return _solve(d, K, use_table=False)


def rank_weights(delta: float, K: int) -> np.ndarray:
    """Optimal rank weights omega (shape (K,)) for one delta: a pure function of (delta, K)."""
    return rank_weight_solution(delta, K).omega
