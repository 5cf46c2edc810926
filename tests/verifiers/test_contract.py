"""Contract (SPEC section 4), determinism, input validation and extreme inputs of the kernels."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from speccheck.verifiers import get

RULES = ["rmc", "dgrs", "rass", "rass-icdf"]


def _Ks(rule):
    return [1] if rule == "rmc" else [1, 2, 5]


def _batch(n, K, seed, delta_max=3.0, distinct=16):
    g = torch.Generator().manual_seed(seed)
    # ``distinct`` different deltas spread over the rows (the inverse-CDF tables cost per delta)
    levels = torch.rand(distinct, generator=g, dtype=torch.float64) * delta_max
    delta = levels[torch.randint(0, distinct, (n,), generator=g)]
    delta[: n // 8] = 0.0
    delta[n // 8: n // 4] = 1e-10
    s = torch.randn(n, K, generator=g, dtype=torch.float64)
    return delta, s


def _check_contract(delta, s, out):
    s_out, accepted, index = out
    B, K = s.shape
    assert s_out.shape == (B,) and accepted.shape == (B,) and index.shape == (B,)
    assert s_out.dtype == s.dtype and accepted.dtype == torch.bool and index.dtype == torch.long
    assert torch.isfinite(s_out).all()
    assert ((index >= 0) & (index <= K)).all()
    assert torch.equal(index == K, ~accepted)
    rows = accepted.nonzero(as_tuple=True)[0]
    assert torch.equal(s_out[rows], s[rows, index[rows]])
    zero = delta == 0
    assert accepted[zero].all() and (index[zero] == 0).all()


@pytest.mark.parametrize("rule", RULES)
def test_contract_and_determinism(rule):
    v = get(rule)
    for K in _Ks(rule):
        delta, s = _batch(4096, K, seed=K)
        out1 = v.verify(delta, s, torch.Generator().manual_seed(123))
        _check_contract(delta, s, out1)
        out2 = v.verify(delta, s, torch.Generator().manual_seed(123))
        for a, b in zip(out1, out2):
            assert torch.equal(a, b), f"{rule}: not reproducible under a fixed generator"
        out3 = v.verify(delta, s, torch.Generator().manual_seed(124))
        assert not torch.equal(out1[0], out3[0])


@pytest.mark.parametrize("rule", RULES)
def test_extreme_delta_and_K(rule):
    """delta up to 40 and K up to 64 give finite, contract-abiding answers (rass: K up to 16,
    as each new K costs LP solves)."""
    v = get(rule)
    Ks = [1] if rule == "rmc" else ([64] if rule == "dgrs" else [16])
    for K in Ks:
        g = torch.Generator().manual_seed(5)
        delta = torch.tensor([0.0, 1e-12, 1e-6, 12.0, 25.0, 39.5, 40.0] * 64, dtype=torch.float64)
        s = torch.randn(delta.numel(), K, generator=g, dtype=torch.float64)
        s[:4, 0] = torch.tensor([-30.0, 30.0, 45.0, -8.0], dtype=torch.float64)
        out = v.verify(delta, s, g)
        _check_contract(delta, s, out)
        # at delta >= 12 nothing is accepted in practice (P(accept) < 1e-9 per row)...
        big = delta >= 12
        big[:4] = False  # rows whose s was set by hand above
        assert not out[1][big].any()
        # ...and the residual sits around delta: |s_out - delta| < 7 holds w.p. > 1 - 3e-9 per row
        assert ((out[0][big] - delta[big]).abs() < 7).all()


def test_float32_inputs_keep_dtype_and_children():
    v = get("dgrs")
    g = torch.Generator().manual_seed(0)
    s = torch.randn(1000, 3, generator=g, dtype=torch.float32)
    delta = torch.full((1000,), 0.7, dtype=torch.float32)
    s_out, accepted, index = v.verify(delta, s, g)
    assert s_out.dtype == torch.float32
    rows = accepted.nonzero(as_tuple=True)[0]
    assert torch.equal(s_out[rows], s[rows, index[rows]])


@pytest.mark.parametrize("rule", RULES)
def test_bad_inputs(rule):
    v = get(rule)
    K = 1
    s = torch.zeros(4, K, dtype=torch.float64)
    d = torch.full((4,), 0.5, dtype=torch.float64)
    with pytest.raises(ValueError, match="delta"):
        v.verify(torch.tensor([0.5, -1.0, 0.5, 0.5], dtype=torch.float64), s, None)
    with pytest.raises(ValueError, match="delta"):
        v.verify(torch.tensor([0.5, math.nan, 0.5, 0.5], dtype=torch.float64), s, None)
    with pytest.raises(ValueError, match="delta"):
        v.verify(torch.tensor([0.5, math.inf, 0.5, 0.5], dtype=torch.float64), s, None)
    with pytest.raises(ValueError, match="shape"):
        v.verify(torch.full((3,), 0.5, dtype=torch.float64), s, None)
    with pytest.raises(ValueError, match=r"shape \[B, K\]"):
        v.verify(d, torch.zeros(4, dtype=torch.float64), None)
    with pytest.raises(ValueError, match="K"):
        v.verify(d, torch.zeros(4, 0, dtype=torch.float64), None)
    with pytest.raises(ValueError, match="floating"):
        v.verify(d, torch.zeros(4, K, dtype=torch.int64), None)
    with pytest.raises(ValueError, match="floating"):
        v.verify(torch.ones(4, dtype=torch.int64), s, None)
    with pytest.raises(ValueError, match="finite"):
        v.verify(d, torch.full((4, K), math.nan, dtype=torch.float64), None)
    if rule == "rmc":
        with pytest.raises(ValueError, match="K=2"):
            v.verify(d, torch.zeros(4, 2, dtype=torch.float64), None)


def test_empty_batch():
    for rule in RULES:
        out = get(rule).verify(torch.zeros(0, dtype=torch.float64), torch.zeros(0, 1, dtype=torch.float64), None)
        assert all(t.shape == (0,) for t in out)


def test_acceptance_methods_match_theory():
    from speccheck import theory

    d = np.array([0.0, 0.3, 1.7])
    assert np.allclose(get("rmc").acceptance(d, 1), theory.acceptance_rmc(d))
    assert np.allclose(get("dgrs").acceptance(d, 3), theory.acceptance_dgrs(d, 3))
    a = get("rass").acceptance(d, 3)
    assert a[0] == 1.0 and np.all(a[1:] <= theory.list_bound_iid(d[1:], 3) + 1e-9)
    assert get("rmc").supports_K(1) and not get("rmc").supports_K(2)
