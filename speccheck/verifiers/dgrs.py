"""D-GRS: greedy rejection sampling over the children in drafting order (SPEC section 1).

With levels lambda_0 = 0 < lambda_1 = 1 < ... < lambda_K and G_1 = 1, G_2, ... from
:func:`speccheck.theory.dgrs_levels`, child k is accepted w.p.
beta_k = min(1, (rho(S_k) - lambda_{k-1})_+ / G_k). Evaluated as
``expm1(log rho) - (lambda_{k-1} - 1) > U_k G_k`` so that tiny delta (where rho, lambda ~ 1
agree to 12 digits) keeps every digit and delta up to 40 never overflows to NaN. After K
rejections S is drawn from (phi(s - delta) - lambda_K phi(s))_+ / G_{K+1}, supported on
s >= tau_K, by the exact samplers of :mod:`speccheck.verifiers._residual`.
"""

from __future__ import annotations

import numpy as np
import torch

from speccheck.verifiers import _residual
from speccheck.verifiers.base import ScalarVerifier, VerifyResult, first_true, group_deltas, uniform


class DGRS(ScalarVerifier):
    """Greedy rejection sampling (D-GRS), any K >= 1.

    residual: "rejection" (proposals from N(delta, 1), inverse-CDF fallback for rows that are
    still pending after 2^11 - 1 proposals) or "icdf" (inverse CDF only).
    """

    name = "dgrs"
    description = "greedy rejection sampling in drafting order (D-GRS), exact residual on s >= tau_K"

    def __init__(self, residual: str = "rejection"):
        if residual not in ("rejection", "icdf"):
            raise ValueError(f"residual must be 'rejection' or 'icdf', got residual={residual!r}")
        self.residual = residual

    def acceptance(self, delta, K: int) -> np.ndarray:
        from speccheck.theory import acceptance_dgrs

        return acceptance_dgrs(delta, K)

    def _kernel(self, delta: torch.Tensor, s: torch.Tensor, generator) -> VerifyResult:
        from speccheck.theory import dgrs_levels

        B, K = s.shape
        dev = s.device
        delta_u, group = group_deltas(delta)
        lev = dgrs_levels(delta_u.cpu().numpy(), K)
        mu = torch.as_tensor(lev.mu, dtype=torch.float64, device=dev)  # [U, K+1], mu_0 = -1
        G = torch.as_tensor(lev.G, dtype=torch.float64, device=dev)  # [U, K+1], G[:, k] = G_{k+1}
        if delta_u.shape[0] == 1:
            mu_prev, G_k = mu[:, :K], G[:, :K]
        else:
            mu_prev, G_k = mu[group, :K], G[group, :K]
        d = delta[:, None]
        log_rho = d * s - 0.5 * d * d
        accept = torch.expm1(log_rho) - mu_prev > uniform((B, K), s, generator) * G_k
        accepted, index = first_true(accept)
        s_out = torch.gather(s, 1, index.clamp(max=K - 1)[:, None])[:, 0]
        rej = torch.nonzero(~accepted, as_tuple=True)[0]
        if rej.numel():
            log_lam_u = torch.log1p(mu[:, K])  # log lambda_K per distinct delta
            s_out[rej] = sample_residual(delta_u, log_lam_u, group[rej], generator, self.residual)
        return s_out, accepted, index


def sample_residual(delta_u, log_lam_u, group, generator, method: str = "rejection") -> torch.Tensor:
    """Samples of (phi(s - delta) - lambda_K phi(s))_+ / G_{K+1} for rows of the given groups."""

    def log_b_groups(s, g):
        return log_lam_u[g][:, None]

    if method == "icdf":
        return _residual.sample_icdf(delta_u, log_b_groups, group, generator)
    d_rows = delta_u[group]
    ll_rows = log_lam_u[group]
    def log_b_rows(s, rows):
        return (ll_rows if rows is None else ll_rows[rows])[:, None]

    x, done = _residual.sample_rejection(d_rows, log_b_rows, generator)
    left = torch.nonzero(~done, as_tuple=True)[0]
    if left.numel():
        x[left] = _residual.sample_icdf(delta_u, log_b_groups, group[left], generator)
    return x
