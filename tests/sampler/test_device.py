"""Algorithm 1 on a device (issue 17, point 4), checked under the fake-CUDA emulation.

``fakecuda.py`` (a copy of the project's tool, see its docstring) wraps CPU tensors as "cuda:0"
tensors and records every operation a real GPU would reject (a host tensor mixed into a device
op, a host generator for a device draw, ``.numpy()`` on a device tensor). Its generator is a CPU
generator, so a run "on cuda" draws the same numbers as on the CPU: the outputs must be
bit-identical, and the emulation must record no device error.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from speccheck.errors import DeviceError
from speccheck.sampler.analysis import summarize
from speccheck.sampler.core import SpeculativeSampler
from speccheck.sampler.tree import uniform_tree, widths_tree
from speccheck.targets.schedules import flow_matching
from speccheck.validation.trajectory import small_mixture
from tests import fakecuda as fc

F64 = torch.float64

PROTOCOLS = [  # (lazy, prefetch, leaves, freeze)
    (True, "nearest", True, "velocity"), (False, "nearest", False, "velocity"),
    (True, "parent", False, "denoised"), (False, "parent", True, "denoised"),
    (True, "none", False, "drift"), (False, "none", True, "drift"),
]


def _sampler(lazy: bool, prefetch: str, leaves: bool, freeze: str, tree=None) -> SpeculativeSampler:
    return SpeculativeSampler(small_mixture(4), flow_matching(12, 0.4), tree or uniform_tree(2, 3), "dgrs",
                              lazy=lazy, prefetch=prefetch, leaves=leaves, freeze=freeze)


def _run_on(device: str, sampler: SpeculativeSampler, seed: int = 3):
    gen = fc.cuda_generator(seed) if device == "cuda" else torch.Generator().manual_seed(seed)
    x0 = torch.randn(16, 4, generator=gen, dtype=F64, device=device)
    caps = torch.tensor([1, 2, 3, 3] * 4, device=device)
    result = sampler.run(x0, gen, record_states=True, depth_cap=caps)
    summary = summarize(result, sampler.verifier, sampler.schedule.stochastic, 3)
    return result, summary


@pytest.mark.parametrize("lazy,prefetch,leaves,freeze", PROTOCOLS)
def test_run_on_cuda_has_no_device_errors_and_matches_cpu(lazy, prefetch, leaves, freeze):
    cpu_result, cpu_summary = _run_on("cpu", _sampler(lazy, prefetch, leaves, freeze))
    fc.reset()
    with fc.fake_cuda():
        result, summary = _run_on("cuda", _sampler(lazy, prefetch, leaves, freeze))
        on_device = {name: getattr(result, name).device.type for name in
                     ("x", "nfe", "root_calls", "det_calls", "rounds", "n_accepted", "n_verified",
                      "commit_depth", "states")}
    assert not fc.ERRORS, dict(fc.ERRORS)
    assert set(on_device.values()) == {"cuda"}, on_device
    assert sum(fc.OPS.values()) > 0        # the work really ran on the emulated device
    for name in ("x", "states"):
        assert torch.equal(getattr(result, name).elem, getattr(cpu_result, name)), name
    for name in ("nfe", "rounds", "n_accepted", "commit_depth"):
        assert torch.equal(getattr(result, name).elem, getattr(cpu_result, name)), name
    for name in ("traj", "step", "depth", "delta", "accepted", "index"):
        assert np.array_equal(getattr(result.events, name), getattr(cpu_result.events, name)), name
    assert summary == pytest.approx(cpu_summary, nan_ok=True)


def test_mixed_widths_on_cuda():
    fc.reset()
    with fc.fake_cuda():
        _run_on("cuda", _sampler(True, "nearest", False, "velocity", tree=widths_tree([3, 1, 2])))
    assert not fc.ERRORS, dict(fc.ERRORS)


def test_generator_on_another_device_is_refused():
    sampler = _sampler(True, "nearest", False, "velocity")
    with fc.fake_cuda():
        x0 = torch.zeros(4, 4, dtype=F64, device="cuda")
        with pytest.raises(DeviceError, match="generator is on cpu but x0 is on cuda"):
            sampler.run(x0, torch.Generator())
    with pytest.raises(DeviceError, match="generator is on cuda:0 but x0 is on cpu"):
        sampler.run(torch.zeros(4, 4, dtype=F64), fc.cuda_generator(0))


def test_run_cells_on_cuda_matches_cpu(monkeypatch):
    """The sweep's cell runner on the device: same rows and summaries as on the CPU (the emulated
    device generator is a CPU generator, so the streams coincide), no device error."""
    from speccheck.sampler import experiments

    monkeypatch.setattr(experiments, "generator", lambda seed, device: fc.cuda_generator(seed) if device == "cuda"
                        else torch.Generator().manual_seed(seed))
    for lazy in (True, False):
        proto = experiments.preset("gmm-paper", lazy=lazy)
        cpu_rows, cpu_summaries = experiments.run_cells(proto, "dgrs", 2, [2], 2, 5)
        fc.reset()
        with fc.fake_cuda():
            rows, summaries = experiments.run_cells(proto, "dgrs", 2, [2], 2, 5, device="cuda")
        assert not fc.ERRORS, dict(fc.ERRORS)
        assert rows == cpu_rows
        assert len(summaries) == len(cpu_summaries)
        for got, want in zip(summaries, cpu_summaries):
            assert got == pytest.approx(want, nan_ok=True)


def test_plain_sampler_on_cuda_matches_cpu():
    from speccheck.sampler.plain import sample

    target, schedule = small_mixture(4), flow_matching(12, 0.4)
    cpu = sample(target, schedule, 8, generator=torch.Generator().manual_seed(4), return_trajectories=True)
    fc.reset()
    with fc.fake_cuda():
        res = sample(target, schedule, 8, generator=fc.cuda_generator(4), return_trajectories=True)
        devices = {res.samples.device.type, res.trajectories.device.type}
    assert not fc.ERRORS, dict(fc.ERRORS)
    assert devices == {"cuda"} and sum(fc.OPS.values()) > 0
    assert torch.equal(res.trajectories.elem, cpu.trajectories) and res.nfe == cpu.nfe


def test_run_cells_outputs_on_cuda_match_cpu(monkeypatch):
    from speccheck.sampler import experiments

    monkeypatch.setattr(experiments, "generator", lambda seed, device: fc.cuda_generator(seed) if device == "cuda"
                        else torch.Generator().manual_seed(seed))
    outputs = ("samples", "trajectories", "acceptance")
    for lazy in (True, False):
        proto = experiments.preset("gmm-paper", lazy=lazy, steps=4)
        _, want = experiments.run_cells(proto, "dgrs", 2, [1, 2], 2, 5, outputs=outputs)
        fc.reset()
        with fc.fake_cuda():
            _, got = experiments.run_cells(proto, "dgrs", 2, [1, 2], 2, 5, device="cuda", outputs=outputs)
        assert not fc.ERRORS, dict(fc.ERRORS)
        for g, w in zip(got, want):
            for key in ("samples", "states", "accepted_per_step", "verified_per_step"):
                assert isinstance(g[key], np.ndarray) and np.array_equal(g[key], w[key]), key
