"""Certified optimal RASS rank weights for any K (1..128) by LP duality on refined partitions.

Objective. A(omega) = int min(q, p_omega), q = phi(. - delta), p_omega = sum_r omega_r p_r,
p_r(s) = phi(s) b_r(Phi(s)) the density of the r-th order statistic of K standard normals;
A is concave on the simplex W_K and A* = max A.

Weak duality (the certificate). For any measurable y: R -> [0, 1] and any omega in W_K,
(x)_+ >= y x gives

    1 - A(omega) = int (q - p_omega)_+ >= int y (q - p_omega) = sum_r omega_r int y (q - p_r)
                 >= min_r int y (q - p_r) =: L(y),

so 1 - A* >= L(y), i.e. A* <= U(y) = 1 - L(y) = int (1 - y) q + max_r int y p_r. At the optimum
y* = 1{q > p_omega*} the bound is tight (the KKT conditions make every rank of the support
attain the max). With y constant on the cells j of a partition, L is a finite sum of exact
cell masses: Q_j (of q), P_rj (of p_r) and Phi_j (of phi),

    L(y) = sum_j y_j D_j - max_r sum_j y_j E_rj,   D_j = Q_j - Phi_j,  E_rj = P_rj - Phi_j,

(the deviation form: precise when 1 - A is tiny) and U(y) = sum_j (1 - y_j) Q_j + max_r
sum_j y_j P_rj (precise when A is tiny). The best y on a partition is the dual solution of the
discretised primal max_omega sum_j min(Q_j, sum_r omega_r P_rj), an LP with K weight columns and
one hinge per cell, solved by HiGHS (dual simplex, one thread: deterministic). Whatever HiGHS's
tolerances, y is clipped to [0, 1], so the bound is valid.

Algorithm (rounds r = 1..MAX_ROUNDS; every step a pure function of (delta, K)):
  1. cell masses on the partition (the first: base_edges; later: base_edges plus graded edges
     c, c +- 10^-k, k = 1..9, at the crossings c of the best weights so far and those of the
     last LP's weights farther than MERGE_DISTANCE from them);
  2. the LP, solved as its dual: K rows, one column y_j in [0, 1] per "hinge" cell (cells
     where q is above or below every p_r add a linear or constant term), so the simplex basis
     has K rows whatever the partition (HiGHS simplex, the acceptance form then interior point
     with crossover; one thread; iteration limits); the weights are the rows' duals; the
     rejection form is solved twice, with and without column scaling (RejectionLP);
  3. primal: the LP's weights evaluated exactly (:mod:`speccheck.theory.exact`: every crossing,
     closed-form masses), and Newton-polished on their face (active-set Newton with exact
     gradient, Hessian and line search); the best exact A of all rounds is kept;
  4. dual: the LP's y, and y re-solved from the LP's basis in float64 (:func:`refine_dual`, so
     HiGHS's tolerances of >= 1e-10 do not limit the bound), and the Frank-Wolfe /
     piecewise certificate of the best weights (y = 1{q > p_omega}: ``rass.certificate``);
     the best bound of all rounds is kept; in the rejection form it starts from the closed-form
     dual of the delta -> 0 limit (:func:`markov_dual`);
  5. stop once gap <= GAP_TOL * min(1, A, 1 - A), or gap <= GAP_TOL (absolute) from round
     ABSOLUTE_AFTER on or where 1 - A <= GAP_TOL, or when the partition would not change, or
     stalled (a refined round that does not cut the gap by 10% while the LP's box cannot grow,
     or three such rounds in a row), or after ``max_rounds`` (the anytime form; where the first
     partition's box bound (K >= 48, delta ~ 1e-9 .. 1e-5), where refined rounds can cost
     seconds, it also stops after round 1 above K = ANYTIME_BOX_K and below once a round does
     not halve the gap; its LPs try one cold HiGHS strategy, none after a failed warm re-solve,
     one column scaling on refined partitions). The bounds are
     kept across rounds (A* <= A + local gap folded in), so the gap never grows with the rounds;
  5b. where the gap is still above GAP_TOL (the full solve, rejection form) and the first
     partition's box bound (HiGHS failed the larger boxes): the rounds again, the first one a
     walk of centred LPs in a growing trust region from that box's weights
     (:func:`trust_region_walk`, on the first partition), which reaches omega_r = 0 where the box
     form cannot;
  6. where the gap is still above GAP_TOL (the full solve, acceptance form): exact line searches
     from the best weights towards single ranks (:func:`vertex_moves`);
  7. where the gap is still above GAP_TOL (the full solve): the set bound of {q > p_omega} at the best weights
     (with and without the pieces the piecewise certificate drops), its boundaries moved to
     the maximin of min_r h_r by Newton (``certificate.maximin_set_bound``,
     :func:`polished_lower_bound`): second order in the distance to the optimum's set, where
     the LP's cell-constant y is off by ~(cell width)^2 and the weights' own Frank-Wolfe gap is
     first order.
The discretised objective overestimates A(omega) only on the cells holding a crossing of
omega (by ~ q |F'| w^2 / 8 for width w): refining around the crossings makes the LP's optimum
approach A*, and its weights find the optimal face, which the Newton polish then solves.

Cell masses. Narrow cells (width * (K + |z| + |z - delta| + 1) < 1) by 16-point Gauss-Legendre on
the densities (relative precision; D_j from expm1(delta z - delta^2/2); the order-statistic
densities from an accurate binomial pmf at the midpoint times exact ratios), wide ones from normal
tails and binomial-tail order-statistic CDFs (``exact``'s closed forms, a few ulp absolute at any
K <= 128: ``tests/theory/test_exact.py``). Rounding allowance:
ROUNDING_ULPS (64) ulp of the sum of the magnitudes entering each bound (every mass carries a
few ulp of relative error), and 64 ulp of min(A, 1 - A) for the exact evaluator's value (stated
to ~1e-14 relative); the reported gap includes both. Two LP forms keep HiGHS's absolute
tolerances meaningful: where D-GRS's acceptance (a lower bound on A*) is >= 1/2, the rejection
form in deviations eps = omega - 1/K in units of s = min(1, delta) with the hinges in units of
D-GRS's rejection; below, the acceptance form in units of D-GRS's acceptance. Both are handed
to HiGHS as their duals (min over y of the bound U(y), resp. max of L(y), with K rows), which at
K = 64..128 on a refined partition is 2-10x faster than the primal (one row per hinge cell) and
certifies smaller gaps (``theory/rass_dual_survey.md``).
omega_r >= 0 (eps_r >= -1/K) is a box of size 1/(K s) on e = eps / s, huge at tiny delta, where
HiGHS fails in it; the box starts at its delta = 1e-3 size and grows 10-fold while binding (it
does bind: at K = 64, delta = 1e-6 the optimum has ranks at omega_r = 0, eps_r / delta ~ -1.6e4).
The growth runs on the first (small, ~0.01-0.2 s per LP) partition; each larger box (a cost
change in the dual) re-solves the same HiGHS instance from its last basis, else cold. The
refined partitions solve in deviations from the best weights so far, e_r >= -omega_0r / s: omega
>= 0 exactly and no box, the deviations small near the optimum (``lp_rejection_centred``; where
HiGHS fails there, the box found on the first partition). e has no upper bound (implied by
sum e = 0). Where HiGHS fails every box large enough for omega_r = 0 (K >~ 96, delta ~ 1e-8 ..
1e-6: the bases of ~70 graded cell columns are numerically singular for its LU), the box form's
weights stay near 1/K and the centred LPs around them fail too; step 5b's trust-region walk gets
there by many small centred steps instead.
A box or a clipped coefficient only restricts the LP: its y is still valid, its weights feasible.

Edge cases: delta = 0 (uniform, A = 1) and K = 1 (RMC) in closed form; delta > DELTA_UNDERFLOW:
A < 1e-340, the top rank (A = 0 returned). Below delta = 1e-150 the LP's data are the
delta -> 0 limits (D_j / delta -> int_j z phi). Where 1 - A <= GAP_TOL the bound 1 - A itself
certifies the absolute gap (tiny delta). Relative to a tiny 1 - A (delta <= 1e-3): Markov's bound
(``certificate.markov_lower_bound``, relative precision at any delta) is the rejection form's
first lower bound and tightens the final gap, and Markov's weights are offered
(``with_markov_bound``); at delta <= 1e-9 Markov's weights from a 120-digit solve, evaluated and
certified in extended precision (``rass.precise.markov_solution_precise``: float64 can neither
state nor evaluate them above K ~ 20), are the answer where certified to 1e-10 of 1 - A (no LP
runs). Where omega >= 0 binds (K = 64 at delta > 1.2e-15, K = 96 at delta > 2e-24, K = 128 at
delta > 1.1e-33) Markov's bound is loose (K = 64, delta = 1e-14: 1 - A = 2.089e-18, certified
gap 0.41 of it) but true. Where the float evaluator's allowance exceeds 1e-10 of 1 - A (deviations
>> 1 - A), the reported 1 - A is re-evaluated in extended precision
(``rass.precise.with_precise_rejection``: at K = 48..128, delta = 1e-8 the float value was off by
up to 6e-5 relative). A gap U - A with A rounded to 1.0 certified
nothing (it gave 0 where 1 - A ~ 1e-18): :func:`upper_gap` takes it as (U - 1) + (1 - A).

Measured: ``theory/rass_dual_survey.md`` (generated by ``speccheck reproduce rass-survey``):
the certified gap and time of every cell of K in {17, 24, 32, 48, 64, 96, 110, 121, 128} x 18
deltas in [1e-12, 40]: all 162 <= 1e-12 (worst 9.1e-13); the cells where omega >= 0 binds at
K >= 96, delta ~ 1e-8 .. 1e-6, take 10-50 s (the second pass, step 5b). Off that grid, two
random scans: 80 cells (K uniform in 17..128, delta log-uniform in [1e-12, 40], plus 0 and
subnormal) and 40 cells in that band (K in 90..128, delta log-uniform in [1e-9, 1e-5]): all
<= 1e-12 (worst 9.4e-13). This is measured, not proved: HiGHS's failures there are erratic, and
the gap returned is always the one certified (a cell above 1e-12 would say so).
"""

from __future__ import annotations

import functools
import os
import sys

import highspy
import numpy as np
from scipy import sparse, special

from speccheck.errors import InputError
from speccheck.theory import exact
from speccheck.theory.acceptance import acceptance_dgrs, dgrs_levels
from speccheck.theory.exact import law_from_eps
from speccheck.theory.normal import LOG_SQRT_2PI, normal_mass, normal_mass_below
from speccheck.theory.rass.certificate import (
    MARKOV_CERTIFIED_DELTA,
    MARKOV_GAP,
    SUBNORMAL_DELTA,
    RankWeightSolution,
    certificate,
    closed_form_solution,
    evaluated,
    markov_lower_bound,
    markov_solution,
    maximin_set_bound,
    one_blas_thread,
    with_markov_bound,
)
from speccheck.theory.rass.precise import (
    PRECISE_SET_FULL_MAX_K,
    PRECISE_SET_MAX_K,
    markov_solution_precise,
    with_precise_rejection,
    with_precise_set_bound,
)
from speccheck.theory.validate import check_delta, check_K

GAP_TOL = 1e-12  # the stated optimality gap (absolute; also relative to min(A, 1 - A) where reachable)
MAX_ROUNDS = 12  # K = 63, delta = 1.36e-4 needs 10 rounds that each cut the gap by 10-40%
ROUNDING_ULPS = 64.0
NEWTON_STEPS = 12
VERTEX_ROUNDS, VERTEX_RANKS, VERTEX_SECTIONS = 4, 8, 12  # vertex_moves (full solve, acceptance form, gap > GAP_TOL)
POLISH_FROM_ROUND = 1
LP_BOX = 1e9
COLUMN_SCALE_FLOOR = 1e-4
COLUMN_SCALINGS = (True, False)  # the rejection form's LP, column-scaled and not (RejectionLP): both each round
DUAL_FORM_ITERATIONS = 4  # both dual-form LPs (K rows): an optimum takes ~0.5-1.5 (rows + columns) iterations
WARM_ITERATIONS = 3  # a warm re-solve in a larger box: at most 3 (rows + columns) iterations, else cold
MAX_BOX_GROWTH = 1e4  # the box grows to at most 1e4 times its first size (then the last one is kept)
GROWTH_ITERATIONS = 2.5  # ... and not after an LP that took more than 2.5 (cells + K) simplex iterations
LP_SOLVERS = ("simplex", "ipm")
TRUST_STEPS = 40  # trust_region_walk: at most 40 LP solves on the first partition (~0.05-0.15 s each at K = 128)
MERGE_DISTANCE = 1e-6  # an LP crossing this close to a best crossing gets no graded cells of its own
STALL_FACTOR = 0.9  # a refined round that does not cut the gap by 10% is a stall (see _solve)
ABSOLUTE_AFTER = 2  # rounds after which gap <= GAP_TOL (absolute) ends the refinement
ANYTIME_BOX_K = 80  # where the first partition's box binds, the anytime form stops after round 1 above this K
# (a refined round costs 1-2 s at K = 111..128 there) and below it once a round does not halve the gap
LP_TIME_LIMIT = 60.0  # seconds per LP: a safety valve only (deterministic iteration limits bound the work)
MIN_ROW_MASS = 1e-12  # acceptance form: cells where q is lighter (relative to the scale) get no LP row
MAX_RATIO = 1e12  # acceptance form: P_rj is clipped at MAX_RATIO Q_j in the LP
TINY_DELTA = 1e-150  # below: the LP data are the delta -> 0 limits
REFINE_OFFSETS = 10.0 ** -np.arange(9.0, 0.0, -1.0)  # 1e-9 .. 1e-1 on both sides of each crossing
_GL_X, _GL_W = np.polynomial.legendre.leggauss(16)
LEAN_RULES = ((1e-3, 4), (0.05, 8))  # CellMasses(lean=True): n-point Gauss-Legendre below w * c (see there)
_EPS = 2.0 ** -52


# ----------------------------------------------------------------- partition
def base_edges(delta: float, K: int) -> np.ndarray:
    """Finite cell edges of the first partition: the order statistics' quantiles Phi^-1 of
    Chebyshev nodes in u (2K + 16), z-steps of 1/4 on [-8, delta + 8] and a few tail edges out
    to [-40, delta + 40] (beyond, every mass is < 1e-340)."""
    n = 2 * K + 16
    u = 0.5 * (1.0 - np.cos(np.pi * np.arange(1, n) / n))
    tails = np.array([-40.0, -30.0, -20.0, -12.0, delta + 12.0, delta + 20.0, delta + 30.0, delta + 40.0])
    edges = np.concatenate([special.ndtri(u), np.arange(-8.0, delta + 8.0 + 1e-9, 0.25), tails])
    return np.unique(edges)


def refined_edges(edges: np.ndarray, crossings: np.ndarray) -> np.ndarray:
    """``edges`` plus each crossing c and c +- 10^-k, k = 1..9 (graded cells)."""
    c = crossings[np.isfinite(crossings)]
    if c.size == 0:
        return edges
    extra = c[:, None] + np.concatenate([[0.0], REFINE_OFFSETS, -REFINE_OFFSETS])[None, :]
    return np.unique(np.concatenate([edges, extra.ravel()]))


# ----------------------------------------------------------------- cell masses
class CellMasses:
    """Exact masses of the cells (-inf, e_0], (e_0, e_1], ..., (e_last, inf) (M = len(edges) + 1).

    Q: q's masses; phi: phi's; D_scaled: (Q - phi) / s with s = min(1, delta) (the delta -> 0
    limit below TINY_DELTA); P: (M, K) order-statistic masses.

    ``lean`` (the anytime form): the narrow cells with w c < 1e-3 (0.05) by 4 (8) Gauss-Legendre
    points instead of 16, c = K (1 + |z|) + |z - delta| + 1 bounding the log-derivatives of the
    integrands (that of b_r(Phi(z)) is (r - 1) phi / Phi - (K - r) phi / (1 - Phi), each term
    <= K (1 + |z|)); the n-point rule's relative error is then ~ (w c)^(2n) (n!)^4 / ((2n + 1)
    ((2n)!)^3) < 1e-30, far below the rounding allowance. The graded cells (widths 1e-9 .. 1e-4)
    take most of them: half the time of the masses at K = 128."""

    def __init__(self, delta: float, K: int, edges: np.ndarray, lean: bool = False):
        lo = np.concatenate([[-np.inf], edges])
        hi = np.concatenate([edges, [np.inf]])
        self.scale = min(1.0, delta)
        M = lo.size
        self.Q, self.phi, self.D_scaled = np.empty(M), np.empty(M), np.empty(M)
        self.P = np.empty((M, K))
        mid = np.where(np.isfinite(lo) & np.isfinite(hi), 0.5 * (lo + hi), 0.0)
        width = hi - lo
        narrow = np.isfinite(width) & (width * (K + np.abs(mid) + np.abs(mid - delta) + 1.0) < 1.0)
        rest = narrow
        if lean:
            wc = width * (K * (1.0 + np.abs(mid)) + np.abs(mid - delta) + 1.0)
            for limit, n in LEAN_RULES:
                group = rest & (wc < limit)
                self._narrow(delta, K, lo[group], hi[group], group, *np.polynomial.legendre.leggauss(n))
                rest = rest & ~group
        self._narrow(delta, K, lo[rest], hi[rest], rest, _GL_X, _GL_W)
        self._wide(delta, K, lo[~narrow], hi[~narrow], ~narrow)

    def _narrow(self, delta: float, K: int, lo: np.ndarray, hi: np.ndarray, sel: np.ndarray,
                gl_x: np.ndarray, gl_w: np.ndarray) -> None:
        half = 0.5 * (hi - lo)
        z = 0.5 * (hi + lo)[:, None] + half[:, None] * gl_x[None, :]
        wts = half[:, None] * gl_w[None, :]
        log_phi = -0.5 * z * z - LOG_SQRT_2PI
        dens = np.exp(log_phi)
        self.phi[sel] = np.sum(wts * dens, axis=1)
        self.Q[sel] = np.sum(wts * np.exp(log_phi + delta * z - 0.5 * delta * delta), axis=1)
        if delta < TINY_DELTA:
            ratio = z
        else:
            ratio = np.expm1(delta * z - 0.5 * delta * delta) / self.scale
        self.D_scaled[sel] = np.sum(wts * dens * ratio, axis=1)
        self.P[sel] = np.einsum("mn,mnk->mk", wts * dens, _bernstein_at_nodes(K, 0.5 * (hi + lo), z))

    def _wide(self, delta: float, K: int, lo: np.ndarray, hi: np.ndarray, sel: np.ndarray) -> None:
        self.phi[sel] = normal_mass(lo, hi)
        self.Q[sel] = normal_mass(lo - delta, hi - delta)
        lo_f = np.where(np.isfinite(lo), lo, 0.0)
        hi_f = np.where(np.isfinite(hi), hi, 0.0)
        if delta < TINY_DELTA:  # int_lo^hi z phi = phi(lo) - phi(hi)
            g_lo = np.where(np.isfinite(lo), np.exp(-0.5 * lo_f * lo_f - LOG_SQRT_2PI), 0.0)
            g_hi = np.where(np.isfinite(hi), np.exp(-0.5 * hi_f * hi_f - LOG_SQRT_2PI), 0.0)
            self.D_scaled[sel] = g_lo - g_hi
        else:  # Q - phi = G(hi) - G(lo), G(x) = -P(x - delta < Z < x)
            g_lo = np.where(np.isfinite(lo), normal_mass_below(lo_f, delta), 0.0)
            g_hi = np.where(np.isfinite(hi), normal_mass_below(hi_f, delta), 0.0)
            self.D_scaled[sel] = (g_lo - g_hi) / self.scale
        law = exact.law_from_omega(np.full(K, 1.0 / K))
        lower_lo, upper_lo = exact.rank_tails(law.K, lo_f)
        lower_hi, upper_hi = exact.rank_tails(law.K, hi_f)
        lower_lo = np.where(np.isfinite(lo)[:, None], lower_lo, 0.0)
        upper_lo = np.where(np.isfinite(lo)[:, None], upper_lo, 1.0)
        lower_hi = np.where(np.isfinite(hi)[:, None], lower_hi, 1.0)
        upper_hi = np.where(np.isfinite(hi)[:, None], upper_hi, 0.0)
        left = (hi_f <= 0.0) & np.isfinite(hi)
        right = (lo_f >= 0.0) & np.isfinite(lo)
        P = np.where(left[:, None], lower_hi - lower_lo,
                     np.where(right[:, None], upper_lo - upper_hi, 1.0 - lower_lo - upper_hi))
        self.P[sel] = np.clip(P, 0.0, None)


def _bernstein_at_nodes(K: int, mid: np.ndarray, z: np.ndarray) -> np.ndarray:
    """b_r(Phi(z)) = K P(Bin(K - 1, Phi(z)) = r - 1) at the nodes z (cells, n) of narrow cells
    with midpoints ``mid``, shape (cells, n, K), to a few ulp: at the midpoint by
    :func:`exact.binomial_pmf`, at the nodes by the exact ratio
    (u / u_m)^(r - 1) ((1 - u) / (1 - u_m))^(K - r), its logs from log1p of the normal mass
    between midpoint and node (small in a narrow cell, so the exponent has no cancellation)."""
    u_m, v_m, log_u_m, log_v_m = special.ndtr(mid), special.ndtr(-mid), special.log_ndtr(mid), special.log_ndtr(-mid)
    b_mid = K * exact.binomial_pmf(K - 1, u_m, v_m, log_u_m, log_v_m)
    m, u_m, v_m = mid[:, None], u_m[:, None], v_m[:, None]
    du = np.where(z >= m, normal_mass(m, np.maximum(z, m)), -normal_mass(np.minimum(z, m), m))
    with np.errstate(divide="ignore", invalid="ignore"):  # beyond |z| ~ 37 (masses < 1e-300): the log form
        log_ratio_u = np.where(u_m > 1e-300, np.log1p(du / u_m), special.log_ndtr(z) - log_u_m[:, None])
        log_ratio_v = np.where(v_m > 1e-300, np.log1p(-du / v_m), special.log_ndtr(-z) - log_v_m[:, None])
    low, high = exact.rank_exponents(K)
    return b_mid[:, None, :] * np.exp(log_ratio_u[..., None] * low + log_ratio_v[..., None] * high)


# ----------------------------------------------------------------- the bound
class DualBound:
    """lower: a lower bound on 1 - A*; upper: an upper bound on A* (both already net of the
    rounding allowance)."""

    __slots__ = ("lower", "upper")

    def __init__(self, lower: float, upper: float):
        self.lower, self.upper = lower, upper


def dual_bound(masses: CellMasses, y: np.ndarray) -> DualBound:
    """L(y) (a lower bound on 1 - A*) and U(y) (an upper bound on A*) for y clipped to [0, 1],
    each minus/plus its rounding allowance."""
    y = np.clip(np.nan_to_num(y, nan=0.0), 0.0, 1.0)
    s = masses.scale
    D = masses.D_scaled * s
    yP = y @ masses.P
    E = yP - y @ masses.phi
    r_star = int(np.argmax(E))
    lower = float(y @ D) - float(E[r_star])
    lower_err = ROUNDING_ULPS * _EPS * (float(y @ np.abs(D)) + float(yP[r_star]) + float(y @ masses.phi))
    upper = float((1.0 - y) @ masses.Q) + float(np.max(yP))
    upper_err = ROUNDING_ULPS * _EPS * upper
    return DualBound(max(lower - lower_err, 0.0), min(upper + upper_err, 1.0))


def markov_dual(delta: float, K: int) -> DualBound:
    """The bound of the delta -> 0 optimal dual, in closed form: y = 0 and 1 alternately on the
    cells between the n points z_k = Phi^-1(u_k), u_k = (1 - cos(k pi / (n + 1))) / 2 (the zeros
    of the Chebyshev polynomial U_n(1 - 2u)), y = 1 on the last (z_n, inf); n = K for odd K,
    K + 1 for even K (n odd: y = 0 on the first cell, where q < p_omega as delta -> 0).

    Why: p_r(z) dz = b_r(u) du with b_r a polynomial of degree K - 1 in u = Phi(z), and the sign
    function of U_n (Markov's canonical points of L1 approximation) is orthogonal to every
    polynomial of degree < n on [0, 1]; so int y p_r = 1/2 = int y phi for every rank, and
    L(y) = int y (q - phi) = Q(S) - Phi(S), valid at any delta. As delta -> 0 with
    eps = delta e, 1 - A(omega) -> delta int_0^1 (Phi^-1(u) - B(u))_+ du, B = sum_r e_r b_r:
    half the L1 error of a polynomial approximation of Phi^-1, whose best error (Markov: every
    odd derivative of Phi^-1 is positive) the bound attains while omega >= 0 does not bind. It
    certifies tiny delta at large K, where the LP fails on refined partitions (K = 121,
    delta = 1.25e-8: 3.3e-13 of 1 - A = 1.16e-12, where every LP form gave 0)."""
    n = K if K % 2 else K + 1
    k = np.arange(1, n + 1, dtype=np.float64)
    edges = special.ndtri(0.5 * (1.0 - np.cos(k * np.pi / (n + 1))))
    y = (np.arange(n + 1) % 2).astype(np.float64)
    return dual_bound(CellMasses(delta, K, edges), y)


def local_gap(law: exact.RankLaw, res: exact.ExactAcceptance) -> float:
    """An upper bound on A* - A(omega) from the weights' own crossings: min of the Frank-Wolfe gap
    max_r g_r - g . omega (the dual y = 1{q > p_omega}) and ``rass.certificate``, plus the
    rounding allowance ROUNDING_ULPS ulp of max_r g_r."""
    g = res.gradient[0]
    bound = float(g.max() - g @ law.omega)
    if res.pieces is not None:
        bound = min(bound, certificate(res.pieces, law.omega).bound)
    return max(bound, 0.0) + ROUNDING_ULPS * _EPS * float(g.max())


def refine_dual(masses: CellMasses, y: np.ndarray, support: np.ndarray) -> np.ndarray:
    """The LP's dual y re-solved from its basis in float64: y fixed where it is 0 or 1 (to
    1e-9), and on the fractional cells F the least-squares solution of
    sum_j y_j P_rj = mu for every rank r of the primal support (the complementary slackness
    conditions of the LP's vertex), clipped to [0, 1]. HiGHS's tolerances (>= 1e-10) no longer
    limit the bound; any y in [0, 1] stays valid."""
    frac = np.nonzero((y > 1e-9) & (y < 1.0 - 1e-9))[0]
    S = np.nonzero(support)[0]
    if frac.size == 0 or S.size < 2:
        return y
    fixed = np.where(y >= 1.0 - 1e-9, 1.0, 0.0)
    fixed[frac] = 0.0
    P_S = masses.P[:, S]
    rhs = -(fixed @ P_S)
    M = np.concatenate([P_S[frac].T, -np.ones((S.size, 1))], axis=1)
    col_scale = np.maximum(np.abs(M).max(axis=0), 1e-300)
    sol = np.linalg.lstsq(M / col_scale, rhs, rcond=1e-14)[0] / col_scale
    out = fixed.copy()
    out[frac] = np.clip(sol[:frac.size], 0.0, 1.0)
    return out


# ----------------------------------------------------------------- the LP
@functools.lru_cache(maxsize=1)
def _quiet_first_instance() -> None:
    """HiGHS prints a banner on stdout when the first instance of a process is made (before any
    option can be set): make that one with file descriptor 1 pointed at /dev/null."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
            highspy.Highs()
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def _highs() -> highspy.Highs:
    _quiet_first_instance()
    h = highspy.Highs()
    for key, value in (("output_flag", False), ("threads", 1), ("small_matrix_value", 1e-12),
                       ("primal_feasibility_tolerance", 1e-10), ("dual_feasibility_tolerance", 1e-10),
                       ("ipm_optimality_tolerance", 1e-12), ("random_seed", 0), ("time_limit", LP_TIME_LIMIT),
                       ("ipm_iteration_limit", 100)):
        h.setOptionValue(key, value)
    return h


def _model(cost: np.ndarray, col_lo: np.ndarray, col_hi: np.ndarray, A: sparse.csc_matrix,
           row_lo: np.ndarray, row_hi: np.ndarray) -> highspy.Highs:
    """A HiGHS instance holding the LP min cost . x, col_lo <= x <= col_hi, row_lo <= A x <= row_hi."""
    inf = highspy.kHighsInf
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = A.shape[1], A.shape[0]
    lp.col_cost_ = cost
    lp.col_lower_ = np.where(np.isfinite(col_lo), col_lo, -inf)
    lp.col_upper_ = np.where(np.isfinite(col_hi), col_hi, inf)
    lp.row_lower_ = np.where(np.isfinite(row_lo), row_lo, -inf)
    lp.row_upper_ = np.where(np.isfinite(row_hi), row_hi, inf)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = A.indptr
    lp.a_matrix_.index_ = A.indices
    lp.a_matrix_.value_ = A.data
    h = _highs()
    h.passModel(lp)
    return h


def _solve_model(h: highspy.Highs, solver: str, size: int, iterations: float
                 ) -> tuple[tuple[np.ndarray, np.ndarray, int] | None, object]:
    """Run ``h`` (from its current basis, if any: a warm start after a cost change) with at most
    ``iterations`` * ``size`` simplex iterations; (x, row duals, simplex iterations) or None."""
    h.setOptionValue("solver", solver)
    h.setOptionValue("simplex_iteration_limit", int(iterations * size))
    h.run()
    status = h.getModelStatus()
    if status != highspy.HighsModelStatus.kOptimal:
        return None, status
    sol = h.getSolution()
    return (np.array(sol.col_value), np.array(sol.row_dual), int(h.getInfo().simplex_iteration_count)), status


class CellKinds:
    """Which cells need a hinge in the LP: ``linear`` where Q_j >= P_rj for every rank (q above
    any mixture: the cell adds sum_r omega_r P_rj to A, y_j = 1), ``constant`` where Q_j <= P_rj
    for every rank (adds Q_j, y_j = 0), ``hinge`` the others."""

    def __init__(self, masses: CellMasses):
        P_max, P_min = masses.P.max(axis=1), masses.P.min(axis=1)
        self.linear = masses.Q >= P_max
        self.constant = ~self.linear & (masses.Q <= P_min)
        self.hinge = ~(self.linear | self.constant)


def lp_rejection_form(masses: CellMasses, K: int, rho: float, box: float | None = None, grow: bool = True,
                      iteration_cap: bool = True, column_scaled: bool = True, quick: bool = False
                      ) -> tuple[np.ndarray, np.ndarray, float, bool] | None:
    """:class:`RejectionLP` in a growing box: omega_r >= 0 is eps_r >= -1/K, i.e.
    e_r >= -1/(K s), huge at tiny delta, where HiGHS fails with that box; so the box starts at
    its delta = 1e-3 size and grows 10-fold while the solution touches it (binding even at
    delta = 1e-6 for K = 64: the optimum's eps / delta reach ~1e4 there). A box only restricts
    the LP: its dual y is still valid, its weights still feasible. Each larger box re-solves the
    same HiGHS instance from the last basis (a cost change in the dual form), else cold. ``box``:
    where to start (the box of an earlier partition); ``grow`` False: that box only;
    ``iteration_cap`` False: grow whatever HiGHS's iteration count (the small first partition);
    ``quick``: one cold strategy (:class:`RejectionLP`, the anytime form). Returns
    (eps, y, box, stuck) of the last solution (stuck: HiGHS failed in the next larger box), or None."""
    s = masses.scale
    full = 1.0 / (K * s)
    start = min(full, 1.0 / (K * max(s, 1e-3)))
    box = start if box is None else min(box, full)
    lp = RejectionLP(masses, K, rho, column_scaled, quick=quick)
    best = None
    while True:
        # a larger box: warm, else cold (the dual form's cold solve often succeeds where the warm
        # one stalls, and fails fast where it fails: ~0.3 s at K = 128)
        out = lp.solve(box)
        if out is None:  # HiGHS gave up in this box: the caller starts below it next time
            return None if best is None else (best[0], best[1], best[2], True)
        best = (out[0], out[1], box, False)
        if not grow or box >= min(full, LP_BOX) or float(np.min(out[0])) / s > -box * (1.0 - 1e-6):
            return best
        if box >= MAX_BOX_GROWTH * start:
            return (best[0], best[1], best[2], True)
        # no larger box on this partition once HiGHS needed many iterations in this one (a
        # larger one fails slowly); the next partition starts from this box
        if iteration_cap and out[2] > GROWTH_ITERATIONS * (masses.Q.size + K):
            return best
        box = min(10.0 * box, LP_BOX)
        if box >= full * (1.0 - 1e-9):  # the last step goes to the full box exactly
            box = full


class RejectionLP:
    """min sum_j (D_j - sum_r eps_r P_rj)_+ over sum eps = 0, eps_r >= -1/K, solved as its LP
    dual (K equality rows instead of one row per hinge cell: dual simplex on a basis of K rows,
    ~5x faster than the primal's at K = 64 on a refined partition). In units: eps = s e with
    s = min(1, delta), objective in units of ``rho`` (about 1 - A*), a = s / rho:

        primal  min_e  g.e + sum_j t_j,  t_j >= a D_j - a P_j.e, t >= 0, sum e = 0, e >= -box
        dual    max_{u in [0, 1]^n, v, r >= 0}  a D.u - box sum_r r_r
                s.t. a (P^T u)_r + v + r_r = g_r  (r = 1..K)

    over the hinge cells j (g: the linear cells' masses, folded into the cost of e; the constant
    cells 0). u is the dual y on the hinge cells, e the row duals (e = -HiGHS's row dual: d
    min / d g). :meth:`solve` (box): the model is kept between calls, so a larger box (a cost
    change on r) starts from the last optimal basis."""

    # (HiGHS simplex_strategy: 1 dual, 4 primal; presolve): the dual simplex with HiGHS's presolve,
    # then without (its presolve fails some centred LPs that solve without it), then the primal
    # simplex: on the refined partitions at K >= 96 the dual simplex's LU can fail on the graded
    # cells' nearly parallel columns where the primal one still solves (K = 128, delta = 1e-6);
    # interior point and PDLP rescued no cell of the survey here
    solvers = ((1, "on"), (1, "off"), (4, "off"))

    def __init__(self, masses: CellMasses, K: int, rho: float, column_scaled: bool = True,
                 centre: np.ndarray | None = None, quick: bool = False):
        # quick (the anytime form): the first cold strategy only, and none after a failed warm
        # re-solve in a larger box (the others rescue few LPs, slowly: K = 128, delta = 1e-6, round 1
        # 2.8 -> 1.2 s, same gap)
        self.quick = quick
        if quick:
            self.solvers = self.solvers[:1]
        s = masses.scale
        kinds = CellKinds(masses)
        self.hinge = np.nonzero(kinds.hinge)[0]
        self.linear = kinds.linear
        self.K, self.scale = K, s
        a = s / rho
        n = self.hinge.size
        # column_scaled: column j holds m_j u_j (m_j: the cell's largest mass), so HiGHS's absolute
        # tolerance on its reduced cost a (D_j - P_j . e) / m_j is relative to the cell (fine cells
        # count); else u_j itself (HiGHS's own scaling). Neither is better on every cell (K = 64 at
        # delta <= 1e-6: the scaled; K = 96..128 at 1e-6: the unscaled): _solve runs both
        self.m = np.ones(n)
        if column_scaled:
            self.m = np.maximum(np.maximum(np.maximum(masses.Q, masses.phi), masses.P.max(axis=1))[self.hinge],
                                COLUMN_SCALE_FLOOR)
        self.A = sparse.hstack([sparse.csc_matrix(a * (masses.P[self.hinge] / self.m[:, None]).T),
                                sparse.csc_matrix(np.ones((K, 1))), sparse.identity(K, format="csc")], format="csc")
        # centre eps0: e = (eps - eps0) / s, D_j - P_j . eps = (D_j - P_j . eps0) - P_j . (eps - eps0)
        self.centre = np.zeros(K) if centre is None else centre
        self.gain = a * (masses.D_scaled[self.hinge] - masses.P[self.hinge] @ self.centre / s) / self.m
        self.rhs = -a * masses.P[kinds.linear].sum(axis=0)
        self.col_lo = np.concatenate([np.zeros(n), [-np.inf], np.zeros(K)])
        self.col_hi = np.concatenate([self.m, [np.inf], np.full(K, np.inf)])
        self._warm = None  # the HiGHS instance of the last optimal solve

    def _cost(self, box: float | np.ndarray) -> np.ndarray:
        return np.concatenate([-self.gain, [0.0], np.broadcast_to(box, (self.K,))])

    def solve(self, box: float | np.ndarray) -> tuple[np.ndarray, np.ndarray, int] | None:
        """(eps, y, simplex iterations) with e >= -box (per rank if an array; omega_0 / s from a
        centre: omega >= 0 exactly), or None: warm (from the last optimal basis)
        if there is one, else (or if that fails) cold (simplex, at most
        DUAL_FORM_ITERATIONS (rows + columns) iterations)."""
        out = None
        size = self.A.shape[0] + self.A.shape[1]
        if self._warm is not None:
            K, n = self.K, self.hinge.size
            self._warm.changeColsCost(K, np.arange(n + 1, n + 1 + K, dtype=np.int32), self._cost(box)[n + 1:])
            self._warm.setOptionValue("presolve", "off")
            out, _ = _solve_model(self._warm, "simplex", size, WARM_ITERATIONS)
            if out is None and self.quick:
                return None
        if out is None:
            self._warm = None
            for strategy, presolve in self.solvers:
                h = _model(self._cost(box), self.col_lo, self.col_hi, self.A, self.rhs, self.rhs)
                h.setOptionValue("presolve", presolve)
                h.setOptionValue("simplex_strategy", strategy)
                out, _ = _solve_model(h, "simplex", size, DUAL_FORM_ITERATIONS)
                if out is not None:
                    self._warm = h
                    break
        if out is None:
            return None
        x, row_dual, iterations = out
        y = self.linear.astype(np.float64)
        y[self.hinge] = np.clip(x[:self.hinge.size] / self.m, 0.0, 1.0)
        return self.centre - row_dual * self.scale, y, iterations


def lp_rejection_centred(masses: CellMasses, K: int, rho: float, centre: exact.RankLaw, column_scaled: bool,
                         quick: bool = False) -> tuple[np.ndarray, np.ndarray] | None:
    """:class:`RejectionLP` in deviations from ``centre``'s weights omega_0, with e_r >= -omega_0r / s:
    omega >= 0 exactly, no box. Near the optimum the deviations are small while the box form
    needs e ~ 1/(K s) for the ranks that go to 0, where HiGHS fails (K = 128, delta = 1e-6: the
    refined rounds reach omega_r = 0 on 45 ranks this way, certifying 9e-13 where the box form
    stopped at 4e-11). (eps, y) or None."""
    out = RejectionLP(masses, K, rho, column_scaled, centre=centre.eps, quick=quick).solve(centre.omega / masses.scale)
    return None if out is None else (out[0], out[1])


def trust_region_walk(masses: CellMasses, K: int, rho: float, eps: np.ndarray, scalings: tuple[bool, ...],
                      trust: float) -> tuple[np.ndarray, np.ndarray] | None:
    """The partition's LP optimum approached by a walk of :class:`RejectionLP` solves in
    deviations from the last solution (the centre), each in a trust region
    e_r >= -min(omega_0r / s, T): omega >= 0 exactly, the deviations small enough for HiGHS.
    Each step tries the column scalings in order (``scalings``: True = column-scaled); T doubles
    after a solve whose region binds and shrinks 3-fold when every scaling fails; the walk ends
    when the region does not bind (that solve is the partition's optimum), after TRUST_STEPS
    solves, or when T has shrunk below 1e-3 of its start. Every centre is feasible in the next
    LP, so the LP's value never increases along the walk.

    Why: where omega >= 0 binds on dozens of ranks (K >~ 96, delta ~ 1e-8 .. 1e-6) the optimum's
    deviations reach 1/(K s) ~ 1e5 in the LP's units, and HiGHS fails (LU) in the boxes that
    would allow them: the box form's weights stay >= 0.9/K. K = 128, delta = 3e-7, first
    partition: the walk reaches 29 ranks at 0 in 9 solves (1 - A on the cells 2.79e-11 ->
    2.38e-11). (eps, y) of the last solve, or None if none solved."""
    s = masses.scale
    zero = (1.0 / K + eps) <= 1e-15
    centre = law_from_eps(np.where(zero, -1.0 / K, eps), zero)
    last, floor = None, 1e-3 * trust
    for _ in range(TRUST_STEPS):
        bound = np.minimum(centre.omega / s, trust)
        out = None
        for scaled in scalings:
            out = RejectionLP(masses, K, rho, scaled, centre=centre.eps).solve(bound)
            if out is not None:
                break
        if out is None:
            trust /= 3.0
            if trust < floor:
                break
            continue
        last = (out[0], out[1])
        e = (out[0] - centre.eps) / s
        if not np.any((trust < centre.omega / s) & (e <= -trust * (1.0 - 1e-9))):
            break
        zero = (1.0 / K + out[0]) <= 1e-15
        centre = law_from_eps(np.where(zero, -1.0 / K, out[0]), zero)
        trust *= 2.0
    return last


def _box_binds(eps: np.ndarray, box: float, s: float, K: int) -> bool:
    """The box form's solution touches its box e >= -box, smaller than omega >= 0's 1/(K s)."""
    return box < (1.0 - 1e-9) / (K * s) and float(np.min(eps)) / s <= -box * (1.0 - 1e-6)


def lp_acceptance_form(masses: CellMasses, K: int, scale: float) -> tuple[np.ndarray, np.ndarray] | None:
    """max sum_j min(Q_j, sum_r omega_r P_rj) over W_K in units of ``scale`` (about A*), solved
    as its LP dual (K rows, like :class:`RejectionLP`):

        min_{y in [0, 1]^n, mu}  sum_j (1 - y_j) Q_j + mu   s.t.  c_r + sum_j y_j P_rj <= mu  (r = 1..K)

    i.e. U(y) minimised over the hinge cells' y; c_r: the linear cells' masses of rank r. Only on
    the hinge cells with Q_j >= MIN_ROW_MASS scale, with P_rj clipped at MAX_RATIO Q_j (the
    clipping and the dropped cells only restrict the primal; y = 0 there). omega = the rows'
    duals (-HiGHS's row dual: d U / d c_r), normalised. Returns (omega, y)."""
    kinds = CellKinds(masses)
    hinge = np.nonzero(kinds.hinge & (masses.Q >= MIN_ROW_MASS * scale))[0]
    n = hinge.size
    P = np.minimum(masses.P[hinge], MAX_RATIO * masses.Q[hinge][:, None]) / scale
    linear = masses.P[kinds.linear].sum(axis=0) / scale
    A = sparse.hstack([sparse.csc_matrix(P.T), sparse.csc_matrix(-np.ones((K, 1)))], format="csc")
    cost = np.concatenate([-masses.Q[hinge] / scale, [1.0]])
    col_lo = np.concatenate([np.zeros(n), [-np.inf]])
    col_hi = np.concatenate([np.ones(n), [np.inf]])
    out = None
    for solver in LP_SOLVERS:
        h = _model(cost, col_lo, col_hi, A, np.full(K, -np.inf), -linear)
        out, _ = _solve_model(h, solver, A.shape[0] + A.shape[1], DUAL_FORM_ITERATIONS)
        if out is not None:
            break
    if out is None:
        return None
    x, row_dual, _ = out
    y = kinds.linear.astype(np.float64)
    y[hinge] = np.clip(x[:n], 0.0, 1.0)
    omega = np.clip(-row_dual, 0.0, None)
    if not omega.sum() > 0:
        return None
    return omega / omega.sum(), y


def clipped_cells(masses: CellMasses) -> np.ndarray:
    """Cells where the acceptance form clipped a rank mass (there y_j > 0 may count the true,
    much larger, P_rj in U: :func:`_solve` also tries y_j = 0 on them)."""
    return np.any(masses.P > MAX_RATIO * masses.Q[:, None], axis=1)


# ----------------------------------------------------------------- the solver


def upper_gap(upper: float, acc: float, rej: float) -> float:
    """U - A(omega) for an upper bound U on A*: from A where A < 1/2, else as (U - 1) + (1 - A)
    (U - 1 exact for U in [1/2, 1]): A rounded to float carries ~1e-16 of absolute error, so
    U - A is no bound once 1 - A is below that (A = 1.0 in float at 1 - A ~ 1e-18)."""
    return upper - acc if acc < 0.5 else (upper - 1.0) + rej


def _target(acc: float, rej: float) -> float:
    return GAP_TOL * min(1.0, acc, rej)


def newton_polish(d: float, K: int, eps: np.ndarray, zero: np.ndarray, steps: int = NEWTON_STEPS
                  ) -> tuple[exact.RankLaw, exact.ExactAcceptance]:
    """Active-set Newton ascent of the exact A from 1/K + eps (``zero``: weights exactly 0): on
    the face {omega_r > 0} plus the zero rank with the largest gradient above g . omega (if any),
    maximise g . x + x.H.x / 2 over sum x = 0 (bordered KKT system in least squares: H has rank
    <= #crossings, the minimum-norm step; an entering rank that the step would make negative
    stays out), cut at the simplex boundary (a weight that reaches 0 leaves the face), halved
    until the exact A does not decrease. Returns the last (best) point."""
    law = law_from_eps(eps, zero)
    res = exact.exact_acceptance(law, np.array([d]), gradient=True)
    for _ in range(steps):
        grad = res.gradient[0]
        H_full = exact.hessian(law, d, res.crossings[0])
        face = ~zero
        outside = np.nonzero(zero & (grad > grad @ law.omega))[0]
        if outside.size:  # the rank that most wants to enter joins the face
            face = face.copy()
            face[outside[np.argmax(grad[outside])]] = True
        step = _face_step(H_full, grad, face)
        entering = face & zero & (step < 0)
        if np.any(entering):
            step = _face_step(H_full, grad, face & ~entering)
        if not (np.all(np.isfinite(step)) and float(grad @ step) > 0):
            break
        neg = step < 0
        t_max = float(np.min(law.omega[neg] / -step[neg])) if np.any(neg) else np.inf
        t = min(1.0, t_max)
        for _ in range(12):
            z = zero & ~(step > 0)
            if t >= t_max:
                z |= neg & (law.omega + t * step <= law.omega * 1e-12)
            trial_law = law_from_eps(np.where(z, -1.0 / K, law.eps + t * step), z)
            trial = exact.exact_acceptance(trial_law, np.array([d]), gradient=True)
            if _better(trial, res) or _same(trial, res):
                break
            t *= 0.5
        else:
            break
        if _same(trial, res):
            break
        law, res, zero = trial_law, trial, z
    return law, res


def _moved_towards(d: float, law: exact.RankLaw, rank: int, t: float
                   ) -> tuple[exact.RankLaw, exact.ExactAcceptance]:
    omega = (1.0 - t) * law.omega
    omega[rank] += t
    moved = exact.law_from_omega(omega)
    return moved, exact.exact_acceptance(moved, np.array([d]), gradient=True)


def _vertex_line_search(d: float, law: exact.RankLaw, res: exact.ExactAcceptance, rank: int
                        ) -> tuple[exact.RankLaw, exact.ExactAcceptance]:
    """max over t in [0, 1] of the exact A((1 - t) omega + t e_rank) (concave in t): t = 10^-16,
    10^-15, ... until A decreases after an increase, then VERTEX_SECTIONS ternary sections of the
    last bracket. Returns the best point evaluated (``(law, res)`` itself if none is better)."""
    best, previous_t, best_t = (law, res), 0.0, 0.0
    for t in 10.0 ** np.arange(-16.0, 1.0):
        trial = _moved_towards(d, law, rank, float(t))
        if _better(trial[1], best[1]):
            best, previous_t, best_t = trial, best_t, float(t)
        elif best_t > 0.0:  # past the maximum (below it, a step too small to change A in float64)
            break
    else:
        return best
    lo, hi = previous_t, 10.0 * best_t
    for _ in range(VERTEX_SECTIONS):
        inner = [_moved_towards(d, law, rank, lo + (hi - lo) * f) for f in (1.0 / 3.0, 2.0 / 3.0)]
        for trial in inner:
            if _better(trial[1], best[1]):
                best = trial
        if _better(inner[0][1], inner[1][1]):
            hi = lo + (hi - lo) * 2.0 / 3.0
        else:
            lo = lo + (hi - lo) / 3.0
    return best


def vertex_moves(d: float, law: exact.RankLaw, res: exact.ExactAcceptance, rounds: int = VERTEX_ROUNDS
                 ) -> tuple[exact.RankLaw, exact.ExactAcceptance]:
    """Frank-Wolfe-type moves towards single ranks: each round, an exact line search along
    e_r - omega for the VERTEX_RANKS ranks of steepest ascent (g_r > g . omega), keeping the best.
    Where A is small a rank of weight ~1e-11 can cover a residual piece of ~1e-11 (K = 32,
    delta = 6: a left-tail piece q > p_omega, taken up by 3e-11 on rank 8), a gain the LP's
    tolerances and the Newton polish's face (the entering rank's gradient is ~1 there, its
    useful step ~1e-11) do not find."""
    for _ in range(rounds):
        grad = res.gradient[0]
        slope = grad - grad @ law.omega
        ranks = [int(r) for r in np.argsort(-slope)[:VERTEX_RANKS] if slope[r] > 0.0]
        best = (law, res)
        for rank in ranks:
            trial = _vertex_line_search(d, law, res, rank)
            if _better(trial[1], best[1]):
                best = trial
        if best[0] is law:
            break
        law, res = best
    return law, res


def _face_step(H: np.ndarray, g: np.ndarray, face: np.ndarray) -> np.ndarray:
    """argmax of g.x + x.H.x/2 over {sum x = 0, x = 0 off the face}: the bordered KKT system
    (scaled by max |H_rr|) in least squares, minimum norm (H has rank <= #crossings)."""
    S = np.nonzero(face)[0]
    step = np.zeros(g.size)
    n = S.size
    h_scale = float(np.abs(np.diag(H)[S]).max()) if n else 0.0
    if n < 2 or not h_scale > 0:
        return step
    M = np.zeros((n + 1, n + 1))
    M[:n, :n] = H[np.ix_(S, S)] / h_scale
    M[:n, n] = M[n, :n] = 1.0
    sol = np.linalg.lstsq(M, np.concatenate([-g[S] / h_scale, [0.0]]), rcond=1e-13)[0]
    step[S] = sol[:n] - sol[:n].mean()
    return step


def _same(new: exact.ExactAcceptance, old: exact.ExactAcceptance) -> bool:
    return bool(new.rejection[0] == old.rejection[0] and new.acceptance[0] == old.acceptance[0])


class _Search:
    """The state of one solve: the best weights so far (law, exact result) and their local gap,
    the best bounds on A* (lower: on 1 - A*; upper: on A*), and the rejection form's boxes."""

    def __init__(self, d: float, K: int, max_rounds: int):
        self.d, self.K, self.max_rounds = d, K, max_rounds
        self.anytime = max_rounds < MAX_ROUNDS
        self.dgrs = float(acceptance_dgrs(d, K))
        self.dgrs_rejection = float(dgrs_levels(d, K).G[-1])
        self.rejection_form = self.dgrs >= 0.5
        self.rho = max(self.dgrs_rejection, 1e-3 * min(1.0, d), 1e-300)  # the scale of 1 - A* (D-GRS's is above it)
        self.base = base_edges(d, K)
        self.boxes, self.stuck = [None] * len(COLUMN_SCALINGS), [False] * len(COLUMN_SCALINGS)
        self.walk_start = None  # (eps, box, column scaling) of the first partition's box form, where the box binds
        self.best, self.local = None, np.inf
        self.lower, self.upper = 0.0, 1.0
        if self.rejection_form:
            markov = markov_dual(d, K)
            self.lower, self.upper = max(markov.lower, markov_lower_bound(d, K)), markov.upper

    def offer(self, candidate: tuple) -> None:
        if self.best is None or _better(candidate[1], self.best[1]):
            self.best, self.local = candidate, local_gap(*candidate)
            # A* <= A + local and 1 - A* >= (1 - A) - local: kept as bounds, so the gap never
            # grows from one round to the next (the anytime form relies on it)
            acc, rej = float(candidate[1].acceptance[0]), float(candidate[1].rejection[0])
            self.upper = min(self.upper, (acc + self.local) * (1.0 + 2.0 * _EPS))
            self.lower = max(self.lower, (rej - self.local) * (1.0 - 2.0 * _EPS))

    def bound(self, masses: CellMasses, y: np.ndarray) -> None:
        b = dual_bound(masses, y)
        self.lower, self.upper = max(self.lower, b.lower), min(self.upper, b.upper)

    def gap(self) -> float:
        acc, rej = float(self.best[1].acceptance[0]), float(self.best[1].rejection[0])
        return min(upper_gap(self.upper, acc, rej), rej - self.lower, self.local)

    def _rejection_lps(self, masses: CellMasses, first: bool) -> list:
        """The rejection form's LPs on this partition, (eps, y) each: the first (small) partition
        finds the box the optimum needs; the later ones solve in deviations from the best weights
        so far (omega >= 0 exactly, no box), else start in that box (where D-GRS's 1 - A <=
        GAP_TOL, the first box is enough: 1 - A certifies)."""
        outs = []
        for v, scaled in enumerate(COLUMN_SCALINGS):
            out = None if self.best is None else lp_rejection_centred(masses, self.K, self.rho, self.best[0], scaled,
                                                                      quick=self.anytime)
            if out is None:
                grow = not self.stuck[v] and (not first or self.dgrs_rejection > GAP_TOL)
                out = lp_rejection_form(masses, self.K, self.rho, self.boxes[v], grow=grow, iteration_cap=not first,
                                        column_scaled=scaled, quick=self.anytime)
                # stuck (HiGHS failed in a larger box): the later partitions keep the last box that worked
                self.boxes[v] = None if out is None else out[2]
                self.stuck[v] = self.stuck[v] or (out is not None and out[3])
                if (first and self.walk_start is None and out is not None
                        and _box_binds(out[0], out[2], masses.scale, self.K)):
                    self.walk_start = (out[0], out[2], scaled)
            if out is not None:
                outs.append((out[0], out[1]))
                if self.anytime and self.best is not None:  # anytime: one centred LP per refined round
                    break  # (the second scaling cut no gap of 8 cells at K = 64..128 by 10%, cost ~40% of the time)
        return outs

    def rounds(self, walk: bool = False) -> int:
        """Partition rounds (module doc, steps 1-5) until certified, stalled or ``max_rounds``;
        ``walk``: the first round is :func:`trust_region_walk` from ``walk_start`` on the first
        partition. Returns the rounds run."""
        d, K = self.d, self.K
        edges, last_gap, stalls, rounds = self.base, np.inf, 0, 0
        for rounds in range(1, self.max_rounds + 1):
            masses = CellMasses(d, K, edges, lean=self.anytime)
            if walk and rounds == 1:
                eps, box, scaled = self.walk_start  # that scaling first, the others where it fails
                scalings = tuple(sorted(COLUMN_SCALINGS, key=lambda c: c != scaled))
                out = trust_region_walk(masses, K, self.rho, eps, scalings, box)
                lp_outs = [] if out is None else [out]
            elif self.rejection_form:
                lp_outs = self._rejection_lps(masses, first=rounds == 1 and self.best is None)
            else:
                out = lp_acceptance_form(masses, K, max(self.dgrs, 1e-300))
                lp_outs = [] if out is None else [(out[0] - 1.0 / K, out[1])]
            if not lp_outs:
                break
            if self.anytime and len(lp_outs) > 1:  # anytime: the Newton polish of the best LP weights only
                candidates = [c for eps, _ in lp_outs for c in _candidates(d, K, eps, polish=False)]
                if candidates and rounds >= POLISH_FROM_ROUND:
                    top = functools.reduce(lambda a, b: b if _better(b[1], a[1]) else a, candidates)
                    candidates.append(newton_polish(d, K, top[0].eps, top[0].omega <= 0.0))
            else:
                candidates = [c for eps, _ in lp_outs
                              for c in _candidates(d, K, eps, polish=rounds >= POLISH_FROM_ROUND)]
            for candidate in candidates:
                self.offer(candidate)
            if self.best is None:
                break
            duals = []
            for eps, y in lp_outs:
                duals += [y, refine_dual(masses, y, (1.0 / K + eps) > 1e-15)]
            if not self.rejection_form:
                duals += [np.where(clipped_cells(masses), 0.0, y) for y in duals]
            for y in duals:
                self.bound(masses, y)
            acc, rej = float(self.best[1].acceptance[0]), float(self.best[1].rejection[0])
            # the dual y = 1{q > p_omega} at the best weights (cells = the pieces between their
            # crossings): U - A is their Frank-Wolfe gap, tightened by rass.certificate
            gap = self.gap()
            # refine around the best weights' crossings and the LP weights' (where the LP found more)
            new_edges = refined_edges(self.base, _centres(self.best[1].crossings[0],
                                                          [c[1].crossings[0] for c in candidates[:1]]))
            # done: certified relative to min(1, A, 1 - A); or to GAP_TOL absolute once a round on a
            # refined partition is done (relative precision is then beyond the rounding floor or the
            # LP's accuracy) or where 1 - A <= GAP_TOL itself (tiny delta); or nothing new to refine;
            # or stalled: a refined round that did not cut the gap by 10% in a box that cannot grow,
            # or three such rounds in a row (the LP's box or accuracy limits it: a further round costs
            # as much as the last and gains as little)
            stalls = stalls + 1 if rounds >= 2 and gap > STALL_FACTOR * last_gap else 0
            if (gap <= _target(acc, rej) or (gap <= GAP_TOL and (rounds >= ABSOLUTE_AFTER or rej <= GAP_TOL))
                    or np.array_equal(new_edges, edges) or stalls >= 3 or (stalls and all(self.stuck))
                    or (self.anytime and self.walk_start is not None
                        and (K > ANYTIME_BOX_K or (rounds >= 2 and gap > 0.5 * last_gap)))):
                break
            edges, last_gap = new_edges, gap
        return rounds


def _solve(d: float, K: int, max_rounds: int = MAX_ROUNDS) -> RankWeightSolution:
    search = _Search(d, K, max_rounds)
    rounds = search.rounds()
    full_solve = max_rounds == MAX_ROUNDS
    # the full solve, where the first partition's box bound and the gap is still open: the rounds
    # again from the trust-region walk's weights (omega_r = 0 reached on the ranks that need it)
    if full_solve and search.best is not None and search.walk_start is not None and search.gap() > GAP_TOL:
        rounds += search.rounds(walk=True)
    best, best_local = search.best, search.local
    best_lower, best_upper = search.lower, search.upper
    rejection_form = search.rejection_form
    if best is None:  # HiGHS failed on the first partition: Newton from uniform and from the top rank
        top = np.full(K, -1.0 / K)
        top[-1] = 1.0 - 1.0 / K
        for candidate in (newton_polish(d, K, np.zeros(K), np.zeros(K, bool)),
                          newton_polish(d, K, top, np.arange(K) < K - 1)):
            if best is None or _better(candidate[1], best[1]):
                best, best_local = candidate, local_gap(*candidate)
    law, res = best
    acc, rej = float(res.acceptance[0]), float(res.rejection[0])
    closed_gap = min(upper_gap(best_upper, acc, rej), rej - best_lower, best_local)
    if not rejection_form and full_solve and closed_gap > GAP_TOL:
        law, res = vertex_moves(d, law, res)
        best_local = min(best_local, local_gap(law, res))
        acc, rej = float(res.acceptance[0]), float(res.rejection[0])
    # the set bound, moved (the full solve only: ~0.5-20 s of least squares at K = 128, and after
    # a round or two of the anytime form it has not tightened the LP's bound on the cells measured)
    if full_solve and min(upper_gap(best_upper, acc, rej), rej - best_lower, best_local, rej) > GAP_TOL:
        polished = polished_lower_bound(d, K, law, res)
        best_lower = max(best_lower, polished)
        best_upper = min(best_upper, 1.0 - polished)
    gap = max(min(upper_gap(best_upper, acc, rej), rej - best_lower, best_local, rej), 0.0)
    gap += ROUNDING_ULPS * _EPS * min(acc, rej)
    roots = res.crossings[0]
    return RankWeightSolution(law.omega.copy(), acc, rej, gap, acc + gap, law.eps.copy(),
                              roots[np.isfinite(roots)], rounds)


def polished_lower_bound(d: float, K: int, law: exact.RankLaw, res: exact.ExactAcceptance) -> float:
    """A lower bound on 1 - A* from the set bound (``certificate.maximin_set_bound``: valid
    for any set; its boundaries moved towards the maximin by Newton) from two sets: {q > p_omega}
    at the best weights, and the same without the pieces ``certificate`` drops. Net of the
    rounding allowance (256 ulps, absolute); 0 when neither applies.

    Why: the LP's dual y is constant on cells, so its bound is off by ~(cell width)^2 where the
    graded cells are not centred on the optimum's crossings, and the weights' own Frank-Wolfe
    gap is first order in their distance to the optimum; the moved set is second order."""
    starts = []
    if res.pieces is not None:
        roots = res.crossings[0]
        roots = roots[np.isfinite(roots)]
        starts.append((roots, res.pieces.q_above))
        dropped = certificate(res.pieces, law.omega).dropped
        if dropped is not None and np.any(dropped):
            starts.append((roots, res.pieces.q_above & ~dropped))
    best = 0.0
    for boundaries, in_set in starts:
        if boundaries.size and in_set.size == boundaries.size + 1:
            best = max(best, maximin_set_bound(d, K, boundaries, in_set, law.omega)[0])
    # the masses summed into h_r total at most Q(S) + P_r(S) <= 2, each to a few ulps: 4 x 64 ulps absolute
    return max(best - 4.0 * ROUNDING_ULPS * _EPS, 0.0)


def _centres(best: np.ndarray, others: list[np.ndarray]) -> np.ndarray:
    """The best weights' crossings, plus those of ``others`` farther than MERGE_DISTANCE from
    all of them (a nearby one already sits in the graded cells of the best's: refining it too
    would double the LP for little)."""
    best = best[np.isfinite(best)]
    extra = np.concatenate(others) if others else np.empty(0)
    extra = extra[np.isfinite(extra)]
    if best.size and extra.size:
        extra = extra[np.min(np.abs(extra[:, None] - best[None, :]), axis=1) > MERGE_DISTANCE]
    return np.concatenate([best, extra])


def _candidates(d: float, K: int, eps: np.ndarray, polish: bool) -> list:
    """The LP's weights evaluated exactly, and (from round POLISH_FROM_ROUND) Newton-polished on
    their face."""
    zero = (1.0 / K + eps) <= 1e-15
    if np.all(zero):
        return []
    eps = np.where(zero, -1.0 / K, eps)
    law = law_from_eps(eps, zero)
    res = exact.exact_acceptance(law, np.array([d]), gradient=True)
    out = [(law, res)]
    if polish:
        out.append(newton_polish(d, K, law.eps, zero))
    return out


def _better(new: exact.ExactAcceptance, old: exact.ExactAcceptance) -> bool:
    """A(new) > A(old), compared on A where both are small and on 1 - A otherwise."""
    if new.acceptance[0] < 0.5 and old.acceptance[0] < 0.5:
        return bool(new.acceptance[0] > old.acceptance[0])
    return bool(new.rejection[0] < old.rejection[0])


@functools.lru_cache(maxsize=1024)
def _solution(d: float, K: int, max_rounds: int = MAX_ROUNDS) -> RankWeightSolution:
    closed = closed_form_solution(d, K, lambda: _solution(SUBNORMAL_DELTA, K, max_rounds))
    if closed is not None:
        return closed
    with one_blas_thread():
        markov = markov_solution(d, K, only_certified=True)
        if markov is None and d <= MARKOV_CERTIFIED_DELTA:
            # float64 cannot state or evaluate Markov's weights here (K >= ~24): extended precision
            precise = markov_solution_precise(d, K, MARKOV_GAP)
            if precise is not None:
                return precise
        sol = evaluated(d, markov or with_markov_bound(d, K, _solve(d, K, max_rounds)))
        # the anytime form (speccheck theory above K = 32) keeps to the cheaper K range
        max_K = PRECISE_SET_FULL_MAX_K if max_rounds == MAX_ROUNDS else PRECISE_SET_MAX_K
        return with_precise_set_bound(d, with_precise_rejection(d, sol), max_K)


def certified_rank_weights(delta: float, K: int, *, max_rounds: int | None = None) -> RankWeightSolution:
    """Optimal RASS weights at one delta (finite >= 0; K in 1..128) with a certificate from LP
    duality on a refined partition: ``upper_bound = acceptance + gap`` bounds the optimum A*
    (the gap is what is certified: <= 1e-12 absolute on every cell of
    ``theory/rass_dual_survey.md`` and of two random scans (module doc), and
    <= 1e-12 * min(1, A, 1 - A) where rounding allows),
    acceptance and rejection exact at the returned weights. A pure function of (delta, K, max_rounds).

    ``max_rounds`` (anytime form, e.g. for an interactive command: ``speccheck theory`` uses
    ``speccheck.theory.table.rass_budget``): stop after that many
    partition rounds (1..MAX_ROUNDS - 1; None or MAX_ROUNDS: the full solve), or earlier where
    the first partition's box binds (module doc, step 5), and return the best
    weights so far with their certified gap (valid, possibly above 1e-12; ``iterations`` = the
    rounds run, both passes of the full solve counted; only the full solve adds the vertex moves,
    the trust-region pass (module doc, step 5b), the second and third cold HiGHS strategies and
    the second column scaling on refined partitions, which can take seconds at K >= 96: so its
    rounds are not the full solve's).
    Round 1 (base partition, ~2K + 100 cells) takes ~0.02-0.2 s at K = 17..128;
    each later (refined) round ~0.05-1 s, growing with K (two LPs with ~20 cells per crossing;
    measured: ``theory/rass_dual_survey.md``)."""
    d = float(check_delta(delta))
    K = check_K(K)
    rounds = MAX_ROUNDS if max_rounds is None else max_rounds
    if isinstance(rounds, bool) or not isinstance(rounds, (int, np.integer)) or not 1 <= rounds <= MAX_ROUNDS:
        raise InputError(f"max_rounds must be None or an integer in 1..{MAX_ROUNDS}, got {max_rounds!r}")
    sol = _solution(d, K, int(rounds))
    return sol._replace(omega=sol.omega.copy(), deviation=sol.deviation.copy(), crossings=sol.crossings.copy(),
                        deviation_tail=None if sol.deviation_tail is None else sol.deviation_tail.copy())
