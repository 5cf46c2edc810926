"""Exactness of every built-in kernel on a (delta, K) grid: s_out ~ N(delta, 1) by KS with
n = 2^20 (DKW-Massart threshold) and P(accept) against speccheck.theory (exact binomial),
each at false-failure rate ALPHA = 1e-6 (130 cells x 2 assertions: family-wise < 3e-4)."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
import torch

from speccheck import theory
from speccheck.verifiers import get

from .helpers import ALPHA, assert_binomial, assert_normal

N = 1 << 20
DELTAS = [0.0, 1e-9, 1e-3, 0.1, 0.5, 1.0, 2.0, 4.0, 8.0, 20.0]
CELLS = [("rmc", 1, d) for d in DELTAS] + [
    (rule, K, d) for rule in ("dgrs", "rass", "rass-icdf") for K in (1, 2, 3, 8) for d in DELTAS
]


def _theory_acceptance(rule: str, delta: float, K: int) -> float:
    if rule == "rmc":
        return float(theory.acceptance_rmc(delta))
    if rule == "dgrs":
        return float(theory.acceptance_dgrs(delta, K))
    # RASS: the exact acceptance of the weights the kernel uses (interpolated LP weights)
    from speccheck.verifiers.rass import rass_weights

    return 1.0 if delta == 0 else float(theory.acceptance_rass(delta, K, rass_weights(delta, K)))


@pytest.mark.parametrize("rule,K,delta", CELLS, ids=[f"{r}-K{K}-d{d:g}" for r, K, d in CELLS])
def test_exact_law_and_acceptance(rule, K, delta):
    seed = zlib.crc32(f"{rule}/{K}/{delta!r}".encode())
    g = torch.Generator().manual_seed(seed)
    s = torch.randn(N, K, generator=g, dtype=torch.float64)
    v = get(rule)
    s_out, accepted, index = v.verify(torch.full((N,), delta, dtype=torch.float64), s, g)
    label = f"{rule} K={K} delta={delta:g}"
    assert torch.isfinite(s_out).all()
    assert_normal(s_out, mean=delta, label=label)
    p = _theory_acceptance(rule, delta, K)
    assert_binomial(int(accepted.sum()), N, p, label=label)
    # the contract on the same draws
    acc_rows = accepted.nonzero(as_tuple=True)[0]
    assert torch.equal(s_out[acc_rows], s[acc_rows, index[acc_rows]])
    assert torch.equal(index == K, ~accepted)
    if delta == 0:
        assert bool(accepted.all()) and bool((index == 0).all())


def test_rass_weights_near_optimal():
    """The interpolated grid weights lose little acceptance vs the LP at the exact delta and
    never beat the i.i.d.-list bound (deterministic checks)."""
    from speccheck.verifiers.rass import rass_weights

    for K in (2, 3, 8):
        for d in (1e-3, 0.13, 0.77, 1.5, 2.71, 5.55):
            a_used = float(theory.acceptance_rass(d, K, rass_weights(d, K)))
            a_opt = float(theory.acceptance_rass(d, K))
            bound = float(theory.list_bound_iid(d, K))
            assert a_used <= bound + 1e-9, (K, d, a_used, bound)
            assert a_opt - a_used <= 1e-4, (K, d, a_opt, a_used)


def test_mixed_deltas_one_batch():
    """A batch whose rows all differ in delta (the sampler's case): the standardised outputs
    s_out - delta are N(0, 1), and the number accepted matches the sum of per-row theory
    probabilities (Hoeffding bound at ALPHA)."""
    n = 1 << 17
    g = torch.Generator().manual_seed(7)
    for rule, K in (("dgrs", 3), ("rass", 3), ("rass-icdf", 2)):
        if rule == "dgrs":
            delta = torch.rand(n, generator=g, dtype=torch.float64) * 3.0  # all distinct
        elif rule == "rass":  # all distinct, within 21 LP grid points
            delta = 0.4 + 0.4 * torch.rand(n, generator=g, dtype=torch.float64)
        else:  # the inverse-CDF tables cost per distinct delta: 200 of them
            levels = 0.4 + 0.4 * torch.rand(200, generator=g, dtype=torch.float64)
            delta = levels[torch.randint(0, 200, (n,), generator=g)]
        v = get(rule)
        s = torch.randn(n, K, generator=g, dtype=torch.float64)
        s_out, accepted, index = v.verify(delta, s, g)
        assert_normal(s_out - delta, 0.0, label=f"{rule} mixed deltas")
        p = v.acceptance(delta.numpy(), K) if rule == "dgrs" else _rass_acc(delta.numpy(), K)
        t = np.sqrt(n * np.log(2.0 / ALPHA) / 2.0)  # Hoeffding on a sum of n Bernoullis
        assert abs(float(accepted.sum()) - p.sum()) <= t, (rule, float(accepted.sum()), p.sum(), t)


def _rass_acc(delta: np.ndarray, K: int) -> np.ndarray:
    # acceptance is smooth in delta: evaluate on 61 points and interpolate (the interpolation
    # error, < 1e-3 per row, is far below the Hoeffding threshold)
    from speccheck.verifiers.rass import RASS

    grid = np.linspace(delta.min(), delta.max(), 41)
    return np.interp(delta, grid, RASS().acceptance(grid, K))
