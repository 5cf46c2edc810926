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
from pathlib import Path

import numpy as np
import torch

from speccheck.verifiers import _cache, _residual
from speccheck.verifiers.base import (
    ScalarVerifier,
    VerifyResult,
    couple_selected,
    group_deltas,
    uniform,
)

Tensor = torch.Tensor
_SQRT1_2 = math.sqrt(0.5)

DELTA_GRID = np.unique(np.round(np.concatenate([
    np.arange(0.0, 3.0, 0.02), np.arange(3.0, 8.0, 0.1), np.arange(8.0, 40.0 + 1e-9, 1.0),
]), 12))

_LOCK = threading.Lock()
_OMEGA: dict[int, np.ndarray] = {}  # K -> [len(DELTA_GRID), K] LP weights (NaN rows: not solved yet)


def _cache_file(K: int) -> Path | None:
    # keyed by the grid and the LP's source, so a changed LP never reuses stale weights
    from speccheck.theory import rass as _lp

    key = hashlib.sha1(DELTA_GRID.tobytes() + Path(_lp.__file__).read_bytes()).hexdigest()[:12]
    return _cache.cache_file(f"rass_weights_K{K}_{key}.npy")


def _table(K: int) -> np.ndarray:
    table = _OMEGA.get(K)
    if table is None:
        shape = (DELTA_GRID.size, K)
        saved = _cache.load(_cache_file(K), shape)
        table = saved if saved is not None else np.full(shape, np.nan)
        _OMEGA[K] = table
    return table


def _save(K: int) -> None:
    _cache.save(_cache_file(K), _OMEGA[K])


def grid_weights(g, K: int) -> np.ndarray:
    """LP rank weights at grid indices ``g`` ([n] -> [n, K]); new grid points are solved by
    :func:`speccheck.theory.rank_weights` and cached (in memory and in ~/.cache/speccheck, or
    $SPECCHECK_CACHE_DIR; set it to an empty string to disable the file)."""
    from speccheck.theory import rank_weights
    from speccheck.theory._validate import check_omega

    g = np.asarray(g, np.int64)
    with _LOCK:
        table = _table(K)
        missing = np.unique(g[np.isnan(table[g, 0])])
        for gi in missing:
            d = float(DELTA_GRID[gi])
            table[gi] = np.full(K, 1.0 / K) if d == 0.0 or K == 1 else check_omega(rank_weights(d, K), K)
        if missing.size:
            _save(K)
        return table[g].copy()


def precompute_weights(K: int, delta_max: float = 40.0) -> None:
    """Solve (and cache) the LP at every grid point up to ``delta_max`` (the sampler's warm-up)."""
    grid_weights(np.nonzero(DELTA_GRID <= delta_max + 1e-12)[0], K)


def grid_bracket(delta) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(lo, hi, t) per delta (flattened): the kernel mixes grid points lo and hi with weight t
    (hi = lo where t = 0); deltas beyond the grid use its last point."""
    flat = np.minimum(np.asarray(delta, np.float64).ravel(), DELTA_GRID[-1])
    lo = np.clip(np.searchsorted(DELTA_GRID, flat, side="right") - 1, 0, DELTA_GRID.size - 2)
    t = np.clip((flat - DELTA_GRID[lo]) / (DELTA_GRID[lo + 1] - DELTA_GRID[lo]), 0.0, 1.0)
    return lo, np.where(t > 0.0, lo + 1, lo), t


def rass_weights(delta, K: int) -> np.ndarray:
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
    from speccheck.theory import log_p_omega
    from speccheck.theory.normal import log_phi

    key = (K, g_lo, g_hi)
    out = _SUPPORT.get(key)
    if out is not None:
        return out
    d_lo, d_hi = float(DELTA_GRID[g_lo]), float(DELTA_GRID[g_hi])
    n = int(round((d_hi - d_lo + 2 * SUPPORT_WINDOW) / SUPPORT_STEP))
    s = d_lo - SUPPORT_WINDOW + SUPPORT_STEP * np.arange(n + 1)
    top = np.where(s < d_lo, d_lo * s - 0.5 * d_lo**2, np.where(s > d_hi, d_hi * s - 0.5 * d_hi**2, 0.5 * s * s))
    keep = np.zeros(n, bool)
    for g in {g_lo, g_hi}:
        w = grid_weights([g], K)[0]
        log_b = log_p_omega(s, K, w) - log_phi(s)
        keep |= _positive_cells(top - log_b)
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
    r = np.arange(1, K + 1)
    return np.array([math.lgamma(K + 1) - math.lgamma(i) - math.lgamma(K - i + 1) for i in r])


def ndtr(x: Tensor) -> Tensor:
    """Phi(x) with full relative precision in the lower tail (torch.special.ndtr loses it there)."""
    return 0.5 * torch.special.erfc(x * -_SQRT1_2)


def _bernstein(a: Tensor, left: Tensor, x: Tensor) -> Tensor:
    """sum_r a_r x^(r-1) where ``left`` and sum_r a_r x^(K-r) elsewhere (Horner), a [n|1, K]."""
    K = a.shape[-1]
    if a.shape[0] == 1:  # one set of coefficients: select them with scalar arithmetic
        c = a[0].tolist()
        lf = left.to(x.dtype)
        f = lf * (c[K - 1] - c[0]) + c[0]
        for j in range(K - 2, -1, -1):
            lo, hi = c[K - 1 - j], c[j]
            f = torch.addcmul(lf * (hi - lo) + lo if hi != lo else torch.full_like(x, lo), f, x)
        return f
    f = torch.where(left, a[:, K - 1:K], a[:, 0:1])
    for j in range(K - 2, -1, -1):
        f = torch.addcmul(torch.where(left, a[:, j:j + 1], a[:, K - 1 - j:K - j]), f, x)
    return f


def log_mix(s: Tensor, A: Tensor, Ad: Tensor | None) -> Tensor:
    """log B(Phi(s)) for s [n, m] with per-row coefficients A, Ad [n or 1, K]; result [n, m].

    B = sum_r A_r u^(r-1) (1-u)^(K-r) by Horner in x = min(u, 1-u) / max(u, 1-u) <= 1 (all terms
    positive: full relative precision, no overflow). With ``Ad`` (coefficients of B - 1), log B is
    log1p(B - 1) wherever |B - 1| < 1/2, which keeps tiny deltas' residual mass; ``Ad=None`` skips it.
    """
    K = A.shape[-1]
    if K == 1:
        if Ad is None or not bool((Ad != 0).any()):
            return torch.zeros_like(s)
        return torch.log1p(Ad[:, :1] * torch.ones_like(s))
    # one erfc: the smaller of u = Phi(s) and 1 - u is the tail Phi(-|s|), the larger 1 - that
    small = 0.5 * torch.special.erfc(s.abs() * _SQRT1_2)
    left = s <= 0  # u <= 1 - u
    big = 1.0 - small
    x = small / big
    scale = big ** (K - 1)
    Bv = _bernstein(A, left, x) * scale
    logB = torch.log(Bv)
    under = Bv < 1e-280  # far tails (subnormal or 0, e.g. s < -14 with omega = e_8): log space
    if bool(under.any()):
        idx = torch.nonzero(under, as_tuple=True)
        su = s[idx]
        a = A.expand(s.shape[0], K)[idx[0]]
        r = torch.arange(K, dtype=s.dtype, device=s.device)
        terms = (torch.log(a) + r * torch.special.log_ndtr(su)[:, None]
                 + (K - 1 - r) * torch.special.log_ndtr(-su)[:, None])
        logB = logB.index_put(idx, torch.logsumexp(terms, dim=1))
    if Ad is None:
        return logB
    D = _bernstein(Ad, left, x) * scale
    return torch.where(D.abs() < 0.5, torch.log1p(D), logB)


PRECISE_BELOW = 0.25  # grid deltas below which log B uses the log1p(B - 1) form
TRUNCATE_BELOW = 0.6  # residual rows propose from q truncated to their support when q(S) < this


class RASS(ScalarVerifier):
    """Rank-aware selection with optimal (grid-cached) rank weights; rejection-sampled residual
    (inverse-CDF fallback for rows still pending after 2^11 - 1 proposals: tiny residual mass)."""

    name = "rass"
    description = "rank-aware selection, optimal rank weights (delta grid), rejection-sampled residual"
    residual = "rejection"

    def acceptance(self, delta, K: int) -> np.ndarray:
        """integral min(q, p_omega) with the grid weights this kernel uses, per delta."""
        from speccheck.theory import acceptance_rass
        from speccheck.theory._validate import check_delta

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
        d_np = delta_u.cpu().numpy()
        W = rass_weights(d_np, K)  # [U, K], the weights acceptance() reports
        C = np.exp(_log_binom(K))
        A_u = torch.as_tensor(W * C, dtype=torch.float64, device=dev)
        Ad_u = None
        if float(d_np.min()) < PRECISE_BELOW:
            Ad_u = torch.as_tensor((W - 1.0 / K) * C, dtype=torch.float64, device=dev)
        omega_u = torch.as_tensor(W, dtype=torch.float64, device=dev)
        single = delta_u.shape[0] == 1
        A_row = A_u if single else A_u[group]
        Ad_row = Ad_u if single or Ad_u is None else Ad_u[group]
        if K == 1:
            sel, index = s[:, 0], torch.zeros(B, dtype=torch.long, device=dev)
        else:
            if K == 2:  # a sort of two is a comparison
                swap = s[:, 0] > s[:, 1]
                vals = torch.stack([torch.minimum(s[:, 0], s[:, 1]), torch.maximum(s[:, 0], s[:, 1])], dim=1)
                order = torch.stack([swap.long(), (~swap).long()], dim=1)
            else:
                vals, order = torch.sort(s, dim=1)
            cum = torch.cumsum(omega_u, dim=1)[:, :-1]
            cum = cum if single else cum[group]
            r = (uniform((B, 1), s, generator) >= cum).sum(dim=1, keepdim=True)
            sel = torch.gather(vals, 1, r)[:, 0]
            index = torch.gather(order, 1, r)[:, 0]
        h = _residual.log_ratio(sel, delta, log_mix(sel[:, None], A_row, Ad_row)[:, 0])
        s_out, accepted, index, rej = couple_selected(sel, index, h, K, generator)
        if rej.numel():
            s_out[rej] = self._residual(delta_u, A_u, Ad_u, group[rej], generator)
        return s_out, accepted, index

    def _residual(self, delta_u, A_u, Ad_u, group, generator) -> Tensor:
        K = A_u.shape[1]

        def log_b_groups(x, g):
            return log_mix(x, A_u[g], None if Ad_u is None else Ad_u[g])

        if self.residual == "icdf":
            return _residual.sample_icdf(delta_u, log_b_groups, group, generator, log_b_terms=K)
        single = delta_u.shape[0] == 1
        d_rows = delta_u[group]

        def log_b_rows(x, rows):
            if single:
                return log_mix(x, A_u, Ad_u)
            g = group if rows is None else group[rows]
            return log_mix(x, A_u[g], None if Ad_u is None else Ad_u[g])

        lo_u, hi_u = (torch.as_tensor(a, dtype=torch.float64, device=delta_u.device)
                      for a in support_rows(delta_u.cpu().numpy(), K))
        tab = _residual.normal_pieces(delta_u, lo_u, hi_u)
        # truncated proposals cost ~1.5x a plain normal draw: worth it only where they cut the
        # number of proposals enough (q(S) = tab.cum[:, -1] well below 1)
        q_support = tab.cum[:, -1] if single else tab.cum[group, -1]
        if float(q_support.mean()) > TRUNCATE_BELOW:
            propose = None
        else:
            propose = self._proposer(tab, single, group, d_rows.shape[0], generator)
        x, done = _residual.sample_rejection(d_rows, log_b_rows, generator, max_elems=max(1 << 16, (1 << 23) // K),
                                             propose=propose)
        left = torch.nonzero(~done, as_tuple=True)[0]
        if left.numel():
            x[left] = _residual.sample_icdf(delta_u, log_b_groups, group[left], generator, log_b_terms=K)
        return x

    @staticmethod
    def _proposer(tab, single: bool, group, n_rows: int, generator):
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
