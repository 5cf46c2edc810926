"""The d-dimensional verification step around any scalar kernel (SPEC section 1, rank-1 reduction).

Delta = (mu_q - mu_p) / sigma, delta = ||Delta||, e = Delta / delta. A state X is split into
S = e . (X - mu_p) / sigma and Z_perp = (X - mu_p) / sigma - S e; S ~ N(0, 1) under P and
N(delta, 1) under Q, and Z_perp has the same law under both, independent of S. The kernel turns
the K children's S into one S_out ~ N(delta, 1); the output state is
Y = mu_p + sigma (S_out e + Z_perp of the accepted child, or of the first child on rejection).
An accepted row returns the child itself (bit-exact). delta = 0 (P = Q) uses e = first basis
vector; the built-in kernels accept the first child there.
"""

from __future__ import annotations

import torch

from speccheck.verifiers.base import Verifier, check_verify_outputs

Tensor = torch.Tensor


def _check_state_inputs(mu_p, mu_q, sigma, children) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    for name, t in (("mu_p", mu_p), ("mu_q", mu_q), ("children", children)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if not torch.is_floating_point(t):
            raise ValueError(f"{name} must be a floating-point tensor, got dtype {t.dtype}")
    if mu_p.dim() < 1:
        raise ValueError(f"mu_p must have shape [B, *state_shape], got {tuple(mu_p.shape)}")
    if mu_q.shape != mu_p.shape:
        raise ValueError(f"mu_q shape {tuple(mu_q.shape)} does not match mu_p shape {tuple(mu_p.shape)}")
    B, state = mu_p.shape[0], tuple(mu_p.shape[1:])
    if children.dim() != mu_p.dim() + 1 or children.shape[0] != B or tuple(children.shape[2:]) != state:
        raise ValueError(
            f"children must have shape [B, K, *state_shape] = [{B}, K, {', '.join(map(str, state))}], "
            f"got {tuple(children.shape)}")
    if children.shape[1] < 1:
        raise ValueError(f"K must be >= 1, got children shape {tuple(children.shape)}")
    if not isinstance(sigma, torch.Tensor):
        sigma = torch.as_tensor(float(sigma), dtype=torch.float64, device=mu_p.device)
    elif not torch.is_floating_point(sigma):
        raise ValueError(f"sigma must be floating-point, got dtype {sigma.dtype}")
    sigma = sigma.to(device=mu_p.device, dtype=torch.float64)
    if sigma.dim() == 0:
        sigma = sigma.expand(B)
    if sigma.shape != (B,):
        raise ValueError(f"sigma must be a float or have shape [B] = [{B}], got {tuple(sigma.shape)}")
    if B and not bool((sigma > 0).all() and torch.isfinite(sigma).all()):
        bad = sigma[~((sigma > 0) & torch.isfinite(sigma))][0]
        raise ValueError(f"sigma must be finite and > 0, got sigma={float(bad)!r}")
    return mu_p, mu_q, sigma, children


def project(mu_p: Tensor, mu_q: Tensor, sigma: float | Tensor, children: Tensor
            ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Rank-1 reduction. Returns (delta[B], e[B, d], s[B, K], z_perp[B, K, d], sigma[B]), float64."""
    mu_p, mu_q, sigma, children = _check_state_inputs(mu_p, mu_q, sigma, children)
    B, K = children.shape[:2]
    mp = mu_p.reshape(B, -1).to(torch.float64)
    Delta = (mu_q.reshape(B, -1).to(torch.float64) - mp) / sigma[:, None]
    delta = torch.linalg.vector_norm(Delta, dim=1)
    e = Delta / torch.where(delta > 0, delta, 1.0)[:, None]
    # delta = 0: any unit direction will do (s is then unused); e_0, without a host sync
    first_axis = torch.zeros_like(e[:1])
    first_axis[:, 0] = 1.0
    e = torch.where((delta == 0)[:, None], first_axis, e)
    z = (children.reshape(B, K, -1).to(torch.float64) - mp[:, None, :]) / sigma[:, None, None]
    s = torch.einsum("bkd,bd->bk", z, e)
    z_perp = z - s[..., None] * e[:, None, :]
    return delta, e, s, z_perp, sigma


def verify_states(verifier: Verifier, mu_p: Tensor, mu_q: Tensor, sigma: float | Tensor, children: Tensor,
                  generator: torch.Generator | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """One verification step in state space.

    mu_p, mu_q: [B, *shape]; sigma: float or [B] (> 0); children: [B, K, *shape] drafted from
    N(mu_p, sigma^2 I). Returns (y [B, *shape] ~ N(mu_q, sigma^2 I), accepted [B], index [B])
    with y == children[b, index[b]] where accepted and index == K otherwise.
    """
    delta, e, s, z_perp, sig = project(mu_p, mu_q, sigma, children)
    B, K = s.shape
    name = getattr(verifier, "name", type(verifier).__name__)
    s_out, accepted, index = check_verify_outputs(verifier.verify(delta, s, generator), B, K, name)
    s_out = s_out.to(torch.float64)
    keep = torch.where(accepted, index, torch.zeros_like(index)).clamp(0, K - 1)
    z_keep = z_perp[torch.arange(B, device=s.device), keep]
    flat = mu_p.reshape(B, -1).to(torch.float64) + sig[:, None] * (s_out[:, None] * e + z_keep)
    y = flat.reshape(mu_p.shape).to(mu_p.dtype)
    if bool(accepted.any()):
        chosen = children[torch.arange(B, device=s.device), keep].to(mu_p.dtype)
        y = torch.where(accepted.reshape((B,) + (1,) * (mu_p.dim() - 1)), chosen, y)
    return y, accepted, index
