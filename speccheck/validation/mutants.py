"""Mutants: plausible bugs, each a small variation of a correct rule or of the d-dim wrapper.

The battery must kill every one of them (``speccheck battery --mutants`` prints the kill
matrix; :func:`run_mutants` runs them, :func:`mutant_factories` lists them, sampler mutants
included). They are compact self-contained kernels with a ``bug`` switch, so each mutant is
one or two changed lines against the reference rule right beside it; the references
(``ReferenceRMC``, ``ReferenceDGRS``, ``ReferenceRASS`` with bug=None, and
``reference_verify_states``) are themselves exact and serve as known-good rules in tests.

Every mutant declares the acceptance of the rule it was copied from (a bug does not change
what the author believes), so acceptance drift is caught by the binomial test.

Also here: :class:`AlwaysRejectRule` (exact but useless: never accepts, returns a fresh
N(delta, 1)) and the contract-breaking "claims accept" mutant (fresh target draws reported
as accepted children).
"""

from __future__ import annotations

import functools
import math
import sys
from typing import Any, Callable, Optional

import numpy as np
import torch

from speccheck.errors import InputError
from speccheck.theory import acceptance_dgrs, acceptance_rass, acceptance_rmc, dgrs_levels, residual_intervals
from speccheck.validation.battery import BatteryReport, load_verifier, run_battery
from speccheck.validation.suites import Suite, load_suite
from speccheck.verifiers.rass import rass_weights

Tensor = torch.Tensor
Gen = Optional[torch.Generator]
Triple = tuple[Tensor, Tensor, Tensor]


# ------------------------------------------------------------------------------ helpers
def _rand(shape, like: Tensor, generator) -> Tensor:
    return torch.rand(shape, generator=generator, dtype=like.dtype, device=like.device)


def _randn(shape, like: Tensor, generator) -> Tensor:
    return torch.randn(shape, generator=generator, dtype=like.dtype, device=like.device)


def _rejection(n: int, like: Tensor, generator, propose: Callable[[int], Tensor],
               log_accept: Callable[[Tensor, Tensor], Tensor], rows: Tensor) -> Tensor:
    """Draw one accepted candidate per row: propose(m) -> [P, m] candidates for the P pending
    rows (``rows`` indexes per-row parameters), log_accept(x, rows) -> log acceptance prob."""
    out = torch.empty(n, dtype=like.dtype, device=like.device)
    pending = torch.arange(n, device=like.device)
    m = 16
    for _ in range(10_000):
        if pending.numel() == 0:
            return out
        x = propose(pending, m)
        ok = torch.log(_rand(x.shape, like, generator)) < log_accept(x, rows[pending])
        got = ok.any(dim=1)
        first = torch.argmax(ok.to(torch.int8), dim=1)
        out[pending[got]] = x[got, first[got]]
        pending = pending[~got]
        m = min(4 * m, 1 << 14)
    raise RuntimeError("rejection sampler did not terminate")


class _Rule:
    """Common bits: name, optional bug switch, declared acceptance."""

    name = "rule"
    bug: str | None = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(bug={self.bug!r})"


# ---------------------------------------------------------------------------------- RMC
class ReferenceRMC(_Rule):
    """Reflection maximal coupling (K = 1): accept w.p. min(1, rho(S)), else S <- delta - S.

    bugs: "fresh" (rejection returns a fresh N(delta, 1)), "reflect_delta" (S <- 2 delta - S),
    "float32" (rho = exp(delta s) / exp(delta^2 / 2) in float32 -- inf / inf at large delta --
    and s_out left in float32).
    """

    BUGS = ("fresh", "reflect_delta", "float32")

    def __init__(self, bug: str | None = None):
        if bug is not None and bug not in self.BUGS:
            raise ValueError(f"bug must be one of {self.BUGS}, got bug={bug!r}")
        self.bug = bug
        self.name = "ref-rmc" if bug is None else f"rmc-{bug}"

    def supports_K(self, K: int) -> bool:
        return K == 1

    def acceptance(self, delta: Any, K: int) -> np.ndarray:
        return acceptance_rmc(delta)

    def verify(self, delta: Tensor, s: Tensor, generator: Gen = None) -> Triple:
        B, K = s.shape
        if K != 1:
            raise ValueError(f"RMC needs K == 1, got K={K}")
        s1 = s[:, 0]
        u = _rand(B, s, generator)
        if self.bug == "float32":
            d32, s32 = delta.float(), s1.float()
            rho = torch.exp(d32 * s32) / torch.exp(0.5 * d32 * d32)
            acc = u.float() < rho
            out = torch.where(acc, s32, d32 - s32)
        else:
            acc = torch.log(u) < delta * s1 - 0.5 * delta * delta
            if self.bug == "fresh":
                rej = delta + _randn(B, s, generator)
            elif self.bug == "reflect_delta":
                rej = 2.0 * delta - s1
            else:
                rej = delta - s1
            out = torch.where(acc, s1, rej)
        index = torch.where(acc, 0, K).to(torch.long)
        return out, acc, index


class ClaimsAcceptRule(_Rule):
    """Contract breaker: returns fresh N(delta, 1) draws (exact law!) but claims child 0 was
    accepted -- the reconstruction would then keep a Z_perp and S that do not belong together."""

    name = "claims-accept"
    bug = "claims_accept"

    def verify(self, delta: Tensor, s: Tensor, generator: Gen = None) -> Triple:
        B, K = s.shape
        out = delta + _randn(B, s, generator)
        return out, torch.ones(B, dtype=torch.bool, device=s.device), torch.zeros(B, dtype=torch.long, device=s.device)


class AlwaysRejectRule(_Rule):
    """Exact but useless: never accepts; s_out is a fresh N(delta, 1) draw (index = K)."""

    name = "always-reject"

    def acceptance(self, delta: Any, K: int) -> np.ndarray:
        return np.zeros_like(np.asarray(delta, np.float64))

    def verify(self, delta: Tensor, s: Tensor, generator: Gen = None) -> Triple:
        B, K = s.shape
        out = delta + _randn(B, s, generator)
        rejected = torch.zeros(B, dtype=torch.bool, device=s.device)
        return out, rejected, torch.full((B,), K, dtype=torch.long, device=s.device)


# -------------------------------------------------------------------------------- D-GRS
def _dgrs_levels_vec(d: np.ndarray, K: int, bug: str | None) -> tuple[np.ndarray, np.ndarray]:
    """(lam[U, 0..K], G[U, 0..K]) with G[:, k] = G_{k+1} for deltas d > 0 [U]; the buggy
    recurrences for the mutants (vectorised over the deltas, a loop over k)."""
    if bug not in ("G_prev_lambda", "centred_tau"):
        lv = dgrs_levels(d, K)
        return lv.lam.copy(), lv.G.copy()
    from speccheck.theory.normal import Phibar

    U = d.size
    lam = np.zeros((U, K + 1))
    G = np.zeros((U, K + 1))
    G[:, 0] = 1.0
    shift = 0.0 if bug == "centred_tau" else 0.5 * d
    for k in range(1, K + 1):
        lam[:, k] = lam[:, k - 1] + G[:, k - 1]
        l_for_G = lam[:, k - 1] if bug == "G_prev_lambda" else lam[:, k]
        positive = l_for_G > 0
        tau = np.log(np.where(positive, l_for_G, 1.0)) / d + shift
        value = np.maximum(Phibar(tau - d) - l_for_G * Phibar(tau), 0.0)
        G[:, k] = np.where(positive, value, 1.0)
    return lam, G


class ReferenceDGRS(_Rule):
    """Greedy rejection sampling over K children in drafting order (SPEC section 1).

    bugs: "stale_lambda" (beta_k uses lambda_{k-2}), "G_prev_lambda" (G_{k+1} computed with
    lambda_{k-1}), "residual_step1" (residual (q - lambda_1 p)_+ instead of lambda_K),
    "centred_tau" (levels with the centred threshold ln(lambda)/delta in uncentred coordinates).
    """

    BUGS = ("stale_lambda", "G_prev_lambda", "residual_step1", "centred_tau")

    def __init__(self, bug: str | None = None):
        if bug is not None and bug not in self.BUGS:
            raise ValueError(f"bug must be one of {self.BUGS}, got bug={bug!r}")
        self.bug = bug
        self.name = "ref-dgrs" if bug is None else f"dgrs-{bug}"

    def acceptance(self, delta: Any, K: int) -> np.ndarray:
        return acceptance_dgrs(delta, K)

    def _levels(self, delta: Tensor, K: int) -> tuple[Tensor, Tensor]:
        d_np = delta.detach().cpu().numpy().astype(np.float64)
        uniq, inv = np.unique(d_np, return_inverse=True)
        lam = np.zeros((uniq.size, K + 1))
        G = np.zeros((uniq.size, K + 1))
        G[:, 0] = 1.0
        lam[:, 1:] = 1.0  # delta = 0 rows: P = Q, child 1 is always accepted
        pos = uniq > 0
        if pos.any():
            lam[pos], G[pos] = _dgrs_levels_vec(uniq[pos], K, self.bug)
        to = functools.partial(torch.as_tensor, dtype=delta.dtype, device=delta.device)
        return to(lam[inv.reshape(-1)]), to(G[inv.reshape(-1)])

    def verify(self, delta: Tensor, s: Tensor, generator: Gen = None) -> Triple:
        B, K = s.shape
        lam, G = self._levels(delta, K)
        u = _rand((B, K), s, generator)
        accepted = torch.zeros(B, dtype=torch.bool, device=s.device)
        index = torch.full((B,), K, dtype=torch.long, device=s.device)
        zero = delta == 0
        log_rho = delta[:, None] * s - 0.5 * (delta * delta)[:, None]
        for k in range(1, K + 1):
            lam_prev = lam[:, k - 2] if (self.bug == "stale_lambda" and k >= 2) else lam[:, k - 1]
            Gk = G[:, k - 1]
            excess = torch.exp(log_rho[:, k - 1]) - lam_prev
            beta = torch.where(Gk > 0, torch.clamp(excess / torch.where(Gk > 0, Gk, 1.0), 0.0, 1.0),
                               torch.zeros_like(Gk))
            beta = torch.where(zero, torch.ones_like(beta), beta)
            take = ~accepted & (u[:, k - 1] < beta)
            index = torch.where(take, k - 1, index)
            accepted = accepted | take
        out = torch.gather(s, 1, torch.clamp(index, max=K - 1)[:, None])[:, 0]
        rej = torch.nonzero(~accepted).flatten()
        if rej.numel():
            lam_res = lam[rej, 1] if self.bug == "residual_step1" else lam[rej, K]
            out[rej] = _dgrs_residual(delta[rej], lam_res, s, generator)
        return out, accepted, index


def _dgrs_residual(delta: Tensor, lam: Tensor, like: Tensor, generator) -> Tensor:
    """Draws from (phi(s - delta) - lam phi(s))_+ (normalised): N(delta, 1) truncated to
    s >= tau = ln(lam)/delta + delta/2, accepted w.p. 1 - lam / rho(s)."""
    log_lam = torch.log(lam)
    tau = log_lam / delta + 0.5 * delta
    mass = torch.special.ndtr(delta - tau)  # P(N(delta,1) >= tau)

    def propose(rows, m):
        u = _rand((rows.numel(), m), like, generator)
        return delta[rows, None] - torch.special.ndtri(u * mass[rows, None])

    def log_accept(x, rows):
        d = delta[rows, None]
        return torch.log(-torch.expm1(torch.clamp(log_lam[rows, None] - (d * x - 0.5 * d * d), max=0.0)))

    rows = torch.arange(delta.numel(), device=like.device)
    return _rejection(delta.numel(), like, generator, propose, log_accept, rows)


# --------------------------------------------------------------------------------- RASS
@functools.lru_cache(maxsize=4096)
def _wrong_interval(d: float, K: int) -> tuple[float, float]:
    """The largest residual interval at (d, K) with the interpolated weights (the mutant's keep)."""
    ivs = residual_intervals(d, K, rass_weights(d, K))
    iv = max(ivs, key=lambda t: t.mass)
    return iv.lo, iv.hi


def _rass_tables(d: np.ndarray, K: int, bug: str | None):
    """Per distinct delta d [U]: omega used to select [U, K], omega used in the density [U, K],
    beta orders (a_r, b_r) [K], kept residual interval [U, 2] (whole line unless bug).

    The weights are those of the built-in kernel (the LP on a fine delta grid, linearly
    interpolated: any convex combination is in W_K, so the reference stays exact), which keeps
    a batch of many distinct deltas (the trajectory layer) at one cached LP per grid point."""
    w = rass_weights(d, K)
    w_density = w
    if bug == "weights_Km1" and K > 1:
        w_density = np.concatenate([np.zeros((d.size, 1)), rass_weights(d, K - 1)], axis=1)
    r = np.arange(1, K + 1)
    a, b = r.astype(float), (K - r + 1).astype(float)
    if bug == "beta_offbyone":
        b = b + 1.0  # the order-statistic densities of K + 1 draws
    keep = np.tile([-np.inf, np.inf], (d.size, 1))
    if bug == "wrong_interval":  # the interval of delta rounded to 2 digits (bounded cost per batch)
        for i, di in enumerate(d):
            if di > 0:
                keep[i] = _wrong_interval(float(f"{di:.2g}"), K)
    return w, w_density, a, b, keep


def _log_p(x: Tensor, w: Tensor, a: np.ndarray, b: np.ndarray) -> Tensor:
    """log sum_r w_r phi(x) Beta(a_r, b_r) density at Phi(x); x [n, m], per-row w [n, K]."""
    to = functools.partial(torch.as_tensor, dtype=x.dtype, device=x.device)
    from scipy import special

    log_coef = to(-special.betaln(a, b))
    xx = x[..., None]
    terms = (torch.log(w)[:, None, :] + log_coef - 0.5 * xx * xx - 0.5 * math.log(2 * math.pi)
             + to(a - 1) * torch.special.log_ndtr(xx) + to(b - 1) * torch.special.log_ndtr(-xx))
    return torch.logsumexp(terms, dim=-1)


class ReferenceRASS(_Rule):
    """Rank-aware selection (the kernel's grid-interpolated LP weights), maximal coupling with q,
    rejection-sampled residual from plain N(delta, 1) proposals.

    bugs: "beta_offbyone" (densities of K + 1 draws), "weights_Km1" (density evaluated with
    the weights cached for K - 1), "top_uncorrected" (the top rank is accepted without the
    min(1, q/p) test), "wrong_interval" (residual drawn from the largest residual interval only).
    """

    BUGS = ("beta_offbyone", "weights_Km1", "top_uncorrected", "wrong_interval")

    def __init__(self, bug: str | None = None):
        if bug is not None and bug not in self.BUGS:
            raise ValueError(f"bug must be one of {self.BUGS}, got bug={bug!r}")
        self.bug = bug
        self.name = "ref-rass" if bug is None else f"rass-{bug}"

    def acceptance(self, delta: Any, K: int) -> np.ndarray:
        d = np.asarray(delta, np.float64)
        W = rass_weights(d, K)
        out = np.empty(d.shape)
        for idx, di in np.ndenumerate(d):
            out[idx] = 1.0 if di == 0 else acceptance_rass(float(di), K, W[idx])
        return out

    def verify(self, delta: Tensor, s: Tensor, generator: Gen = None) -> Triple:
        B, K = s.shape
        d_u, group = torch.unique(delta, return_inverse=True)
        w, w_den, a, b, keep = _rass_tables(d_u.cpu().numpy(), K, self.bug)
        to = functools.partial(torch.as_tensor, dtype=s.dtype, device=s.device)
        w, w_den, keep = to(w)[group], to(w_den)[group], to(keep)[group]
        s_sorted, order = torch.sort(s, dim=1)
        u = _rand(B, s, generator)
        r = torch.clamp((u[:, None] >= torch.cumsum(w, dim=1)).sum(dim=1), max=K - 1)
        x = torch.gather(s_sorted, 1, r[:, None])[:, 0]
        log_q = -0.5 * (x - delta) ** 2 - 0.5 * math.log(2 * math.pi)
        log_ratio = log_q - _log_p(x[:, None], w_den, a, b)[:, 0]
        acc = torch.log(_rand(B, s, generator)) < log_ratio
        if self.bug == "top_uncorrected":
            acc = acc | (r == K - 1)
        acc = acc | (delta == 0)  # q = p_omega: the selected draft is always accepted
        index = torch.where(acc, torch.gather(order, 1, r[:, None])[:, 0], K)
        out = x.clone()
        rej = torch.nonzero(~acc).flatten()
        if rej.numel():
            d_r, w_r, wd_r, keep_r = delta[rej], w[rej], w_den[rej], keep[rej]

            def propose(rows, m):
                return d_r[rows, None] + _randn((rows.numel(), m), s, generator)

            def log_accept(y, rows):
                lq = -0.5 * (y - d_r[rows, None]) ** 2 - 0.5 * math.log(2 * math.pi)
                lp = _log_p(y, w_r[rows] if self.bug == "beta_offbyone" else wd_r[rows], a, b)
                la = torch.log(torch.clamp(-torch.expm1(lp - lq), min=0.0))
                inside = (y > keep_r[rows, :1]) & (y < keep_r[rows, 1:])
                return torch.where(inside, la, torch.full_like(la, -math.inf))

            n = rej.numel()
            out[rej] = _rejection(n, s, generator, propose, log_accept, torch.arange(n, device=s.device))
        return out, acc, index


# ------------------------------------------------------------------------- d-dim wrapper
WRAPPER_BUGS = ("drop_zperp", "first_child_zperp", "no_sigma_scale")


def reference_verify_states(verifier: Any, mu_p: Tensor, mu_q: Tensor, sigma: Any, children: Tensor,
                            generator: Gen = None, bug: str | None = None) -> Triple:
    """Rank-1 reduction around a scalar kernel (SPEC section 1). mu_p, mu_q: [B, *shape];
    sigma: float or [B]; children: [B, K, *shape] -> (y [B, *shape], accepted [B], index [B]).

    bugs: "drop_zperp" (y = mu_p + sigma S e), "first_child_zperp" (the first child's Z_perp
    kept even when another child is accepted), "no_sigma_scale" (Delta = mu_q - mu_p not divided
    by sigma).
    """
    B, K = children.shape[:2]
    shape = children.shape[2:]
    dt = children.dtype
    if not torch.is_tensor(sigma) or sigma.ndim == 0:
        sig = torch.as_tensor(sigma, dtype=dt, device=children.device).expand(B)
    else:
        sig = sigma.to(dt)
    sig_b = sig.reshape((B,) + (1,) * len(shape))
    Delta = (mu_q - mu_p) if bug == "no_sigma_scale" else (mu_q - mu_p) / sig_b
    flat = Delta.reshape(B, -1)
    delta = torch.linalg.vector_norm(flat, dim=1)
    e = torch.where(delta[:, None] > 0, flat / torch.where(delta > 0, delta, 1.0)[:, None], torch.zeros_like(flat))
    e[delta == 0, 0] = 1.0
    Z = ((children - mu_p[:, None]) / sig_b[:, None]).reshape(B, K, -1)
    S = torch.einsum("bkd,bd->bk", Z, e)
    Zperp = Z - S[..., None] * e[:, None, :]
    s_out, accepted, index = verifier.verify(delta, S, generator)
    keep = torch.where(accepted, index, 0)
    if bug == "first_child_zperp":
        keep = torch.zeros_like(index)
    zp = Zperp[torch.arange(B, device=children.device), keep]
    if bug == "drop_zperp":
        zp = torch.zeros_like(zp)
    y = mu_p + sig_b * (s_out[:, None] * e + zp).reshape((B,) + tuple(shape))
    acc_rows = torch.nonzero(accepted).flatten()
    if acc_rows.numel() and bug is None:
        y[acc_rows] = children[acc_rows, index[acc_rows]]  # bit-exact copy of the accepted child
    return y, accepted, index


class WrapperMutant(_Rule):
    """A correct scalar kernel inside a buggy d-dim wrapper (the battery calls ``verify_states``
    on the verifier object when it defines one)."""

    def __init__(self, bug: str, base=None):
        if bug not in WRAPPER_BUGS:
            raise ValueError(f"bug must be one of {WRAPPER_BUGS}, got bug={bug!r}")
        self.bug = bug
        self.base = base if base is not None else ReferenceDGRS()
        self.name = f"wrapper-{bug}"

    def acceptance(self, delta: Any, K: int) -> np.ndarray:
        return self.base.acceptance(delta, K)

    def verify(self, delta: Tensor, s: Tensor, generator: Gen = None) -> Triple:
        return self.base.verify(delta, s, generator)

    def verify_states(self, mu_p: Tensor, mu_q: Tensor, sigma: Any, children: Tensor,
                      generator: Gen = None) -> Triple:
        return reference_verify_states(self.base, mu_p, mu_q, sigma, children, generator, bug=self.bug)


class ReferenceWrapped(_Rule):
    """A reference kernel with the reference wrapper (a known-good rule for layer 3)."""

    def __init__(self, base=None):
        self.base = base if base is not None else ReferenceDGRS()
        self.name = f"{self.base.name}+ref-wrapper"

    def acceptance(self, delta: Any, K: int) -> np.ndarray:
        return self.base.acceptance(delta, K)

    def supports_K(self, K: int) -> bool:
        f = getattr(self.base, "supports_K", None)
        return True if f is None else bool(f(K))

    def verify(self, delta: Tensor, s: Tensor, generator: Gen = None) -> Triple:
        return self.base.verify(delta, s, generator)

    def verify_states(self, mu_p: Tensor, mu_q: Tensor, sigma: Any, children: Tensor,
                      generator: Gen = None) -> Triple:
        return reference_verify_states(self.base, mu_p, mu_q, sigma, children, generator)


# ------------------------------------------------------------------- narrow-region mutants
#: kind -> (what goes wrong, region (delta_lo, delta_hi, Ks or None = every K))
NARROW_KINDS: dict[str, tuple[str, tuple[float, float, tuple[int, ...] | None]]] = {
    "tiny-delta": ("for 0 < delta < 1e-3 the largest child is accepted (q/p ~ 1 + delta s 'approximated')",
                   (1e-8, 1e-3, None)),
    "window": ("for delta in [1.3, 1.4) (between the gate's grid points 1 and 2) child 0 is always accepted",
               (1.3, 1.4, None)),
    "large-delta": ("delta is clamped to 15 'for numerical safety' (wrong for delta > 15)", (15.0, 40.0, None)),
    "single-K": ("at K = 5 (not on the gate's grid) a row rejected K times returns the last child as accepted",
                 (0.0, 40.0, (5,))),
    "batch-tail": ("rows past the first 4096 of a batch are verified with the batch's first delta",
                   (0.0, 40.0, None)),
}

BATCH_HEAD = 4096


class NarrowRegionDGRS(ReferenceDGRS):
    """The exact D-GRS reference, wrong only in a narrow region (``region``: delta window and K).

    These bugs hide from a fixed delta x K grid: below its smallest delta, between two of its
    points, above its largest, at a K it does not list, or only past some row of a batch (a
    grid cell has one delta per batch). See :data:`NARROW_KINDS`.

    Power on the gate (layer L5: 4096 rows per stratum and K; the PIT KS test detects a
    sup-CDF deviation of 0.068 with probability >= 0.99 at the binding Holm level), smallest
    deviation of the PIT law u = Phi(s_out - delta) from U(0, 1) in one stratum:

    - tiny-delta: stratum [1e-4, 1e-3) lies inside the region; u of the largest of K = 2
      children has CDF x^2: deviation max(x - x^2) = 0.25 (every K >= 2 of the 17 listed);
    - window: 18.3% of stratum [1, 1.5) (log scale) is in [1.3, 1.4), where s_out ~ N(0, 1)
      instead of N(delta, 1): deviation 0.092 at every K;
    - large-delta: s_out ~ N(15, 1) for delta in [15, 40): deviation > 0.8;
    - single-K: at K = 5, delta in [3, 4), about 85% of rows are rejected by D-GRS and return
      an N(0, 1) child instead of the residual draw (which lies above tau_5 > delta): > 0.5;
    - batch-tail: 94% of the rows of a 65536-row chunk get another stratum's delta: > 0.5.

    Each exceeds 0.068 in at least one stratum, so the gate kills each with power >= 0.99
    (the acceptance tests add more); :mod:`speccheck.validation.localise` then confirms a
    window inside the region. Measured kill matrix: ``validation/reports/kill_matrix.txt``.
    """

    def __init__(self, kind: str):
        if kind not in NARROW_KINDS:
            raise ValueError(f"kind must be one of {tuple(NARROW_KINDS)}, got kind={kind!r}")
        super().__init__(None)
        self.kind = kind
        self.bug = kind
        self.name = f"narrow-{kind}"
        self.description, self.region = NARROW_KINDS[kind]

    def verify(self, delta: Tensor, s: Tensor, generator: Gen = None) -> Triple:
        B, K = s.shape
        if self.kind == "large-delta":
            return super().verify(torch.clamp(delta, max=15.0), s, generator)
        if self.kind == "batch-tail" and B > BATCH_HEAD:
            shared = delta.clone()
            shared[BATCH_HEAD:] = delta[0]
            return super().verify(shared, s, generator)
        out, acc, index = super().verify(delta, s, generator)
        if self.kind == "tiny-delta":
            rows = (delta > 0) & (delta < 1e-3)
            top = torch.argmax(s, dim=1)
            out = torch.where(rows, torch.gather(s, 1, top[:, None])[:, 0], out)
            acc, index = acc | rows, torch.where(rows, top, index)
        elif self.kind == "window":
            rows = (delta >= 1.3) & (delta < 1.4)
            out, acc = torch.where(rows, s[:, 0], out), acc | rows
            index = torch.where(rows, torch.zeros_like(index), index)
        elif self.kind == "single-K" and K == 5:
            rows = ~acc
            out, acc = torch.where(rows, s[:, K - 1], out), acc | rows
            index = torch.where(rows, torch.full_like(index, K - 1), index)
        return out, acc, index


# ------------------------------------------------------------------------------ registry
def _make_mutants() -> dict[str, Callable[[], object]]:
    m: dict[str, Callable[[], object]] = {}
    for bug in ReferenceRMC.BUGS:
        m[f"rmc-{bug}"] = functools.partial(ReferenceRMC, bug)
    m["claims-accept"] = ClaimsAcceptRule
    for bug in ReferenceDGRS.BUGS:
        m[f"dgrs-{bug}"] = functools.partial(ReferenceDGRS, bug)
    for bug in ReferenceRASS.BUGS:
        m[f"rass-{bug}"] = functools.partial(ReferenceRASS, bug)
    for bug in WRAPPER_BUGS:
        m[f"wrapper-{bug}"] = functools.partial(WrapperMutant, bug)
    for kind in NARROW_KINDS:
        m[f"narrow-{kind}"] = functools.partial(NarrowRegionDGRS, kind)
    return m


#: name -> zero-argument factory of the mutant verifier
MUTANTS: dict[str, Callable[[], object]] = _make_mutants()

#: name -> zero-argument factory of the exact reference rules the mutants vary
REFERENCES: dict[str, Callable[[], object]] = {
    "ref-rmc": ReferenceRMC,
    "ref-dgrs": ReferenceDGRS,
    "ref-rass": ReferenceRASS,
    "ref-wrapped": ReferenceWrapped,
    "always-reject": AlwaysRejectRule,
}


# ------------------------------------------------------------------------------ runners
class SamplerMutantRule:
    """A correct verifier run inside a mutant sampler (layer 4 only: layers 1-3 do not involve
    the sampler)."""

    def __init__(self, name: str, factory: Callable, base: str = "dgrs"):
        self.base = load_verifier(base)
        self.sampler_factory = factory
        self.name = f"sampler-{name}"

    def acceptance(self, delta: Any, K: int) -> np.ndarray:
        return self.base.acceptance(delta, K)

    def verify(self, delta: Tensor, s: Tensor, generator: Gen = None) -> Triple:
        return self.base.verify(delta, s, generator)


def mutant_factories(include_sampler: bool = True, include_zoo: bool = True) -> dict[str, Callable[[], Any]]:
    """The scalar/wrapper mutants, the implementer mutants of :mod:`speccheck.validation.zoo`, plus
    the sampler engineer's SAMPLER_MUTANTS when present."""
    from functools import partial

    out = dict(MUTANTS)
    if include_zoo:
        from speccheck.validation.zoo import ZOO

        out.update(ZOO)
    if include_sampler:
        from speccheck.validation.sampler_mutants import SAMPLER_MUTANTS

        for k, f in dict(SAMPLER_MUTANTS).items():
            out[f"sampler-{k}"] = partial(SamplerMutantRule, str(k), f)
    return out


def run_mutants(suite: str | Suite = "gate", *, names: list[str] | None = None, device: str = "cpu",
                seed: int | None = None, progress: bool = False, heartbeat: Callable[[str], None] | None = None,
                **options: Any) -> dict[str, BatteryReport]:
    """Run the suite on every mutant (or ``names``); returns {mutant: report}.

    ``heartbeat`` and ``options`` (``layers``, ``Ks``, ``scale``, ...) go to :func:`run_battery`.
    Raises :class:`speccheck.errors.InputError` for an unknown mutant name."""
    facts = mutant_factories()
    if names:
        unknown = [n for n in names if n not in facts]
        if unknown:
            raise InputError(f"unknown mutant(s) {unknown}; known: {sorted(facts)}")
        facts = {n: facts[n] for n in names}
    st = load_suite(suite) if isinstance(suite, str) else suite
    out = {}
    for name, f in facts.items():
        if progress:
            print(f"[mutants] {name} ...", file=sys.stderr, flush=True)
        v = f()
        if getattr(v, "sampler_factory", None) is not None and st.trajectory is None:
            continue  # sampler mutants need layer 4 (run_battery runs them on layers 0 and 4 only)
        beat = None if heartbeat is None else (lambda label, _n=name: heartbeat(f"{_n}: {label}"))
        out[name] = run_battery(v, st, device=device, seed=seed, progress=progress, heartbeat=beat, **options)
    return out
