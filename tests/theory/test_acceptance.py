import numpy as np
import pytest
from scipy import integrate, stats

from speccheck.theory import acceptance_dgrs, acceptance_rmc, dgrs_levels
from speccheck.theory.normal import normal_mass


def test_rmc_closed_form():
    d = np.array([0.0, 0.3, 1.0, 4.0])
    np.testing.assert_allclose(acceptance_rmc(d), 2 * stats.norm.sf(d / 2), rtol=1e-14)


def test_dgrs_K1_is_rmc_everywhere():
    d = np.concatenate([[0.0, 1e-12, 1e-9], np.geomspace(1e-6, 40, 50)])
    np.testing.assert_allclose(acceptance_dgrs(d, 1), acceptance_rmc(d), rtol=1e-14, atol=0)


def test_dgrs_levels_recursion_matches_definition():
    # G_{k+1} = Q(H_k) - lambda_k P(H_k) evaluated by quadrature of (q - lambda_k p)_+
    delta, K = 0.8, 4
    lev = dgrs_levels(delta, K)
    for k in range(1, K + 1):
        lam = lev.lam[k]
        f = lambda s, lam=lam: max(stats.norm.pdf(s - delta) - lam * stats.norm.pdf(s), 0.0)  # noqa: E731
        val = integrate.quad(f, lev.tau[k], np.inf, epsabs=1e-13)[0]
        assert lev.G[k] == pytest.approx(val, rel=1e-9, abs=1e-14)
        assert lev.lam[k] == pytest.approx(lev.lam[k - 1] + lev.G[k - 1], rel=1e-15)


def test_dgrs_acceptance_equals_one_minus_G_where_that_is_accurate():
    d = np.array([0.1, 0.5, 1.0, 3.0])
    lev = dgrs_levels(d, 6)
    np.testing.assert_allclose(acceptance_dgrs(d, 6), 1 - lev.G[..., -1], rtol=1e-12)


def test_dgrs_tiny_delta_keeps_residual_mass():
    # lambda_2 - 1 = G_2 ~ delta / sqrt(2 pi): log(lambda_2) must not round to 0
    lev = dgrs_levels(1e-12, 3)
    assert lev.G[1] == pytest.approx(1e-12 * stats.norm.pdf(0), rel=1e-6)
    assert np.all(lev.G[1:] > 0)
    assert np.all(np.isfinite(lev.tau[1:]))


def test_dgrs_large_delta_finite_and_positive():
    acc = acceptance_dgrs(np.array([20.0, 40.0]), 64)
    assert np.all(np.isfinite(acc)) and np.all(acc > 0)
    assert acc[0] == pytest.approx(1.19359237e-22, rel=1e-6)


def test_delta_zero_accepts_first_child():
    lev = dgrs_levels(0.0, 3)
    np.testing.assert_array_equal(lev.G, [1, 0, 0, 0])
    assert acceptance_dgrs(0.0, 3) == 1.0


def test_normal_mass_narrow_and_tails():
    assert normal_mass(30.0, 30.0 + 1e-9) == pytest.approx(1e-9 * stats.norm.pdf(30.0), rel=1e-8)
    assert normal_mass(-1e-10, 1e-10) == pytest.approx(2e-10 * stats.norm.pdf(0), rel=1e-12)
    assert normal_mass(35.0, np.inf) == pytest.approx(stats.norm.sf(35.0), rel=1e-12)
    assert normal_mass(-np.inf, np.inf) == 1.0


@pytest.mark.parametrize("bad", [-0.1, np.nan, np.inf, -np.inf])
def test_bad_delta_raises(bad):
    with pytest.raises(ValueError, match="delta"):
        acceptance_dgrs(bad, 2)
    with pytest.raises(ValueError, match="delta"):
        acceptance_rmc([0.5, bad])


@pytest.mark.parametrize("bad", [0, -1, 2.5, "3", None])
def test_bad_K_raises(bad):
    with pytest.raises(ValueError, match="K"):
        acceptance_dgrs(0.5, bad)


def _dgrs_rejection_mpmath(delta: float, K: int) -> float:
    """G_{K+1} by the D-GRS recursion in 400-digit arithmetic (tau - delta is exact there)."""
    import mpmath as mp

    with mp.workdps(400):
        d = mp.mpf(delta)
        lam, G = mp.mpf(1), mp.mpf(0)
        for k in range(1, K + 1):
            if k > 1:
                lam += G
            tau = mp.log(lam) / d + d / 2
            G = (mp.ncdf(tau) - mp.ncdf(tau - d)) - (lam - 1) * (1 - mp.ncdf(tau))
        return float(G)


@pytest.mark.parametrize("delta", [1e-2, 1e-5, 1e-12, 1e-17, 1e-100, 1e-200, 1e-300])
def test_dgrs_rejection_keeps_relative_precision_at_tiny_delta(delta):
    # G_{K+1} ~ delta c_K as delta -> 0: it used to round tau - delta (1e-4 relative error at
    # delta = 1e-12) and came out 0 below delta ~ 1e-17
    K = 8
    G = dgrs_levels(delta, K).G
    assert np.all(G[1:] > 0)
    assert G[-1] == pytest.approx(_dgrs_rejection_mpmath(delta, K), rel=1e-12)


def test_band_mass_matches_normal_mass_on_wide_bands_and_scales_on_narrow():
    from speccheck.theory.acceptance import NARROW_BAND, band_mass

    t = np.array([-2.0, 0.3, 1.5, 4.0])
    for width in (NARROW_BAND * 0.999, NARROW_BAND, 0.5):
        np.testing.assert_allclose(band_mass(t, width), normal_mass(t - width, t), rtol=1e-12)
    np.testing.assert_allclose(band_mass(t, 1e-280) / 1e-280, stats.norm.pdf(t), rtol=1e-14)
    assert band_mass(0.3, 0.0) == 0.0
