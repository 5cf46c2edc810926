"""RASS (rank-aware selection): selected-draft law, optimal rank weights, residual intervals.

The selected draft S_(r), r ~ omega, has density p_omega(s) = phi(s) sum_r omega_r b_r(Phi(s)),
b_r the Beta(r, K - r + 1) density. P(accept) = integral min(q, p_omega), q(s) = phi(s - delta).
The optimal omega maximises that concave objective; on M quadrature nodes it is a linear
program with K + M variables (omega, and t_m <= min(q_m, p_omega(s_m))).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np
from scipy import optimize, sparse, special

from speccheck.theory._validate import check_delta, check_K, check_omega
from speccheck.theory.normal import log_phi, normal_mass

# min(q, p_omega) <= p_omega, whose mass outside [-S_MAX, S_MAX] is <= K Phibar(9) < 1e-17
# for K <= 64: the LP's domain does not depend on delta.
S_MAX = 9.0
PANEL_WIDTH = 0.5


# ----------------------------------------------------------------- the selected-draft law
@functools.lru_cache(maxsize=256)
def _log_beta_coef(K: int) -> np.ndarray:
    """log K! / ((r-1)! (K-r)!) for r = 1..K."""
    r = np.arange(1, K + 1)
    return special.gammaln(K + 1) - special.gammaln(r) - special.gammaln(K - r + 1)


def _log_rank_terms(s, K: int) -> np.ndarray:
    """log [phi(s) b_r(Phi(s))], shape s.shape + (K,)."""
    s = np.asarray(s, np.float64)[..., None]
    r = np.arange(1, K + 1)
    with np.errstate(divide="ignore"):
        return (
            log_phi(s)
            + _log_beta_coef(K)
            + (r - 1) * special.log_ndtr(s)
            + (K - r) * special.log_ndtr(-s)
        )


def log_p_omega(s, K: int, omega) -> np.ndarray:
    """log p_omega(s), the log density of the rank-selected draft (shape of ``s``)."""
    K = check_K(K)
    w = check_omega(omega, K)
    with np.errstate(divide="ignore"):
        return special.logsumexp(_log_rank_terms(s, K) + np.log(w), axis=-1)


def cdf_p_omega(s, K: int, omega) -> np.ndarray:
    """P(S_(r) <= s) = sum_r omega_r I_{Phi(s)}(r, K - r + 1)."""
    K = check_K(K)
    w = check_omega(omega, K)
    s = np.asarray(s, np.float64)[..., None]
    r = np.arange(1, K + 1)
    return special.betainc(r, K - r + 1, special.ndtr(s)) @ w


def sf_p_omega(s, K: int, omega) -> np.ndarray:
    """P(S_(r) > s), accurate in the upper tail: I_{1 - u}(b, a) = 1 - I_u(a, b)."""
    K = check_K(K)
    w = check_omega(omega, K)
    s = np.asarray(s, np.float64)[..., None]
    r = np.arange(1, K + 1)
    return special.betainc(K - r + 1, r, special.ndtr(-s)) @ w


def _p_mass(a, b, K, w):
    """P(a < S_(r) < b) from whichever tail keeps precision."""
    if a >= 0:
        return sf_p_omega(a, K, w) - sf_p_omega(b, K, w)
    return cdf_p_omega(b, K, w) - cdf_p_omega(a, K, w)


# ----------------------------------------------------------------- residual intervals
class ResidualInterval(NamedTuple):
    """(lo, hi) where q > p_omega, and mass = integral_lo^hi (q - p_omega) ds."""

    lo: float
    hi: float
    mass: float


def _log_ratio(s, d, K, w):
    """D(s) = log q(s) - log p_omega(s) (vectorised; a max-shifted log-sum-exp over ranks)."""
    terms = _log_rank_terms(s, K)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = terms + np.log(w)
        mx = np.max(terms, axis=-1, keepdims=True)
        mx = np.where(np.isfinite(mx), mx, 0.0)
        lp = np.log(np.sum(np.exp(terms - mx), axis=-1)) + mx[..., 0]
    return log_phi(np.asarray(s) - d) - lp


def _bisect(f, a: np.ndarray, b: np.ndarray, iters: int = 60) -> np.ndarray:
    """Vectorised bisection for sign-changing brackets [a, b] of f."""
    fa = f(a)
    for _ in range(iters):
        m = 0.5 * (a + b)
        fm = f(m)
        left = np.sign(fm) == np.sign(fa)
        a = np.where(left, m, a)
        fa = np.where(left, fm, fa)
        b = np.where(left, b, m)
        if np.all(b - a <= 1e-14 * np.maximum(1.0, np.abs(a))):
            break
    return 0.5 * (a + b)


def crossings(delta: float, K: int, omega, *, lo: float = -40.0, hi: float | None = None,
              step: float = 0.02) -> np.ndarray:
    """Sorted points where q = p_omega, on [lo, hi] (default hi = delta + 40).

    Sign changes of D = log q - log p_omega on a grid are refined by vectorised bisection;
    grid points where |D| has a local minimum without a sign change are searched for a
    hidden pair of crossings (a tangency, or two crossings closer than ``step``).
    """
    d = float(check_delta(delta))
    K = check_K(K)
    w = check_omega(omega, K)
    hi = d + 40.0 if hi is None else hi
    grid = np.arange(lo, hi + step, step)
    D = _log_ratio(grid, d, K, w)
    f = lambda x: _log_ratio(x, d, K, w)  # noqa: E731
    sign = np.sign(D)
    nz = np.nonzero(sign != 0)[0]  # a root exactly on a grid point is bracketed by its neighbours
    flip = nz[:-1][sign[nz[:-1]] * sign[nz[1:]] < 0]
    nxt = nz[1:][sign[nz[:-1]] * sign[nz[1:]] < 0]
    roots = [_bisect(f, grid[flip], grid[nxt])] if flip.size else []
    absD = np.abs(D)
    cand = np.nonzero((absD[1:-1] < absD[:-2]) & (absD[1:-1] <= absD[2:]) & (absD[1:-1] < 0.05))[0] + 1
    for j in cand:
        if not (sign[j - 1] == sign[j] == sign[j + 1]):
            continue
        g = (lambda x: float(f(np.array(x)))) if sign[j] > 0 else (lambda x: -float(f(np.array(x))))
        res = optimize.minimize_scalar(g, bounds=(grid[j - 1], grid[j + 1]), method="bounded",
                                       options={"xatol": 1e-13})
        if res.fun < 0:
            roots.append(_bisect(f, np.array([grid[j - 1], res.x]), np.array([res.x, grid[j + 1]])))
    return np.sort(np.concatenate(roots)) if roots else np.empty(0)


def _pieces(d: float, K: int, w: np.ndarray):
    """Split the line at the crossings: (lo, hi, q_above) for every piece."""
    pts = np.concatenate([[-np.inf], crossings(d, K, w), [np.inf]])
    for a, b in zip(pts[:-1], pts[1:]):
        if np.isfinite(a) and np.isfinite(b):
            m = 0.5 * (a + b)
        elif np.isfinite(a):
            m = a + 1.0
        elif np.isfinite(b):
            m = b - 1.0
        else:
            m = 0.0
        yield float(a), float(b), bool(_log_ratio(np.array(m), d, K, w) > 0)


def residual_intervals(delta: float, K: int, omega) -> list[ResidualInterval]:
    """The intervals where q(s) > p_omega(s) with their residual masses (closed form).

    Masses use normal_mass for q and the incomplete Beta CDF/SF for p_omega, so
    sum(mass) = 1 - acceptance_rass(delta, K, omega) with no numerical integration.
    """
    d = float(check_delta(delta))
    K = check_K(K)
    w = check_omega(omega, K)
    out = []
    for a, b, q_above in _pieces(d, K, w):
        if q_above:
            mass = float(normal_mass(a - d, b - d)) - float(_p_mass(a, b, K, w))
            out.append(ResidualInterval(a, b, max(mass, 0.0)))
    return out


def _acceptance_rass_scalar(d: float, K: int, w: np.ndarray) -> float:
    """integral min(q, p_omega) = sum over pieces of the smaller law's mass (no cancellation,
    so it keeps relative precision when the acceptance is ~1e-88)."""
    total = 0.0
    for a, b, q_above in _pieces(d, K, w):
        total += float(_p_mass(a, b, K, w)) if q_above else float(normal_mass(a - d, b - d))
    return float(np.clip(total, 0.0, 1.0))


# ----------------------------------------------------------------- the rank-weight LP
def _lp_nodes(breaks: np.ndarray, order: int = 8) -> tuple[np.ndarray, np.ndarray]:
    """Gauss-Legendre nodes and weights on every panel between sorted breakpoints."""
    x, wx = np.polynomial.legendre.leggauss(order)
    a, b = breaks[:-1], breaks[1:]
    half, mid = 0.5 * (b - a), 0.5 * (b + a)
    return (mid[:, None] + half[:, None] * x).ravel(), (half[:, None] * wx).ravel()


def _lp_domain(d: float, K: int) -> tuple[float, float]:
    """Where min(q, p_omega) has its mass, relative to its total: min(q, p_omega) <= q and
    <= p_omega <= K phi, so it lives below delta + S and above -S (small delta), and around
    tau* = ln(K)/delta + delta/2, where q = K phi (large delta, acceptance ~ 1e-88)."""
    tau_star = np.log(K) / d + 0.5 * d
    lo = min(max(-S_MAX, d - S_MAX), tau_star - S_MAX)
    hi = max(S_MAX, min(tau_star, d) + S_MAX)
    return lo, hi


def _panel_breaks(d: float, K: int, width: float, extra: np.ndarray = np.empty(0)) -> np.ndarray:
    lo, hi = _lp_domain(d, K)
    n = max(int(np.ceil((hi - lo) / width)), 1)
    extra = extra[(extra > lo) & (extra < hi)]
    br = np.unique(np.concatenate([np.linspace(lo, hi, n + 1), extra]))
    return br[np.concatenate([[True], np.diff(br) > 1e-9])]


def lp_matrices(delta: float, K: int, nodes: np.ndarray):
    """q_m = q(s_m) and A[m, r] = phi(s_m) b_r(Phi(s_m)) (so p_omega(s_m) = A @ omega), both
    divided by one scale (returned LP values are in those units)."""
    log_q = np.clip(log_phi(nodes - delta), -1400.0, None)
    log_A = np.clip(_log_rank_terms(nodes, K), -1400.0, None)
    # one common scale (the LP's optimum does not move): keeps HiGHS' absolute tolerances
    # meaningful when the acceptance is ~1e-88
    shift = float(np.max(np.minimum(log_q, log_A.max(axis=1))))
    # after scaling min(q_m, max_r A[m, r]) <= 1, so capping entries at 1e6 leaves q's role
    # unchanged and moves A's only for weights below 1e-6; it keeps HiGHS within its
    # accepted matrix range
    cap = np.log(1e6)
    return np.exp(np.minimum(log_q - shift, cap)), np.exp(np.minimum(log_A - shift, cap)), shift


def _solve_lp_highs(q, A, w_quad) -> tuple[np.ndarray, float]:
    """maximise sum_m w_m min(q_m, (A omega)_m) over the simplex, as an LP solved by HiGHS
    (interior point with crossover: the dual simplex stalls for minutes on the degenerate
    LPs of small delta and large K).

    Nodes where q_m >= max_r A[m, r] contribute the linear term w_m (A omega)_m and nodes
    where q_m <= min_r A[m, r] the constant w_m q_m; only the remaining nodes need a hinge
    variable t_m with t_m <= q_m (a bound) and t_m - (A omega)_m <= 0 (a row). Same optimum,
    a much smaller LP.
    """
    lin = q >= A.max(axis=1)
    const = q <= A.min(axis=1)
    hinge = ~(lin | const)
    Ah, qh, wh = A[hinge], q[hinge], w_quad[hinge]
    M, K = Ah.shape
    offset = float(w_quad[const] @ q[const])
    cost = np.concatenate([-(w_quad[lin] @ A[lin]), -wh])
    mat = sparse.vstack([
        sparse.hstack([sparse.csr_matrix(-Ah), sparse.identity(M, format="csr")]),
        sparse.csr_matrix(np.concatenate([np.ones(K), np.zeros(M)])[None, :]),
    ], format="csc")
    res = optimize.linprog(cost, A_ub=mat[:M], b_ub=np.zeros(M), A_eq=mat[M:], b_eq=[1.0],
                           bounds=np.column_stack([np.zeros(K + M), np.concatenate([np.ones(K), qh])]),
                           method="highs-ipm")
    if res.status != 0:
        raise RuntimeError(f"rank-weight LP failed: {res.message}")
    w = np.clip(res.x[:K], 0.0, None)
    return w / w.sum(), offset - res.fun


def _solve_lp_cvxpy(q, A, w_quad) -> tuple[np.ndarray, float]:
    """The same LP written with cvxpy (readable reference; slower than the HiGHS path).

    maximise sum_m w_m t_m  s.t.  t <= q,  t <= A omega,  omega in the simplex W_K.
    """
    import cvxpy as cp

    omega = cp.Variable(A.shape[1], nonneg=True)
    t = cp.Variable(len(q))
    prob = cp.Problem(cp.Maximize(w_quad @ t), [t <= q, t <= A @ omega, cp.sum(omega) == 1])
    prob.solve(solver=cp.CLARABEL)
    w = np.clip(omega.value, 0.0, None)
    return w / w.sum(), float(prob.value)


_KINKS: dict[int, dict[float, np.ndarray]] = {}  # K -> {delta: kinks of its optimum}


def _nearest_kinks(d: float, K: int, radius: float = 0.1) -> np.ndarray | None:
    solved = _KINKS.get(K)
    if not solved:
        return None
    near = min(solved, key=lambda x: abs(x - d))
    return solved[near] if abs(near - d) <= radius else None


def _two_pass(d: float, K: int, solve, max_passes: int = 4) -> tuple[np.ndarray, float]:
    """Pass 1 on coarse panels only locates the kinks of min(q, p_omega) (skipped when a
    solved delta within 0.1 gives them); later passes break their panels at the previous
    optimum's kinks (with small panels around each), so that no quadrature panel straddles a
    kink; repeat while a kink moved by more than 0.01."""
    lo, hi = _lp_domain(d, K)
    kinks = _nearest_kinks(d, K)
    if kinks is None:
        nodes, wq = _lp_nodes(_panel_breaks(d, K, 2 * PANEL_WIDTH), order=4)
        q, A, log_scale = lp_matrices(d, K, nodes)
        w, val = solve(q, A, wq)
        kinks = crossings(d, K, w, lo=lo, hi=hi, step=0.05)
    for _ in range(max_passes - 1):
        breaks = (kinks[:, None] + np.array([-0.1, -0.02, 0.0, 0.02, 0.1])).ravel()
        nodes, wq = _lp_nodes(_panel_breaks(d, K, PANEL_WIDTH, breaks))
        q, A, log_scale = lp_matrices(d, K, nodes)
        w, val = solve(q, A, wq)
        used, kinks = kinks, crossings(d, K, w, lo=lo, hi=hi, step=0.05)
        if kinks.size == used.size and np.all(np.abs(kinks - used) < 0.01):
            break
    _KINKS.setdefault(K, {})[d] = kinks
    return w, val * np.exp(log_scale)


def rank_weights_cvxpy(delta: float, K: int) -> tuple[np.ndarray, float]:
    """Optimal weights and LP value from the cvxpy formulation (same nodes as rank_weights)."""
    d = float(check_delta(delta))
    K = check_K(K)
    if d == 0.0 or K == 1:
        return np.full(K, 1.0 / K), 1.0 if d == 0.0 else float("nan")
    return _two_pass(d, K, _solve_lp_cvxpy)


@functools.lru_cache(maxsize=16384)
def _solve_rank_weights(d: float, K: int) -> tuple[np.ndarray, float]:
    if d == 0.0 or K == 1:
        return np.full(K, 1.0 / K), float("nan")
    return _two_pass(d, K, _solve_lp_highs)


class RankWeightSolution(NamedTuple):
    """omega: optimal weights; lp_value: the LP's (quadrature) objective; acceptance: the exact
    integral min(q, p_omega) for that omega; quadrature_loss = |lp_value - acceptance|."""

    omega: np.ndarray
    lp_value: float
    acceptance: float
    quadrature_loss: float


@functools.lru_cache(maxsize=4096)
def _rank_weight_solution(d: float, K: int) -> RankWeightSolution:
    w, val = _solve_rank_weights(d, K)
    acc = _acceptance_rass_scalar(d, K, w)
    if not np.isfinite(val):
        val = acc
    return RankWeightSolution(w, val, acc, abs(val - acc))


def rank_weight_solution(delta: float, K: int) -> RankWeightSolution:
    """Optimal RASS weights with the LP value, the exact acceptance and the quadrature loss."""
    d = float(check_delta(delta))
    K = check_K(K)
    sol = _rank_weight_solution(d, K)
    return sol._replace(omega=sol.omega.copy())


def rank_weights(delta: float, K: int) -> np.ndarray:
    """Optimal rank weights omega (shape (K,)) for one delta (HiGHS LP; cached by (delta, K))."""
    d = float(check_delta(delta))
    K = check_K(K)
    return _solve_rank_weights(d, K)[0].copy()


def acceptance_rass(delta, K: int, omega=None):
    """integral min(q, p_omega) (exact, from the crossings); omega=None uses the optimal weights.

    Vectorised over ``delta`` by a loop (each delta needs its own crossings).
    """
    d = check_delta(delta)
    K = check_K(K)
    w_fixed = None if omega is None else check_omega(omega, K)
    out = np.empty(d.shape)
    for idx, di in np.ndenumerate(d):
        if w_fixed is None:
            out[idx] = _rank_weight_solution(float(di), K).acceptance
        else:
            out[idx] = _acceptance_rass_scalar(float(di), K, w_fixed)
    return out if d.ndim else float(out)
