"""MCRS: max-conditioned rank selection (issue 7), the verification kernel.

Sort the K scalars; m = the largest, u_m = Phi(m). Draw a rank r ~ pi(u_m) from the policy
(piecewise constant in the max, :mod:`speccheck.theory.mcrs`), select S_(r); accept it w.p.
min(1, q(S)/p_pi(S)) with p_pi(s) = phi(s) g_pi(Phi(s)) in closed form (log space); on
rejection draw from (q - p_pi)_+ normalised by rejection from the target (proposals
N(delta, 1) accepted w.p. (1 - p_pi/q)_+; expected one proposal per verified row; the shared
adaptive sampler of :mod:`speccheck.verifiers._residual`), with the shared inverse-CDF sampler
for rows still pending after its rounds (and for every rejected row when all deltas of a call
are below :data:`TINY_RESIDUAL_DELTA`, where the residual mass is below ~1e-4).
Exact for every feasible policy: the kernel always uses the g_pi of the policy it drew from.

Device discipline (issue 17): host syncs per call do not grow with the batch (log g has no
data-dependent branch; one upload of the groups' policy mix; the device tables are cached per
(K, G, device) and rebuilt only when a new grid policy is solved).

Policies. A batch mixes many deltas, so policies are tabulated on a fixed delta grid
(:data:`DELTA_GRID`, solved by :func:`speccheck.theory.mcrs.mcrs_policy`, shipped as package
data and cached) and a row uses the linear interpolation pi = (1 - t) pi_lo + t pi_hi of the
policies at its two neighbouring grid points. That is a policy too (exact), and since g is
linear in pi, g = (1 - t) g_lo + t g_hi, which tracks f_delta to second order in the grid step:
the LP-optimal policy matches g to f closely, so the NEAREST grid policy loses ~TV(q_delta,
q_grid) ~ 0.4 |delta - grid| (K = 6, delta = 0.12 on a grid point 0.1: 0.992 vs 0.9997),
while the interpolated one keeps the optimum's acceptance. Grid point 0 is the uniform policy
(g = 1, p = phi exactly; at delta = 0 and for K = 1 the rejected draft is reflected, as RMC);
mixed with it (0 < delta < 0.001), log g = log1p(t (g_hi - 1)) keeps tiny deltas' residual
mass. Beyond the grid: the top-rank policy. Above K = MAX_POLICY_K (16) the policy is RASS's
optimal constant one (pi_r(m) = omega_r), i.e. the RASS kernel: no LP at run time for any K
(docs/mcrs.md states what it gives up against an LP policy).
:meth:`MCRS.acceptance` reports the exact acceptance of the policy actually used.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from numpy.typing import ArrayLike

from speccheck.theory import mcrs as _theory
from speccheck.verifiers import _cache, _residual
from speccheck.verifiers.base import (
    ScalarVerifier,
    VerifyResult,
    couple_selected,
    group_deltas,
    uniform,
)
from speccheck.verifiers.grid import grid_bracket as _shared_grid_bracket
from speccheck.verifiers.special import ndtr as _ndtr

Tensor = torch.Tensor

DELTA_GRID = _theory.KERNEL_DELTA_GRID
_MIDS = 0.5 * (DELTA_GRID[1:] + DELTA_GRID[:-1])
TOP_INDEX = DELTA_GRID.size  # pseudo grid point: the top-rank policy (pi_K = 1), delta > 12.25

_LOCK = threading.Lock()
# Policy cells of the kernel's policies. Fewer than the theory table's 160: each grid point's LP
# is ~10x cheaper cold (the sampler meets dozens of grid points per K) for a small loss of
# acceptance (K = 4, delta = 0.1: 88.0% of RASS's gap closed at G = 80 vs 88.9% at 160 Chebyshev
# cells; the theory table's 1280 sine cells reach 90.1%, see docs/mcrs.md).
VERIFIER_G = _theory.KERNEL_G
# Below this delta (every group of a call) the residual skips the rejection rounds (see MCRS._residual).
TINY_RESIDUAL_DELTA = 0.01
# Largest K with LP policies (shipped for K = 2..MAX_POLICY_K). Above it MCRS uses RASS's optimal
# rank weights as its policy, pi_r(m) = omega_r for every m (a valid MCRS policy: g = p_omega / phi),
# i.e. it runs the RASS kernel; docs/mcrs.md states what that gives up against the LP policy.
MAX_POLICY_K = _theory.KERNEL_MAX_K


def grid_index(delta: np.ndarray) -> np.ndarray:
    """Index of the nearest grid point to each delta, TOP_INDEX beyond the grid."""
    d = np.asarray(delta, np.float64)
    idx = np.searchsorted(_MIDS, d, side="left")
    return np.where(d > DELTA_GRID[-1] + 0.25, TOP_INDEX, idx)


def grid_bracket(delta: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(lo, hi, t): the policy used at each delta is (1 - t) pi[lo] + t pi[hi] (grid indices,
    TOP_INDEX for the top-rank policy beyond the grid). delta = 0 is the uniform policy alone;
    between 0 and the first positive grid point it is mixed with that point's policy.

    The bracket is :func:`speccheck.verifiers.grid.grid_bracket` on MCRS's own grid (coarser than
    RASS's: each point costs an LP), plus the top-rank pseudo point at and beyond 12."""
    d = np.asarray(delta, np.float64).ravel()
    lo, hi, t = _shared_grid_bracket(d, DELTA_GRID)
    beyond = d >= DELTA_GRID[-1]
    return np.where(beyond, TOP_INDEX, lo), np.where(beyond, TOP_INDEX, hi), np.where(beyond, 0.0, t)


def has_policies(delta: ArrayLike, K: int, G: int = VERIFIER_G) -> bool:
    """Whether the policies the kernel uses at every ``delta`` are available without an LP solve
    (solved already, stored in the package data or the user cache, or closed-form; always for
    K > MAX_POLICY_K, where no LP is ever solved)."""
    if K > MAX_POLICY_K:
        return True
    lo, hi, _ = grid_bracket(np.asarray(delta, np.float64))
    table = policy_table(K, G)
    for gi in np.unique(np.concatenate([lo, hi])):
        gi = int(gi)
        if gi in table.policies or gi in (0, TOP_INDEX) or K == 1:
            continue
        with _LOCK:
            if table._stored_policy(gi) is None:
                return False
    return True


def _top_policy(K: int, G: int) -> _theory.MCRSPolicy:
    a, abar = _theory.mcrs_edges(K, G)
    pi = np.zeros((G, K))
    pi[:, K - 1] = 1.0
    return _theory.MCRSPolicy(K, a, abar, pi)


# ------------------------------------------------------------------------- stored policies
# Cold checked solves take seconds per grid point (two interior-point LPs, on 32 and 64 cells,
# and RASS's weights; docs/mcrs.md), so solved policies are stored: the package ships
# speccheck/data/mcrs_policies_G64.npz (K = 2..MAX_POLICY_K on the whole grid, each with the
# acceptance it passed its check with; rebuilt by ``speccheck reproduce mcrs-policies``), and
# anything solved later (another G) is saved to ~/.cache/speccheck ($SPECCHECK_CACHE_DIR; empty
# string: off). A stored policy is used only if its grid and cell edges match the current ones
# and it is checked (or passes the check when first used); any stored policy is a valid policy,
# so the kernel stays exact, and acceptance() always evaluates the policy actually used.
PACKAGE_DATA = Path(__file__).resolve().parent.parent / "data" / f"mcrs_policies_G{VERIFIER_G}.npz"


LAYOUT_VERSION, EDGES_ATOL = _theory.LAYOUT_VERSION, _theory.EDGES_ATOL
_layout_key, policy_checksum, _package_entry = _theory.layout_key, _theory.policy_checksum, _theory.package_entry


def _cache_file(K: int, G: int) -> Path | None:
    return _cache.cache_file(f"mcrs_policies_K{K}_G{G}_{_layout_key(K, G)}.npz")


def _stored_pi(K: int, G: int) -> tuple[np.ndarray, np.ndarray]:
    """([TOP_INDEX, G, K] stored policies (NaN where none), [TOP_INDEX] checked flags): package
    data (checked where its ``checked_K{K}`` acceptance is recorded; used only if its layout key,
    edges and checksum match, :func:`_package_entry`), then the user cache (unchecked: a file anyone
    could have written, so each of its policies passes :func:`speccheck.theory.mcrs.check_level`
    when first used, or is solved again)."""
    out = np.full((TOP_INDEX, G, K), np.nan)
    checked = np.zeros(TOP_INDEX, bool)
    sources = []
    if G == VERIFIER_G and PACKAGE_DATA.exists():
        try:
            with np.load(PACKAGE_DATA) as z:
                entry = _package_entry(z, K, G)
                if entry is not None:
                    sources.append(entry)
        except (OSError, ValueError, KeyError):
            pass
    cached = _cache.load(_cache_file(K, G), out.shape)
    if cached is not None:
        sources.append((cached, np.zeros(TOP_INDEX, bool)))
    for arr, ok in sources:
        if arr is not None and arr.shape == out.shape:
            # a checked entry replaces an unchecked one; otherwise the first source wins
            fill = ~np.isnan(arr[:, 0, 0]) & (np.isnan(out[:, 0, 0]) | (ok & ~checked))
            out[fill] = arr[fill]
            checked[fill] = ok[fill]
    return out, checked


class _PolicyTable:
    """Policies of one (K, G) on the grid, as numpy objects and as per-device torch tables."""

    def __init__(self, K: int, G: int):
        self.K, self.G = K, G
        self.policies: dict[int, _theory.MCRSPolicy] = {}
        self.version = 0
        self.torch: dict[str, tuple[int, dict]] = {}
        self._rows: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # gi -> (z-polynomials, cumulative pi)
        self._stored: np.ndarray | None = None
        self._checked: np.ndarray | None = None

    def policy(self, gi: int) -> _theory.MCRSPolicy:
        with _LOCK:
            pol = self.policies.get(gi)
            if pol is None:
                if gi == TOP_INDEX:
                    pol = _top_policy(self.K, self.G)
                elif gi == 0 or self.K == 1:
                    pol = _theory.uniform_policy(self.K, self.G)
                else:
                    pol = self._stored_policy(gi)
                    if pol is None:
                        pol = _theory.mcrs_policy(float(DELTA_GRID[gi]), self.K, self.G)
                        self._save(gi, pol.pi)
                self.policies[gi] = pol
                self.version += 1
            return pol

    def _stored_policy(self, gi: int):
        """The stored policy at grid point gi if it is checked, or passes the check now
        (:func:`speccheck.theory.mcrs.check_level`); None: solve it (a stored policy that fails
        the check is never used)."""
        if self._stored is None:
            self._stored, self._checked = _stored_pi(self.K, self.G)
        pi = self._stored[gi]
        if np.isnan(pi[0, 0]):
            return None
        a, abar = _theory.mcrs_edges(self.K, self.G)
        delta = float(DELTA_GRID[gi])
        pol = _theory.MCRSPolicy(self.K, a, abar, pi.copy(), delta)
        if not self._checked[gi]:
            if _theory.acceptance_of_policy(delta, pol) < _theory.check_level(delta, self.K, self.G):
                return None
            self._checked[gi] = True
        return pol

    def _save(self, gi: int, pi: np.ndarray) -> None:
        if self._stored is None:
            self._stored, self._checked = _stored_pi(self.K, self.G)
        self._stored[gi] = pi
        self._checked[gi] = True
        _cache.save(_cache_file(self.K, self.G), self._stored)

    def _row(self, gi: int, policy) -> tuple[np.ndarray, np.ndarray]:
        """(z-polynomials, cumulative pi) of grid point gi, computed once (the tables are rebuilt
        whenever a grid point is added, which a sampler's calls do one or two at a time)."""
        row = self._rows.get(gi)
        if row is None:
            row = self._rows[gi] = (_poly_or_one(gi, policy), np.cumsum(policy.pi, axis=1))
        return row

    def tables(self, used: np.ndarray, device) -> dict:
        """Torch tables for all solved grid points: slot[grid index] -> row of coef/cum."""
        for gi in np.unique(used):
            self.policy(int(gi))
        key = str(device)
        hit = self.torch.get(key)
        if hit is not None and hit[0] == self.version:
            return hit[1]
        with _LOCK:
            keys = sorted(self.policies)
            pols = [self.policies[k] for k in keys]
            slot = np.full(TOP_INDEX + 1, -1, np.int64)
            slot[keys] = np.arange(len(keys))
            ref = pols[0]
            f64 = dict(dtype=torch.float64, device=device)
            tab = dict(
                slot=torch.as_tensor(slot, device=device),
                slot_np=slot,
                poly=torch.as_tensor(np.stack([self._row(k, p)[0] for k, p in zip(keys, pols)]), **f64),
                cum=torch.as_tensor(np.stack([self._row(k, p)[1] for k, p in zip(keys, pols)]), **f64),
                uniform=torch.as_tensor([_is_uniform(k, self.K) for k in keys], device=device),
                a=torch.as_tensor(ref.a, **f64),
                abar_rev=torch.as_tensor(ref.abar[::-1].copy(), **f64),
                abar=torch.as_tensor(ref.abar, **f64),
                C=torch.as_tensor(_theory.rank_coeffs(self.K), **f64),
                chebyshev=(np.array_equal(ref.a, _theory.mcrs_edges(self.K, self.G)[0])
                           and _theory.GRID_KIND == "chebyshev"),
            )
            self.torch[key] = (self.version, tab)
            return tab


_TABLES: dict[tuple[int, int], _PolicyTable] = {}


def policy_table(K: int, G: int = VERIFIER_G) -> _PolicyTable:
    key = (int(K), int(G))
    with _LOCK:
        if key not in _TABLES:
            _TABLES[key] = _PolicyTable(*key)
        return _TABLES[key]


def z_polynomial(policy: _theory.MCRSPolicy) -> np.ndarray:
    """g on cell j as one polynomial in z = a_{j+1} - x: g = sum_k P[j, k] z^k, shape (G, K).

    From g = sum_r C_r x^(r-1) Q_{r,j}(z) with x = a_{j+1} - z expanded binomially. Mixed signs:
    the absolute error is ~1e-13 (coefficients <= K 2^K, z <= cell width), negligible in total
    variation; the theory keeps the cancellation-free form for its exact evaluation."""
    K, G = policy.K, policy.G
    C = _theory.rank_coeffs(K)
    top = policy.a[1:]
    out = np.zeros((G, K))
    for r in range(1, K + 1):
        # x^(r-1) = sum_i binom(r-1, i) top^(r-1-i) (-z)^i
        xr = np.stack([math.comb(r - 1, i) * top ** (r - 1 - i) * (-1.0) ** i for i in range(r)], axis=1)
        Q = policy.coef[:, r - 1, :]  # (G, K) in powers of z
        for i in range(r):
            out[:, i:] += C[r - 1] * xr[:, i : i + 1] * Q[:, : K - i]
    return out


def _is_uniform(gi: int, K: int) -> bool:
    return K == 1 or gi == 0


def _poly_or_one(gi: int, policy) -> np.ndarray:
    """z_polynomial, with the uniform policy's g = 1 written exactly (so log g = 0 exactly)."""
    if _is_uniform(gi, policy.K):
        out = np.zeros((policy.G, policy.K))
        out[:, 0] = 1.0
        return out
    return z_polynomial(policy)


def _cell(u: Tensor, tab: dict) -> Tensor:
    """Policy cell j with a_j <= u < a_{j+1} (the top cells are >= 1e-7 wide: u resolves them).

    The edges are a_j = sin^2(pi j / 2G)^(1/K), so j ~ (2G/pi) atan2(sqrt(u^K), sqrt(1 - u^K)),
    corrected against the stored edges (a searchsorted over the edges costs ~4x more on CPU);
    other edge layouts use the searchsorted."""
    a = tab["a"]
    G = a.shape[0] - 1
    if not tab.get("chebyshev", False):
        return (torch.searchsorted(a, u.contiguous(), right=True) - 1).clamp(0, G - 1)
    K = tab["C"].shape[0]
    uk = torch.exp(K * torch.log(u))
    j = torch.floor(torch.atan2(torch.sqrt(uk), torch.sqrt((1.0 - uk).clamp(min=0.0))) * (2.0 * G / math.pi))
    j = j.to(torch.long).clamp(0, G - 1)
    for _ in range(2):  # the estimate is off by at most one cell
        j = (j - (u < a[j]).long()).clamp(0, G - 1)
        j = (j + (u >= a[j + 1]).long()).clamp(0, G - 1)
    return j


def _g(z: Tensor, j: Tensor, P: Tensor, tab: dict) -> Tensor:
    poly = tab["poly"][P, j]  # [n, m, K]
    K = poly.shape[-1]
    g = poly[..., K - 1]
    for k in range(K - 2, -1, -1):
        g = g * z + poly[..., k]
    return g


def log_g(s: Tensor, mix: tuple, tab: dict) -> Tensor:
    """log g_pi(Phi(s)) for s [n, m] and each row's policy mix = (slot_lo, slot_hi, t), each [n]
    (or [1]): g = (1 - t) g_lo + t g_hi; result [n, m].

    On cell j, g = sum_k P[j, k] z^k with z = a_{j+1} - u = y - (1 - a_{j+1}) >= 0 taken from
    y = Phibar(s) (accurate where u rounds to 1); exactly 0 for the uniform policy."""
    lo, hi, t = mix
    u = _ndtr(s)
    y = _ndtr(-s)
    j = _cell(u, tab)
    z = (y - tab["abar"][j + 1]).clamp(min=0.0)

    def rows(x):
        return x[:, None].expand_as(j) if x.shape[0] == s.shape[0] else x.expand_as(j)

    # Both policies are always evaluated and mixed with torch.where (no host check of t or of
    # the uniform flags): the same ops and no sync whatever the mix (issue 17). At t = 0 the
    # lerp is g_lo exactly; where g_lo is the uniform policy's g = 1 (written exactly),
    # g = 1 + t (g_hi - 1) in log1p form keeps tiny deltas' residual mass.
    tt = rows(t)
    g_lo = _g(z, j, rows(lo), tab)
    g_hi = _g(z, j, rows(hi), tab)
    out = torch.log(torch.lerp(g_lo, g_hi, tt).clamp(min=0.0))
    uni = tab["uniform"][lo] & (t > 0)
    return torch.where(rows(uni), torch.log1p(tt * (g_hi - 1.0)), out)


def _rass_kernel():  # noqa: ANN202 - the RASS verifier (imported late: a heavier module)
    from speccheck.verifiers.rass import RASS

    return RASS()


class MCRS(ScalarVerifier):
    """Max-conditioned rank selection with LP-optimal (grid-cached) policies; rejection-sampled
    residual, reflection for the uniform policy (delta < 5e-4 and K = 1). For K > MAX_POLICY_K
    the policy is RASS's optimal constant one (no LP at run time): the RASS kernel."""

    name = "mcrs"
    description = "max-conditioned rank selection (policy in the largest draft), rejection-sampled residual"

    def __init__(self, G: int = VERIFIER_G):
        if int(G) < 1:
            raise ValueError(f"G must be an integer >= 1, got G={G!r}")
        self.G = int(G)

    def policies(self, delta: ArrayLike, K: int) -> list:
        """The MCRSPolicy used at each delta (flat list): the grid policies' interpolation
        (K > MAX_POLICY_K: RASS's weights at that delta as a constant policy)."""
        d = np.asarray(delta, np.float64).ravel()
        if K > MAX_POLICY_K:
            from speccheck.verifiers.rass import rass_weights

            return [_theory.constant_policy(w, self.G) for w in rass_weights(d, K)]
        tbl = policy_table(K, self.G)
        out = []
        for x, lo, hi, t in zip(d, *grid_bracket(d)):
            p_lo = tbl.policy(int(lo))
            if t == 0.0:
                out.append(p_lo)
                continue
            pi = (1.0 - t) * p_lo.pi + t * tbl.policy(int(hi)).pi
            out.append(_theory.MCRSPolicy(K, p_lo.a, p_lo.abar, pi / pi.sum(axis=1, keepdims=True), float(x)))
        return out

    def acceptance(self, delta: ArrayLike, K: int) -> np.ndarray:
        """Exact integral min(q, p_pi) for the grid policy this kernel uses, per delta."""
        from speccheck.theory.validate import check_delta, check_K

        d = check_delta(delta)
        K = check_K(K)
        if K > MAX_POLICY_K:
            return _rass_kernel().acceptance(d, K)
        pols = self.policies(d, K)
        out = np.array([
            1.0 if x == 0 else _theory.acceptance_of_policy(float(x), p) for x, p in zip(d.ravel(), pols)
        ])
        return out.reshape(d.shape)

    def _kernel(self, delta: Tensor, s: Tensor, generator) -> VerifyResult:
        B, K = s.shape
        if K > MAX_POLICY_K:
            return _rass_kernel()._kernel(delta, s, generator)
        dev = s.device
        delta_u, group = group_deltas(delta)
        delta_np = delta_u.cpu().numpy()
        lo_u, hi_u, t_np = grid_bracket(delta_np)
        tab = policy_table(K, self.G).tables(np.concatenate([lo_u, hi_u]), dev)
        # one upload per call: the groups' (slot_lo, slot_hi, t) (slots are small ints, exact in float64)
        mix_dev = torch.as_tensor(np.stack([tab["slot_np"][lo_u], tab["slot_np"][hi_u], t_np]).astype(np.float64),
                                  device=dev)
        mix_u = (mix_dev[0].long(), mix_dev[1].long(), mix_dev[2])  # each [U]
        single = delta_u.shape[0] == 1
        mix_row = mix_u if single else tuple(x[group] for x in mix_u)

        def full(x):
            return x.expand(B) if single else x

        vals, order = torch.sort(s, dim=1)
        if K == 1:
            r = torch.zeros((B, 1), dtype=torch.long, device=dev)
        else:
            top = vals[:, K - 1 :]
            j = _cell(_ndtr(top), tab)[:, 0]
            cum = torch.lerp(tab["cum"][full(mix_row[0]), j], tab["cum"][full(mix_row[1]), j],
                             full(mix_row[2])[:, None])
            r = (uniform((B, 1), s, generator) >= cum[:, :-1]).sum(dim=1, keepdim=True)
        sel = torch.gather(vals, 1, r)[:, 0]
        index = torch.gather(order, 1, r)[:, 0]
        h = _residual.log_ratio(sel, delta, log_g(sel[:, None], mix_row, tab)[:, 0])
        s_out, accepted, index, rej = couple_selected(sel, index, h, K, generator)
        if rej.numel():
            # p = phi exactly (uniform policy, t = 0): the residual is the reflection of the draft.
            # Which groups are uniform is known on the host (no sync unless the batch mixes both).
            s_out[rej] = _residual.rejected_outputs(
                rej, sel, delta, ((K == 1) | (lo_u == 0)) & (t_np == 0),
                tab["uniform"][full(mix_row[0])] & (full(mix_row[2]) == 0),
                lambda rows: self._residual(delta_u, mix_u, group[rows], tab, generator, delta_np))
        return s_out, accepted, index

    def _residual(self, delta_u, mix_u, group, tab, generator, delta_np: np.ndarray) -> Tensor:
        """Residual draws for rows of groups ``group``: rejection from q, the inverse CDF for the
        rows still pending. When every group's delta is below :data:`TINY_RESIDUAL_DELTA` the
        residual mass is below ~1e-4 (thousands of proposals per row), so rows get one proposal
        and go to the inverse CDF (a fixed cost per group, and a fixed number of syncs)."""
        K = tab["C"].shape[0]
        max_proposals = 1 if float(delta_np.max()) < TINY_RESIDUAL_DELTA else 1 << 16

        def log_b_rows(x, rows):
            g = group if rows is None else group[rows]
            return log_g(x, tuple(m[g] for m in mix_u), tab)

        def log_b_groups(x, g):
            return log_g(x, tuple(m[g] for m in mix_u), tab)

        def finish(rows):  # rows still pending after the rejection rounds (tiny residual mass)
            return _residual.sample_icdf(delta_u, log_b_groups, group[rows], generator, log_b_terms=K * K)

        x, _ = _residual.sample_rejection(delta_u[group], log_b_rows, generator, max_proposals=max_proposals,
                                          finish=finish)
        return x


# ------------------------------------------------------------------------- package data builder
def build_policy_data(Ks: ArrayLike, path: Path = PACKAGE_DATA, deltas: ArrayLike | None = None,
                      log: Callable[[str], None] = print) -> Path:
    """Solve the checked G = VERIFIER_G policies for each K at every grid point (or at the grid
    points nearest ``deltas``), record the acceptance each passed its check with
    (``checked_K{K}``), merge into the npz at ``path`` (keeps checked entries; written after
    every grid point, so an interrupted build keeps its progress) and return it.

    A policy already stored for that grid point (package data or user cache, checked or not) is
    reused only if it passes :func:`speccheck.theory.mcrs.check_level` now; otherwise solved."""
    import time

    G = VERIFIER_G
    data = {}
    if Path(path).exists():
        with np.load(path) as z:
            data = {k: z[k] for k in z.files}

    def write() -> None:
        data["grid"] = DELTA_GRID
        tmp = Path(str(path) + ".tmp.npz")
        np.savez_compressed(tmp, **data)
        os.replace(tmp, path)

    for K in Ks:
        K = int(K)
        a, abar = _theory.mcrs_edges(K, G)
        key = _layout_key(K, G)
        arr = data.get(f"K{K}")
        checked = data.get(f"checked_K{K}")
        if arr is None or arr.shape != (TOP_INDEX, G, K) or _package_entry(data, K, G) is None:
            arr = np.full((TOP_INDEX, G, K), np.nan)
            checked = None
        if checked is None or checked.shape != (TOP_INDEX,):
            checked = np.full(TOP_INDEX, np.nan)
        stored, _ = _stored_pi(K, G)
        idx = range(1, TOP_INDEX) if deltas is None else sorted({int(i) for i in grid_index(np.asarray(deltas))})
        for gi in idx:
            if gi in (0, TOP_INDEX) or np.isfinite(checked[gi]) or K == 1:
                continue
            t0 = time.perf_counter()
            delta = float(DELTA_GRID[gi])
            pol, source = None, "solved"
            if not np.isnan(stored[gi, 0, 0]):
                candidate = _theory.MCRSPolicy(K, a, abar, stored[gi].copy(), delta)
                if _theory.acceptance_of_policy(delta, candidate) >= _theory.check_level(delta, K, G):
                    pol, source = candidate, "stored, passes the check"
            if pol is None:
                pol = _theory.mcrs_policy(delta, K, G)  # checked: raises rather than return a failing policy
            arr[gi] = pol.pi
            checked[gi] = _theory.acceptance_of_policy(delta, pol)
            _put(data, K, arr, key, checked, a)
            write()
            log(f"K={K} delta={delta:g}: acceptance {checked[gi]:.12f} ({source}, {time.perf_counter() - t0:.1f} s)")
        _put(data, K, arr, key, checked, a)
        write()
    return Path(path)


def _put(data: dict, K: int, arr: np.ndarray, key: str, checked: np.ndarray, a: np.ndarray) -> None:
    """Store K's policies with their layout key, check records, edges and checksum."""
    data[f"K{K}"], data[f"layout_K{K}"], data[f"checked_K{K}"] = arr, np.array(key), checked
    data[f"edges_K{K}"], data[f"sha_K{K}"] = a, np.array(policy_checksum(arr, checked))


def rekey_policy_data(path: Path = PACKAGE_DATA) -> Path:
    """Rewrite the npz at ``path`` with the current layout keys, edges and checksums, keeping its
    policies and check records (for data written under an older key scheme whose grid and cell
    placement are the current ones)."""
    with np.load(path) as z:
        data = {k: z[k] for k in z.files}
    for name in [k for k in data if k.startswith("K") and k[1:].isdigit()]:
        K = int(name[1:])
        a, _ = _theory.mcrs_edges(K, VERIFIER_G)
        checked = data.get(f"checked_K{K}", np.full(TOP_INDEX, np.nan))
        _put(data, K, data[name], _layout_key(K, VERIFIER_G), checked, a)
    tmp = Path(str(path) + ".tmp.npz")
    np.savez_compressed(tmp, **data)
    os.replace(tmp, path)
    return Path(path)
