"""Exact samplers for a residual law (q - p)_+ / mass, shared by D-GRS and RASS.

Both rules have a residual of the form

    r(s) = (q(s) - p(s))_+,   q(s) = phi(s - delta),   p(s) = phi(s) * B(s),

with B(s) = lambda_K for D-GRS and B(s) = sum_r omega_r b_r(Phi(s)) for RASS. Everything is
written through the log-ratio h(s) = log q(s) - log p(s) = delta s - delta^2 / 2 - log B(s),
so r(s) = q(s) * (-expm1(-h(s)))_+ keeps full relative precision for tiny delta (where q and p
agree to 12 digits) and never overflows for delta up to 40.

Two samplers, both exact:

* ``rejection``: propose Y ~ N(delta, 1) = q and accept w.p. (1 - p(Y)/q(Y))_+. Its efficiency is
  the residual mass, so the *expected* number of proposals per verified row is 1. A caller that
  knows a set S containing {q > p} may propose from q restricted to S instead
  (:func:`truncated_normal`): the accepted law is again (q - p)_+ / mass, and the efficiency
  rises by 1 / q(S). Rows still
  pending after ``max_proposals`` proposals (only rows with a tiny residual mass, i.e. tiny
  delta) finish with the inverse-CDF sampler. The number of proposals a row gets is decided
  before they are drawn, and the first accepted proposal has the residual law whatever that
  number, so the mixture is exact.
* ``icdf``: inverse CDF. The residual's support inside [delta - 12, delta + 12] (outside it the
  residual mass is < 4e-33) is cut into cells of width 1/32; sign changes of h at the cell
  edges locate the crossings of q and p, refined by bisection to machine precision, so each
  cell's positive part [a', b'] is known. On [a', b'] the residual is sampled at the 8
  Gauss-Legendre nodes; its degree-7 interpolant (relative error ~ (w/2)^8 / 8! |r^(8)/r|,
  below 1e-15 near delta and 1e-11 twelve units out, for the cell width w = 1/32)
  integrates in closed form to the cell CDF (a degree-8 polynomial). A row draws V, finds its
  cell from the cumulative masses, and solves the cell polynomial by safeguarded Newton.
  A positive bump narrower than one cell, with no sign change at the cell edges, would be
  missed (its mass is O(width^3)); the crossing counts of SPEC section 1 are far apart.
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple

import numpy as np
import torch

from speccheck.verifiers.base import positive_uniform, uniform

Tensor = torch.Tensor
# propose(rows[n] | None, m) -> [n, m] proposals from q (restricted to a superset of {q > p})
ProposeFn = Callable[["Tensor | None", int], Tensor]
# log_B(s[n, m], rows[n]) -> log B at s for each row's parameters ([n, m]).
# (rows=None in sample_rejection means all rows, s then has shape [n, 1]).
LogBFn = Callable[[Tensor, Tensor], Tensor]

LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)
WINDOW = 12.0  # half-width of the residual window around delta
CELL = 1.0 / 32.0
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
def _ndtr(x: Tensor) -> Tensor:
    """Phi(x), full relative precision in the lower tail."""
    return 0.5 * torch.special.erfc(x * -math.sqrt(0.5))


class NormalPieces(NamedTuple):
    """N(mean_u, 1) restricted to a union of intervals, per group u, cut into one-tail pieces:
    lo, hi [U, P] (standardised), tail [U, P] (Phi(-lo) on the right of the mean, Phi(hi) on
    the left), mass, cum [U, P], right [U, P] (bool), mean [U]."""

    lo: Tensor
    hi: Tensor
    tail: Tensor
    mass: Tensor
    cum: Tensor
    right: Tensor
    mean: Tensor


def normal_pieces(mean: Tensor, lo: Tensor, hi: Tensor) -> NormalPieces:
    """Tables for :func:`sample_pieces`: mean [U]; lo, hi [U, J] disjoint intervals (+-inf
    allowed; an empty slot has lo >= hi). Each interval is split at the mean so that each piece
    lies in one tail, where its mass and inverse CDF keep full relative precision."""
    a = lo - mean[:, None]
    b = hi - mean[:, None]
    zero = torch.zeros((), dtype=a.dtype, device=a.device)
    bl = torch.minimum(b, zero)  # left piece [a, bl], right piece [ar, b]
    ar = torch.maximum(a, zero)
    t_left, t_right = _ndtr(bl), _ndtr(-ar)
    m_left = torch.where(a < bl, t_left - _ndtr(a), zero)
    m_right = torch.where(ar < b, t_right - _ndtr(-b), zero)
    mass = torch.cat([m_left, m_right], dim=1)
    cum = torch.cumsum(mass, dim=1)
    if bool((cum[:, -1] <= 0).any()):
        raise RuntimeError("normal_pieces: a group's intervals carry no normal mass")
    right = torch.zeros_like(mass, dtype=torch.bool)
    right[:, a.shape[1]:] = True
    return NormalPieces(torch.cat([a, ar], 1), torch.cat([bl, b], 1), torch.cat([t_left, t_right], 1),
                        mass, cum, right, mean)


def sample_pieces(tab: NormalPieces, groups: Tensor | None, n: int, m: int, generator) -> Tensor:
    """[n, m] draws; row i from group groups[i] (``groups=None``: a single group, U = 1).

    A piece is chosen by its mass; inside it, with V ~ U[0, 1), a right piece is inverted from
    its upper tail (x = -ndtri(Phi(-lo) - V mass)) and a left one from its lower tail
    (x = ndtri(Phi(hi) - V mass)): the argument of ndtri stays in (0, 1/2], never 0.
    """
    like = tab.mass
    P = tab.mass.shape[1]
    if groups is None:
        cum, total = tab.cum[0], tab.cum[0, -1]
        v = uniform((n, m), like, generator) * total
        j = torch.searchsorted(cum, v, right=True)
        last = int(torch.nonzero(tab.mass[0] > 0)[-1])

        def pick(x):
            return x[0][j]
        mean = tab.mean[0]
    else:
        cum = tab.cum[groups]
        v = uniform((n, m), like, generator) * cum[:, -1:]
        j = torch.searchsorted(cum, v, right=True)
        pos = tab.mass[groups] > 0
        last = (P - 1) - torch.argmax(torch.flip(pos, dims=[1]).to(torch.uint8), dim=1, keepdim=True)
        rows = groups[:, None]

        def pick(x):
            return x[rows, j]
        mean = tab.mean[groups][:, None]
    j = torch.minimum(j, torch.as_tensor(last, device=j.device))  # v rounding up to the total
    V = uniform((n, m), like, generator)
    z = torch.special.ndtri(pick(tab.tail) - V * pick(tab.mass))
    z = torch.where(pick(tab.right), -z, z)
    z = torch.minimum(torch.maximum(z, pick(tab.lo)), pick(tab.hi))  # a last-ulp step outside
    return z + mean


def sample_rejection(
    delta: Tensor,
    log_b: LogBFn,
    generator: torch.Generator | None,
    max_proposals: int = 4096,
    max_elems: int = 1 << 22,
    propose: ProposeFn | None = None,
) -> tuple[Tensor, Tensor]:
    """Rejection sampling of the residual for each row of ``delta[n]``: proposals Y ~ N(delta, 1)
    (or ``propose(rows, m)``: q restricted to a superset of {q > p}) accepted w.p.
    (1 - exp(-h(Y)))_+. Rounds give each pending row m proposals (the first accepted one is
    kept); m adapts to the acceptance rate observed in the previous round.

    Returns (x[n], done[n]); rows with done == False (more than ``max_proposals`` rejected
    proposals, i.e. a tiny residual mass) still need a sample: use :func:`sample_icdf`.
    """
    n = delta.shape[0]
    # round 0: one proposal per row, no index gathers
    if propose is None:
        x = torch.randn(n, generator=generator, dtype=torch.float64, device=delta.device)
        x += delta
    else:
        x = propose(None, 1)[:, 0]
    h = log_ratio(x, delta, log_b(x[:, None], None)[:, 0])
    done = uniform((n,), x, generator) < -torch.expm1(-h)
    pending = torch.nonzero(~done, as_tuple=True)[0]
    if pending.numel() == 0:
        return x, done
    frac = 1.0 - pending.numel() / n
    m = 1 if frac >= 0.5 else int(min(math.ceil(1.0 / max(frac, 1e-12)), 1 << 20))
    used = 1
    while pending.numel() and used < max_proposals:
        m = max(1, min(m, max_proposals - used, max_elems // pending.numel()))
        d = delta[pending, None]
        if propose is None:
            y = torch.randn((pending.numel(), m), generator=generator, dtype=torch.float64, device=delta.device)
            y += d
        else:
            y = propose(pending, m)
        h = log_ratio(y, d, log_b(y, pending))
        acc = uniform(y.shape, y, generator) < -torch.expm1(-h)
        if m == 1:
            got = acc[:, 0]
            vals = y[:, 0]
        else:
            got = acc.any(dim=1)
            first = torch.argmax(acc.to(torch.uint8), dim=1)
            vals = torch.gather(y, 1, first[:, None])[:, 0]
        rows = pending[got]
        x[rows] = vals[got]
        done[rows] = True
        n_got = rows.numel()
        used += m
        # per-proposal acceptance p observed this round -> 1 / p proposals next round (a row
        # then finishes w.p. ~1 - 1/e; this minimises the expected total of proposals)
        frac = n_got / pending.numel()
        p = 1.0 - (1.0 - frac) ** (1.0 / m) if frac < 1.0 else 1.0
        m = 1 if p >= 0.5 else int(min(max(math.ceil(1.0 / max(p, 1e-12)), 2 * m), 1 << 20))
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


def _horner(coef: Tensor, t: Tensor) -> Tensor:
    """sum_m coef[:, m] t^m for coef [n, M]."""
    f = coef[:, -1]
    for m in range(coef.shape[1] - 2, -1, -1):
        f = torch.addcmul(coef[:, m], f, t)
    return f


def _solve_cell(coef: Tensor, half: Tensor, target: Tensor, max_iter: int = 30) -> Tensor:
    """Solve F(t) = half * sum_m coef[:, m] t^m = target for t in [-1, 1] (F increasing, F(-1) = 0).

    Newton from the root of the quadratic Taylor model at t = -1, kept inside a shrinking
    bracket (bisection when a step leaves it); stops after a round in which every step was
    below 1e-11 (the error after that step is below 1e-20 in t).
    """
    deg = coef.shape[1] - 1
    dcoef = coef[:, 1:] * torch.arange(1, deg + 1, dtype=coef.dtype, device=coef.device)
    # initial guess: F(-1 + x) ~ half (F1 x + F2 x^2 / 2) with F1 = F'(-1), F2 = F''(-1)
    alt = torch.tensor([(-1.0) ** m for m in range(deg)], dtype=coef.dtype, device=coef.device)
    F1 = half * (dcoef * alt).sum(dim=1)
    d2 = dcoef[:, 1:] * torch.arange(1, deg, dtype=coef.dtype, device=coef.device)
    F2 = half * (d2 * alt[: deg - 1]).sum(dim=1)
    total = half * coef.sum(dim=1)
    lin = target / torch.where(total > 0, total, 1.0) * 2.0
    disc = F1 * F1 + 2.0 * F2 * target
    quad = 2.0 * target / (F1 + torch.sqrt(disc.clamp(min=0.0)))
    x = torch.where((disc >= 0) & (F1 + torch.sqrt(disc.clamp(min=0.0)) > 0) & (quad <= 2.0), quad, lin)
    t = (x - 1.0).clamp(-1.0, 1.0)
    lo = torch.full_like(t, -1.0)
    hi = torch.ones_like(t)
    for _ in range(max_iter):
        f = half * _horner(coef, t) - target
        fp = half * _horner(dcoef, t)
        neg = f < 0
        lo = torch.where(neg, t, lo)
        hi = torch.where(neg, hi, t)
        step = f / torch.where(fp > 0, fp, 1.0)
        t_new = t - step
        outside = (fp <= 0) | (t_new < lo) | (t_new > hi)
        t_new = torch.where(outside, 0.5 * (lo + hi), t_new)
        t_new = torch.where(f == 0, t, t_new)
        # quadratic convergence: once every step is < 1e-11 the remaining error is ~1e-22
        done = bool(((t_new - t).abs() <= 1e-11).all())
        t = t_new
        if done:
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
    if delta_u.shape[0] == 1 or bool((row_group == row_group[0]).all()):
        order = torch.arange(n, device=row_group.device)
        sorted_groups = row_group
    else:
        order = torch.argsort(row_group, stable=True)
        sorted_groups = row_group[order]
    used = torch.unique_consecutive(sorted_groups)
    per = max(1, min(256, max_elems // (N_CELLS * (N_GL + 1) * max(1, log_b_terms))))
    bounds = torch.searchsorted(sorted_groups, used[per::per].contiguous()).tolist() if used.numel() > per else []
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
