"""Exact samplers for a residual law (q - p)_+ / mass, shared by D-GRS and RASS.

Both rules have a residual of the form

    r(s) = (q(s) - p(s))_+,   q(s) = phi(s - delta),   p(s) = phi(s) * B(s),

with B(s) = lambda_K for D-GRS and B(s) = sum_r omega_r b_r(Phi(s)) for RASS. Everything is
written through the log-ratio h(s) = log q(s) - log p(s) = delta s - delta^2 / 2 - log B(s),
so r(s) = q(s) * (-expm1(-h(s)))_+ keeps full relative precision for tiny delta (where q and p
agree to 12 digits) and never overflows for delta up to 40.

Two samplers, both exact:

* ``rejection``: propose Y ~ N(delta, 1) = q and accept w.p. (1 - p(Y)/q(Y))_+. Its efficiency is
  the residual mass, so the *expected* number of proposals per verified row is 1; rows still
  pending after ``max_rounds`` doubling rounds (2^max_rounds - 1 proposals: only rows with a
  tiny residual mass, i.e. tiny delta) finish with the inverse-CDF sampler. Conditioning on the
  round a row finishes in does not bias it (each round's accepted value has the residual law),
  so the mixture is exact.
* ``icdf``: inverse CDF. The residual's support inside [delta - 12, delta + 12] (outside it the
  residual mass is < 4e-33) is cut into cells of width 1/64; sign changes of h at the cell
  edges locate the crossings of q and p, refined by bisection to machine precision, so each
  cell's positive part [a', b'] is known. On [a', b'] the residual is sampled at the 8
  Gauss-Legendre nodes; its degree-7 interpolant (relative error < 1e-13 on cells this narrow)
  integrates in closed form to the cell CDF (a degree-8 polynomial). A row draws V, finds its
  cell from the cumulative masses, and solves the cell polynomial by safeguarded Newton.
  A positive bump narrower than one cell, with no sign change at the cell edges, would be
  missed (its mass is O(width^3)); the crossing counts of SPEC section 1 are far apart.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np
import torch

from speccheck.verifiers.base import positive_uniform, uniform

Tensor = torch.Tensor
# log_B(s[n, m], rows[n]) -> log B at s for each row's parameters ([n, m]).
LogBFn = Callable[[Tensor, Tensor], Tensor]

LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)
WINDOW = 12.0  # half-width of the residual window around delta
CELL = 1.0 / 64.0
N_CELLS = int(round(2 * WINDOW / CELL))
N_GL = 8


def _interp_integral_coeffs() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """GL nodes/weights on [-1, 1] and C[i, m]: int_{-1}^t l_i(u) du = sum_m C[i, m] t^m."""
    x, w = np.polynomial.legendre.leggauss(N_GL)
    C = np.zeros((N_GL, N_GL + 1))
    for i in range(N_GL):
        e = np.zeros(N_GL)
        e[i] = 1.0
        li = np.polynomial.polynomial.polyfit(x, e, N_GL - 1)  # exact interpolation (8 points, degree 7)
        Li = np.polynomial.polynomial.polyint(li, lbnd=-1.0)
        C[i, : Li.size] = Li
    return x, w, C


_GL_X, _GL_W, _GL_C = _interp_integral_coeffs()
_CONST_CACHE: dict = {}


def _consts(device: torch.device):
    key = str(device)
    if key not in _CONST_CACHE:
        _CONST_CACHE[key] = tuple(torch.as_tensor(a, dtype=torch.float64, device=device) for a in (_GL_X, _GL_W, _GL_C))
    return _CONST_CACHE[key]


def log_ratio(s: Tensor, delta: Tensor, log_b: Tensor) -> Tensor:
    """h(s) = log q(s) - log p(s) = delta s - delta^2/2 - log B(s) (delta broadcast against s)."""
    return delta * s - 0.5 * delta * delta - log_b


def residual_density(s: Tensor, delta: Tensor, log_b: Tensor) -> Tensor:
    """(q - p)_+(s) = q(s) (1 - exp(-h(s)))_+ with full relative precision."""
    h = log_ratio(s, delta, log_b)
    q = torch.exp(-0.5 * (s - delta) ** 2 - LOG_SQRT_2PI)
    return torch.clamp(q * -torch.expm1(-h), min=0.0)


# ----------------------------------------------------------------------------- rejection
def sample_rejection(
    delta: Tensor,
    log_b: LogBFn,
    generator: torch.Generator | None,
    max_rounds: int = 11,
    max_elems: int = 1 << 22,
) -> tuple[Tensor, Tensor]:
    """Rejection sampling of the residual for each row of ``delta[n]``: proposals Y ~ N(delta, 1)
    accepted w.p. (1 - exp(-h(Y)))_+. Round k gives each pending row 2^k proposals.

    Returns (x[n], done[n]); rows with done == False still need a sample (use :func:`sample_icdf`).
    """
    n = delta.shape[0]
    x = torch.zeros_like(delta)
    done = torch.zeros(n, dtype=torch.bool, device=delta.device)
    pending = torch.arange(n, device=delta.device)
    for k in range(max_rounds):
        if pending.numel() == 0:
            break
        m = max(1, min(1 << k, max_elems // pending.numel()))
        d = delta[pending, None]
        y = d + torch.randn((pending.numel(), m), generator=generator, dtype=torch.float64, device=delta.device)
        h = log_ratio(y, d, log_b(y, pending))
        acc = uniform(y.shape, y, generator) < -torch.expm1(-h)
        got = acc.any(dim=1)
        first = torch.argmax(acc.to(torch.uint8), dim=1)
        rows = pending[got]
        x[rows] = y[got, first[got]]
        done[rows] = True
        pending = pending[~got]
    return x, done


# ----------------------------------------------------------------------------- inverse CDF
def _bisect_crossings(lo: Tensor, hi: Tensor, delta: Tensor, groups: Tensor, log_b: LogBFn, pos_hi: Tensor) -> Tensor:
    """Root of h in [lo, hi] (one sign change; ``pos_hi``: h(hi) > 0) by bisection to full precision."""
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if bool(((mid <= lo) | (mid >= hi)).all()):
            break
        hm = log_ratio(mid[:, None], delta[:, None], log_b(mid[:, None], groups))[:, 0]
        right = (hm > 0) == pos_hi  # mid lies on hi's side of the crossing
        hi = torch.where(right, mid, hi)
        lo = torch.where(right, lo, mid)
    return 0.5 * (lo + hi)


def _cell_tables(delta_u: Tensor, groups: Tensor, log_b: LogBFn):
    """Per group u: cell positive parts [a', b'] ([U, M]), residual at their GL nodes ([U, M, 8]),
    cumulative masses ([U, M]) and total mass ([U])."""
    gx, gw, _ = _consts(delta_u.device)
    U = delta_u.shape[0]
    j = torch.arange(N_CELLS + 1, dtype=torch.float64, device=delta_u.device)
    edges = (delta_u[:, None] - WINDOW) + CELL * j[None, :]
    h_e = log_ratio(edges, delta_u[:, None], log_b(edges, groups))
    pos = h_e > 0
    pa, pb = pos[:, :-1], pos[:, 1:]
    ea, eb = edges[:, :-1], edges[:, 1:]
    cross = pa != pb
    c = ea.clone()
    if bool(cross.any()):
        cu, cj = torch.nonzero(cross, as_tuple=True)
        c[cu, cj] = _bisect_crossings(ea[cu, cj], eb[cu, cj], delta_u[cu], groups[cu], log_b, pb[cu, cj])
    a2 = torch.where(pa, ea, torch.where(pb, c, ea))
    b2 = torch.where(pb, eb, torch.where(pa, c, ea))
    half = 0.5 * (b2 - a2)
    nodes = (0.5 * (a2 + b2))[..., None] + half[..., None] * gx
    flat = nodes.reshape(U, -1)
    r = residual_density(flat, delta_u[:, None], log_b(flat, groups)).reshape(U, N_CELLS, N_GL)
    mass = half * (r @ gw)
    cum = torch.cumsum(mass, dim=1)
    return a2, b2, r, mass, cum


def _solve_cell(coef: Tensor, half: Tensor, target: Tensor) -> Tensor:
    """Solve half * sum_m coef[:, m] t^m = target for t in [-1, 1] (increasing polynomial)."""
    deg = coef.shape[1] - 1
    dcoef = coef[:, 1:] * torch.arange(1, deg + 1, dtype=coef.dtype, device=coef.device)
    total = half * coef.sum(dim=1)
    t = torch.where(total > 0, 2.0 * target / torch.where(total > 0, total, 1.0) - 1.0, torch.zeros_like(target))
    t = t.clamp(-1.0, 1.0)
    lo = torch.full_like(t, -1.0)
    hi = torch.ones_like(t)
    for _ in range(40):
        f = coef[:, deg].clone()
        for m in range(deg - 1, -1, -1):
            f = f * t + coef[:, m]
        fp = dcoef[:, deg - 1].clone()
        for m in range(deg - 2, -1, -1):
            fp = fp * t + dcoef[:, m]
        f = half * f - target
        fp = half * fp
        lo = torch.where(f < 0, t, lo)
        hi = torch.where(f < 0, hi, t)
        step = f / torch.where(fp > 0, fp, 1.0)
        t_new = t - step
        bad = (fp <= 0) | ~(t_new > lo) | ~(t_new < hi)
        t_new = torch.where(bad, 0.5 * (lo + hi), t_new)
        t_new = torch.where(f == 0, t, t_new)
        converged = bool(((t_new - t).abs() <= 4e-16).all())
        t = t_new
        if converged:
            break
    return t


def sample_icdf(
    delta_u: Tensor,
    log_b: LogBFn,
    row_group: Tensor,
    generator: torch.Generator | None,
    max_elems: int = 1 << 23,
    log_b_terms: int = 1,
) -> Tensor:
    """Inverse-CDF residual samples for rows of groups: ``delta_u[U]`` holds each group's delta,
    ``log_b(s[n, m], groups[n])`` its log B, ``row_group[n]`` the group of each row.

    Returns x[n] with x[i] ~ (q - p)_+ / mass for group row_group[i].
    """
    n = row_group.shape[0]
    out = torch.empty(n, dtype=torch.float64, device=delta_u.device)
    if n == 0:
        return out
    _, _, gC = _consts(delta_u.device)
    V = positive_uniform((n,), delta_u, generator)
    order = torch.argsort(row_group, stable=True)
    sorted_groups = row_group[order]
    U = delta_u.shape[0]
    used = torch.unique_consecutive(sorted_groups)
    per = max(1, min(256, max_elems // (N_CELLS * (N_GL + 1) * max(1, log_b_terms))))
    bounds = torch.searchsorted(sorted_groups, used[per::per]).tolist() if used.numel() > per else []
    starts = [0] + bounds
    ends = bounds + [n]
    for st, en in zip(starts, ends):
        rows = order[st:en]
        g_rows = sorted_groups[st:en]
        gs = torch.unique_consecutive(g_rows)  # the groups of this chunk (sorted)
        local = torch.searchsorted(gs, g_rows)
        a2, b2, r, mass, cum = _cell_tables(delta_u[gs], gs, log_b)
        total = cum[:, -1]
        if bool((total <= 0).any()):
            bad = gs[total <= 0][0]
            raise RuntimeError(f"residual has no mass in [delta-12, delta+12] for delta={float(delta_u[bad])!r}")
        cn = cum / total[:, None]
        cn[:, -1] = 1.0
        keys = (cn + 2.0 * torch.arange(gs.numel(), dtype=torch.float64, device=cn.device)[:, None]).reshape(-1)
        v = V[rows]
        pos = torch.searchsorted(keys, v + 2.0 * local)
        j = (pos - local * N_CELLS).clamp(0, N_CELLS - 1)
        m = mass[local, j]
        target = (v * total[local] - (cum[local, j] - m)).clamp(min=0.0)
        target = torch.minimum(target, m)
        half = 0.5 * (b2[local, j] - a2[local, j])
        coef = r[local, j] @ gC  # [n, 9]: cell CDF polynomial in t / half
        t = _solve_cell(coef, half, target)
        out[rows] = a2[local, j] + half * (t + 1.0)
    return out
