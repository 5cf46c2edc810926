"""Device statistics equal the numpy path's, and cost one host sync per test (fake-CUDA)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import special
from scipy import stats as sstats

from speccheck.validation import device_stats as ds
from speccheck.validation import stats
from tests import fakecuda as fc


def _sample(n: int, shift: float, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, generator=g, dtype=torch.float64) + shift


@pytest.mark.parametrize("shift", [0.0, 0.05])
def test_ks_equals_numpy(shift):
    x = _sample(20_000, shift, 1)
    got = ds.ks_dkw_test(x, ds.normal_cdf(0.0), 1e-3, cell="c", test="ks")
    ref = stats.ks_dkw_test(x.numpy(), special.ndtr, 1e-3, cell="c", test="ks")
    assert got.statistic == pytest.approx(ref.statistic, rel=1e-12, abs=1e-15)
    assert (got.threshold, got.mdd, got.n, got.passed) == (ref.threshold, ref.mdd, ref.n, ref.passed)
    assert got.p_value == pytest.approx(ref.p_value, rel=1e-9)


def test_tails_equal_numpy_and_are_exact_counts():
    x = _sample(50_000, 0.3, 2)  # shifted: the upper tail is heavy, the test must fail
    got = ds.tail_test(x, ds.normal_cdf(0.0), 1e-3, q=0.01, cell="c")
    ref = stats.tail_test(x.numpy(), special.ndtr, 1e-3, q=0.01, cell="c")
    assert got.extra == ref.extra
    assert (got.statistic, got.threshold, got.p_value, got.passed) == (ref.statistic, ref.threshold, ref.p_value,
                                                                        ref.passed)
    assert not got.passed


def test_mmd_equals_numpy():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(4000, 8, generator=g, dtype=torch.float64)
    y = torch.randn(4000, 8, generator=g, dtype=torch.float64) + 0.02
    got = ds.mmd_linear_test(x, y, 1e-3, cell="c")
    ref = stats.mmd_linear_test(x.numpy(), y.numpy(), 1e-3, cell="c")
    assert got.statistic == pytest.approx(ref.statistic, rel=1e-9)
    assert got.extra["mmd2"] == pytest.approx(ref.extra["mmd2"], rel=1e-9, abs=1e-15)
    assert (got.n, got.passed, got.extra["bandwidth"]) == (ref.n, ref.passed, ref.extra["bandwidth"])
    assert got.mdd == pytest.approx(ref.mdd, rel=1e-9)


def test_chi2_cdf_and_pit_match_scipy():
    v = torch.linspace(0.0, 40.0, 401, dtype=torch.float64)
    np.testing.assert_allclose(ds.chi2_cdf(16)(v).numpy(), sstats.chi2.cdf(v.numpy(), 16), rtol=1e-12, atol=1e-15)
    x = _sample(10_000, 0.0, 4)
    u = ds.pit_values(x, ds.normal_cdf())
    counts = ds.pit_counts(u, 20)
    ref, _ = np.histogram(special.ndtr(x.numpy()), bins=20, range=(0.0, 1.0))
    np.testing.assert_array_equal(counts.numpy(), ref)
    # the PIT of a N(0, 1) sample is U(0, 1): KS against uniform at DKW level 1e-6 (false-failure rate)
    assert float(ds.ks_statistic(u, ds.uniform_cdf)) <= stats.dkw_threshold(u.numel(), 1e-6)


def test_normal_cdf_keeps_lower_tail_precision():
    x = torch.tensor([-30.0, -10.0, 0.0, 10.0], dtype=torch.float64)
    np.testing.assert_allclose(ds.normal_cdf(0.0)(x).numpy(), special.ndtr(x.numpy()), rtol=1e-13)


def test_non_finite_samples_fail_like_numpy():
    x = _sample(1000, 0.0, 5)
    x[7] = math.nan
    for got, ref in ((ds.ks_dkw_test(x, ds.normal_cdf(), 1e-3), stats.ks_dkw_test(x.numpy(), special.ndtr, 1e-3)),
                     (ds.tail_test(x, ds.normal_cdf(), 1e-3), stats.tail_test(x.numpy(), special.ndtr, 1e-3))):
        assert not got.passed and got.note == ref.note == "non-finite values in the sample"
    y = torch.zeros(1000, 2, dtype=torch.float64)
    y[3, 1] = math.inf
    assert not ds.mmd_linear_test(y, torch.zeros(1000, 2, dtype=torch.float64), 1e-3).passed


def test_acceptance_count_and_fetch():
    acc = torch.tensor([True, False, True, True])
    assert ds.fetch(ds.acceptance_count(acc), torch.tensor([1.5, 2.5])) == [3.0, 1.5, 2.5]
    assert ds.fetch() == []


def test_statistics_stay_on_the_device_one_sync_per_test():
    """Under the fake-CUDA emulation: no device error, and each drop-in test syncs once."""
    fc.reset()
    with fc.fake_cuda():
        g = fc.cuda_generator(6)
        x = torch.randn(4096, generator=g, dtype=torch.float64, device="cuda")
        y = torch.randn(4096, 4, generator=g, dtype=torch.float64, device="cuda")
        results = [ds.ks_dkw_test(x, ds.normal_cdf(), 1e-3), ds.tail_test(x, ds.normal_cdf(), 1e-3),
                   ds.mmd_linear_test(y, y.flip(0), 1e-3),
                   ds.ks_dkw_test(ds.pit_values(x, ds.normal_cdf()), ds.uniform_cdf, 1e-3)]
        counts = ds.pit_counts(x.abs().clamp(max=1.0), 10)
        n_counted = ds.fetch(counts.sum())
    assert not fc.ERRORS, dict(fc.ERRORS)
    assert sum(fc.EVENTS.values()) == len(results) + 1, dict(fc.EVENTS)
    assert n_counted == [4096.0]
    assert all(r.passed for r in results)
