"""RASS's 1 - A at given weights with RELATIVE precision where float64 cannot give it, and
Markov's small-delta weights from a high-precision solve (issue 38 items 1-2).

Why. At small delta the optimal weights are 1/K + delta e* with e* interpolating Phi^-1 at
Markov's points (``certificate.markov_edges``); e* alternates in sign and grows with K
(max |e*|: 2.8e2 at K = 24, 3.0e8 at K = 48, 6.3e12 at K = 64, 5.2e21 at K = 96, 7.0e30 at
K = 128), while 1 - A ~ delta 1e-4. In float64 the sum sum_r eps_r b_r(Phi(z)) then loses
~log10(max |e*|) digits to cancellation: at K = 64, delta = 1e-30 the float evaluator's 1 - A was
off by 6% and the float least-squares e* (``certificate.markov_deviation``) was 1e4-fold off.

What. With e = eps / delta (exact in mpmath), the deviation of q - p_omega from phi is
H(z) = (q - p_omega) / (delta phi) = expm1(delta z - delta^2/2) / delta - f_e(Phi(z)),
f_e(u) = sum_r e_r b_r(u), and

    (1 - A) / delta = sum over the cells (a, b] between consecutive zeros of H where H > 0 of
                      [D(b) - D(a)] - sum_j E_j [pmf_j(Phi(b)) - pmf_j(Phi(a))],

D(x) = (Phi(x - delta) - Phi(x)) / delta, E_j = e_1 + ... + e_j, pmf_j(u) = C(K, j) u^j
(1 - u)^(K - j) (sum_r e_r I_u(r, K - r + 1) = sum_j E_j pmf_j(u)), all in mpmath at
``working_dps`` digits (enough for the cancellation in f_e and E, plus 30), D at that many more
digits than -log10(delta). The zeros are refined by Newton in mpmath from float guesses (every
guess must converge to a distinct zero); the sign of H on each cell is read at its midpoint.
Caveat: a pair of zeros that the guesses miss altogether is missed here too (the float search's
guesses, or Markov's points for Markov's weights, whose count of zeros ``markov_zero_count``
checks on a dense grid in the tests).

Markov's e* (``markov_deviation_precise``): solved at 120 digits by
``research/markov_deviation.py`` and shipped as package data (``MARKOV_DATA``), rounded to float64
and made exactly antisymmetric (e_r = -e_(K+1-r), as the exact e* is: Phi^-1 and the Bernstein
basis are), so that delta e* rounded sums to exactly 0 and the weights 1/K + delta e* are a
probability vector without renormalising.
"""

from __future__ import annotations

import functools
import math
import threading
from pathlib import Path
from typing import NamedTuple

import mpmath as mp
import numpy as np

from speccheck.theory import exact
from speccheck.theory.rass.certificate import RankWeightSolution, evaluation_floor, markov_edges, maximin_set_bound

MARKOV_DATA = Path(__file__).resolve().parents[2] / "data" / "markov_deviation.npz"
NEWTON_ITER = 12  # Newton steps per zero, at most (2 from float guesses good to 1e-12)
GUARD_DPS = 30  # digits kept beyond the cancellation
QUADRATIC_STOP = 1e-13  # a Newton step this small leaves an error ~(H''/H') 1e-26 (the float guesses: ~1e-14 off)
COMPONENTS = 3  # float64 numbers per deviation in an expansion (the package data, markov_eps)
PRECISE_REJECTION = 1e-10  # with_precise_rejection: where the float evaluator's allowance exceeds this share
# of 1 - A (10x below the 1e-9 the golden table asks of a reported 1 - A; the allowance is itself a bound) ...
MARKOV_PRECISE_DELTA = 1e-3  # ... and tightens the gap with Markov's precise bound at and below this delta
PRECISE_SET_GAP = 1e-10  # with_precise_set_bound: where the gap is above this share of 1 - A ...
PRECISE_SET_MAX_K = 24  # ... and K is at most this (O(K^2) mpmath operations per margin evaluation:
# 0.1-1 s per solve at K = 8..24) ...
PRECISE_SET_FULL_MAX_K = 96  # ... or this in rass_dual's full solve (0.5-2.5 s more at K = 32..96, delta ~ 0.01-0.1,
# where it certified (32, 0.01): 2.1e-9 -> 1.3e-10, (48, 0.1): 1.1e-8 -> 3e-11, (96, 0.1): 1.9e-8 -> 7.3e-10;
# at K = 128 it did not tighten (128, 0.1) in 5.7 s)


_MP_LOCK = threading.RLock()  # mpmath's working precision is process-global: one computation at a time


def _serialised(fn):
    """Run ``fn`` holding _MP_LOCK (it sets mpmath's global precision: threads must not interleave)."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with _MP_LOCK:
            return fn(*args, **kwargs)
    return wrapper


class PreciseRejection(NamedTuple):
    """rejection: 1 - A at the weights (float64, correctly rounded from ~``GUARD_DPS`` digits);
    crossings: the zeros of q - p_omega (float64); error: a bound on |rejection - exact 1 - A| /
    rejection from the working precision (~10^-GUARD_DPS) and the float rounding (2^-53)."""

    rejection: float
    crossings: np.ndarray
    error: float


@functools.lru_cache(maxsize=256)
def markov_deviation_precise(K: int) -> np.ndarray | None:
    """Markov's e* (``certificate.markov_deviation``'s system, solved at 120 digits by
    research/markov_deviation.py) as an expansion of shape (COMPONENTS, K) (e*_r = the sum of
    column r), each component exactly antisymmetric; None where the package data do not hold K.
    Read-only."""
    if K < 2 or not MARKOV_DATA.exists():
        return None
    with np.load(MARKOV_DATA) as data:
        key = f"K{K}"
        if key not in data.files:
            return None
        e = np.array(data[key], dtype=np.float64).reshape(-1, K)
    return _antisymmetric(e)


def _antisymmetric(e: np.ndarray) -> np.ndarray:
    """Each row made exactly antisymmetric (x_r = -x_(K+1-r), the middle 0) from its first half
    (the exact e* is antisymmetric, and rounding is symmetric): every row then sums to exactly 0."""
    e = e.copy()
    K = e.shape[1]
    half = K // 2
    e[:, K - half:] = -e[:, :half][:, ::-1]
    if K % 2:
        e[:, half] = 0.0
    e.flags.writeable = False
    return e


def split(x: "mp.mpf | float", components: int = COMPONENTS) -> list[float]:
    """An mpmath number as ``components`` float64 numbers, each the rounded remainder of the ones
    before (their sum holds ~53 ``components`` bits of x)."""
    out = []
    for _ in range(components):
        out.append(float(x))
        x = x - mp.mpf(out[-1])
    return out


@_serialised
def markov_eps(delta: float, K: int) -> np.ndarray | None:
    """delta e* as an expansion of shape (COMPONENTS, K) (each row exactly antisymmetric, so the
    weights 1/K + the column sums are a probability vector exactly); None where the package data
    do not hold K or some weight would be <= 0 (omega >= 0 binds: not the optimum's form)."""
    e = markov_deviation_precise(K)
    if e is None or not delta > 0.0:
        return None
    with mp.workdps(4 * 17 * COMPONENTS):
        d = mp.mpf(float(delta))
        rows = [split(d * mp.fsum(mp.mpf(float(x)) for x in e[:, r]), e.shape[0]) for r in range(K)]
    eps = _antisymmetric(np.array(rows).T)
    if not np.all(np.isfinite(eps)) or np.any(1.0 / K + eps[0] + eps[1:].sum(axis=0) <= 0.0):
        return None
    return eps


def working_dps(e: list) -> int:
    """Digits for f_e and E: the cancellation (log10 of sum |e_r|, f_e is O(1)) plus GUARD_DPS."""
    scale = max((abs(x) for x in e), default=mp.mpf(1))
    return GUARD_DPS + 10 + max(0, int(mp.log10(scale + 1)) + 1) if scale > 0 else GUARD_DPS + 10


class _Poly(NamedTuple):
    """Coefficients (highest power first, for mp.polyval) of the Bernstein sums in t = u / v."""

    f: list  # f_e(u) = v^(K-1) poly_f(t)
    df: list  # df_e/du = v^(K-2) poly_df(t)
    E: list  # sum_j E_j pmf_j(u) = v^K poly_E(t)


def _polys(K: int, e: list) -> _Poly:
    m = K - 1
    f = [K * math.comb(m, i) * e[i] for i in range(K)]
    df = [K * m * math.comb(m - 1, i) * (e[i + 1] - e[i]) for i in range(m)] if m >= 1 else []
    E, acc = [], mp.mpf(0)
    for j in range(K + 1):
        E.append(math.comb(K, j) * acc)
        if j < K:
            acc += e[j]
    return _Poly(f[::-1], df[::-1], E[::-1])


def _uv(z):
    return mp.ncdf(z), mp.ncdf(-z)


def _H(d, poly: _Poly, z, K: int, derivative: bool = False):
    """H(z) and (optionally) H'(z) in mpmath."""
    u, v = _uv(z)
    t = u / v
    x = d * z - d * d / 2
    h = mp.expm1(x) / d - v ** (K - 1) * mp.polyval(poly.f, t)
    if not derivative:
        return h
    dfdu = v ** (K - 2) * mp.polyval(poly.df, t) if K >= 2 else mp.mpf(0)
    return h, mp.exp(x) - mp.npdf(z) * dfdu


def _newton(d, poly: _Poly, z0: float, K: int, tol) -> mp.mpf | None:
    z = mp.mpf(z0)
    for _ in range(NEWTON_ITER):
        h, dh = _H(d, poly, z, K, derivative=True)
        if dh == 0:
            return None
        step = h / dh
        z -= step
        # converged: |step| <= tol, or small enough that the next (quadratic) step would be below it
        if abs(step) <= tol * (1 + abs(z)) or abs(step) <= QUADRATIC_STOP * (1 + abs(z)):
            return z
    return None


def _D(d, x, extra: int):
    """(Phi(x - delta) - Phi(x)) / delta, to working precision (``extra`` more digits for the
    cancellation; x = +-inf gives 0)."""
    if mp.isinf(x):
        return mp.mpf(0)
    with mp.extradps(extra):
        return (mp.ncdf(x - d) - mp.ncdf(x)) / d


def _E_sum(poly: _Poly, K: int, z):
    """sum_j E_j pmf_j(Phi(z)) (0 at z = +-inf: E_0 = E_K = 0)."""
    if mp.isinf(z):
        return mp.mpf(0)
    u, v = _uv(z)
    return v ** K * mp.polyval(poly.E, u / v)


def _mp_e(eps: np.ndarray, d, zero: np.ndarray | None = None) -> list:
    """e = (omega - 1/K) / delta in mpmath for the weights omega_r = 1/K + eps_r (``eps`` of shape
    (K,) or an expansion (m, K): the column sums), 0 where ``zero``, divided by their sum (exactly
    1 for an antisymmetric expansion; else off by the rounding of the float deviations, which moves
    a tiny 1 - A: these are the weights that the deviations state, as research/rass_golden.py reads them)."""
    eps = np.asarray(eps, np.float64).reshape(-1, np.shape(eps)[-1])
    K = eps.shape[1]
    zero = np.zeros(K, bool) if zero is None else np.asarray(zero, bool)
    with mp.extradps(max(0, int(-math.log10(float(d)))) + 20):
        w = [mp.mpf(0) if zero[r] else mp.mpf(1) / K + mp.fsum(mp.mpf(float(x)) for x in eps[:, r]) for r in range(K)]
        total = mp.fsum(w)
        return [(x / total - mp.mpf(1) / K) / d for x in w]


@_serialised
def precise_rejection(delta: float, eps: np.ndarray, guesses: np.ndarray, *, strict: bool = True,
                      zero: np.ndarray | None = None) -> PreciseRejection | None:
    """1 - A at omega = 1/K + eps (eps exact: shape (K,), or an expansion (m, K) whose column
    sums are the deviations) for 0 < delta <= 1, with ~GUARD_DPS digits (module doc);
    ``guesses``: float approximations of every zero of q - p_omega; ``zero``: ranks of weight
    exactly 0 (their deviation -1/K, which float64 rounds); the weights are renormalised to sum 1
    (:func:`_mp_e`). None where a guess does not converge or two converge together (``strict``;
    else those guesses are dropped: the guesses then come from several searches, e.g. the float
    evaluator's crossings and Markov's points), or where 1 - A is not > 0."""
    d_f = float(delta)
    K = int(np.shape(eps)[-1])
    if not 0.0 < d_f <= 1.0 or K < 2:
        return None
    d = mp.mpf(d_f)
    with mp.workdps(60):
        e0 = _mp_e(eps, d, zero)
    dps = working_dps(e0)
    extra = max(0, int(-math.log10(d_f))) + 5
    with mp.workdps(dps):
        e = _mp_e(eps, d, zero)
        if abs(mp.fsum(e)) > mp.mpf(10) ** (-dps + 5) * mp.fsum(abs(x) for x in e):
            return None
        poly = _polys(K, e)
        tol = mp.mpf(10) ** (-(GUARD_DPS // 2 + 5))
        zs = []
        for g in np.sort(np.asarray(guesses, np.float64)):
            if not np.isfinite(g):
                continue
            z = _newton(d, poly, float(g), K, tol)
            if z is None:
                if strict:
                    return None
                continue
            zs.append(z)
        zs.sort()
        distinct = [z for i, z in enumerate(zs) if i == 0 or z - zs[i - 1] > tol * 100]
        if strict and len(distinct) < len(zs):
            return None
        zs = distinct
        edges = [mp.ninf] + zs + [mp.inf]
        total = mp.mpf(0)
        scale = mp.mpf(0)
        D_at = [_D(d, x, extra) for x in edges]
        E_at = [_E_sum(poly, K, x) for x in edges]
        for i in range(len(edges) - 1):
            a, b = edges[i], edges[i + 1]
            if mp.isinf(a) and mp.isinf(b):
                mid = mp.mpf(0)
            elif mp.isinf(a):
                mid = b - 1
            elif mp.isinf(b):
                mid = a + 1
            else:
                mid = (a + b) / 2
            if _H(d, poly, mid, K) > 0:
                piece = (D_at[i + 1] - D_at[i]) - (E_at[i + 1] - E_at[i])
                total += piece
                scale += abs(piece)
        rej = total * d
        if not rej > 0:
            return None
        rej_f = float(rej)
        error = 2.0 ** -53 + float(mp.mpf(10) ** (-GUARD_DPS) * (1 + scale / abs(total)))
        return PreciseRejection(rej_f, np.array([float(z) for z in zs]), error)


@_serialised
def markov_zero_count(delta: float, eps: np.ndarray, points_per_cell: int = 20) -> int:
    """The sign changes of q - p_omega on a dense grid (``points_per_cell`` between consecutive
    Markov points, and out to +-9 beyond them): a check that Markov's weights have exactly n zeros
    (a test helper; seconds at K = 128)."""
    K = int(np.shape(eps)[-1])
    z = markov_edges(K)
    grid = [np.linspace(z[0] - 9.0, z[0], 4 * points_per_cell, endpoint=False)]
    for a, b in zip(z[:-1], z[1:]):
        grid.append(np.linspace(a, b, points_per_cell, endpoint=False))
    grid.append(np.linspace(z[-1], z[-1] + 9.0, 4 * points_per_cell))
    pts = np.concatenate(grid)
    pts = pts[~np.isin(pts, z)]
    d = mp.mpf(float(delta))
    with mp.workdps(60):
        e0 = _mp_e(eps, d)
    with mp.workdps(working_dps(e0)):
        e = _mp_e(eps, d)
        poly = _polys(K, e)
        signs = [_H(d, poly, mp.mpf(float(x)), K) > 0 for x in pts]
    return int(sum(a != b for a, b in zip(signs, signs[1:])))


@_serialised
def markov_lower_bound_precise(delta: float, K: int) -> float:
    """``certificate.markov_lower_bound`` (1 - A* >= Q(S) - Phi(S), S Markov's cells, at any
    delta > 0: weak duality, P_r(S) = 1/2 = Phi(S) for every rank) with the points z_k and the
    cell masses in mpmath (~GUARD_DPS digits: no allowance for float edges), rounded down."""
    if not delta > 0.0 or K < 2:
        return 0.0
    n = K if K % 2 else K + 1
    d_f = float(delta)
    extra = max(0, int(-math.log10(d_f))) + 5
    with mp.workdps(GUARD_DPS + 20):
        d = mp.mpf(d_f)
        z = [mp.sqrt(2) * mp.erfinv(2 * mp.sin(k * mp.pi / (2 * (n + 1))) ** 2 - 1) for k in range(1, n + 1)]
        edges = z + [mp.inf]
        total = mp.fsum(_D(d, edges[i + 1], extra) - _D(d, edges[i], extra) for i in range(0, n, 2))
        lower = total * d * (1 - mp.mpf(10) ** (-GUARD_DPS + 5))
    value = float(lower)
    return max(math.nextafter(value, 0.0) if value > 0.0 else 0.0, 0.0)


def markov_solution_precise(delta: float, K: int, max_relative_gap: float) -> RankWeightSolution | None:
    """Markov's weights 1/K + delta e* (:func:`markov_eps`, an expansion: ``deviation`` its leading
    component, ``deviation_tail`` the rest) with 1 - A from :func:`precise_rejection` and the gap
    from :func:`markov_lower_bound_precise` (plus the evaluation's error bound); None where they
    are not in the simplex, the evaluation fails, or the gap exceeds ``max_relative_gap`` of 1 - A."""
    eps = markov_eps(delta, K)
    if eps is None:
        return None
    res = precise_rejection(delta, eps, markov_edges(K))
    if res is None or res.crossings.size != markov_edges(K).size:
        return None
    rej = res.rejection
    gap = max(rej - markov_lower_bound_precise(delta, K), 0.0) + 2.0 * res.error * rej
    if gap > max_relative_gap * rej:
        return None
    omega = 1.0 / K + eps[0]
    omega = omega / math.fsum(omega.tolist())
    acc = 1.0 - rej
    return RankWeightSolution(omega, acc, rej, gap, acc + gap, eps[0].copy(), res.crossings, 0,
                              deviation_tail=eps[1:].copy())


@_serialised
def set_margins_precise(delta: float, K: int, edges: np.ndarray, in_set: np.ndarray) -> np.ndarray:
    """``certificate.set_margins`` (h_r = Q(S) - P(S_(r) in S), S the pieces [edges[i],
    edges[i + 1]] with in_set[i]; edges[0] = -inf, edges[-1] = +inf) in mpmath, each rounded to the
    float64 below it: lower bounds on the exact margins at these (float) edges. Relative
    precision where Q(S) and P_r(S) nearly cancel (1 - A* ~ 1e-7 beside masses ~1/2 at K = 8,
    delta = 1e-4), where float64's ~1e-16 absolute is ~1e-9 relative."""
    d_f = float(delta)
    with mp.workdps(GUARD_DPS + 15 + max(0, int(-math.log10(d_f)))):
        d = mp.mpf(d_f)
        pts = [mp.mpf(float(x)) if np.isfinite(x) else (mp.inf if x > 0 else mp.ninf) for x in edges]
        cdf = []
        for z in pts:
            if mp.isinf(z):
                cdf.append([mp.mpf(0 if z < 0 else 1)] * K)
                continue
            u, v = _uv(z)
            t, p, pmf = u / v, v ** K, []
            for j in range(K + 1):
                pmf.append(math.comb(K, j) * p)
                p *= t
            tail, acc = [], mp.mpf(0)
            for j in range(K, 0, -1):  # I_r(u) = P(Bin(K, u) >= r)
                acc += pmf[j]
                tail.append(acc)
            cdf.append(tail[::-1])
        h = [mp.mpf(0)] * K
        for i in np.nonzero(np.asarray(in_set, bool))[0]:
            a, b = pts[i], pts[i + 1]
            q = mp.ncdf(b - d) - mp.ncdf(a - d)
            h = [h[r] + q - (cdf[i + 1][r] - cdf[i][r]) for r in range(K)]
        return np.array([math.nextafter(float(x), -math.inf) for x in h])


def with_precise_set_bound(delta: float, sol: RankWeightSolution, max_K: int = PRECISE_SET_MAX_K
                           ) -> RankWeightSolution:
    """``sol`` with its gap tightened by the set bound at {q > p_omega}'s boundaries moved to the
    maximin (``certificate.maximin_set_bound``) with the margins in extended precision
    (:func:`set_margins_precise`), where the float certificates leave more than PRECISE_SET_GAP of
    1 - A (K <= ``max_K``, A >= 1/2): K = 6..17 at delta = 1e-4, where 1 - A* ~ 1e-7 and
    the float bounds' ~1e-16 absolute was 1e-8 relative. The bound is valid for any boundaries;
    the gap keeps ``certificate.evaluation_floor`` for the float evaluator's value of 1 - A."""
    K = int(sol.deviation.size)
    if not (0.0 < delta and K <= max_K and sol.deviation_tail is None and sol.acceptance >= 0.5
            and sol.gap > PRECISE_SET_GAP * sol.rejection):
        return sol
    zero = 1.0 / K + sol.deviation <= 1e-15
    law = exact.law_from_eps(np.where(zero, -1.0 / K, sol.deviation), zero)
    res = exact.exact_acceptance(law, np.array([float(delta)]), gradient=True)
    roots = res.crossings[0]
    roots = roots[np.isfinite(roots)]
    if res.pieces is None or roots.size == 0 or res.pieces.q_above.size != roots.size + 1:
        return sol
    lower, _ = maximin_set_bound(float(delta), K, roots, res.pieces.q_above, law.omega,
                                 margins_at=set_margins_precise)
    gap = min(sol.gap, max(sol.rejection - lower, 0.0) + evaluation_floor(sol))
    return sol._replace(gap=gap, upper_bound=sol.acceptance + gap)


def with_precise_rejection(delta: float, sol: RankWeightSolution) -> RankWeightSolution:
    """``sol`` with 1 - A (and A) re-evaluated by :func:`precise_rejection` at its weights (zeros
    from its crossings) where the float evaluator's allowance (``certificate.evaluation_floor``)
    exceeds PRECISE_REJECTION of 1 - A (deviations >> 1 - A: K >= 48 at delta = 1e-8, where the
    float value was off by 3e-5 relative); the gap is re-based on the same lower bound on 1 - A*
    (sol's claimed 1 - A less its gap, and Markov's precise bound at delta <= 1e-3), plus the
    evaluation's error bound. Unchanged where it does not apply or fails."""
    K = int(sol.deviation.size)
    if not (0.0 < delta <= 1.0 and sol.deviation_tail is None and sol.acceptance >= 0.5 and sol.rejection > 0.0
            and evaluation_floor(sol) > PRECISE_REJECTION * sol.rejection):
        return sol
    zero = 1.0 / K + sol.deviation <= 1e-15
    res = precise_rejection(delta, sol.deviation, sol.crossings, strict=False, zero=zero)
    if res is None:
        return sol
    lower = sol.rejection - sol.gap
    if delta <= MARKOV_PRECISE_DELTA:
        lower = max(lower, markov_lower_bound_precise(delta, K))
    rej = res.rejection
    gap = min(max(rej - lower, 0.0) + 2.0 * res.error * rej, rej)
    return sol._replace(acceptance=1.0 - rej, rejection=rej, gap=gap, upper_bound=1.0 - rej + gap,
                        crossings=res.crossings)
