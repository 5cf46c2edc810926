"""Gaussian mixture: closed-form velocity vs the score identity, presets and seeds."""

import numpy as np
import pytest
import torch

from speccheck.targets.gmm import PAPER_SEED, GaussianMixture, draw_mixture, gmm_preset


def _log_pt(x, t, mix):
    # log p_t(x) of the mixture marginal at time t (rows x [R, d], t [R])
    u = (1 - t)[:, None]
    S2 = u**2 * mix.stds**2 + t[:, None] ** 2                   # [R, C]
    sq = ((x[:, None, :] - u[:, :, None] * mix.means[None]) ** 2).sum(-1)
    d = x.shape[1]
    return torch.logsumexp(mix.log_w - 0.5 * sq / S2 - 0.5 * d * torch.log(2 * np.pi * S2), dim=1)


def test_velocity_matches_score_identity():
    """v_t(x) = -(x + t s_t(x)) / (1 - t) with s_t = grad log p_t (autograd), SPEC section 3."""
    mix = draw_mixture(7, seed=3, n_components=4)
    g = torch.Generator().manual_seed(0)
    x = 2 * torch.randn(40, 7, generator=g, dtype=torch.float64)
    t = torch.rand(40, generator=g, dtype=torch.float64) * 0.98 + 0.01
    xr = x.clone().requires_grad_(True)
    score, = torch.autograd.grad(_log_pt(xr, t, mix).sum(), xr)
    expect = -(x + t[:, None] * score) / (1 - t[:, None])
    np.testing.assert_allclose(mix.velocity(x, t).numpy(), expect.numpy(), rtol=1e-9, atol=1e-9)
    small = GaussianMixture(mix.means.numpy(), mix.stds.numpy(), chunk_rows=7)
    np.testing.assert_allclose(small.velocity(x, t).numpy(), mix.velocity(x, t).numpy(), rtol=1e-12, atol=1e-13)


def test_presets_and_seed_recorded():
    rng = np.random.default_rng(PAPER_SEED)
    means = rng.uniform(-2, 2, size=(5, 512))
    stds = rng.uniform(0.10, 0.25, size=5)
    m = gmm_preset("gmm-d512")
    np.testing.assert_array_equal(m.means.numpy(), means)   # means drawn before the stds
    np.testing.assert_array_equal(m.stds.numpy(), stds)
    assert m.describe() == {"target": "gmm-d512", "d": 512, "components": 5, "mixture_seed": PAPER_SEED}
    assert gmm_preset("gmm-paper").d == 500
    with pytest.raises(ValueError):
        gmm_preset("gmm-1000")


def test_bad_input():
    with pytest.raises(ValueError):
        GaussianMixture(np.zeros(3), np.ones(3))
    with pytest.raises(ValueError):
        GaussianMixture(np.zeros((2, 3)), np.array([1.0, -1.0]))
    with pytest.raises(ValueError):
        GaussianMixture(np.zeros((2, 3)), np.ones(2), weights=np.array([0.7, 0.7]))
    mix = draw_mixture(3, seed=1)
    with pytest.raises(ValueError):
        mix.velocity(torch.zeros(4, 3, dtype=torch.float64), torch.zeros(5, dtype=torch.float64))
