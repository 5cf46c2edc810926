"""verify_states: the d-dimensional step around a scalar kernel (SPEC section 1).

Y must be N(mu_q, sigma^2 I): checked on the displacement direction, on fixed random
directions and by the chi-square law of ||Y - mu_q||^2 / sigma^2, each by KS with a
DKW-Massart threshold at false-failure rate 1e-6. A deliberately wrong rule must fail."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from speccheck.verifiers import get, project, verify_states

from .helpers import assert_cdf, assert_normal, dkw_epsilon, ks_statistic

SHAPE = (3, 4)  # any state shape; d = 12
D = 12


def _setup(B, K, seed, sigma_scalar=False):
    g = torch.Generator().manual_seed(seed)
    mu_p = torch.randn((B,) + SHAPE, generator=g, dtype=torch.float64)
    sigma = 0.3 + torch.rand(B, generator=g, dtype=torch.float64)
    if sigma_scalar:
        sigma = 0.7
    sig = torch.as_tensor(sigma, dtype=torch.float64).expand(B)
    delta = torch.tensor([0.0, 0.4, 1.0, 2.5], dtype=torch.float64)[torch.arange(B) % 4]
    direction = torch.randn((B,) + SHAPE, generator=g, dtype=torch.float64)
    direction /= direction.reshape(B, -1).norm(dim=1).reshape((B,) + (1,) * len(SHAPE))
    mu_q = mu_p + (sig * delta).reshape((B,) + (1,) * len(SHAPE)) * direction
    children = mu_p[:, None] + sig.reshape((B, 1) + (1,) * len(SHAPE)) * torch.randn(
        (B, K) + SHAPE, generator=g, dtype=torch.float64)
    return g, mu_p, mu_q, sigma, sig, children, direction, delta


@pytest.mark.parametrize("rule,K", [("dgrs", 3), ("rass", 2), ("rmc", 1)])
def test_output_law(rule, K):
    B = 1 << 16
    g, mu_p, mu_q, sigma, sig, children, direction, delta = _setup(B, K, seed=K)
    y, accepted, index = verify_states(get(rule), mu_p, mu_q, sigma, children, g)
    assert y.shape == mu_p.shape and y.dtype == mu_p.dtype
    z = ((y - mu_q) / sig.reshape((B,) + (1,) * len(SHAPE))).reshape(B, D)
    # displacement direction (rows with delta > 0)
    e = direction.reshape(B, D)
    moving = delta > 0
    assert_normal((z * e).sum(1)[moving], 0.0, label=f"{rule}: along the displacement")
    # three fixed random directions
    rng = np.random.default_rng(1)
    for _ in range(3):
        u = torch.from_numpy(rng.standard_normal(D))
        u /= u.norm()
        assert_normal(z @ u, 0.0, label=f"{rule}: random direction")
    # chi-square with d degrees of freedom
    assert_cdf((z * z).sum(1), lambda t: stats.chi2.cdf(t, D), label=f"{rule}: ||Y - mu_q||^2 / sigma^2")
    # accepted rows are the children themselves; delta = 0 rows accept child 0
    rows = accepted.nonzero(as_tuple=True)[0]
    assert torch.equal(y[rows], children[rows, index[rows]])
    zero = delta == 0
    assert accepted[zero].all() and (index[zero] == 0).all()
    assert torch.equal(index == K, ~accepted)


def test_rejected_rows_keep_first_childs_orthogonal_part():
    B, K = 4096, 3
    g, mu_p, mu_q, sigma, sig, children, direction, delta = _setup(B, K, seed=9)
    y, accepted, index = verify_states(get("dgrs"), mu_p, mu_q, sigma, children, g)
    delta_t, e, s, z_perp, _ = project(mu_p, mu_q, sigma, children)
    zy = ((y - mu_p) / sig.reshape((B,) + (1,) * len(SHAPE))).reshape(B, D)
    zy_perp = zy - (zy * e).sum(1, keepdim=True) * e
    rej = ~accepted
    assert rej.any()
    assert torch.allclose(zy_perp[rej], z_perp[rej, 0], atol=1e-10)


def test_scalar_sigma_and_float32():
    B, K = 2048, 2
    g, mu_p, mu_q, sigma, sig, children, direction, delta = _setup(B, K, seed=4, sigma_scalar=True)
    y, accepted, index = verify_states(get("dgrs"), mu_p.float(), mu_q.float(), sigma, children.float(), g)
    assert y.dtype == torch.float32 and y.shape == mu_p.shape
    rows = accepted.nonzero(as_tuple=True)[0]
    assert torch.equal(y[rows], children.float()[rows, index[rows]])


def test_wrong_rule_is_detected():
    """Power check: 'always accept the first child' is not exact for delta > 0."""

    class Greedy:
        name = "greedy"

        def verify(self, delta, s, generator=None):
            B = s.shape[0]
            return s[:, 0].clone(), torch.ones(B, dtype=torch.bool), torch.zeros(B, dtype=torch.long)

    B = 1 << 14
    g, mu_p, mu_q, sigma, sig, children, direction, delta = _setup(B, 2, seed=2)
    y, _, _ = verify_states(Greedy(), mu_p, mu_q, sigma, children, g)
    z = ((y - mu_q) / sig.reshape((B,) + (1,) * len(SHAPE))).reshape(B, D)
    proj = (z * direction.reshape(B, D)).sum(1)[delta > 0]
    assert ks_statistic(proj, stats.norm.cdf) > dkw_epsilon(proj.numel())


def test_bad_inputs():
    B, K = 4, 2
    g, mu_p, mu_q, sigma, sig, children, direction, delta = _setup(B, K, seed=0)
    v = get("dgrs")
    with pytest.raises(ValueError, match="mu_q"):
        verify_states(v, mu_p, mu_q[:, :2], sigma, children, g)
    with pytest.raises(ValueError, match="children"):
        verify_states(v, mu_p, mu_q, sigma, children[:, :, :2], g)
    with pytest.raises(ValueError, match="children"):
        verify_states(v, mu_p, mu_q, sigma, children[:3], g)
    with pytest.raises(ValueError, match="sigma"):
        verify_states(v, mu_p, mu_q, 0.0, children, g)
    with pytest.raises(ValueError, match="sigma"):
        verify_states(v, mu_p, mu_q, -sig, children, g)
    with pytest.raises(ValueError, match="sigma"):
        verify_states(v, mu_p, mu_q, float("nan"), children, g)
    with pytest.raises(ValueError, match="sigma"):
        verify_states(v, mu_p, mu_q, sig[:2], children, g)
    with pytest.raises(ValueError, match="floating"):
        verify_states(v, mu_p.long(), mu_q, sigma, children, g)
    with pytest.raises(ValueError, match="K"):
        verify_states(v, mu_p, mu_q, sigma, children[:, :0], g)

    class BadShape:
        name = "bad"

        def verify(self, delta, s, generator=None):
            return s, torch.ones(s.shape[0], dtype=torch.bool), torch.zeros(s.shape[0], dtype=torch.long)

    with pytest.raises(ValueError, match="s_out"):
        verify_states(BadShape(), mu_p, mu_q, sigma, children, g)
