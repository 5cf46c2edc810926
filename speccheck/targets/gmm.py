"""Isotropic Gaussian mixture data with the closed-form velocity (SPEC section 3, paper 5.1).

Component i: weight w_i, mean mu_i, std s_i. Given component i, x_t ~ N((1 - t) mu_i, S_i^2 I),
S_i^2 = (1 - t)^2 s_i^2 + t^2, and the component velocity is affine:
v_i(x) = A_i (x - (1 - t) mu_i) - mu_i, A_i = (t - (1 - t) s_i^2) / S_i^2.
v_t(x) = sum_i r_i(x) v_i(x) with posterior responsibilities r_i ∝ w_i N(x; (1 - t) mu_i, S_i^2 I)
(computed in log space).
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import torch

from speccheck.errors import InputError
from speccheck.targets.base import check_rows

PAPER_SEED = 20260714
GMM_PRESETS = ("gmm-paper", "gmm-d512")


class GaussianMixture:
    """VelocityModel for sum_i w_i N(mu_i, s_i^2 I_d). means: (C, d), stds: (C,), weights: (C,)."""

    def __init__(self, means, stds, weights=None, *, seed: Optional[int] = None, name: str = "gmm",
                 dtype: torch.dtype = torch.float64, chunk_rows: int = 16384):
        means = np.asarray(means, dtype=np.float64)
        stds = np.asarray(stds, dtype=np.float64)
        if means.ndim != 2:
            raise InputError(f"means must have shape (C, d), got {means.shape}")
        C, d = means.shape
        if stds.shape != (C,) or np.any(~np.isfinite(stds)) or np.any(stds <= 0):
            raise InputError(f"stds must be {C} positive numbers, got {stds}")
        weights = np.full(C, 1.0 / C) if weights is None else np.asarray(weights, dtype=np.float64)
        if weights.shape != (C,) or np.any(weights <= 0) or abs(weights.sum() - 1) > 1e-9:
            raise InputError(f"weights must be {C} positive numbers summing to 1, got {weights}")
        self.means = torch.as_tensor(means, dtype=dtype)
        self.stds = torch.as_tensor(stds, dtype=dtype)
        self.log_w = torch.as_tensor(np.log(weights), dtype=dtype)
        self.state_shape = (d,)
        self.seed = seed
        self.name = name
        self.dtype = dtype
        self.chunk_rows = int(chunk_rows)
        self._mu_sq = (self.means**2).sum(1)

    @property
    def d(self) -> int:
        return self.state_shape[0]

    def velocity(self, x: torch.Tensor, t: torch.Tensor, cond: Optional[torch.Tensor] = None) -> torch.Tensor:
        """x: [R, d], t: [R] in (0, 1] -> v_t(x): [R, d]. Rows are processed in chunks."""
        check_rows(x, t, self.state_shape)
        if x.shape[0] <= self.chunk_rows:
            return self._velocity(x, t)
        return torch.cat([self._velocity(xc, tc) for xc, tc in
                          zip(x.split(self.chunk_rows), t.split(self.chunk_rows))])

    def _velocity(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        mu = self.means.to(x)
        s2 = self.stds.to(x) ** 2
        t = t.to(x.dtype).reshape(-1, 1)                      # [R, 1]
        u = 1 - t
        S2 = u**2 * s2 + t**2                                  # [R, C]
        A = (t - u * s2) / S2                                  # [R, C]
        xmu = x @ mu.T                                         # [R, C]
        sq = (x * x).sum(1, keepdim=True) - 2 * u * xmu + u**2 * self._mu_sq.to(x)
        logits = self.log_w.to(x) - 0.5 * sq / S2 - 0.5 * self.d * torch.log(S2)
        r = torch.softmax(logits, dim=1)                       # [R, C]
        rA = r * A
        # sum_i r_i [A_i (x - u mu_i) - mu_i] = (sum r_i A_i) x - (r * (A u + 1)) @ mu
        return rA.sum(1, keepdim=True) * x - (rA * u + r) @ mu

    def sample(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """n i.i.d. data samples [n, d] (for checks)."""
        idx = torch.multinomial(self.log_w.exp(), n, replacement=True, generator=generator)
        z = torch.randn(n, self.d, generator=generator, dtype=self.dtype)
        return self.means[idx] + self.stds[idx].unsqueeze(1) * z

    def describe(self) -> dict:
        return {"target": self.name, "d": self.d, "components": int(self.means.shape[0]),
                "mixture_seed": self.seed}


def draw_mixture(d: int, seed: int, n_components: int = 5, mean_range: float = 2.0,
                 std_range: tuple[float, float] = (0.10, 0.25), name: str = "gmm") -> GaussianMixture:
    """The paper's random mixture: numpy default_rng(seed); means ~ U([-r, r]^d) drawn first
    (shape (C, d)), then stds ~ U(std_range) (shape (C,)); equal weights."""
    if d < 1 or n_components < 1:
        raise InputError(f"need d >= 1 and n_components >= 1, got d={d}, n_components={n_components}")
    rng = np.random.default_rng(seed)
    means = rng.uniform(-mean_range, mean_range, size=(n_components, d))
    stds = rng.uniform(std_range[0], std_range[1], size=n_components)
    return GaussianMixture(means, stds, seed=seed, name=name)


def gmm_preset(name: str) -> GaussianMixture:
    """'gmm-paper': d = 500 (paper section 5.1); 'gmm-d512': d = 512 (the authors' public code).
    Both drawn with seed 20260714 (the paper does not state its seed; recorded in results)."""
    if name == "gmm-paper":
        return draw_mixture(500, PAPER_SEED, name=name)
    if name == "gmm-d512":
        return draw_mixture(512, PAPER_SEED, name=name)
    raise InputError(f"unknown mixture preset {name!r}; choose 'gmm-paper' or 'gmm-d512'")
