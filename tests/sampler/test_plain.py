"""The plain sampler (speccheck.sampler.plain / speccheck.sample): the chain's exact law on
Gaussian data, NFE accounting, trajectories on request, seeds, bad input.

Statistical assertions state their false-failure rate."""

import dataclasses

import numpy as np
import pytest
import torch
from scipy import stats

import speccheck
from speccheck.errors import DeviceError, InputError
from speccheck.sampler.plain import PlainResult, sample
from speccheck.targets.gaussian import GaussianData, chain_law
from speccheck.targets.schedules import flow_matching, uniform
from speccheck.validation.trajectory import small_mixture


def test_plain_sampler_has_the_chains_exact_law_on_gaussian_data():
    target = GaussianData(np.linspace(-1.0, 1.0, 4), 0.5)
    schedule = flow_matching(8, 0.5)
    res = sample(target, schedule, 4000, generator=3, return_trajectories=True)
    law = chain_law(schedule, target)
    x = res.trajectories.numpy()                                   # [n, N + 1, d]
    z = (x.mean(0) - law.mean) / np.sqrt(law.var[:, None] / x.shape[0])
    level = 1e-3 / z.size                                          # family-wise false-failure rate 1e-3
    assert np.all(2 * stats.norm.sf(np.abs(z)) > level)
    chi2 = ((x[:, -1] - law.mean[-1]) ** 2).sum() / law.var[-1]     # variance check: chi2 with n d dof
    dof = x.shape[0] * x.shape[2]
    assert stats.chi2.ppf(5e-4, dof) < chi2 < stats.chi2.ppf(1 - 5e-4, dof)
    assert torch.equal(res.samples, res.trajectories[:, -1])


def test_nfe_accounting_matches_the_speculative_sampler():
    res = sample(small_mixture(4), flow_matching(12, 0.4), 5, generator=0)
    assert (res.nfe, res.det_calls, res.n_stochastic, res.batch_calls) == (10, 2, 10, 12)  # t=1 and t->0 ends
    assert res.speedup == 1.0 and res.trajectories is None and res.samples.shape == (5, 4)
    assert res.protocol["schedule"]["N"] == 12
    assert {f.name for f in dataclasses.fields(PlainResult)} >= {"samples", "trajectories", "nfe"}


def test_seeds_reproduce_and_top_level_export():
    target, schedule = small_mixture(3), uniform(6, 0.3)
    a = speccheck.sample(target, schedule, 7, generator=5)
    b = sample(target, schedule, 7, generator=torch.Generator().manual_seed(5))
    assert torch.equal(a.samples, b.samples)
    x0 = torch.zeros(7, 3, dtype=torch.float64)
    c = sample(target, schedule, 7, generator=5, x0=x0)
    assert not torch.equal(a.samples, c.samples) and torch.equal(x0, torch.zeros(7, 3, dtype=torch.float64))
    assert "sample" in speccheck.__all__ and "sample" in dir(speccheck)


@pytest.mark.parametrize("bad", [
    dict(n=0), dict(n=2.5), dict(generator="seed"), dict(generator=-1), dict(schedule="uniform"),
    dict(target=object()), dict(return_trajectories="yes"), dict(x0=torch.zeros(3, 3)), dict(x0=torch.zeros(4, 2)),
    dict(cond=torch.zeros(3)),
])
def test_bad_input_raises_input_error(bad):
    kw = {**dict(target=small_mixture(3), schedule=uniform(4, 0.3), n=4, generator=0), **bad}
    with pytest.raises(InputError):
        sample(kw.pop("target"), kw.pop("schedule"), kw.pop("n"), **kw)


def test_generator_on_another_device_is_a_device_error():
    with pytest.raises(DeviceError):
        sample(small_mixture(3), uniform(4, 0.3), 2, generator=torch.Generator(), device="meta")
