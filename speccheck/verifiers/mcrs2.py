"""MCRS-2: min-max conditioned rank selection (issue 29.3), the verification kernel.

Sort the K scalars; l = the smallest, m = the largest (u = Phi(s)). Draw a rank r ~ pi(i(l), j(m))
from a policy on (min-cell, max-cell) pairs (:mod:`speccheck.theory.mcrs.minmax`: G1 = 8 min-cells
x G2 = 64 max-cells, the max-cells being MCRS's), select S_(r) and accept it w.p. min(1, q / p_pi)
with p_pi(s) = phi(s) g_pi(Phi(s)); g_pi is a polynomial of degree K - 1 on each piece between
cell edges, evaluated from the same piece table the theory integrates (Horner in the piece's
relative coordinate). On rejection the residual (q - p_pi)_+ is drawn by rejection from the target
with the inverse-CDF sampler for the rows left over (the shared sampler of
:mod:`speccheck.verifiers._residual`), as MCRS. Exact for every feasible policy: the kernel always
uses the g_pi of the policy it drew from.

Policies. On MCRS-2's delta grid (:data:`speccheck.verifiers.mcrs2_data.GRID`: MCRS's, plus
points every 0.0125 on [0.0375, 0.4875] and every 0.00625 on [0.125, 0.2]), a row uses the
interpolation (1 - t) pi_lo + t pi_hi of its two neighbouring grid policies (a policy again, and
g = (1 - t) g_lo + t g_hi). At the grid points of :func:`speccheck.verifiers.mcrs2_data.minmax_indices`
(K = 2..4: every point in (0, 3]; K = 8: MCRS's points in [0.05, 3] and the fine points in
[0.1, 0.25]; other K up to 16: a range per K, :data:`speccheck.verifiers.mcrs2_data.MINMAX_RANGE`)
the grid policies are the checked min-max LP policies shipped in
speccheck/data/mcrs2_policies_G8x64.npz (loaded, never solved at run time); delta = 0 is the
uniform policy (p = phi, reflection as RMC); other MCRS grid points (RASS's gap < 1e-3 there, or
the max-only policy already closes >= 95% of it) use the MCRS kernel's max-only policy (shipped)
lifted to the pairs, other fine points the mix of their nearest neighbours with a policy; beyond
the grid the top rank. A policy missing from the package data falls back to the max-only one with
a RuntimeWarning saying so. K outside :data:`speccheck.verifiers.mcrs2_data.SHIPPED_KS` (K = 1,
K > 16, and any K <= 16 whose policies are not shipped): the MCRS kernel itself (MCRS's max-only
policies up to K = 16, RASS's above). :meth:`MCRS2.acceptance`
is the exact acceptance of the policy the kernel uses at each delta (docs/mcrs.md).
"""

from __future__ import annotations

import threading
import warnings

import numpy as np
import torch
from numpy.typing import ArrayLike

from speccheck.theory.mcrs import minmax as _mm
from speccheck.verifiers import _residual
from speccheck.verifiers import mcrs as _mcrs
from speccheck.verifiers import mcrs2_data as _data
from speccheck.verifiers.base import ScalarVerifier, VerifyResult, couple_selected, group_deltas, uniform
from speccheck.verifiers.special import ndtr as _ndtr

Tensor = torch.Tensor
G1, G2, MAX_MINMAX_K = _data.G1, _data.G2, _data.MAX_MINMAX_K
TOP_INDEX = _data.TOP
_LOCK = threading.Lock()


class _MinMaxTable:
    """Grid policies of one K as numpy MinMaxPolicy objects (built lazily, per used grid point)
    and their per-device torch tables."""

    def __init__(self, K: int):
        self.K = K
        self.policies: dict[int, _mm.MinMaxPolicy] = {}
        self.version = 0
        self.torch: dict[str, tuple[int, dict]] = {}
        self.declared: dict[float, float] = {}  # delta -> min-max acceptance (mixed policies are new objects)
        self._stored = _data.stored_policies(K)
        self._warned = False

    def pi(self, gi: int) -> np.ndarray:
        """The (G1, G2, K) policy at GRID point gi (see the module docstring for which)."""
        K = self.K
        if gi == 0:
            return np.full((G1, G2, K), 1.0 / K)
        if gi == TOP_INDEX:
            out = np.zeros((G1, G2, K))
            out[..., K - 1] = 1.0
            return out
        if self._stored is not None and np.isfinite(self._stored[1][gi]):
            return self._stored[0][gi]
        if K in _data.SHIPPED_KS and gi in _data.minmax_indices(K) and not self._warned:
            self._warned = True
            warnings.warn(f"mcrs2: no shipped min-max policies for K={K} at delta={_data.GRID[gi]:g} "
                          f"(package data missing or not matching); using the max-only MCRS policy there "
                          f"(exact, lower acceptance; build them with "
                          f"speccheck.verifiers.mcrs2_data.build_minmax_data)", RuntimeWarning, stacklevel=4)
        if _data.ON_MCRS_GRID[gi]:
            return _data.lifted_max_only(K, gi)
        # a fine point (FINE, FINER) without its own policy: the mix of its nearest neighbours with
        # one (an LP policy, or a point of MCRS's grid)
        anchor = _data.ON_MCRS_GRID.copy()
        if self._stored is not None:
            anchor |= np.isfinite(self._stored[1])
        lo = int(np.nonzero(anchor[:gi])[0][-1])
        hi = gi + 1 + int(np.nonzero(anchor[gi + 1:])[0][0])
        t = (_data.GRID[gi] - _data.GRID[lo]) / (_data.GRID[hi] - _data.GRID[lo])
        pi = (1.0 - t) * self.pi(lo) + t * self.pi(hi)
        return pi / pi.sum(axis=2, keepdims=True)

    def policy(self, gi: int) -> _mm.MinMaxPolicy:
        with _LOCK:
            pol = self.policies.get(gi)
        if pol is None:
            d = float(_data.GRID[gi]) if gi < TOP_INDEX else float("inf")
            pol = _mm.MinMaxPolicy(self.K, G1, G2, self.pi(gi), d)
            with _LOCK:
                self.policies.setdefault(gi, pol)
                self.version += 1
        return self.policies[gi]

    def policy_at(self, delta: float, lo: int, hi: int, t: float) -> _mm.MinMaxPolicy:
        """The policy at delta between GRID points lo and hi (weight t on hi)."""
        p_lo = self.policy(lo)
        return p_lo if t == 0.0 else _mm.mix_policies(p_lo, self.policy(hi), t, delta)

    def acceptance(self, delta: float, lo: int, hi: int, t: float) -> float:
        """int min(q, p_pi) at delta, evaluated once per delta (a sampler or the battery asks for
        the same deltas many times; each evaluation is a crossing search of ~20-60 ms)."""
        with _LOCK:
            hit = self.declared.get(delta)
        if hit is None:
            hit = 1.0 if delta == 0 else _mm.acceptance_of_minmax(delta, self.policy_at(delta, lo, hi, t))
            with _LOCK:
                if len(self.declared) >= DECLARED_CACHE:
                    self.declared.clear()
                self.declared[delta] = hit
        return hit

    def tables(self, used: np.ndarray, device) -> dict:
        """Torch tables for all built grid points: slot[grid index] -> row of coef/cum."""
        for gi in np.unique(used):
            self.policy(int(gi))
        key = str(device)
        with _LOCK:
            hit = self.torch.get(key)
            if hit is not None and hit[0] == self.version:
                return hit[1]
            keys = sorted(self.policies)
            pols = [self.policies[k] for k in keys]
            slot = np.full(TOP_INDEX + 1, -1, np.int64)
            slot[keys] = np.arange(len(keys))
            ref = pols[0]
            f64 = dict(dtype=torch.float64, device=device)
            lo, _, hi, _ = _mm.minmax_cells(self.K, G1, G2)
            coef = np.stack([p.coef for p in pols])
            uni = np.array([k == 0 for k in keys])
            coef[uni] = 0.0
            coef[uni, :, 0] = 1.0  # g = 1 written exactly: log g = 0
            tab = dict(
                slot_np=slot,
                coef=torch.as_tensor(coef, **f64),
                cum=torch.as_tensor(np.stack([np.cumsum(p.pi, axis=2) for p in pols]), **f64),
                uniform=torch.as_tensor(uni, device=device),
                eu=torch.as_tensor(ref.eu, **f64),
                ey=torch.as_tensor(ref.ey, **f64),
                ey_rev=torch.as_tensor(ref.ey[::-1].copy(), **f64),
                width=torch.as_tensor(ref.width, **f64),
                lo=torch.as_tensor(lo, **f64),
                # the max-cell lookup of MCRS (_mcrs._cell): its Chebyshev edges, K from C's length
                max_cells=dict(a=torch.as_tensor(hi, **f64), C=torch.zeros(self.K, **f64), chebyshev=True),
            )
            self.torch[key] = (self.version, tab)
            return tab


_TABLES: dict[int, _MinMaxTable] = {}
DECLARED_CACHE = 1 << 16  # deltas whose declared acceptance a table keeps (then it starts afresh)


def minmax_table(K: int) -> _MinMaxTable:
    with _LOCK:
        if K not in _TABLES:
            _TABLES[K] = _MinMaxTable(int(K))
        return _TABLES[K]


def _piece(u: Tensor, y: Tensor, tab: dict) -> Tensor:
    P = tab["width"].shape[0]
    p_lo = torch.searchsorted(tab["eu"], u.contiguous(), right=True) - 1
    p_hi = P - torch.searchsorted(tab["ey_rev"], y.contiguous(), right=False)
    return torch.where(u < 0.5, p_lo, p_hi).clamp(0, P - 1)


def _g(t: Tensor, p: Tensor, slot: Tensor, tab: dict) -> Tensor:
    c = tab["coef"][slot, p]  # [..., K]
    K = c.shape[-1]
    g = c[..., K - 1]
    for k in range(K - 2, -1, -1):
        g = g * t + c[..., k]
    return g


def log_g(s: Tensor, mix: tuple, tab: dict) -> Tensor:
    """log g_pi(Phi(s)) for s [n, m] and each row's mix (slot_lo, slot_hi, t) ([n] or [1]):
    g = (1 - t) g_lo + t g_hi; the uniform policy's g = 1 mixed in log1p form (tiny deltas)."""
    lo, hi, t = mix
    u, y = _ndtr(s), _ndtr(-s)
    p = _piece(u, y, tab)
    rel = torch.where(u < 0.5, tab["eu"][p + 1] - u, y - tab["ey"][p + 1]) / tab["width"][p]
    rel = rel.clamp(0.0, 1.0)

    def rows(x):
        return x[:, None].expand_as(p) if x.shape[0] == s.shape[0] else x.expand_as(p)

    tt = rows(t)
    g_lo = _g(rel, p, rows(lo), tab)
    g_hi = _g(rel, p, rows(hi), tab)
    out = torch.log(torch.lerp(g_lo, g_hi, tt).clamp(min=0.0))
    uni = tab["uniform"][lo] & (t > 0)
    return torch.where(rows(uni), torch.log1p(tt * (g_hi - 1.0)), out)


class MCRS2(ScalarVerifier):
    """Min-max conditioned rank selection with shipped LP policies (K in SHIPPED_KS); the MCRS
    kernel for other K. Rejection-sampled residual, reflection for the uniform policy."""

    name = "mcrs2"
    description = "min-max conditioned rank selection (policy in the smallest and largest draft)"

    def __init__(self):
        self._mcrs = _mcrs.MCRS()

    def _delegates(self, K: int) -> bool:
        """K without shipped min-max policies (K = 1, K > 16, and K in 2..16 outside SHIPPED_KS): the
        MCRS kernel (the same law and acceptance as its max-only policy lifted to the pairs)."""
        return K not in _data.SHIPPED_KS

    def policies(self, delta: ArrayLike, K: int) -> list:
        """The MinMaxPolicy used at each delta (flat list), K in 2..MAX_MINMAX_K."""
        d = np.asarray(delta, np.float64).ravel()
        tbl = minmax_table(K)
        return [tbl.policy_at(float(x), int(lo), int(hi), float(t)) for x, lo, hi, t in zip(d, *_data.grid_bracket(d))]

    def acceptance(self, delta: ArrayLike, K: int) -> np.ndarray:
        """Exact integral min(q, p_pi) of the policy this kernel uses, per delta."""
        from speccheck.theory.validate import check_delta, check_K

        d = check_delta(delta)
        K = check_K(K)
        if self._delegates(K):
            return self._mcrs.acceptance(d, K)
        flat = d.ravel()
        out = np.empty(flat.shape)
        # above MINMAX_MAX_DELTA both bracketing policies are the max-only MCRS policy lifted to the
        # pairs (or the top rank): the MCRS kernel's law, whose declaration evaluates its density
        # exactly (the min-max table is a per-piece polynomial fit, ~1e-13 absolute: at K = 8,
        # delta >= 30 it declared 2.2e-39 against a true value below 1e-50). Below it the min-max
        # evaluation is used even where both policies are lifted max-only ones (K >= 5 above its
        # MINMAX_RANGE): its crossing search finds the close pairs that MCRS's scan can miss (K = 7,
        # delta = 0.79: MCRS's declaration is 4.3e-8 above the 40-digit evaluation of the same law)
        lo, hi, t = _data.grid_bracket(flat)
        max_only = lo > int(np.nonzero(_data.GRID <= _data.MINMAX_MAX_DELTA + 1e-9)[0][-1])
        if max_only.any():
            out[max_only] = self._mcrs.acceptance(flat[max_only], K)
        tbl = minmax_table(K)
        for i in np.nonzero(~max_only)[0]:
            out[i] = tbl.acceptance(float(flat[i]), int(lo[i]), int(hi[i]), float(t[i]))
        return out.reshape(d.shape)

    def _kernel(self, delta: Tensor, s: Tensor, generator) -> VerifyResult:
        B, K = s.shape
        if self._delegates(K):
            return self._mcrs._kernel(delta, s, generator)
        dev = s.device
        delta_u, group = group_deltas(delta)
        delta_np = delta_u.cpu().numpy()
        lo_u, hi_u, t_np = _data.grid_bracket(delta_np)
        tab = minmax_table(K).tables(np.concatenate([lo_u, hi_u]), dev)
        mix_dev = torch.as_tensor(np.stack([tab["slot_np"][lo_u], tab["slot_np"][hi_u], t_np]).astype(np.float64),
                                  device=dev)
        mix_u = (mix_dev[0].long(), mix_dev[1].long(), mix_dev[2])
        single = delta_u.shape[0] == 1
        mix_row = mix_u if single else tuple(x[group] for x in mix_u)

        def full(x):
            return x.expand(B) if single else x

        vals, order = torch.sort(s, dim=1)
        G1_ = tab["lo"].shape[0] - 1
        i = (torch.searchsorted(tab["lo"], _ndtr(vals[:, 0]).contiguous(), right=True) - 1).clamp(0, G1_ - 1)
        j = _mcrs._cell(_ndtr(vals[:, K - 1 :]), tab["max_cells"])[:, 0]
        cum = torch.lerp(tab["cum"][full(mix_row[0]), i, j], tab["cum"][full(mix_row[1]), i, j],
                         full(mix_row[2])[:, None])
        r = (uniform((B, 1), s, generator) >= cum[:, :-1]).sum(dim=1, keepdim=True)
        sel = torch.gather(vals, 1, r)[:, 0]
        index = torch.gather(order, 1, r)[:, 0]
        h = _residual.log_ratio(sel, delta, log_g(sel[:, None], mix_row, tab)[:, 0])
        s_out, accepted, index, rej = couple_selected(sel, index, h, K, generator)
        if rej.numel():  # reflection for the uniform policy, else the residual (as MCRS)
            s_out[rej] = _residual.rejected_outputs(
                rej, sel, delta, (lo_u == 0) & (t_np == 0),
                tab["uniform"][full(mix_row[0])] & (full(mix_row[2]) == 0),
                lambda rows: self._residual(delta_u, mix_u, group[rows], tab, generator, delta_np))
        return s_out, accepted, index

    def _residual(self, delta_u, mix_u, group, tab, generator, delta_np: np.ndarray) -> Tensor:
        """Residual draws as MCRS._residual (rejection from q, inverse CDF for the rows left)."""
        K = tab["coef"].shape[-1]
        max_proposals = 1 if float(delta_np.max()) < _mcrs.TINY_RESIDUAL_DELTA else 1 << 16

        def log_b_rows(x, rows):
            g = group if rows is None else group[rows]
            return log_g(x, tuple(m[g] for m in mix_u), tab)

        def log_b_groups(x, g):
            return log_g(x, tuple(m[g] for m in mix_u), tab)

        def finish(rows):
            return _residual.sample_icdf(delta_u, log_b_groups, group[rows], generator, log_b_terms=K)

        x, _ = _residual.sample_rejection(delta_u[group], log_b_rows, generator, max_proposals=max_proposals,
                                          finish=finish)
        return x
