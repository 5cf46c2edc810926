"""RASS: rank-aware selection with optimal rank weights (SPEC section 1).

Sort the K scalars, draw a rank r ~ omega, select S_(r); accept it w.p. min(1, q(S)/p_omega(S));
on rejection draw from (q - p_omega)_+ normalised (rejection sampling for ``rass``, inverse CDF
for ``rass-icdf``; see :mod:`speccheck.verifiers._residual`). Exact for every omega in W_K.

Weights. A batch mixes many deltas, so omega is tabulated on a fixed delta grid
(:data:`DELTA_GRID`: step 0.02 on [0, 3], 0.1 on [3, 8], 1 on [8, 40]) by the LP
(:func:`speccheck.theory.rank_weights`, solved lazily per (grid point, K) and cached), and a
row uses the linear interpolation between its two neighbouring grid points: a convex
combination, hence a valid omega, so the rule stays exact (q uses the row's own delta). It is
near-optimal too: the optimal weights are close to linear in delta between grid points (near
delta = 0 they are uniform + O(delta)); :meth:`RASS.acceptance` reports the acceptance of the
weights actually used (:func:`rass_weights`).

p_omega(s) = phi(s) B(Phi(s)) with B(u) = sum_r omega_r K!/((r-1)!(K-r)!) u^(r-1) (1-u)^(K-r),
evaluated with u = Phi(s) and 1 - u = Phi(-s) both to full relative precision. Near B = 1
(small delta, weights near uniform) log B = log1p(sum_r (omega_r - 1/K) C_r u^(r-1) (1-u)^(K-r)),
exactly 0 for uniform weights, so tiny deltas keep their residual mass.
"""

from __future__ import annotations

import hashlib
import math
import threading
from collections import OrderedDict
from pathlib import Path
from typing import NamedTuple, Sequence

import numpy as np
import torch
from numpy.typing import ArrayLike

from speccheck.verifiers import _cache, _residual
from speccheck.verifiers import special as _special
from speccheck.verifiers.base import (
    ScalarVerifier,
    VerifyResult,
    couple_selected,
    group_deltas,
    uniform,
)
from speccheck.verifiers.grid import DELTA_GRID, grid_bracket
from speccheck.verifiers.special import log_rank_binomials

Tensor = torch.Tensor
__all__ = ["DELTA_GRID", "grid_bracket", "RASS", "RASSInverseCDF", "rass_weights", "grid_weights",
           "build_weight_data", "residual_support", "support_rows", "log_mix"]

_LOCK = threading.Lock()
_OMEGA: dict[int, np.ndarray] = {}  # K -> [len(DELTA_GRID), K] LP weights (NaN rows: not solved yet)
_UNCHECKED: dict[int, np.ndarray] = {}  # K -> [len(DELTA_GRID)] rows read from the user cache, not yet certified
CACHE_GAP_RTOL = 0.1
"""A cached row is used only if its certified gap to the optimum is <= CACHE_GAP_RTOL (1 - A) + 1e-12
(:func:`speccheck.theory.rass.certificate.weights_gap`); else it is solved again."""


def _solver_sources() -> list[Path]:
    """Every source file of :mod:`speccheck.theory`, subpackages included (the solvers behind the
    weights: rass/core.py at K <= 16, rass/dual.py and exact.py above, and what they import)."""
    from speccheck import theory

    return sorted(Path(theory.__file__).resolve().parent.rglob("*.py"))


def _cache_file(K: int) -> Path | None:
    # keyed by the grid and the solvers' sources, so a changed solver never reuses stale weights
    sources = b"".join(path.read_bytes() for path in _solver_sources())
    key = hashlib.sha1(DELTA_GRID.tobytes() + sources).hexdigest()[:12]
    return _cache.cache_file(f"rass_weights_K{K}_{key}.npz")


PACKAGE_WEIGHTS = Path(__file__).resolve().parent.parent / "data" / "rass_weights.npz"
"""Shipped weight tables (``K{K}`` arrays over ``DELTA_GRID``), rebuilt by ``build_weight_data``."""


def _shipped(K: int) -> np.ndarray | None:
    """The shipped table for K if the package has one on this grid; every row a probability vector."""
    from speccheck.theory.validate import check_omega

    if not PACKAGE_WEIGHTS.exists():
        return None
    with np.load(PACKAGE_WEIGHTS) as data:
        if f"K{K}" not in data.files or not np.array_equal(data["grid"], DELTA_GRID):
            return None
        table = np.array(data[f"K{K}"], dtype=np.float64)
    for row in table:
        check_omega(row, K)
    return table


def _table(K: int) -> np.ndarray:
    table = _OMEGA.get(K)
    if table is None:
        shape = (DELTA_GRID.size, K)
        saved = _shipped(K)
        unchecked = np.zeros(DELTA_GRID.size, bool)
        if saved is None:
            saved = _cache.load(_cache_file(K), shape)
            if saved is not None:
                unchecked = ~np.isnan(saved[:, 0])
        table = saved if saved is not None else np.full(shape, np.nan)
        _OMEGA[K], _UNCHECKED[K] = table, unchecked
    return table


def _certified(d: float, K: int, row: np.ndarray) -> bool:
    """Whether cached weights ``row`` at delta ``d`` are a probability vector whose certified gap
    to the optimal acceptance is within CACHE_GAP_RTOL of their 1 - A."""
    from speccheck.errors import InputError
    from speccheck.theory.rass.certificate import weights_gap
    from speccheck.theory.validate import check_omega

    try:
        omega = check_omega(row, K)
    except InputError:
        return False
    rejection, gap = weights_gap(d, K, omega)
    return bool(np.isfinite(gap) and gap <= CACHE_GAP_RTOL * rejection + 1e-12)


def _check_cached(table: np.ndarray, K: int, g: np.ndarray) -> None:
    """Certify the cached rows among grid points ``g`` (once each); a row that fails becomes NaN."""
    unchecked = _UNCHECKED[K]
    for gi in np.unique(g[unchecked[g]]):
        if not _certified(float(DELTA_GRID[gi]), K, table[gi]):
            table[gi] = np.nan
        unchecked[gi] = False


def _save(K: int) -> None:
    _cache.save(_cache_file(K), _OMEGA[K])


def grid_weights(g: ArrayLike, K: int) -> np.ndarray:
    """LP rank weights at grid indices ``g`` ([n] -> [n, K]); new grid points are solved by
    :func:`speccheck.theory.rank_weights` and cached (in memory and in ~/.cache/speccheck, or
    $SPECCHECK_CACHE_DIR; set it to an empty string to disable the file)."""
    from speccheck.theory import rank_weights
    from speccheck.theory.validate import check_omega

    g = np.asarray(g, np.int64)
    with _LOCK:
        table = _table(K)
        _check_cached(table, K, g)
        missing = np.unique(g[np.isnan(table[g, 0])])
        for gi in missing:
            d = float(DELTA_GRID[gi])
            table[gi] = np.full(K, 1.0 / K) if d == 0.0 or K == 1 else check_omega(rank_weights(d, K), K)
        if missing.size:
            _save(K)
        return table[g].copy()


def build_weight_data(Ks: Sequence[int], path: Path = PACKAGE_WEIGHTS) -> Path:
    """Solve the optimal rank weights at every grid point for each K (from the starting points
    that do not read the shipped table, :func:`speccheck.theory.rass.cold_rank_weight_solution`)
    and write them, with the grid, to ``path`` (the shipped tables; ``speccheck reproduce
    rass-weights``). Tables of other K already in ``path`` (same grid) are kept, and the file is
    rewritten after each K, so a long build keeps its progress."""
    from speccheck.theory.rass.core import cold_rank_weight_solution
    from speccheck.theory.validate import check_omega

    tables = {"grid": DELTA_GRID}
    if path.exists():
        with np.load(path) as old:
            if "grid" in old.files and np.array_equal(old["grid"], DELTA_GRID):
                tables.update({k: np.array(old[k]) for k in old.files if k != "grid"})
    path.parent.mkdir(parents=True, exist_ok=True)
    for K in Ks:
        tables[f"K{K}"] = np.stack([np.full(K, 1.0 / K) if d == 0.0 or K == 1
                                    else check_omega(cold_rank_weight_solution(d, K).omega, K)
                                    for d in DELTA_GRID.tolist()])
        tmp = path.with_suffix(".tmp.npz")
        np.savez_compressed(tmp, **tables)
        tmp.replace(path)
    return path


def rass_weights(delta: ArrayLike, K: int) -> np.ndarray:
    """The omega the RASS kernel uses at each delta: linear interpolation between the LP weights
    at the two neighbouring grid points (a convex combination, so always in W_K; exactly the LP
    weights on grid points, uniform at delta = 0). Shape delta.shape + (K,)."""
    d = np.asarray(delta, np.float64)
    lo, hi, t = grid_bracket(d)
    need = np.unique(np.concatenate([lo, hi]))
    rows = grid_weights(need, K)
    w_lo = rows[np.searchsorted(need, lo)]
    w_hi = rows[np.searchsorted(need, hi)]
    w = (1.0 - t)[:, None] * w_lo + t[:, None] * w_hi
    return w.reshape(d.shape + (K,))


# ------------------------------------------------------------ proposal support for the residual
SUPPORT_STEP = 1.0 / 64.0  # s-grid step of the support search
SUPPORT_WINDOW = 14.0  # searched window around the cell; beyond it q has mass < Phi(-14) ~ 8e-45
_SUPPORT: dict[tuple[int, int, int], np.ndarray] = {}


def _positive_cells(H: np.ndarray) -> np.ndarray:
    """Grid cells [s_i, s_i+1] on which the smooth H may be > 0: max of the end values plus the
    interpolation error bound M h^2 / 8, with M a generous (4x + 1) estimate of |H''| from the
    second differences around the cell."""
    with np.errstate(invalid="ignore"):
        d2 = np.abs(np.diff(H, 2)) / SUPPORT_STEP**2
    d2 = np.nan_to_num(d2, nan=np.inf, posinf=np.inf)
    d2 = np.concatenate([d2[:1], d2, d2[-1:]])  # per node
    M = 4.0 * np.maximum.reduce([d2[:-2], d2[1:-1], d2[2:]]) + 1.0  # nodes i-1..i+1 -> cell i
    M = np.concatenate([M, M[-1:]])[: H.size - 1]
    top = np.maximum(H[:-1], H[1:])
    return top + M * SUPPORT_STEP**2 / 8.0 > 0.0


def residual_support(K: int, g_lo: int, g_hi: int) -> np.ndarray:
    """Intervals [J, 2] whose union contains {s: q_delta(s) > p_omega(s)} for EVERY delta in
    [DELTA_GRID[g_lo], DELTA_GRID[g_hi]] with omega any convex combination of the grid weights at
    g_lo and g_hi (so for every row the kernel interpolates in that grid cell).

    With h = delta s - delta^2/2 - log B_omega(s): log B of a mixture >= the smaller of the two
    ends' log B, and max over delta of delta s - delta^2/2 is explicit, so each row's {h > 0} lies
    in {H_lo > 0} U {H_hi > 0}, H_end(s) = max_delta(delta s - delta^2/2) - log B_end(s). These
    are found on an s-grid with an interpolation-error margin (:func:`_positive_cells`); the two
    tails beyond the searched window are always included, so the union is a true superset.
    Cached per (K, cell).
    """
    key = (K, g_lo, g_hi)
    out = _SUPPORT.get(key)
    if out is not None:
        return out
    d_lo, d_hi = float(DELTA_GRID[g_lo]), float(DELTA_GRID[g_hi])
    n = int(round((d_hi - d_lo + 2 * SUPPORT_WINDOW) / SUPPORT_STEP))
    s = d_lo - SUPPORT_WINDOW + SUPPORT_STEP * np.arange(n + 1)
    top = np.where(s < d_lo, d_lo * s - 0.5 * d_lo**2, np.where(s > d_hi, d_hi * s - 0.5 * d_hi**2, 0.5 * s * s))
    keep = np.zeros(n, bool)
    ends = sorted({g_lo, g_hi})
    # log B of both ends by the kernel's own evaluation (agrees with theory.log_p_omega - log phi
    # to 1e-12: tests/verifiers/test_residual.py), one call for the pair
    mix = mix_from_weights(grid_weights(ends, K), bool(d_lo < PRECISE_BELOW), torch.device("cpu"))
    log_b = log_mix_rows(torch.as_tensor(s).expand(len(ends), -1), mix, None).numpy()
    for row in log_b:
        keep |= _positive_cells(top - row)
    edges = np.flatnonzero(np.diff(np.concatenate([[0], keep.astype(np.int8), [0]])))
    iv = [[s[i], s[j]] for i, j in zip(edges[::2], edges[1::2])]
    if iv and iv[0][0] == s[0]:
        iv[0][0] = -np.inf
    else:
        iv.insert(0, [-np.inf, s[0]])
    if iv[-1][1] == s[-1]:
        iv[-1][1] = np.inf
    else:
        iv.append([s[-1], np.inf])
    out = np.asarray(iv, np.float64)
    _SUPPORT[key] = out
    return out


def support_rows(delta: np.ndarray, K: int) -> tuple[np.ndarray, np.ndarray]:
    """(lo, hi) [n, J] proposal intervals per delta (padded with empty (inf, inf) slots); deltas
    beyond the grid get the whole line."""
    d = np.asarray(delta, np.float64).ravel()
    lo, hi, _ = grid_bracket(d)
    cell = np.where(d >= DELTA_GRID[-1], -1, lo * DELTA_GRID.size + hi)  # -1: the whole line
    cells, inv = np.unique(cell, return_inverse=True)
    sets = [np.array([[-np.inf, np.inf]]) if c < 0 else residual_support(K, int(c // DELTA_GRID.size),
                                                                           int(c % DELTA_GRID.size))
            for c in cells]
    J = max(x.shape[0] for x in sets)
    table = np.full((cells.size, J, 2), np.inf)
    for i, x in enumerate(sets):
        table[i, : x.shape[0]] = x
    out = table[inv.ravel()]
    return out[..., 0], out[..., 1]


def _log_binom(K: int) -> np.ndarray:
    return log_rank_binomials(K)




class Mix(NamedTuple):
    """Coefficients of B(u) = sum_r A_r u^(r-1) (1-u)^(K-r), A_r = omega_r C_r, for U groups.

    In x = min(u, 1-u) / max(u, 1-u) <= 1, B = max(u, 1-u)^(K-1) sum_i c_i x^i with c_i = A_(i+1)
    where u <= 1/2 ("left") and c_i = A_(K-i) elsewhere. ``left``/``right`` [U, K] hold c shifted
    by its first positive index j0 (``j0`` [U, 2], left/right), so the sum is x^j0 times a
    polynomial >= c_j0 > 0: log B never underflows (x^j0 is taken in log space). ``Ad``: the
    same for B - 1 (coefficients (omega_r - 1/K) C_r, unshifted; None when every delta is >=
    :data:`PRECISE_BELOW`). ``cum`` [U, K-1]: cumulative omega (the rank draw). ``host``: for a
    single group, the same coefficients as Python floats (scalar arithmetic, no gathers).
    """

    left: Tensor
    right: Tensor
    j0: Tensor
    Ad: Tensor | None
    cum: Tensor
    host: tuple | None
    any_shift: bool


def _shifted(c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    pos = c > 0
    j0 = np.where(pos.any(axis=1), np.argmax(pos, axis=1), 0)
    K = c.shape[1]
    idx = np.arange(K)[None, :] + j0[:, None]
    out = np.where(idx < K, np.take_along_axis(c, np.minimum(idx, K - 1), axis=1), 0.0)
    return out, j0


def mix_from_weights(W: np.ndarray, precise: bool, device: torch.device) -> Mix:
    """:class:`Mix` for rank weights W [U, K] (host), uploaded in one copy."""
    U, K = W.shape
    A = W * np.exp(log_rank_binomials(K))
    left, j0l = _shifted(A)
    right, j0r = _shifted(A[:, ::-1])
    cum = np.cumsum(W, axis=1)[:, :-1]
    Ad = (W - 1.0 / K) * np.exp(log_rank_binomials(K)) if precise else np.zeros((U, K))
    j0 = np.stack([j0l, j0r], axis=1).astype(np.float64)
    packed = torch.as_tensor(np.concatenate([left, right, j0, Ad, cum], axis=1), dtype=torch.float64, device=device)
    parts = torch.split(packed, [K, K, 2, K, K - 1], dim=1)
    host = None
    if U == 1:
        host = (left[0].tolist(), right[0].tolist(), (int(j0l[0]), int(j0r[0])),
                (Ad[0].tolist(), Ad[0][::-1].tolist()) if precise else None)
    return Mix(parts[0], parts[1], parts[2], parts[3] if precise else None, parts[4], host,
               bool((j0 > 0).any()))


def _poly(left_c: Tensor, right_c: Tensor, host: tuple | None, left: Tensor, x: Tensor) -> Tensor:
    """sum_i c_i x^i, c = left_c where ``left`` else right_c (Horner); [n|1, K] or host lists."""
    if host is not None:  # one set of coefficients: select them with scalar arithmetic
        cl, cr = host
        K = len(cl)
        lf = left.to(x.dtype)
        f = lf * (cl[K - 1] - cr[K - 1]) + cr[K - 1]
        for i in range(K - 2, -1, -1):
            lo, hi = cr[i], cl[i]
            f = torch.addcmul(lf * (hi - lo) + lo if hi != lo else torch.full_like(x, lo), f, x)
        return f
    K = left_c.shape[-1]
    if x.shape[-1] == 1:  # one point per row: select all K coefficients at once (K + 1 ops, not 2K)
        c = torch.where(left, left_c, right_c)
        f = c[:, K - 1:K]
        for i in range(K - 2, -1, -1):
            f = torch.addcmul(c[:, i:i + 1], f, x)
        return f
    f = torch.where(left, left_c[:, K - 1:K], right_c[:, K - 1:K])
    for i in range(K - 2, -1, -1):
        f = torch.addcmul(torch.where(left, left_c[:, i:i + 1], right_c[:, i:i + 1]), f, x)
    return f


def _log_tail_asymptotic(a: Tensor) -> Tensor:
    """log Phi(-a) for a >= 37 (where Phi(-a) < 1e-300 underflows): -a^2/2 - log(a sqrt(2 pi))
    + log(1 - u + 3u^2 - 15u^3 + 105u^4 - 945u^5 + 10395u^6), u = 1/a^2 (the next term of the
    asymptotic series is < 2e-17 there; log1p by its Taylor series, |v| < 1e-3). Inputs below
    30 are clamped (their value is unused)."""
    a = torch.clamp(a, min=30.0)
    u = 1.0 / (a * a)
    v = u * (-1.0 + u * (3.0 + u * (-15.0 + u * (105.0 + u * (-945.0 + u * 10395.0)))))
    log_p = v * (1.0 + v * (-0.5 + v * (1.0 / 3.0 + v * (-0.25 + v * 0.2))))
    return -0.5 * a * a - torch.log(a) - _special.LOG_SQRT_2PI + log_p


def log_mix_rows(s: Tensor, mix: Mix, rows: Tensor | None) -> Tensor:
    """log B(Phi(s)) for s [n, m] with the coefficients of group ``rows[n]`` (None: mix has one
    group, or one per row of s); result [n, m]. No host sync, finite or -inf for every s.

    Near B = 1 (``mix.Ad``: some delta < PRECISE_BELOW) log B = log1p(B - 1) wherever
    |B - 1| < 1/2, which keeps tiny deltas' residual mass (exactly 0 for uniform weights)."""
    if mix.left.shape[-1] == 1:
        return torch.zeros_like(s)
    log_b, D = log_mix_parts(s, mix, rows)
    if D is None:
        return log_b
    return torch.where(D.abs() < 0.5, torch.log1p(D), log_b)


def gather_mix(mix: Mix, rows: Tensor) -> Mix:
    """The coefficients of groups ``rows[n]``, one row each (for :func:`log_mix_rows` with rows=None)."""
    return Mix(mix.left[rows], mix.right[rows], mix.j0[rows], None if mix.Ad is None else mix.Ad[rows],
               mix.cum, None, mix.any_shift)


def log_mix_parts(s: Tensor, mix: Mix, rows: Tensor | None) -> tuple[Tensor, Tensor | None]:
    """(log B, B - 1) at s [n, m] as :func:`log_mix_rows` computes them before it picks one:
    log B from the shifted polynomial, B - 1 from the ``mix.Ad`` coefficients (None without them)."""
    K = mix.left.shape[-1]
    if K == 1:
        return torch.zeros_like(s), (torch.zeros_like(s) if mix.Ad is not None else None)
    host = mix.host if rows is None else None
    if host is None and rows is not None:
        mix = gather_mix(mix, rows)
    # one erfc: the smaller of u = Phi(s) and 1 - u is the tail Phi(-|s|), the larger 1 - that
    small = 0.5 * torch.special.erfc(s.abs() * _special.SQRT1_2)
    left = s <= 0  # u <= 1 - u
    big = 1.0 - small
    x = small / big
    log_big = torch.log(big)
    log_scale = (K - 1) * log_big
    poly = _poly(mix.left, mix.right, None if host is None else host[:2], left, x)
    log_b = torch.log(poly) + log_scale
    if mix.any_shift:  # x^j0 in log space (never -inf * 0)
        if host is not None:
            j0l, j0r = host[2]
            j0 = left.to(s.dtype) * float(j0l - j0r) + float(j0r)
        else:
            j0 = torch.where(left, mix.j0[:, :1], mix.j0[:, 1:2])
        log_x = torch.log(x)
        tiny = ~(small > 1e-300)  # (NaN s: the tail, as before)
        # on the CPU the asymptotic tail (~20 passes) only where some point needs it (the check is
        # free there; an accelerator computes it everywhere rather than sync)
        if s.device.type != "cpu" or bool(tiny.any()):
            log_x = torch.where(tiny, _log_tail_asymptotic(s.abs()) - log_big, log_x)
        log_b = log_b + torch.where(j0 > 0, j0 * log_x, 0.0)
    if mix.Ad is None:
        return log_b, None
    if host is not None:
        D = _poly(None, None, host[3], left, x) * torch.exp(log_scale)
    else:
        D = _poly(mix.Ad, mix.Ad.flip(-1), None, left, x) * torch.exp(log_scale)
    return log_b, D


def log_mix(s: Tensor, A: Tensor, Ad: Tensor | None) -> Tensor:
    """log B(Phi(s)) for s [n, m] with per-row coefficients A, Ad [n or 1, K] (A_r = omega_r C_r,
    Ad_r = (omega_r - 1/K) C_r; ``Ad=None`` skips the log1p form); result [n, m].

    Convenience form of :func:`log_mix_rows` (copies the coefficients to the host once)."""
    K = A.shape[-1]
    W = (A.detach().cpu().numpy() / np.exp(log_rank_binomials(K)))
    mix = mix_from_weights(W, Ad is not None, s.device)
    return log_mix_rows(s, mix, None)


class GridLogTables:
    """log B of the grid weights on the absolute s-grid (:func:`_residual.grid_window`), for the
    inverse-CDF residual of many groups (:func:`_residual.sample_icdf`'s ``grid_log_b``).

    Grid point g (a point of :data:`DELTA_GRID`) covers the windows of every delta in [g - 1, g + 1]:
    edges (k_start[g] + j) CELL, j = 0..span (a row of ``edges`` [cap, span + 1, 2]) and the GL
    nodes of those cells (a row of ``nodes`` [cap, span, 2 N_GL]), each holding the pair
    (log B_g, B_(g+1) / B_g - 1) (nodes: 8 values of each; the second as expm1 of the log-ratio).
    Grid points below :data:`PRECISE_BELOW` (and their neighbours) use the log1p(B - 1) form, so
    log B keeps full precision relative to delta. Rows are computed on demand (no LP for a grid
    point no row uses) and stored compactly: ``slot`` (host, [G]) is g's row (-1: not computed
    yet), the storage grows by half when full, so the memory follows the grid points used (a sampler
    meets a few dozen per K), not the grid. ``wide`` (host, [G] bool): grid points with some
    |log B_(g+1) - log B_g| > :data:`WIDE_LOG_RATIO` (expm1 would overflow): their rows hold the
    log-ratio itself. Every row's values depend on its grid point alone (not on which other rows
    were filled with it, nor when): a warm table gives the bits of a fresh one."""

    def __init__(self, k_start: np.ndarray, span: int, device: torch.device):
        from speccheck.verifiers._residual import N_GL

        self.k_start = k_start
        self.span, self.width = span, 2 * N_GL
        self.slot = np.full(k_start.size, -1, np.int64)
        self.used = 0
        self.wide = np.zeros(k_start.size, bool)
        self.edges = torch.empty((0, span + 1, 2), dtype=torch.float64, device=device)
        self.nodes = torch.empty((0, span, self.width), dtype=torch.float64, device=device)

    @property
    def filled(self) -> np.ndarray:
        """[G] bool: grid points computed so far."""
        return self.slot >= 0

    def nbytes(self) -> int:
        return (self.edges.numel() + self.nodes.numel()) * 8

    def reserve(self, n_new: int) -> np.ndarray:
        """Rows for ``n_new`` more grid points (their indices); the storage grows by at least
        half when it grows (rows copied as they are)."""
        cap = self.edges.shape[0]
        if self.used + n_new > cap:
            cap = min(self.slot.size, max(cap + cap // 2, self.used + n_new, 16))
            edges = self.edges.new_empty((cap, *self.edges.shape[1:]))
            nodes = self.nodes.new_empty((cap, *self.nodes.shape[1:]))
            edges[: self.used], nodes[: self.used] = self.edges[: self.used], self.nodes[: self.used]
            self.edges, self.nodes = edges, nodes
        rows = np.arange(self.used, self.used + n_new)
        self.used += n_new
        return rows


_GRID_TABLES: OrderedDict = OrderedDict()  # (K, device) -> GridLogTables
# all K's tables together: ~0.12 MB per grid-point row whatever K, so every row of 18 K (a battery's
# continuous layer fills them all) or a sampler's few dozen rows per K for hundreds of K
_GRID_TABLES_BYTES = 512 << 20
WIDE_LOG_RATIO = 700.0  # beyond: expm1 of the log-ratio may overflow; mix by logaddexp instead


def _grid_layout() -> tuple[np.ndarray, int, int]:
    """(k_start [G], span, P): the first edge and the common number of cells of each grid
    point's table, and the grid points (the first P) whose log B uses the precise form."""
    G = DELTA_GRID.size
    below = DELTA_GRID[np.maximum(np.arange(G) - 1, 0)]
    above = DELTA_GRID[np.minimum(np.arange(G) + 1, G - 1)]
    k_start = np.floor((below - _residual.WINDOW) / _residual.CELL)
    k_end = np.floor((above - _residual.WINDOW) / _residual.CELL) + _residual.N_GRID_CELLS
    P = int(np.searchsorted(DELTA_GRID, PRECISE_BELOW)) + 1
    return k_start, int((k_end - k_start).max()), P


def _log_b_at(points: Tensor, g: np.ndarray, K: int, precise: bool) -> Tensor:
    """log B of the grid weights at grid points g (one per row of points [n, m]), by the per-row
    tensor path even for one grid point (the host-scalar path of a single group rounds
    differently: a row would then depend on how many rows were filled with it)."""
    return log_mix_rows(points, mix_from_weights(grid_weights(g, K), precise, points.device)._replace(host=None), None)


def grid_log_tables(K: int, device: torch.device, need: np.ndarray) -> GridLogTables:
    """The (K, device) tables with at least the grid points ``need`` filled (cached; least
    recently used tables dropped beyond :data:`_GRID_TABLES_BYTES` in all)."""
    from speccheck.verifiers._residual import N_GL, grid_window

    key = (K, str(device))
    tab = _GRID_TABLES.get(key)
    k_start, span, P = _grid_layout()
    G = DELTA_GRID.size
    if tab is None:
        tab = _GRID_TABLES[key] = GridLogTables(k_start, span, device)
    _GRID_TABLES.move_to_end(key)
    missing = np.unique(np.asarray(need, np.int64))
    missing = missing[~tab.filled[missing]]
    for part in (missing[missing < P], missing[missing >= P]):
        if not part.size:
            continue
        edges, nodes = grid_window(torch.as_tensor(k_start[part], dtype=torch.float64, device=device), span)
        flat = torch.cat([edges, nodes.reshape(part.size, -1)], dim=1)
        precise = bool(part[0] < P)
        here = _log_b_at(flat, part, K, precise)
        ratio = _log_b_at(flat, np.minimum(part + 1, G - 1), K, precise) - here
        wide = (ratio.abs().amax(dim=1) > WIDE_LOG_RATIO).cpu().numpy()  # per row: log-ratios kept
        if wide.any():
            ratio = torch.where(torch.as_tensor(wide, device=device)[:, None], ratio, torch.expm1(ratio))
        else:
            ratio = torch.expm1(ratio)
        tab.wide[part] = wide
        slots = tab.reserve(part.size)
        rows = torch.as_tensor(slots, device=device)
        tab.edges[rows] = torch.stack([here[:, : span + 1], ratio[:, : span + 1]], dim=-1)
        tab.nodes[rows] = torch.cat([here[:, span + 1:].reshape(-1, span, N_GL),
                                     ratio[:, span + 1:].reshape(-1, span, N_GL)], dim=-1)
        tab.slot[part] = slots
    while len(_GRID_TABLES) > 1 and sum(t.nbytes() for t in _GRID_TABLES.values()) > _GRID_TABLES_BYTES:
        _GRID_TABLES.popitem(last=False)
    return tab


def grid_log_b_fn(d_host: np.ndarray, K: int, device: torch.device) -> _residual.GridLogB:
    """:class:`_residual.GridLogB` for groups with deltas ``d_host`` (for
    :func:`_residual.sample_icdf`): log B of each group's interpolated weights
    omega = (1 - t) w_g + t w_(g+1), i.e. B = (1 - t) B_g + t B_(g+1) (B is linear in omega):
    log B = log B_g + log1p(t (B_(g+1) / B_g - 1)), both terms read from the grid tables
    (a positive combination: no cancellation; where log B_g is tiny, for small deltas, it is
    exact to full relative precision and t expm1(.) is too). Where a table's log-ratio exceeds
    :data:`WIDE_LOG_RATIO` the pair is mixed by logaddexp instead. The tables are filled for
    grid points of the groups :func:`_residual.sample_icdf` says it will read (all of them if it
    does not say) on the first read (one upload, no sync). K = 1: B = 1, log B = 0 (no table)."""
    from speccheck.verifiers._residual import N_GL, N_GRID_CELLS

    # B is a mixture of the order-statistic densities b_r (each <= K on [0, 1]), so log B <= log K
    log_b_max = math.log(K) + 1e-9
    coef_state: dict = {}

    def cdf_coef(groups: Tensor) -> _residual.CDFCoef:
        """The closed-form CDF coefficients (:class:`_residual.CDFCoef`) of groups' weights."""
        if "coef" not in coef_state:
            W = rass_weights(d_host, K)  # the kernel's weights (its Mix is built from the same)
            binom = np.array([math.comb(K, j) for j in range(K + 1)], dtype=np.float64)
            zero = np.zeros((W.shape[0], 1))
            low = np.concatenate([zero, np.cumsum(W, axis=1)], axis=1) * binom
            up = np.concatenate([np.cumsum(W[:, ::-1], axis=1)[:, ::-1], zero], axis=1) * binom
            packed = torch.as_tensor(np.concatenate([low, up, W * np.exp(log_rank_binomials(K))], axis=1),
                                     dtype=torch.float64, device=device)
            coef_state["coef"] = torch.split(packed, [K + 1, K + 1, K], dim=1)
        return _residual.CDFCoef(*(c[groups] for c in coef_state["coef"]))

    if K == 1:
        def zeros(n_cols: int):
            return lambda k, groups, *_: torch.zeros((groups.shape[0], n_cols), dtype=torch.float64, device=device)

        return _residual.GridLogB(zeros(1), zeros(N_GL), log_b_max=log_b_max, cdf_coef=cdf_coef)
    lo, _, t = grid_bracket(d_host)
    state: dict = {}

    def prepare(groups: np.ndarray) -> None:
        state.clear()
        state["need"] = lo[groups]

    def setup() -> dict:
        if "tab" not in state:
            tab = grid_log_tables(K, device, state.get("need", lo))
            # per group: t, its grid point's first edge and its row in the tables (one upload;
            # rows of groups that are not read may be -1: clamped, never used)
            wide = tab.wide[lo]
            packed = torch.as_tensor(np.stack([t, tab.k_start[lo], np.maximum(tab.slot[lo], 0), wide]),
                                     dtype=torch.float64, device=device)
            state.update(tab=tab, t=packed[0], k_start=packed[1], row=packed[2].long(),
                         wide=packed[3] > 0 if wide.any() else None)
        return state

    def read(table: Tensor, k: Tensor, groups: Tensor, n_cols: int) -> Tensor:
        """log B of groups[i] at columns k[i] - k_start + (0..n_cols-1) of a table [rows, C, 2 w]
        (rows of contiguous (log B_g, ratio) values, read by index_select: ~10x a 2-D gather's
        speed); result [n, n_cols * w]."""
        st = setup()
        C, width = table.shape[1], table.shape[2]
        start = st["row"][groups] * C + (k - st["k_start"][groups]).long().clamp(0, C - n_cols)
        half = width // 2
        n = groups.shape[0]
        if n_cols > 1 and half == 1:  # windows of (log B_g, ratio) pairs: one strided window per group
            windows = table.reshape(-1, width).unfold(0, n_cols, 1)  # [R C - n_cols + 1, 2, n_cols] view
            picked = windows.index_select(0, start)  # [n, 2, n_cols], each row contiguous
            here, ratio = picked[:, 0], picked[:, 1]
        else:
            cols = torch.arange(n_cols, device=device)
            picked = table.reshape(-1, width).index_select(0, (start[:, None] + cols).reshape(-1))
            picked = picked.reshape(-1, n_cols, 2, half)
            here = picked[:, :, 0].reshape(n, n_cols * half)  # explicit sizes: n may be 0
            ratio = picked[:, :, 1].reshape(n, n_cols * half)
        tg = st["t"][groups][:, None]
        if st["wide"] is None:
            return here + torch.log1p(tg * ratio)
        w = st["wide"][groups][:, None]  # groups whose grid point's row holds log-ratios
        return torch.where(w, torch.logaddexp(here + torch.log1p(-tg), here + ratio + torch.log(tg)),
                           here + torch.log1p(tg * torch.where(w, 0.0, ratio)))

    def edges(k0: Tensor, groups: Tensor, n_cols: int = N_GRID_CELLS + 1) -> Tensor:
        return read(setup()["tab"].edges, k0, groups, n_cols)

    def nodes(k: Tensor, groups: Tensor) -> Tensor:
        return read(setup()["tab"].nodes, k, groups, 1)

    return _residual.GridLogB(edges, nodes, prepare, log_b_max=log_b_max, cdf_coef=cdf_coef)


PRECISE_BELOW = 0.25  # grid deltas below which log B uses the log1p(B - 1) form
TRUNCATE_BELOW = 0.6  # residual rows propose from q truncated to their support when q(S) < this
_TABLES: OrderedDict = OrderedDict()  # (K, device, delta bytes) -> (Mix, support tables), small U only
_TABLES_MAX = 64


def _device_tables(d_host: np.ndarray, K: int, device: torch.device, proposals: bool = True
                   ) -> tuple[Mix, tuple | None]:
    """(Mix, residual proposal tables) for the distinct deltas d_host: built on the host, uploaded
    once, and kept on the device for up to 64 small (U <= 16) delta sets. ``proposals=False``
    (the inverse-CDF residual, which proposes nothing): no proposal tables (None)."""
    key = (K, str(device), d_host.tobytes(), proposals)
    hit = _TABLES.get(key)
    if hit is not None:
        _TABLES.move_to_end(key)
        return hit
    W = rass_weights(d_host, K)  # [U, K], the weights acceptance() reports
    mix = mix_from_weights(W, bool(d_host.min() < PRECISE_BELOW), device)
    out = (mix, _support_tables(d_host, K, device) if proposals else None)
    if d_host.size <= 16:
        _TABLES[key] = out
        while len(_TABLES) > _TABLES_MAX:
            _TABLES.popitem(last=False)
    return out


def _support_tables(d_host: np.ndarray, K: int, device: torch.device) -> tuple | None:
    """Truncated-proposal tables (NormalPieces on the device) when the mean q(S) over the groups
    is below :data:`TRUNCATE_BELOW` (truncated proposals cost ~1.5x a plain normal draw: worth it
    only where they cut the number of proposals enough); None otherwise."""
    from speccheck.theory.normal import normal_mass

    lo, hi = support_rows(d_host, K)
    width_ok = lo < hi
    q_support = np.where(width_ok, normal_mass(np.where(width_ok, lo, 0.0) - d_host[:, None],
                                               np.where(width_ok, hi, 0.0) - d_host[:, None]), 0.0).sum(axis=1)
    if float(q_support.mean()) > TRUNCATE_BELOW or not np.all(q_support > 0):
        return None
    both = torch.as_tensor(np.stack([lo, hi]), dtype=torch.float64, device=device)
    mean = torch.as_tensor(d_host, dtype=torch.float64, device=device)
    return _residual.normal_pieces(mean, both[0], both[1], check=False), float(q_support.mean())


class RASS(ScalarVerifier):
    """Rank-aware selection with optimal (grid-cached) rank weights; rejection-sampled residual
    (inverse-CDF fallback for rows still pending after the rejection rounds: tiny residual mass).

    Host syncs per call are bounded whatever the batch: one copy of the distinct deltas to the
    host (the LP weights are solved and tabulated there), the rejection rounds' counts, and the
    fallback's; the tables live on the device, cached per (K, deltas, device)."""

    name = "rass"
    description = "rank-aware selection, optimal rank weights (delta grid), rejection-sampled residual"
    residual = "rejection"

    def acceptance(self, delta: ArrayLike, K: int) -> np.ndarray:
        """integral min(q, p_omega) with the grid weights this kernel uses, per delta."""
        from speccheck.theory import acceptance_rass
        from speccheck.theory.validate import check_delta

        d = check_delta(delta)
        W = rass_weights(d, K)
        out = np.empty(d.shape)
        for idx, di in np.ndenumerate(d):
            out[idx] = 1.0 if di == 0 else acceptance_rass(float(di), K, W[idx])
        return out

    def _kernel(self, delta: Tensor, s: Tensor, generator) -> VerifyResult:
        B, K = s.shape
        dev = s.device
        delta_u, group = group_deltas(delta)
        d_host = delta_u.cpu().numpy()
        mix, support = _device_tables(d_host, K, dev, proposals=self.residual != "icdf")
        single = delta_u.shape[0] == 1
        if K == 1:
            sel, index = s[:, 0], torch.zeros(B, dtype=torch.long, device=dev)
        else:
            if K == 2:  # a sort of two is a comparison
                swap = s[:, 0] > s[:, 1]
                vals = torch.stack([torch.minimum(s[:, 0], s[:, 1]), torch.maximum(s[:, 0], s[:, 1])], dim=1)
                order = torch.stack([swap.long(), (~swap).long()], dim=1)
            else:
                vals, order = torch.sort(s, dim=1)
            cum = mix.cum if single else mix.cum[group]
            r = (uniform((B, 1), s, generator) >= cum).sum(dim=1, keepdim=True)
            sel = torch.gather(vals, 1, r)[:, 0]
            index = torch.gather(order, 1, r)[:, 0]
        h = _residual.log_ratio(sel, delta, log_mix_rows(sel[:, None], mix, None if single else group)[:, 0])
        s_out, accepted, index, rej = couple_selected(sel, index, h, K, generator)
        # the residual runs even for no rejected row (an empty call): the same syncs at every batch size
        s_out[rej] = self._residual_rows(delta_u, mix, support, group[rej], generator, d_host)
        return s_out, accepted, index

    def _residual(self, delta_u: Tensor, A_u: Tensor, Ad_u: Tensor | None, group: Tensor, generator) -> Tensor:
        """Residual samples for rows of ``group`` from coefficient tensors (tests; one host copy)."""
        d_host = delta_u.cpu().numpy()
        K = A_u.shape[1]
        W = A_u.detach().cpu().numpy() / np.exp(log_rank_binomials(K))
        mix = mix_from_weights(W, Ad_u is not None, delta_u.device)
        return self._residual_rows(delta_u, mix, _support_tables(d_host, K, delta_u.device), group, generator)

    def _residual_rows(self, delta_u: Tensor, mix: Mix, support: tuple | None, group: Tensor, generator,
                       d_host: np.ndarray | None = None) -> Tensor:
        """Residual draws for rows of ``group``; ``d_host`` (the deltas on the host, as the kernel
        has them): many-group inverse-CDF chunks read log B from the grid tables
        (:func:`grid_log_b_fn`) instead of evaluating the rank polynomial per group."""
        single = delta_u.shape[0] == 1
        K = mix.left.shape[1]
        grid = None if d_host is None or single else grid_log_b_fn(d_host, K, delta_u.device)

        gathered: list = []  # (groups, their coefficients): the crossing search reads the same rows 9 times

        def log_b_groups(x, g):
            if single:
                return log_mix_rows(x, mix, None)
            if not gathered or gathered[0] is not g:
                gathered[:] = [g, gather_mix(mix, g)]
            return log_mix_rows(x, gathered[1], None)

        if self.residual == "icdf":
            return _residual.sample_icdf(delta_u, log_b_groups, group, generator, log_b_terms=K, grid_log_b=grid)
        if grid is not None:  # the rejection sampler's fallback keeps the quadrature tables
            grid = grid._replace(cdf_coef=None)
        n = group.shape[0]
        d_rows = delta_u.expand(n) if single else delta_u[group]

        def log_b_rows(x, rows):
            if single:
                return log_mix_rows(x, mix, None)
            return log_mix_rows(x, mix, group if rows is None else group[rows])

        propose = None if support is None else self._proposer(support[0], single, group, n, generator)

        def finish(rows):
            return _residual.sample_icdf(delta_u, log_b_groups, group[rows], generator, log_b_terms=K,
                                         grid_log_b=grid)

        x, _ = _residual.sample_rejection(d_rows, log_b_rows, generator, propose=propose, finish=finish)
        return x

    @staticmethod
    def _proposer(tab, single: bool, group, n_rows: int, generator) -> _residual.ProposeFn:
        """propose(rows, m) for sample_rejection: q truncated to each row's residual support."""

        def propose(rows, m):
            n = n_rows if rows is None else rows.shape[0]
            if single:
                return _residual.sample_pieces(tab, None, n, m, generator)
            return _residual.sample_pieces(tab, group if rows is None else group[rows], n, m, generator)

        return propose


class RASSInverseCDF(RASS):
    """RASS with the inverse-CDF residual sampler (crossing intervals + root refinement)."""

    name = "rass-icdf"
    description = "rank-aware selection, optimal rank weights (delta grid), inverse-CDF residual"
    residual = "icdf"
