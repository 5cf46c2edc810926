"""The residual samplers on their own: the law of the D-GRS and RASS residuals (KS against the
closed-form residual CDF from speccheck.theory) for both samplers, including tiny delta where
the residual mass is ~1e-10 and must not be lost to rounding. False-failure rate 1e-6 each."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from speccheck import theory
from speccheck.theory.normal import normal_mass
from speccheck.verifiers import dgrs as dgrs_mod
from speccheck.verifiers import rass as rass_mod

from .helpers import assert_cdf

N = 1 << 17


def _dgrs_residual_cdf(delta: float, K: int):
    lev = theory.dgrs_levels(np.array([delta]), K)
    tau, mu, G = lev.tau[0, K], lev.mu[0, K], lev.G[0, K]

    def cdf(x):
        x = np.maximum(x, tau)
        # integral_tau^x (phi(s - delta) - lambda phi(s)) ds, in precise pieces
        m = normal_mass(tau - delta, x - delta) - normal_mass(tau, x) - mu * normal_mass(tau, x)
        return np.clip(m / G, 0.0, 1.0)

    return cdf


# Rejection sampling costs 1 / (residual mass) proposals per residual row; here every row is a
# residual row, so it is tested where that mass is O(1). Tiny deltas (mass ~1e-10) use the
# inverse CDF (the rejection sampler hands such rows to it after 4096 proposals).
DGRS_CASES = [("icdf", d, K) for d, K in [(1e-10, 1), (1e-10, 3), (1e-4, 2), (0.3, 1), (0.3, 8), (2.0, 4), (9.0, 2)]]
DGRS_CASES += [("rejection", d, K) for d, K in [(0.3, 1), (0.3, 8), (2.0, 4), (9.0, 2)]]


@pytest.mark.parametrize("method,delta,K", DGRS_CASES)
def test_dgrs_residual_law(method, delta, K):
    g = torch.Generator().manual_seed(int(delta * 1e4) + K)
    lev = theory.dgrs_levels(np.array([delta]), K)
    d_u = torch.tensor([delta], dtype=torch.float64)
    ll = torch.log1p(torch.tensor(lev.mu[:, K], dtype=torch.float64))
    x = dgrs_mod.sample_residual(d_u, ll, torch.zeros(N, dtype=torch.long), g, method)
    assert (x >= lev.tau[0, K] - 1e-12).all()
    assert_cdf(x, _dgrs_residual_cdf(delta, K), label=f"dgrs residual {method} delta={delta} K={K}")


RASS_CASES = [("rass-icdf", d, K) for d, K in [(1e-10, 2), (2e-3, 3), (1.0, 2), (0.7, 8), (3.3, 4)]]
RASS_CASES += [("rass", d, K) for d, K in [(1.0, 2), (2.0, 8), (3.3, 4)]]


@pytest.mark.parametrize("rule,delta,K", RASS_CASES)
def test_rass_residual_law(rule, delta, K):
    """Residual samples against the CDF built from theory.residual_intervals (closed-form masses
    per interval; within an interval, q-mass minus p_omega-mass)."""
    w = rass_mod.rass_weights(delta, K)
    ivs = theory.residual_intervals(delta, K, w)
    total = sum(iv.mass for iv in ivs)

    def cdf(x):
        out = np.zeros_like(x)
        for lo, hi, _ in ivs:
            xc = np.clip(x, lo, hi)
            q = normal_mass(np.full_like(xc, lo - delta), xc - delta)
            p = theory.cdf_p_omega(xc, K, w) - (theory.cdf_p_omega(lo, K, w) if np.isfinite(lo) else 0.0)
            out += q - p
        return np.clip(out / total, 0.0, 1.0)

    v = rass_mod.RASS() if rule == "rass" else rass_mod.RASSInverseCDF()
    C = np.exp(rass_mod._log_binom(K))
    A = torch.tensor(w * C, dtype=torch.float64)[None]
    Ad = torch.tensor((w - 1.0 / K) * C, dtype=torch.float64)[None]
    g = torch.Generator().manual_seed(K)
    x = v._residual(torch.tensor([delta], dtype=torch.float64), A, Ad, torch.zeros(N, dtype=torch.long), g)
    assert_cdf(x, cdf, label=f"{rule} residual delta={delta} K={K}")


def test_icdf_handles_many_groups():
    """Rows from 300 distinct deltas (several chunks of the table builder) in one call."""
    g = torch.Generator().manual_seed(3)
    deltas = torch.linspace(0.05, 6.0, 300, dtype=torch.float64)
    lev = theory.dgrs_levels(deltas.numpy(), 2)
    ll = torch.log1p(torch.tensor(lev.mu[:, 2], dtype=torch.float64))
    group = torch.randint(0, 300, (N,), generator=g)
    x = dgrs_mod.sample_residual(deltas, ll, group, g, "icdf")
    # transform each row by its own residual CDF: must be U(0, 1)
    u = np.empty(N)
    gn = group.numpy()
    xn = x.numpy()
    for j in range(300):
        rows = gn == j
        u[rows] = _dgrs_residual_cdf(float(deltas[j]), 2)(xn[rows])
    assert_cdf(torch.from_numpy(u), lambda t: np.clip(t, 0.0, 1.0), label="icdf many groups")


@pytest.mark.parametrize("K", [1, 2, 3, 8, 16])
def test_log_mix_matches_theory(K):
    """log p_omega(s) - log phi(s) from the kernel's Horner evaluation agrees with theory's
    log-sum-exp to 1e-12 (relative) on s in [-37, 50], for one and for per-row coefficients."""
    from speccheck.theory import log_p_omega

    for d in (0.0, 0.003, 0.5, 2.0, 30.0):
        w = rass_mod.rass_weights(d, K)
        C = np.exp(rass_mod._log_binom(K))
        A = torch.tensor(w * C, dtype=torch.float64)[None]
        Ad = torch.tensor((w - 1.0 / K) * C, dtype=torch.float64)[None]
        s = torch.linspace(-37.0, 50.0, 3001, dtype=torch.float64)[None]
        ref = log_p_omega(s[0].numpy(), K, w) + 0.5 * s[0].numpy() ** 2 + 0.5 * np.log(2 * np.pi)
        for got in (rass_mod.log_mix(s, A, Ad)[0], rass_mod.log_mix(s.expand(2, -1), A.expand(2, -1), None)[1]):
            err = np.abs(got.numpy() - ref) / np.maximum(1.0, np.abs(ref))
            assert err.max() < 1e-12, (K, d, err.max())
