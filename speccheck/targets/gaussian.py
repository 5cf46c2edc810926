"""Gaussian data N(m, c^2 I): affine velocity and the exact law of the discretised chain.

Under x_t = (1 - t) x_0 + t xi, x_t ~ N((1 - t) m, s_t^2 I) with s_t^2 = (1 - t)^2 c^2 + t^2, and
v_t(x) = E[xi - x_0 | x_t = x] = A_t (x - (1 - t) m) - m,  A_t = (t - (1 - t) c^2) / s_t^2.
Every step of the churn sampler is then affine-Gaussian, so the chain Y_0..Y_N (Y_0 ~ N(m0, v0 I))
is a Gaussian process with independent coordinates: :func:`chain_law` gives it exactly.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import numpy as np
import torch

from speccheck.errors import InputError
from speccheck.targets.base import check_rows
from speccheck.targets.schedules import Schedule


class GaussianData:
    """VelocityModel for data N(m, c^2 I_d). m: (d,) array-like; c > 0."""

    def __init__(self, m, c: float, dtype: torch.dtype = torch.float64):
        m = torch.as_tensor(np.asarray(m, dtype=np.float64), dtype=dtype)
        if m.dim() != 1:
            raise InputError(f"m must be a vector, got shape {tuple(m.shape)}")
        if not np.isfinite(c) or c <= 0:
            raise InputError(f"c must be > 0, got {c!r}")
        self.m = m
        self.c = float(c)
        self.state_shape = (int(m.numel()),)
        self.dtype = dtype

    def slope(self, t: torch.Tensor) -> torch.Tensor:
        """A_t, shape of t."""
        s2 = (1 - t) ** 2 * self.c**2 + t**2
        return (t - (1 - t) * self.c**2) / s2

    def velocity(self, x: torch.Tensor, t: torch.Tensor, cond: Optional[torch.Tensor] = None) -> torch.Tensor:
        """x: [R, d], t: [R] -> [R, d]."""
        check_rows(x, t, self.state_shape)
        t = t.to(x.dtype).reshape(-1, 1)
        m = self.m.to(x)
        return self.slope(t) * (x - (1 - t) * m) - m

    def describe(self) -> dict:
        return {"target": "gaussian", "d": self.state_shape[0], "c": self.c}


class ChainLaw(NamedTuple):
    """mean: (N + 1, d); var: (N + 1,) per-coordinate variance of Y_n; gain: (N,) with
    Y_{n+1} = gain_n Y_n + offset_n + sigma_n xi; offset: (N, d); cov_next: (N,) Cov(Y_n, Y_{n+1})."""

    mean: np.ndarray
    var: np.ndarray
    gain: np.ndarray
    offset: np.ndarray
    cov_next: np.ndarray


def chain_law(schedule: Schedule, target: GaussianData, init_mean: float = 0.0, init_var: float = 1.0) -> ChainLaw:
    """Exact law of the discretised sampler (deterministic steps as Euler, sigma_n = 0)."""
    if init_var < 0:
        raise InputError(f"init_var must be >= 0, got {init_var}")
    m = target.m.double().numpy()
    d = m.size
    N = schedule.N
    mean = np.empty((N + 1, d))
    var = np.empty(N + 1)
    gain = np.empty(N)
    offset = np.empty((N, d))
    cov_next = np.empty(N)
    mean[0] = init_mean
    var[0] = init_var
    for n in range(N):
        t = schedule.t[n]
        A = float(target.slope(torch.tensor(t, dtype=torch.float64)))
        a, c, s = schedule.a[n], schedule.c[n], schedule.sigma[n]
        gain[n] = a + c * A
        offset[n] = c * (-A * (1 - t) * m - m)
        mean[n + 1] = gain[n] * mean[n] + offset[n]
        var[n + 1] = gain[n] ** 2 * var[n] + s**2
        cov_next[n] = gain[n] * var[n]
    return ChainLaw(mean, var, gain, offset, cov_next)
