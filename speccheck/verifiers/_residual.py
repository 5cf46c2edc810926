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
  rises by 1 / q(S). A fixed number of rounds (one proposal per row, then at most
  :data:`ROUNDS` rounds of m proposals per pending row, m sized from the acceptance rate seen so
  far); rows still pending after them (only rows with a tiny residual mass, i.e. tiny delta)
  finish with the inverse-CDF sampler. The number of proposals a row gets is decided before
  they are drawn, and the first accepted proposal has the residual law whatever that number,
  so the mixture is exact.
* ``icdf``: inverse CDF. The residual's support inside [delta - 12, delta + 12] (outside it the
  residual mass is < 4e-33) is cut into cells of width 1/32; sign changes of h at the cell
  edges locate the crossings of q and p, refined by a 16-section search (a fixed number of
  steps) to within 1/32 * 16^-8 ~ 7e-12 (a root off by eps moves O(eps^2) of mass: r vanishes
  linearly at a crossing, and no GL node lies within eps of a cell end), so each
  cell's positive part [a', b'] is known. On [a', b'] the residual is sampled at the 8
  Gauss-Legendre nodes; its degree-7 interpolant (relative error ~ (w/2)^8 / 8! |r^(8)/r|,
  below 1e-15 near delta and 1e-11 twelve units out, for the cell width w = 1/32)
  integrates in closed form to the cell CDF (a degree-8 polynomial). A row draws V, finds its
  cell from the cumulative masses, and solves the cell polynomial by safeguarded Newton.
  Groups with delta > 40 draw from q itself (equal to the residual in float64).
  A positive bump narrower than one cell, with no sign change at the cell edges, would be
  missed (its mass is O(width^3)); the crossing counts of SPEC section 1 are far apart.

  Many groups (rows with their own delta, e.g. the battery's continuous layer): a caller that
  can tabulate log B on the absolute grid s = k/32 once per rule parameter (RASS: per grid
  point of its rank weights; D-GRS: a constant) passes it as :class:`GridLogB`. Chunks of more
  than :data:`DENSE_GROUPS` groups then anchor their window on that grid (k0 = floor(32 (delta
  - 12)), N_GRID_CELLS = 769 cells: it still contains [delta - 12, delta + 12]), read log B at
  the edges and GL nodes from the tables, evaluate nodes only on the cells inside the support
  (compacted: the ~45% outside carry no mass) and call ``log_b`` only at the crossing cells,
  whose roots are bracketed by the cell's 10 known points (ends and GL nodes: width <= 5.7e-3)
  and refined by :data:`ILLINOIS_STEPS` Illinois steps (one evaluation each instead of the
  16-section's 15; the roots agree with a 14-step 16-section search to 2e-15 at K = 2 and
  5e-11 at K = 64, the resolution of h itself there). Same cells, nodes and polynomials, so
  the same accuracy; the cost per group no longer grows with the cost of log B (RASS: K).
  On the CPU the edge and node passes run in blocks of :data:`BLOCK_CELLS` cells (their
  temporaries stay in cache), and up to :data:`GRID_TABLE_CHUNKS` chunks build their tables
  together (rows still drawn per chunk): the same elementwise operations on the same values,
  so the draws are bit-identical to whole-array passes.

  Closed form (RASS's grid path, :attr:`GridLogB.cdf_coef`; rows with :data:`CF_MIN_DELTA` <=
  delta <= :data:`HUGE_DELTA`): the cells serve only to find the crossings (signs of h at the
  grid edges, edges beyond the far bound not evaluated, roots refined as above). Each positive
  interval's mass comes from the closed-form CDFs of q (ndtr) and of p: P(S <= s) = sum_r omega_r
  I_Phi(s)(r, K - r + 1), a Bernstein polynomial in Phi(s) with nonnegative coefficients, taken
  in whichever tail keeps its terms small (:class:`CDFCoef`). A row picks its interval from V
  and solves F(x) = Q(x) - P(x) = F(end) +- its mass from the interval's nearer end by
  safeguarded Newton (F' = q - p), from the root with p dropped (a bracket end). No quadrature:
  the draw is the exact inverse CDF up to rounding (mass error ~ 1e-16 / residual mass,
  relative); below CF_MIN_DELTA the quadrature tables keep the tiny mass's relative precision.

Device discipline (issue 17): host syncs and kernel launches per call are bounded by constants
independent of the batch size (one count per rejection round, one convergence check per
inverse-CDF chunk; compaction by ``nonzero_static``, fixed-step root searches); prefix sums use
:func:`scan_sum`, not CUDA's float cumsum (which raises in deterministic mode); constants are
uploaded once per device.
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple

import numpy as np
import torch

from speccheck.verifiers.base import positive_uniform, uniform
from speccheck.verifiers.special import LOG_SQRT_2PI, SQRT1_2, ndtr

Tensor = torch.Tensor
# propose(rows[n] | None, m) -> [n, m] proposals from q (restricted to a superset of {q > p})
ProposeFn = Callable[["Tensor | None", int], Tensor]
# log_B(s[n, m], rows[n]) -> log B at s for each row's parameters ([n, m]).
# (rows=None in sample_rejection means all rows, s then has shape [n, 1]).
LogBFn = Callable[[Tensor, Tensor], Tensor]


class GridLogB(NamedTuple):
    """log B tabulated on the absolute s-grid k * CELL (k integral, float64), for
    :func:`sample_icdf`: ``edges(k0[U], groups[U])`` -> log B of each group at the edges of the
    window that starts at k0 ([U, N_GRID_CELLS + 1], or [U, 1] if constant in s);
    ``nodes(k[n], groups[n])`` -> log B at the GL nodes of cells k ([n, N_GL] or [n, 1]); both at
    the points :func:`grid_window` / :func:`grid_nodes` give, bit for bit. ``prepare(groups)``
    (optional): told once per call, on the host, which groups will be read (so tables are built
    for those only). ``log_b_max`` (optional): sup of log B; cells whose left end has
    delta (s - delta/2) - log_b_max > :data:`FAR_H` then skip log B altogether (there
    h > FAR_H, so the residual equals q to the last bit). ``edges`` takes an optional third
    argument n_cols (the first n_cols edges of the window only). ``cdf_coef`` (optional):
    ``cdf_coef(groups[n])`` -> :class:`CDFCoef` of those groups: enables the closed-form path."""

    edges: Callable[[Tensor, Tensor], Tensor]
    nodes: Callable[[Tensor, Tensor], Tensor]
    prepare: Callable[[np.ndarray], None] | None = None
    log_b_max: float | None = None  # an upper bound of log B over all s and groups (enables the far path)
    cdf_coef: Callable[[Tensor], tuple[Tensor, Tensor, Tensor]] | None = None  # closed-form CDF (CDFCoef)


FAR_H = 40.0  # h above this: 1 - exp(-h) == 1.0 in float64 (exp(-40) = 4e-18 < 2^-54), so r = q exactly


WINDOW = 12.0  # half-width of the residual window around delta
CELL = 1.0 / 32.0
N_CELLS = int(round(2 * WINDOW / CELL))
N_GRID_CELLS = N_CELLS + 1  # a window anchored on the absolute grid k * CELL still covers [delta - 12, delta + 12]
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


def _consts(device: torch.device) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """GL nodes [8], weights [8], integral coefficients [8, 9] and the signs (-1)^m [8] on the
    device: uploaded in one copy on first use per device, then cached."""
    key = str(device)
    if key not in _CONST_CACHE:
        alt = np.array([(-1.0) ** m for m in range(N_GL)])
        packed = torch.as_tensor(np.concatenate([_GL_X, _GL_W, _GL_C.ravel(), alt]), dtype=torch.float64, device=device)
        x, w, C, a = torch.split(packed, [N_GL, N_GL, N_GL * (N_GL + 1), N_GL])
        _CONST_CACHE[key] = (x, w, C.reshape(N_GL, N_GL + 1), a)
    return _CONST_CACHE[key]


def log_ratio(s: Tensor, delta: Tensor, log_b: Tensor) -> Tensor:
    """h(s) = log q(s) - log p(s) = delta (s - delta/2) - log B(s) (delta broadcast against s).

    Written as delta (s - delta/2) so that no delta^2 overflows: for any finite delta the result
    is finite or +-inf, never NaN (huge delta: -inf at the drafts, +inf at the proposals)."""
    return delta * (s - 0.5 * delta) - log_b


def residual_density(s: Tensor, delta: Tensor, log_b: Tensor) -> Tensor:
    """(q - p)_+(s) = q(s) (1 - exp(-h(s)))_+ with full relative precision.

    Written as -min(0, q(s) expm1(-h(s))) with -h = log B - delta (s - delta/2) formed directly
    and log q by one fused multiply-add: the fewest passes over [n, m] (this is the inverse-CDF
    tables' inner loop)."""
    z = s - delta
    minus_h = log_b - delta * (s - 0.5 * delta)  # -h, in log_ratio's overflow-free form
    log_q = torch.addcmul(torch.full((), -LOG_SQRT_2PI, dtype=z.dtype, device=z.device), z, z, value=-0.5)
    r = torch.exp(log_q).mul_(torch.expm1(minus_h))
    return r.clamp_(max=0.0).neg_()  # >= 0 (a clamped point may read -0.0)


def scan_sum(x: Tensor) -> Tensor:
    """Inclusive prefix sums along the last axis, deterministic on every device.

    CUDA's float cumsum raises under ``torch.use_deterministic_algorithms(True)``; this
    Hillis-Steele scan (ceil(log2 n) shifted additions, elementwise ops only) gives the same
    bits on every run and 2 ceil(log2 n) ops whatever the batch."""
    n = x.shape[-1]
    shift = 1
    while shift < n:  # each step into a fresh buffer (the sums written in place: no concatenation copy)
        y = torch.empty_like(x)
        y[..., :shift] = x[..., :shift]
        torch.add(x[..., shift:], x[..., :-shift], out=y[..., shift:])
        x = y
        shift *= 2
    return x


def elem_budget(device: torch.device) -> int:
    """Most proposals one rejection round may hold: an eighth of the free memory over ~64 bytes
    per proposal on CUDA (float64 proposal, uniform, log B temporaries), 2^22 elsewhere (and
    when the free memory cannot be read, e.g. under an emulation)."""
    if device.type == "cuda":
        try:
            free, _ = torch.cuda.mem_get_info(device)
            return int(max(1 << 20, min(1 << 28, free // (8 * 64))))
        except (RuntimeError, AssertionError, AttributeError, ValueError):
            pass
    return 1 << 22


# ----------------------------------------------------------------------------- rejection


class NormalPieces(NamedTuple):
    """N(mean_u, 1) restricted to a union of intervals, per group u, cut into one-tail pieces:
    lo, hi [U, P] (standardised), tail [U, P] (Phi(-lo) on the right of the mean, Phi(hi) on
    the left), mass, cum [U, P], right [U, P] (bool), mean [U], last [U] (index of the last
    piece with positive mass)."""

    lo: Tensor
    hi: Tensor
    tail: Tensor
    mass: Tensor
    cum: Tensor
    right: Tensor
    mean: Tensor
    last: Tensor


def normal_pieces(mean: Tensor, lo: Tensor, hi: Tensor, check: bool = True) -> NormalPieces:
    """Tables for :func:`sample_pieces`: mean [U]; lo, hi [U, J] disjoint intervals (+-inf
    allowed; an empty slot has lo >= hi). Each interval is split at the mean so that each piece
    lies in one tail, where its mass and inverse CDF keep full relative precision.

    ``check`` (one host sync): raise if a group's intervals carry no normal mass; callers that
    know the masses on the host pass False."""
    a = lo - mean[:, None]
    b = hi - mean[:, None]
    zero = torch.zeros((), dtype=a.dtype, device=a.device)
    bl = torch.minimum(b, zero)  # left piece [a, bl], right piece [ar, b]
    ar = torch.maximum(a, zero)
    t_left, t_right = ndtr(bl), ndtr(-ar)
    m_left = torch.where(a < bl, t_left - ndtr(a), zero)
    m_right = torch.where(ar < b, t_right - ndtr(-b), zero)
    mass = torch.cat([m_left, m_right], dim=1)
    cum = scan_sum(mass)
    if check and bool((cum[:, -1] <= 0).any()):
        raise RuntimeError("normal_pieces: a group's intervals carry no normal mass")
    right = torch.zeros_like(mass, dtype=torch.bool)
    right[:, a.shape[1]:] = True
    P = mass.shape[1]
    last = (P - 1) - torch.argmax(torch.flip(mass > 0, dims=[1]).to(torch.uint8), dim=1)
    return NormalPieces(torch.cat([a, ar], 1), torch.cat([bl, b], 1), torch.cat([t_left, t_right], 1),
                        mass, cum, right, mean, last)


def sample_pieces(tab: NormalPieces, groups: Tensor | None, n: int, m: int, generator: torch.Generator | None
                  ) -> Tensor:
    """[n, m] draws; row i from group groups[i] (``groups=None``: a single group, U = 1).

    A piece is chosen by its mass; inside it, with V ~ U[0, 1), a right piece is inverted from
    its upper tail (x = -ndtri(Phi(-lo) - V mass)) and a left one from its lower tail
    (x = ndtri(Phi(hi) - V mass)): the argument of ndtri stays in (0, 1/2], never 0.
    """
    like = tab.mass
    if groups is None:
        cum = tab.cum[0]
        v = uniform((n, m), like, generator) * cum[-1]
        j = torch.searchsorted(cum, v, right=True)
        last = tab.last[0]

        def pick(x: Tensor) -> Tensor:
            return x[0][j]
        mean = tab.mean[0]
    else:
        cum = tab.cum[groups]
        v = uniform((n, m), like, generator) * cum[:, -1:]
        j = torch.searchsorted(cum, v, right=True)
        last = tab.last[groups][:, None]
        rows = groups[:, None]

        def pick(x: Tensor) -> Tensor:
            return x[rows, j]
        mean = tab.mean[groups][:, None]
    j = torch.minimum(j, last)  # v rounding up to the total
    V = uniform((n, m), like, generator)
    z = torch.special.ndtri(pick(tab.tail) - V * pick(tab.mass))
    z = torch.where(pick(tab.right), -z, z)
    z = torch.minimum(torch.maximum(z, pick(tab.lo)), pick(tab.hi))  # a last-ulp step outside
    return z + mean


ROUNDS = 3  # rejection rounds after the first (one proposal per row)
FinishFn = Callable[[Tensor], Tensor]  # finish(rows[n]) -> exact residual samples for those rows


def sample_rejection(
    delta: Tensor,
    log_b: LogBFn,
    generator: torch.Generator | None,
    max_proposals: int = 4096,
    max_elems: int | None = None,
    propose: ProposeFn | None = None,
    finish: FinishFn | None = None,
) -> tuple[Tensor, Tensor]:
    """Rejection sampling of the residual for each row of ``delta[n]``: proposals Y ~ N(delta, 1)
    (or ``propose(rows, m)``: q restricted to a superset of {q > p}) accepted w.p.
    (1 - exp(-h(Y)))_+; each row keeps its first accepted proposal.

    Round 0 gives every row one proposal; then at most :data:`ROUNDS` rounds give each pending
    row m proposals, m sized on the host from the acceptance rate observed so far (p^ =
    accepted / proposals): 2 / p^ per row in the first rounds (a row survives w.p. ~e^-2), and
    (log n_pending + 3) / p^ in the last one (expected survivors ~0.05), capped by
    ``max_proposals`` per row in all and by ``max_elems`` per round (default: from the device's
    free memory, :func:`elem_budget`). Each round costs ONE host sync (its two counts), and
    compacts the pending rows with ``nonzero_static`` (no sync): at most 1 + ROUNDS syncs per call,
    whatever n.

    Returns (x[n], done[n]). Rows with done == False (tiny residual mass) still need a sample:
    ``finish(rows)`` (e.g. :func:`sample_icdf`) draws them in place when given (then done is all
    True); otherwise use :func:`sample_icdf` on them. Whether a row gets its j-th proposal is
    decided before that proposal is drawn (from earlier rounds only), and a rejection carries no
    information about the accepted value, so the first accepted proposal (or the fallback's
    fresh draw) has the residual law: the result is exact.
    """
    n = delta.shape[0]
    dev = delta.device
    budget = int(max_elems) if max_elems else elem_budget(dev)
    if propose is None:
        x = torch.randn(n, generator=generator, dtype=torch.float64, device=dev)
        x += delta
    else:
        x = propose(None, 1)[:, 0]
    h = log_ratio(x, delta, log_b(x[:, None], None)[:, 0])
    done = uniform((n,), x, generator) < -torch.expm1(-h)
    n_got = int(torch.count_nonzero(done))  # the round's one sync
    n_pending, accepted, tried, used = n - n_got, n_got, n, 1
    pending = torch.nonzero_static(~done, size=n_pending)[:, 0]
    for rnd in range(1, ROUNDS + 1):
        if n_pending == 0 or used >= max_proposals:
            break
        p_hat = (accepted + 0.5) / (tried + 1.0)
        survive = math.log(n_pending) + 3.0 if rnd == ROUNDS else 2.0  # -log P(row survives)
        m = math.ceil(survive / max(-math.log1p(-min(p_hat, 0.5)), 1e-12))
        m = int(max(1, min(m, max_proposals - used, budget // n_pending, 1 << 24)))
        d = delta[pending, None]
        if propose is None:
            y = torch.randn((n_pending, m), generator=generator, dtype=torch.float64, device=dev)
            y += d
        else:
            y = propose(pending, m)
        h = log_ratio(y, d, log_b(y, pending))
        acc = uniform(y.shape, y, generator) < -torch.expm1(-h)
        got = acc.any(dim=1)
        first = torch.argmax(acc.to(torch.uint8), dim=1)
        vals = torch.gather(y, 1, first[:, None])[:, 0]
        x[pending] = torch.where(got, vals, x[pending])
        done[pending] = got
        counts = torch.stack([torch.count_nonzero(got), torch.where(got, first + 1, m).sum()]).tolist()
        n_got, n_tried = int(counts[0]), int(counts[1])
        accepted += n_got
        tried += n_tried
        used += m
        pending = pending[torch.nonzero_static(~got, size=n_pending - n_got)[:, 0]]
        n_pending -= n_got
    if finish is not None and n_pending:
        x[pending] = finish(pending)
        done[pending] = True
    return x, done


def rejected_outputs(rej: Tensor, sel: Tensor, delta: Tensor, uniform_groups: np.ndarray, uniform_rows: Tensor,
                     residual: FinishFn) -> Tensor:
    """Outputs of the rejected rows ``rej`` of a policy kernel (MCRS, MCRS-2) that selected the
    draft ``sel[B]`` and accepted it w.p. min(1, q / p_pi).

    Law: a row whose policy is the uniform one alone (p = phi exactly) returns the reflection
    delta - S of its draft (given rejection, delta - S ~ (q - phi)_+ / mass: the reflection
    coupling of SPEC section 1); every other row returns ``residual(rows)``, a draw from its
    own (q - p_pi)_+ / mass. ``uniform_groups`` (numpy, per delta group) says on the host whether
    all, none or some rows are uniform: ``residual`` is called at most once, on the non-uniform
    rows, and the per-row flags ``uniform_rows[B]`` are read only when the groups mix both (no
    host sync otherwise). Returns the outputs of ``rej`` in its order."""
    if uniform_groups.all():
        return delta[rej] - sel[rej]
    if not uniform_groups.any():
        return residual(rej)
    uni = uniform_rows[rej]
    out = torch.where(uni, delta[rej] - sel[rej], sel[rej])
    rest = rej[~uni]
    if rest.numel():
        out[~uni] = residual(rest)
    return out


# ----------------------------------------------------------------------------- inverse CDF
SECTIONS = 16  # points per bracket and step of the crossing search
# a 1/32 cell cut 16-fold 8 times: brackets of 2^-37 ~ 7e-12. A root error eps costs at most
# ~ q |h'| eps^2 / 2 of residual mass per crossing (r = q (1 - e^-h) vanishes linearly there), i.e.
# < 1e-20 relative to the cell's mass for |h'| < 1e3, and the cell's GL nodes (>= 0.02 of its
# width from its ends) never see the clamped side: below float64 resolution of every mass.
SECTION_STEPS = 8
NEWTON_STEPS = 8  # Newton steps between convergence checks (one check suffices in practice)
DENSE_GROUPS = 8  # up to this many groups per chunk: search every cell (no compaction sync)
GRID_CHUNK_GROUPS = 256  # most groups per chunk with grid tables (larger chunks measured slower: cache)
GRID_TABLE_CHUNKS = 4  # grid-path chunks whose cell tables are built together (their rows drawn per chunk)
HUGE_DELTA = 40.0  # beyond: (q - p)_+ / mass equals q to float64 precision on q's window


def _bisect_crossings(lo: Tensor, hi: Tensor, delta: Tensor, groups: Tensor, log_b: LogBFn, pos_hi: Tensor) -> Tensor:
    """Root of h in [lo, hi] (one sign change; ``pos_hi``: h(hi) > 0) by :data:`SECTION_STEPS`
    steps of a 16-section search (h at 15 interior points, keep the sub-bracket with the sign
    change), no host check. Shapes: lo, hi, pos_hi [n, c] with delta, groups [n]."""
    n, c = lo.shape
    frac = torch.arange(1, SECTIONS, dtype=lo.dtype, device=lo.device) / SECTIONS
    for _ in range(SECTION_STEPS):
        width = hi - lo
        pts = lo[..., None] + width[..., None] * frac  # [n, c, 15]
        flat = pts.reshape(n, c * (SECTIONS - 1))
        hm = log_ratio(flat, delta[:, None], log_b(flat, groups)).reshape(n, c, SECTIONS - 1)
        before = ((hm > 0) != pos_hi[..., None]).sum(dim=-1)  # points on lo's side of the crossing
        k_lo = before.to(lo.dtype)
        new_lo = torch.where(before > 0, lo + width * (k_lo / SECTIONS), lo)
        hi = torch.where(before < SECTIONS - 1, lo + width * ((k_lo + 1.0) / SECTIONS), hi)
        lo = new_lo
    return 0.5 * (lo + hi)


ILLINOIS_STEPS = 8  # secant steps of the grid path's crossing search, from a GL-node bracket


def _illinois_crossings(lo: Tensor, hi: Tensor, h_lo: Tensor, h_hi: Tensor, delta: Tensor, groups: Tensor,
                        log_b: LogBFn) -> Tensor:
    """Root of h in [lo, hi] (h(lo), h(hi) of opposite signs; all [n]) by :data:`ILLINOIS_STEPS`
    steps of the Illinois method (regula falsi that halves the stale end's value when the same
    end moves twice): one evaluation of h per step, a bracket kept throughout, superlinear
    convergence (order ~1.44) at a simple root. From a bracket of width <= 5.7e-3 (the cell's GL
    nodes) on the smooth h, 8 steps reach the float64 resolution of the root; the root error
    eps only moves ~q |h'| eps^2 / 2 of residual mass in any case. Returns the end of the final
    bracket with the smaller |h| (no host check)."""
    t_lo, t_hi = h_lo.clone(), h_hi.clone()  # true values (h_lo, h_hi get halved)
    moved_hi = torch.zeros_like(lo, dtype=torch.bool)
    moved_lo = torch.zeros_like(moved_hi)
    for _ in range(ILLINOIS_STEPS):
        denom = h_hi - h_lo
        x = hi - h_hi * (hi - lo) / torch.where(denom != 0, denom, 1.0)
        x = torch.where((x > lo) & (x < hi) & (denom != 0), x, 0.5 * (lo + hi))
        h_x = log_ratio(x[:, None], delta[:, None], log_b(x[:, None], groups))[:, 0]
        to_hi = (h_x > 0) == (t_hi > 0)  # x replaces the end with its sign
        h_lo = torch.where(to_hi & moved_hi, 0.5 * h_lo, h_lo)  # Illinois: the stale end's weight halves
        h_hi = torch.where(~to_hi & moved_lo, 0.5 * h_hi, h_hi)
        hi, h_hi, t_hi = torch.where(to_hi, x, hi), torch.where(to_hi, h_x, h_hi), torch.where(to_hi, h_x, t_hi)
        lo, h_lo, t_lo = torch.where(to_hi, lo, x), torch.where(to_hi, h_lo, h_x), torch.where(to_hi, t_lo, h_x)
        moved_hi, moved_lo = to_hi, ~to_hi
    return torch.where(t_lo.abs() < t_hi.abs(), lo, hi)


def _cell_tables(delta_u: Tensor, groups: Tensor, log_b: LogBFn) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Per group u: cell positive parts [a', b'] ([U, M]), residual at their GL nodes ([U, M, 8]),
    cell masses and cumulative masses ([U, M]).

    Crossings are bisected in place on every cell for at most :data:`DENSE_GROUPS` groups on an
    accelerator (no sync), else on the compacted crossing cells only (one sync; free on the CPU,
    where the in-place search would evaluate h at every cell's 15 points 8 times over)."""
    gx, gw, _, _ = _consts(delta_u.device)
    U = delta_u.shape[0]
    j = torch.arange(N_CELLS + 1, dtype=torch.float64, device=delta_u.device)
    edges = (delta_u[:, None] - WINDOW) + CELL * j[None, :]
    h_e = log_ratio(edges, delta_u[:, None], log_b(edges, groups))
    pos = h_e > 0
    pa, pb = pos[:, :-1], pos[:, 1:]
    ea, eb = edges[:, :-1], edges[:, 1:]
    cross = pa != pb
    if U <= DENSE_GROUPS and delta_u.device.type != "cpu":
        c = _bisect_crossings(ea, eb, delta_u, groups, log_b, pb)
    else:
        c = ea.clone()
        cu, cj = torch.nonzero(cross, as_tuple=True)
        c[cu, cj] = _bisect_crossings(ea[cu, cj][:, None], eb[cu, cj][:, None], delta_u[cu], groups[cu], log_b,
                                      pb[cu, cj][:, None])[:, 0]
    c = torch.where(cross, c, ea)
    a2 = torch.where(pa, ea, torch.where(pb, c, ea))
    b2 = torch.where(pb, eb, torch.where(pa, c, ea))
    half = 0.5 * (b2 - a2)
    nodes = (0.5 * (a2 + b2))[..., None] + half[..., None] * gx
    flat = nodes.reshape(U, -1)
    r = residual_density(flat, delta_u[:, None], log_b(flat, groups)).reshape(U, N_CELLS, N_GL)
    mass = half * (r @ gw)
    cum = scan_sum(mass)
    return a2, b2, r, mass, cum


def grid_nodes(k: Tensor) -> Tensor:
    """GL nodes (k + 1/2) CELL + x_i CELL / 2 of the grid cells k (integral float64, any shape;
    result k.shape + (N_GL,)): values that depend on the integer k only."""
    return ((k + 0.5) * CELL)[..., None] + (0.5 * CELL) * _consts(k.device)[0]


def grid_window(k0: Tensor, n_cells: int) -> tuple[Tensor, Tensor]:
    """Points of the absolute s-grid window that starts at s = k0 * CELL (k0 [U], integral
    float64): edges (k0 + j) CELL, j = 0..n_cells ([U, n_cells + 1]), and each cell's GL nodes
    (:func:`grid_nodes`, [U, n_cells, N_GL]). The values depend on the integer k0 + j only, so a
    table built on one window and a row reading a sub-window or single cells agree bit for bit."""
    k = k0[:, None] + torch.arange(n_cells + 1, dtype=torch.float64, device=k0.device)
    return k * CELL, grid_nodes(k[:, :-1])


def grid_start(delta: Tensor) -> Tensor:
    """k0 = floor((delta - WINDOW) / CELL): the first grid edge of delta's window (float64)."""
    return torch.floor((delta - WINDOW) / CELL)


BLOCK_CELLS = 2048  # CPU: grid cells per block of the grid path's elementwise passes (temporaries in cache)


def _block(n: int, size: int, device: torch.device) -> int:
    """Block length for ``n`` items: ``size`` on the CPU (the ~20 elementwise passes over a block
    stay in cache: ~2x faster than whole-array passes, and bit-identical, every op being
    elementwise); on an accelerator the whole array (launches stay independent of n)."""
    return max(1, size) if device.type == "cpu" else max(n, 1)


def _cell_tables_grid(delta_u: Tensor, groups: Tensor, log_b: LogBFn, grid: GridLogB
                      ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """:func:`_cell_tables` on the absolute grid window [k0 CELL, (k0 + N_GRID_CELLS) CELL]
    (which contains [delta - 12, delta + 12]), with log B at its edges and at the GL nodes of
    the cells inside the residual's support read from ``grid`` (tabulated once per rule
    parameter, not per group). Cells outside the support (h <= 0 at both ends) get no node
    evaluation at all (mass 0); the crossing cells evaluate ``log_b`` themselves, for their roots
    (:func:`_illinois_crossings` from the bracket their ends and table nodes give) and their
    partial nodes. One host sync (the two cell counts, for the compaction).

    Returns (a2, b2, r_live, mass, cum, live_index): a2, b2, mass, cum [U, N_GRID_CELLS] as
    :func:`_cell_tables` gives them, the residual at the GL nodes of the live cells only
    (``r_live`` [n_live, N_GL]) and ``live_index`` [U, N_GRID_CELLS] (a cell's row in r_live;
    0 for dead cells, which carry no mass)."""
    gx, gw, _, _ = _consts(delta_u.device)
    k0 = grid_start(delta_u)
    edges = (k0[:, None] + torch.arange(N_GRID_CELLS + 1, dtype=torch.float64, device=k0.device)) * CELL
    U = delta_u.shape[0]
    h_edges = torch.empty_like(edges)
    # far: h >= delta (s - delta/2) - sup log B, increasing in s, so its value at ea bounds the cell
    far = torch.zeros((U, N_GRID_CELLS), dtype=torch.bool, device=delta_u.device)
    step = _block(U, BLOCK_CELLS * N_GL // N_GRID_CELLS, delta_u.device)  # ~ as many elements as a cell block
    for i in range(0, U, step):
        e_b, d_b = edges[i:i + step], delta_u[i:i + step, None]
        h_edges[i:i + step] = log_ratio(e_b, d_b, grid.edges(k0[i:i + step], groups[i:i + step]))
        if grid.log_b_max is not None:
            far[i:i + step] = d_b * (e_b[:, :-1] - 0.5 * d_b) - grid.log_b_max > FAR_H
    pos = h_edges > 0
    pa, pb = pos[:, :-1], pos[:, 1:]
    ea, eb = edges[:, :-1], edges[:, 1:]
    live, cross = pa | pb, pa != pb
    far &= live
    near = live & ~far
    counts = torch.stack([torch.count_nonzero(near), torch.count_nonzero(far), torch.count_nonzero(cross)])
    n_near, n_far, n_cross = counts.tolist()
    nu, nj = torch.nonzero_static(near, size=n_near).unbind(1)
    fu, fj = torch.nonzero_static(far, size=n_far).unbind(1)
    cu, cj = torch.nonzero_static(cross, size=n_cross).unbind(1)
    # the live cells (near ones first) by their flat index in [U, N_GRID_CELLS]: one-index puts
    flat_live = torch.cat([nu, fu]) * N_GRID_CELLS + torch.cat([nj, fj])
    live_index = torch.zeros(U * N_GRID_CELLS, dtype=torch.long, device=delta_u.device)
    live_index[flat_live] = torch.arange(n_near + n_far, device=delta_u.device)
    live_index = live_index.view(U, N_GRID_CELLS)
    # near cells: GL nodes of the whole cell, log B from the tables; far cells: r = q exactly
    # (on the CPU in blocks of BLOCK_CELLS cells, whose temporaries stay in cache: same values)
    k_near, k_far = k0[nu] + nj.to(torch.float64), k0[fu] + fj.to(torch.float64)
    r_live = torch.empty((n_near + n_far, N_GL), dtype=torch.float64, device=delta_u.device)
    step = _block(n_near, BLOCK_CELLS, delta_u.device)
    d_near, g_near = delta_u[nu][:, None], groups[nu]
    for i in range(0, n_near, step):
        k_b = k_near[i:i + step]
        r_b = residual_density(grid_nodes(k_b), d_near[i:i + step], grid.nodes(k_b, g_near[i:i + step]))
        r_live[i:i + r_b.shape[0]] = r_b
    minus_log_sqrt_2pi = torch.full((), -LOG_SQRT_2PI, dtype=torch.float64, device=delta_u.device)
    step = _block(n_far, BLOCK_CELLS, delta_u.device)
    d_far = delta_u[fu][:, None]
    for i in range(0, n_far, step):
        z_far = grid_nodes(k_far[i:i + step]) - d_far[i:i + step]
        r_b = torch.exp(torch.addcmul(minus_log_sqrt_2pi, z_far, z_far, value=-0.5))
        r_live[n_near + i:n_near + i + r_b.shape[0]] = r_b
    # crossing cells: bracket the root between two of the cell's 10 points (ends and GL nodes,
    # h from the tables), refine it (Illinois), then the nodes of [ea, root] or [root, eb]
    ea_c, eb_c, pa_c, pb_c = ea[cu, cj], eb[cu, cj], pa[cu, cj], pb[cu, cj]
    d_c, g_c = delta_u[cu], groups[cu]
    k_c = k0[cu] + cj.to(torch.float64)
    pts = torch.cat([ea_c[:, None], grid_nodes(k_c), eb_c[:, None]], dim=1)  # [n_cross, 10], increasing
    h_pts = torch.cat([h_edges[cu, cj][:, None], log_ratio(pts[:, 1:-1], d_c[:, None], grid.nodes(k_c, g_c)),
                       h_edges[cu, cj + 1][:, None]], dim=1)
    before = ((h_pts > 0) != pb_c[:, None]).sum(dim=1, keepdim=True)  # points on ea's side of the root
    side = torch.cat([before - 1, before], dim=1)
    ends, h_ends = torch.gather(pts, 1, side), torch.gather(h_pts, 1, side)
    root = _illinois_crossings(ends[:, 0], ends[:, 1], h_ends[:, 0], h_ends[:, 1], d_c, g_c, log_b)
    a_c = torch.where(pa_c, ea_c, root)
    b_c = torch.where(pb_c, eb_c, root)
    nodes_c = (0.5 * (a_c + b_c))[:, None] + (0.5 * (b_c - a_c))[:, None] * gx
    row_c = live_index[cu, cj]
    r_live[row_c] = residual_density(nodes_c, delta_u[cu][:, None], log_b(nodes_c, groups[cu]))
    a2 = ea.clone()
    a2[cu, cj] = a_c
    b2 = torch.where(pa & pb, eb, ea)
    b2[cu, cj] = b_c
    # half-widths of the live cells: CELL / 2 exactly for whole cells (their edges are multiples of
    # CELL = 2^-5, so eb - ea is exact), the crossing cells' own
    half = torch.full((n_near + n_far,), 0.5 * CELL, dtype=torch.float64, device=delta_u.device)
    half[row_c] = 0.5 * (b_c - a_c)
    mass = torch.zeros(U * N_GRID_CELLS, dtype=torch.float64, device=delta_u.device)
    mass[flat_live] = half * (r_live @ gw)
    mass = mass.view(U, N_GRID_CELLS)
    cum = scan_sum(mass)
    return a2, b2, r_live, mass, cum, live_index



# ----------------------------------------------------------------- closed-form inverse CDF (grid path)
CF_MIN_DELTA = 0.05  # closed-form residual CDF from this delta on (below: the quadrature tables keep full
# relative precision of the tiny residual mass; above, a mass error ~ 1e-16 / mass < 1e-13 relative)
CF_CHUNK_GROUPS = 4096  # groups per chunk of the closed-form path ([groups, N_GRID_CELLS + 1] edge values)
CF_NEWTON_STEPS = 8  # Newton steps between convergence checks
CF_MAX_STEPS = 64  # at most (a safeguarded Newton step never leaves its bracket: bisection at worst)


class CDFCoef(NamedTuple):
    """Per-group coefficients of the closed-form CDF of p (:attr:`GridLogB.cdf_coef`), all in the
    Bernstein basis b_j(u) = u^j (1 - u)^(K - j), u = Phi(s): ``low`` [n, K + 1] with
    P(S <= s) = sum_j low_j b_j(u), ``up`` [n, K + 1] with P(S > s) = sum_j up_j b_j(u) (both with
    nonnegative coefficients: each tail to full relative precision), ``dens`` [n, K] with
    p(s) = phi(s) sum_r dens_r u^(r - 1) (1 - u)^(K - r) (RASS: low_j = C(K, j) sum_{r <= j} omega_r,
    up_j = C(K, j) sum_{r > j} omega_r, dens_r = omega_r K C(K - 1, r - 1))."""

    low: Tensor
    up: Tensor
    dens: Tensor


def _bernstein(coef: Tensor, small: Tensor, big: Tensor, left: Tensor) -> Tensor:
    """sum_j coef[:, j] u^j (1 - u)^(D - j) (D = coef.shape[1] - 1) at points [n, m] given
    small = min(u, 1 - u), big = max(u, 1 - u) and left = (u <= 1/2): big^D times a polynomial in
    small / big <= 1 (Horner; coefficients reversed where u > 1/2), so no term overflows and a
    nonnegative sum keeps full relative precision."""
    D = coef.shape[1] - 1
    x = small / big
    f = torch.where(left, coef[:, D:D + 1], coef[:, 0:1])
    for i in range(D - 1, -1, -1):
        f = torch.addcmul(torch.where(left, coef[:, i:i + 1], coef[:, D - i:D - i + 1]), f, x)
    return f * big.pow(D)


def _tails(x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """(small, big, left): min and max of Phi(x), 1 - Phi(x) (one erfc) and Phi(x) <= 1/2."""
    small = 0.5 * torch.special.erfc(x.abs() * SQRT1_2)
    return small, 1.0 - small, x <= 0


def _cf_tables(delta_u: Tensor, groups: Tensor, log_b: LogBFn, grid: GridLogB, coef: CDFCoef) -> tuple:
    """Positive intervals of the residual (q - p)_+ inside each group's grid window (crossings of h
    found on the cell edges and refined as in :func:`_cell_tables_grid`), their masses by the
    closed-form CDFs of q and p, and per interval the CDF form that keeps its mass precise.

    Returns (a, b, upper, F_a, F_b, mass, cum) [U, J]: interval ends, the form (upper: tails
    P(S > s), else P(S <= s)), F = Q - P in that form at both ends (the upper form is F = P(S > s)
    - Q(S > s)), mass = F_b - F_a (0 in unused slots) and its prefix sums. One host sync."""
    dev = delta_u.device
    k0 = grid_start(delta_u)
    U = delta_u.shape[0]
    NE = N_GRID_CELLS + 1
    edges = (k0[:, None] + torch.arange(NE, dtype=torch.float64, device=dev)) * CELL
    h_edges = torch.full((U, NE), math.inf, dtype=torch.float64, device=dev)
    step = _block(U, BLOCK_CELLS * N_GL // N_GRID_CELLS, dev)
    for i in range(0, U, step):
        d_b = delta_u[i:i + step, None]
        cols = NE
        if grid.log_b_max is not None and dev.type == "cpu":
            # edges beyond j_far have h >= delta (s - delta/2) - sup log B > FAR_H > 0: not evaluated
            j_far = torch.ceil(((FAR_H + grid.log_b_max) / d_b + 0.5 * d_b) / CELL - k0[i:i + step, None])
            cols = int(min(NE, max(1.0, float(j_far.max()) + 2.0)))
        e_b = edges[i:i + step, :cols]
        h_edges[i:i + step, :cols] = log_ratio(e_b, d_b, grid.edges(k0[i:i + step], groups[i:i + step], cols))
    pos = h_edges > 0
    pa, pb = pos[:, :-1], pos[:, 1:]
    cross = pa != pb
    n_row = cross.sum(dim=1) + pos[:, 0] + pos[:, -1]  # interval ends per group (even)
    n_cross, n_pts = torch.stack([torch.count_nonzero(cross), n_row.max()]).tolist()
    cu, cj = torch.nonzero_static(cross, size=n_cross).unbind(1)
    # roots: bracket between two of the crossing cell's 10 points (ends and GL nodes), then Illinois
    ea_c, eb_c, pb_c = edges[cu, cj], edges[cu, cj + 1], pb[cu, cj]
    d_c, g_c = delta_u[cu], groups[cu]
    k_c = k0[cu] + cj.to(torch.float64)
    pts = torch.cat([ea_c[:, None], grid_nodes(k_c), eb_c[:, None]], dim=1)
    h_pts = torch.cat([h_edges[cu, cj][:, None], log_ratio(pts[:, 1:-1], d_c[:, None], grid.nodes(k_c, g_c)),
                       h_edges[cu, cj + 1][:, None]], dim=1)
    before = ((h_pts > 0) != pb_c[:, None]).sum(dim=1, keepdim=True)
    side = torch.cat([before - 1, before], dim=1)
    ends, h_ends = torch.gather(pts, 1, side), torch.gather(h_pts, 1, side)
    root = _illinois_crossings(ends[:, 0], ends[:, 1], h_ends[:, 0], h_ends[:, 1], d_c, g_c, log_b)
    # interval ends per group, in increasing order: the window's first edge if h > 0 there, the
    # roots (row-major order of the crossing cells), the last edge if h > 0 there
    P = max(2, int(n_pts))
    ends_all = edges[:, :1].expand(U, P).clone()
    first = pos[:, 0].long()
    if n_cross:
        per_row = cross.sum(dim=1)
        start = scan_sum(per_row[None].to(torch.float64))[0].long() - per_row
        slot = torch.arange(n_cross, device=dev) - start[cu] + first[cu]
        ends_all[cu, slot] = root
    last = (torch.arange(U, device=dev), torch.clamp(n_row - 1, min=0))
    ends_all[last] = torch.where(pos[:, -1], edges[:, -1], ends_all[last])
    a, b = ends_all[:, 0::2], ends_all[:, 1::2]
    valid = torch.arange(P // 2, device=dev)[None, :] < (n_row // 2)[:, None]
    b = torch.where(valid, b, a)
    # closed-form tails of q and p at both ends
    d = delta_u[:, None]
    q_low_a, q_up_a, q_low_b, q_up_b = ndtr(a - d), ndtr(d - a), ndtr(b - d), ndtr(d - b)
    sa, ba, la = _tails(a)
    sb, bb, lb = _tails(b)
    p_low_a, p_up_a = _bernstein(coef.low, sa, ba, la), _bernstein(coef.up, sa, ba, la)
    p_low_b, p_up_b = _bernstein(coef.low, sb, bb, lb), _bernstein(coef.up, sb, bb, lb)
    # the form whose terms are smaller (absolute rounding error ~ eps times them)
    upper = q_low_b + p_low_b > q_up_a + p_up_a
    F_a = torch.where(upper, p_up_a - q_up_a, q_low_a - p_low_a)
    F_b = torch.where(upper, p_up_b - q_up_b, q_low_b - p_low_b)
    mass = torch.where(valid, (F_b - F_a).clamp(min=0.0), 0.0)
    return a, b, upper, F_a, F_b, mass, scan_sum(mass)


def _bernstein_rows(cT: Tensor, cR: Tensor, small: Tensor, big: Tensor, left: Tensor) -> Tensor:
    """:func:`_bernstein` at one point per row (all [n]), with the coefficients transposed
    (``cT`` [D + 1, n], and ``cR`` the same reversed: contiguous rows for the Horner steps)."""
    D = cT.shape[0] - 1
    x = small / big
    f = torch.where(left, cT[D], cR[D])
    for i in range(D - 1, -1, -1):
        f = torch.addcmul(torch.where(left, cT[i], cR[i]), f, x)
    return f * big.pow(D)


def _cf_eval(x: Tensor, d: Tensor, coef: tuple, upper: Tensor) -> tuple[Tensor, Tensor]:
    """(F(x), F'(x)) per row ([n] each): F = Q - P in the row's form (see :func:`_cf_tables`),
    F' = q - p; ``coef`` = (P's coefficients, reversed, p's density coefficients, reversed),
    transposed ([K + 1, n], [K + 1, n], [K, n], [K, n])."""
    small, big, left = _tails(x)
    P = _bernstein_rows(coef[0], coef[1], small, big, left)
    B = _bernstein_rows(coef[2], coef[3], small, big, left)
    z = x - d
    Q = torch.where(upper, ndtr(-z), ndtr(z))
    F = torch.where(upper, P - Q, Q - P)
    fp = torch.exp(-0.5 * z * z - LOG_SQRT_2PI) - torch.exp(-0.5 * x * x - LOG_SQRT_2PI) * B
    return F, fp


def _cf_rows(rows: Tensor, local: Tensor, d_rows: Tensor, tables: tuple, coef: CDFCoef, V: Tensor, out: Tensor
             ) -> bool:
    """Draw rows ``rows`` (their groups' rows ``local`` of the tables) by safeguarded Newton on the
    closed-form residual CDF of their interval; returns whether some group had no mass.

    Blocks of :data:`CF_NEWTON_STEPS` steps, one host check after each; the rows that have
    converged (step below 1e-11 (1 + |x|), or F at the rounding level of its terms) leave."""
    a, b, upper, F_a, F_b, mass, cum = tables
    total = cum[:, -1]
    v = V[rows]
    t = v * total[local]
    c_rows = cum[local]
    J = c_rows.shape[1]
    j = (c_rows <= t[:, None]).sum(dim=1)
    last = J - 1 - torch.argmax(torch.flip(mass[local] > 0, dims=[1]).to(torch.uint8), dim=1)
    j = torch.minimum(j, last)[:, None]
    m = torch.gather(mass[local], 1, j)[:, 0]
    c_j = torch.gather(c_rows, 1, j)[:, 0]
    lo_t = (t - (c_j - m)).clamp(min=0.0)  # mass from the interval's left end to the draw
    hi_t = (c_j - t).clamp(min=0.0)  # ... from the draw to its right end
    a_r, b_r = torch.gather(a[local], 1, j)[:, 0], torch.gather(b[local], 1, j)[:, 0]
    up_r = torch.gather(upper[local], 1, j)[:, 0]
    Fa_r, Fb_r = torch.gather(F_a[local], 1, j)[:, 0], torch.gather(F_b[local], 1, j)[:, 0]
    # solve F(x) = ref from the nearer end (its F and the mass between stay small there)
    from_left = lo_t <= hi_t
    ref = torch.where(from_left, Fa_r + lo_t, Fb_r - hi_t)
    c_row = torch.where(up_r[:, None], coef.up, coef.low)
    cs = tuple(torch.stack(c.unbind(1)) for c in (c_row, c_row.flip(1), coef.dens, coef.dens.flip(1)))
    # start: the root with p dropped: from the left end (the mass of q alone from a reaches lo_t
    # first, so x0 <= root) or from the right one (x0 >= root); a bracket end too
    d_r = d_rows
    qa = torch.where(up_r, ndtr(d_r - a_r), ndtr(a_r - d_r))
    qb = torch.where(up_r, ndtr(d_r - b_r), ndtr(b_r - d_r))
    x_l = torch.where(up_r, d_r - torch.special.ndtri((qa - lo_t).clamp(min=0.0, max=1.0)),
                      d_r + torch.special.ndtri((qa + lo_t).clamp(min=0.0, max=1.0)))
    x_r = torch.where(up_r, d_r - torch.special.ndtri((qb + hi_t).clamp(min=0.0, max=1.0)),
                      d_r + torch.special.ndtri((qb - hi_t).clamp(min=0.0, max=1.0)))
    x_l = torch.minimum(torch.maximum(x_l, a_r), b_r)
    x_r = torch.minimum(torch.maximum(x_r, a_r), b_r)
    lo = torch.where(from_left, x_l, a_r)
    hi = torch.where(from_left, b_r, x_r)
    x = torch.where(from_left, x_l, x_r)
    K = coef.dens.shape[1]
    noise_rel = (K + 8) * 2.0 ** -52  # rounding of F: the Bernstein sum and the two tails
    result = torch.empty_like(x)
    idx = torch.arange(x.shape[0], device=x.device)
    steps = 0
    while True:
        for _ in range(CF_NEWTON_STEPS):
            F, fp = _cf_eval(x, d_r, cs, up_r)
            f = F - ref
            neg = f < 0
            lo = torch.where(neg, x, lo)
            hi = torch.where(neg, hi, x)
            x_new = x - f / torch.where(fp > 0, fp, 1.0)
            outside = (fp <= 0) | ~(x_new >= lo) | ~(x_new <= hi)
            x_new = torch.where(outside, 0.5 * (lo + hi), x_new)
            x_new = torch.where(f == 0, x, x_new)
            tol = 1e-11 * (1.0 + x.abs())
            done = ((x_new - x).abs() <= tol) | (f.abs() <= noise_rel * (F.abs() + ref.abs())) | (hi - lo <= tol)
            x = x_new
        steps += CF_NEWTON_STEPS
        result[idx] = x
        n_left, no_mass = torch.stack([torch.count_nonzero(~done), (total <= 0).any()]).tolist()
        if no_mass or not n_left or steps >= CF_MAX_STEPS:
            break
        keep = torch.nonzero_static(~done, size=n_left)[:, 0]
        idx, x, lo, hi, ref, d_r, up_r = idx[keep], x[keep], lo[keep], hi[keep], ref[keep], d_r[keep], up_r[keep]
        cs = tuple(c[:, keep] for c in cs)
    out[rows] = result
    return bool(no_mass)


def _sample_cf(delta_u: Tensor, log_b: LogBFn, rows: Tensor, row_group: Tensor, V: Tensor, grid: GridLogB,
               out: Tensor) -> None:
    """Closed-form inverse-CDF draws for ``rows`` (their groups ``row_group[rows]``), in chunks of
    :data:`CF_CHUNK_GROUPS` groups."""
    g_rows = row_group[rows]
    order = torch.argsort(g_rows, stable=True)
    rows, g_rows = rows[order], g_rows[order]
    used = torch.unique_consecutive(g_rows)
    per = CF_CHUNK_GROUPS
    bounds = torch.searchsorted(g_rows, used[per::per].contiguous()).tolist() if used.numel() > per else []
    for i, (st, en) in enumerate(zip([0] + bounds, bounds + [rows.shape[0]])):
        gs = used[i * per:(i + 1) * per]
        coef_g = CDFCoef(*grid.cdf_coef(gs))
        tables = _cf_tables(delta_u[gs], gs, log_b, grid, coef_g)
        local = torch.searchsorted(gs, g_rows[st:en])
        coef = CDFCoef(*(c[local] for c in coef_g))
        if (_cf_rows(rows[st:en], local, delta_u[g_rows[st:en]], tables, coef, V, out)):
            total = tables[-1][:, -1]
            bad = gs[total <= 0][0]
            raise RuntimeError(f"residual has no mass in [delta-12, delta+12] for delta={float(delta_u[bad])!r}")


def _horner(coef: Tensor, t: Tensor) -> Tensor:
    """sum_m coef[:, m] t^m for coef [n, M]."""
    f = coef[:, -1]
    for m in range(coef.shape[1] - 2, -1, -1):
        f = torch.addcmul(coef[:, m], f, t)
    return f


def _solve_cell(coef: Tensor, half: Tensor, target: Tensor, max_iter: int = 30) -> tuple[Tensor, Tensor, tuple]:
    """Solve F(t) = half * sum_m coef[:, m] t^m = target for t in [-1, 1] (F increasing, F(-1) = 0).

    Newton from the root of the quadratic Taylor model at t = -1, kept inside a shrinking
    bracket (bisection when a step leaves it). Runs blocks of :data:`NEWTON_STEPS` steps with no
    host check inside a block; returns (t, converged, state) where ``converged`` (0-d bool, on
    the device) says every row's last step was below 1e-11 (then the error is ~1e-22); the
    caller checks it once, with its other flags, and runs :func:`_newton_block` from ``state``
    while it is False.
    """
    deg = coef.shape[1] - 1
    dcoef = coef[:, 1:] * torch.arange(1, deg + 1, dtype=coef.dtype, device=coef.device)
    # initial guess: F(-1 + x) ~ half (F1 x + F2 x^2 / 2) with F1 = F'(-1), F2 = F''(-1)
    alt = _consts(coef.device)[3][:deg]
    F1 = half * (dcoef * alt).sum(dim=1)
    d2 = dcoef[:, 1:] * torch.arange(1, deg, dtype=coef.dtype, device=coef.device)
    F2 = half * (d2 * alt[: deg - 1]).sum(dim=1)
    total = half * coef.sum(dim=1)
    lin = target / torch.where(total > 0, total, 1.0) * 2.0
    disc = F1 * F1 + 2.0 * F2 * target
    quad = 2.0 * target / (F1 + torch.sqrt(disc.clamp(min=0.0)))
    x = torch.where((disc >= 0) & (F1 + torch.sqrt(disc.clamp(min=0.0)) > 0) & (quad <= 2.0), quad, lin)
    t = (x - 1.0).clamp(-1.0, 1.0)
    state = (t, torch.full_like(t, -1.0), torch.ones_like(t))
    return _newton_block(coef, dcoef, half, target, state, min(NEWTON_STEPS, max_iter))


def _newton_block(coef: Tensor, dcoef: Tensor, half: Tensor, target: Tensor, state: tuple, steps: int
                  ) -> tuple[Tensor, Tensor, tuple]:
    t, lo, hi = state
    small = torch.zeros((), dtype=torch.bool, device=t.device)
    for _ in range(steps):
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
        small = ((t_new - t).abs() <= 1e-11).all()
        t = t_new
    return t, small, (t, lo, hi)


def sample_icdf(
    delta_u: Tensor,
    log_b: LogBFn,
    row_group: Tensor,
    generator: torch.Generator | None,
    max_elems: int = 1 << 23,
    log_b_terms: int = 1,
    grid_log_b: GridLogB | None = None,
) -> Tensor:
    """Inverse-CDF residual samples for rows of groups: ``delta_u[U]`` holds each group's delta,
    ``log_b(s[n, m], groups[n])`` its log B, ``row_group[n]`` the group of each row.

    Returns x[n] with x[i] ~ (q - p)_+ / mass for group row_group[i]. Groups with delta >
    :data:`HUGE_DELTA` draw from q = N(delta, 1) (equal to the residual to float64 precision).
    Host syncs: 1 for one group (the Newton check, which also checks the masses); for several
    groups + 1 (sort), + 1 per chunk of groups beyond the first, + 1 per chunk of more than
    :data:`DENSE_GROUPS` groups. A second Newton block (1 more sync) only if the first did not
    converge everywhere.

    ``grid_log_b`` (optional, :class:`GridLogB`): log B tabulated on the absolute s-grid; chunks
    of more than :data:`DENSE_GROUPS` groups then build their cell tables from it
    (:func:`_cell_tables_grid`) and evaluate ``log_b`` only at their crossing cells, so the cost
    per group no longer grows with ``log_b_terms``. With its ``cdf_coef`` (several groups), rows
    with CF_MIN_DELTA <= delta <= HUGE_DELTA are drawn by the closed-form CDF
    (:func:`_sample_cf`), rows above HUGE_DELTA from q, the rest as above (+ 1 sync for the
    split, 2 + one per Newton block per chunk of :data:`CF_CHUNK_GROUPS` groups).
    """
    n = row_group.shape[0]
    out = torch.empty(n, dtype=torch.float64, device=delta_u.device)
    if n == 0:
        return out
    V = positive_uniform((n,), delta_u, generator)
    Z = torch.randn(n, generator=generator, dtype=torch.float64, device=delta_u.device)
    rest = None
    if grid_log_b is not None and grid_log_b.cdf_coef is not None and delta_u.shape[0] > 1:
        # closed form for CF_MIN_DELTA <= delta <= HUGE_DELTA, q itself above, tables below
        d_rows = delta_u[row_group]
        cf, huge = (d_rows >= CF_MIN_DELTA) & (d_rows <= HUGE_DELTA), d_rows > HUGE_DELTA
        n_cf, n_huge = torch.stack([torch.count_nonzero(cf), torch.count_nonzero(huge)]).tolist()
        rows_cf = torch.nonzero_static(cf, size=n_cf)[:, 0]
        rows_huge = torch.nonzero_static(huge, size=n_huge)[:, 0]
        rest = torch.nonzero_static(~(cf | huge), size=n - n_cf - n_huge)[:, 0]
        out[rows_huge] = d_rows[rows_huge] + Z[rows_huge]
        if n_cf:
            if grid_log_b.prepare is not None:
                grid_log_b.prepare(torch.unique(row_group[rows_cf]).cpu().numpy())
            _sample_cf(delta_u, log_b, rows_cf, row_group, V, grid_log_b, out)
        if rest.shape[0] == 0:
            return out
        grid_log_b = grid_log_b._replace(cdf_coef=None)
    d_tab = torch.clamp(delta_u, max=HUGE_DELTA)
    if delta_u.shape[0] == 1:
        order = torch.arange(n, device=row_group.device)
        sorted_groups = row_group
        chunks = [(0, n, delta_u.new_zeros(1, dtype=torch.long))]
    else:
        order = torch.argsort(row_group, stable=True) if rest is None else rest[torch.argsort(row_group[rest],
                                                                                            stable=True)]
        sorted_groups = row_group[order]
        n = order.shape[0]
        used = torch.unique_consecutive(sorted_groups)
        if grid_log_b is not None and grid_log_b.prepare is not None and used.numel() > DENSE_GROUPS:
            grid_log_b.prepare(used.cpu().numpy())  # one sync: build tables for these groups only
        # groups per chunk: bounded by the tables' size ([groups, cells, N_GL] <= max_elems) and,
        # without grid tables, by the cost of log B; with them, up to GRID_CHUNK_GROUPS (the
        # crossing search's small ops then serve more groups each)
        terms = 1 if grid_log_b is not None else max(1, log_b_terms)
        cap = GRID_CHUNK_GROUPS if grid_log_b is not None else 256
        per = max(1, min(cap, max_elems // (N_CELLS * (N_GL + 1) * terms)))
        bounds = torch.searchsorted(sorted_groups, used[per::per].contiguous()).tolist() if used.numel() > per else []
        starts, ends = [0] + bounds, bounds + [n]
        chunks = [(st, en, used[i * per:(i + 1) * per]) for i, (st, en) in enumerate(zip(starts, ends))]
    for batch in _table_batches(chunks, grid_log_b is not None):
        gs_all = batch[0][2] if len(batch) == 1 else torch.cat([gs for _, _, gs in batch])
        if grid_log_b is not None and gs_all.numel() > DENSE_GROUPS:
            tables = _cell_tables_grid(d_tab[gs_all], gs_all, log_b, grid_log_b)
        else:
            tables = (*_cell_tables(d_tab[gs_all], gs_all, log_b), None)
        a2, b2, r, mass, cum, live_index = tables
        offset = 0
        for st, en, gs in batch:
            u = slice(offset, offset + gs.numel())  # this chunk's rows of the tables
            offset += gs.numel()
            _icdf_rows(order[st:en], sorted_groups[st:en], gs, a2[u], b2[u], r if live_index is not None else r[u],
                       mass[u], cum[u], None if live_index is None else live_index[u], V, Z, delta_u, out)
    return out


def _table_batches(chunks: list, grid: bool) -> list[list]:
    """Consecutive chunks whose cell tables are built together: up to :data:`GRID_TABLE_CHUNKS`
    grid-path chunks (each of more than :data:`DENSE_GROUPS` groups) per build, so the build's
    fixed cost (the crossing search's small ops) serves more groups; every other chunk alone.
    Rows are still drawn per chunk (the same searches and Newton blocks as one chunk alone)."""
    batches: list[list] = []
    for chunk in chunks:
        big = grid and chunk[2].numel() > DENSE_GROUPS
        if big and batches and batches[-1][-1][3] and len(batches[-1]) < GRID_TABLE_CHUNKS:
            batches[-1].append((*chunk, big))
        else:
            batches.append([(*chunk, big)])
    return [[c[:3] for c in b] for b in batches]


def _icdf_rows(rows: Tensor, g_rows: Tensor, gs: Tensor, a2: Tensor, b2: Tensor, r: Tensor, mass: Tensor,
               cum: Tensor, live_index: Tensor | None, V: Tensor, Z: Tensor, delta_u: Tensor, out: Tensor) -> None:
    """Draw the rows ``rows`` (groups ``g_rows``, sorted, all in ``gs``) from their groups' cell
    tables (row u of a2, b2, mass, cum, live_index: group gs[u]) into ``out``."""
    gC = _consts(delta_u.device)[2]
    local = torch.searchsorted(gs, g_rows)
    n_cells = mass.shape[1]
    total = cum[:, -1]
    safe_total = torch.where(total > 0, total, 1.0)
    cn = cum / safe_total[:, None]
    cn[:, -1] = 1.0
    keys = (cn + 2.0 * torch.arange(gs.numel(), dtype=torch.float64, device=cn.device)[:, None]).reshape(-1)
    v = V[rows]
    pos = torch.searchsorted(keys, v + 2.0 * local)
    j = (pos - local * n_cells).clamp(0, n_cells - 1)
    m = mass[local, j]
    target = (v * total[local] - (cum[local, j] - m)).clamp(min=0.0)
    target = torch.minimum(target, m)
    half = 0.5 * (b2[local, j] - a2[local, j])
    r_cell = r[local, j] if live_index is None else r[live_index[local, j]]  # [n, N_GL]
    coef = r_cell @ gC  # [n, 9]: cell CDF polynomial in t / half
    dcoef = coef[:, 1:] * torch.arange(1, coef.shape[1], dtype=coef.dtype, device=coef.device)
    t, converged, state = _solve_cell(coef, half, target)
    no_mass, ok = torch.stack([(total <= 0).any(), converged]).tolist()
    if no_mass:
        bad = gs[total <= 0][0]
        raise RuntimeError(f"residual has no mass in [delta-12, delta+12] for delta={float(delta_u[bad])!r}")
    steps = NEWTON_STEPS
    while not ok and steps < 30:
        t, converged, state = _newton_block(coef, dcoef, half, target, state, NEWTON_STEPS)
        steps += NEWTON_STEPS
        ok = bool(converged)
    x = a2[local, j] + half * (t + 1.0)
    d_rows = delta_u[g_rows]
    out[rows] = torch.where(d_rows > HUGE_DELTA, d_rows + Z[rows], x)
