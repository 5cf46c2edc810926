"""The validation paths on a (fake) CUDA device: zero device errors (issue 17).

Under the fake-CUDA emulation (``tests/verifiers/fakecuda.py``, a copy of
../shared/tools/fakecuda) tensors made with ``device="cuda"`` are CPU tensors that report
``cuda:0``; every op is checked against CUDA's device rules (a CPU tensor mixed into a CUDA op,
a CPU generator for a CUDA random op, ``.numpy()`` on a CUDA tensor, ...) and violations are
recorded in ``fc.ERRORS`` with the file:line of the offending speccheck frame. Each test below
runs one path with ``device="cuda"`` and asserts that ``fc.ERRORS`` stays empty.

CPU-only torch cannot build ``torch.Generator(device="cuda")``, so the fixture swaps
``torch.Generator`` for a subclass that returns the emulation's CUDA generator for a cuda
device (and a plain CPU generator otherwise) while a test runs: the library's own generator
construction (``speccheck.seeding.generator``, the trajectory layer) is exercised unchanged.

Statistical assertions (the exact built-in rule passes the battery) fail by chance with
probability <= the suite's family-wise rate 1e-3.
"""

from __future__ import annotations

import pytest
import torch
from torch.overrides import TorchFunctionMode

from speccheck.validation.battery import run_battery
from speccheck.validation.mutants import MUTANTS
from speccheck.validation.report import format_report
from speccheck.validation.suites import parse_suite
from speccheck.verifiers import get
from tests import fakecuda as fc

_REAL_GENERATOR = torch.Generator


class _DeviceAwareGenerator(_REAL_GENERATOR):
    """``torch.Generator(device=...)`` under the emulation: a fake CUDA generator for a cuda
    device, a CPU generator otherwise (both instances of the patched ``torch.Generator``)."""

    def __new__(cls, device: str | torch.device = "cpu"):
        if torch.device(device).type == "cuda":
            return _REAL_GENERATOR.__new__(_FakeCudaGenerator)
        return _REAL_GENERATOR.__new__(cls)

    def __init__(self, device: str | torch.device = "cpu") -> None:
        pass


class _FakeCudaGenerator(_DeviceAwareGenerator, fc.FakeCudaGen):
    """The emulation's CUDA generator (reports ``cuda:0``; its draws are checked as CUDA draws)."""


# In-place random methods: the emulation checks their generator at the dispatch level, where it
# arrives as a plain torch.Generator (its Python subclass is lost), so a fake CUDA generator is
# reported as "CPU generator used for a CUDA tensor". They are checked here at the Python level
# instead (where the generator object is the caller's), and the dispatch-level report is dropped.
_INPLACE_RANDOM = {"uniform_", "normal_", "exponential_", "random_", "bernoulli_", "cauchy_", "log_normal_",
                   "geometric_"}


class _InplaceRandomCheck(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        gen = kwargs.get("generator")
        if name in _INPLACE_RANDOM and gen is not None and args and isinstance(args[0], torch.Tensor):
            on_cuda = args[0].device.type == "cuda"
            if on_cuda != isinstance(gen, fc.FakeCudaGen):
                where = "CPU generator used for a CUDA tensor" if on_cuda else "CUDA generator used for a CPU tensor"
                fc._error(f"{name} (python level): {where}")
        return func(*args, **kwargs)


def _device_errors() -> dict:
    dispatch_false_positives = {f"{name}: CPU generator used for a CUDA tensor" for name in _INPLACE_RANDOM}
    return {kind: dict(sites) for kind, sites in fc.ERRORS.items() if kind not in dispatch_false_positives}


@pytest.fixture
def fake_cuda(monkeypatch):
    """Run the test body on the emulated CUDA device; yields a function returning the device
    errors recorded so far (``{kind: {site: count}}``)."""
    monkeypatch.setattr(torch, "Generator", _DeviceAwareGenerator)
    fc.reset()
    with fc.fake_cuda(), _InplaceRandomCheck():
        yield _device_errors
    fc.reset()


def _suite(**tables) -> object:
    data = {"name": "fakecuda", "seed": 5, "family_alpha": 1e-3, "contract": {"n": 64}, **tables}
    return parse_suite(data, "fakecuda")


ALL_LAYERS = dict(
    scalar={"deltas": [1.0], "K": [1, 2], "n": 4096},
    wrapper={"dims": [2, 16], "n": 512, "K": 2, "deltas": [0.0, 1.0], "chunk": 512},
    trajectory={"n_traj": 20, "K": 2, "L": 2, "d": 3},
    continuous={"K": [1, 2], "edges": [0.1, 1.0, 3.0], "n": 512, "zero_atom": True, "declared_deltas": 1,
                "declared_rows": 128, "confirm_n": 1024, "refine": 2},
    sequence={"K": [1, 2, 3], "calls": 40, "small_calls": 20, "max_batch": 64},
)


def test_generator_hook_gives_cuda_and_cpu_generators(fake_cuda):
    from speccheck.seeding import generator

    g = generator(3, "cuda")
    assert g.device.type == "cuda" and isinstance(g, torch.Generator)
    assert generator(3, "cpu").device.type == "cpu"
    x = torch.randn(8, generator=g, dtype=torch.float64, device="cuda")
    x.uniform_(0.0, 1.0, generator=g)
    assert x.device.type == "cuda"
    assert not fake_cuda()
    x.uniform_(0.0, 1.0, generator=generator(3, "cpu"))  # a real device error is still seen
    assert "uniform_ (python level): CPU generator used for a CUDA tensor" in fake_cuda()


def test_battery_all_layers_on_cuda(fake_cuda):
    """Contract (L0), scalar grid and acceptance (L1, L2), wrapper (L3), trajectory (L4), the
    continuous-delta layer (L5) and the call sequence (L6) of an exact built-in rule on cuda: no
    device error, all pass (the GPU run of 2026-12-04 stopped in L6's inputs: a CPU draw from a
    CUDA generator)."""
    rep = run_battery("dgrs", _suite(**ALL_LAYERS), device="cuda", seed=11)
    assert not fake_cuda(), fake_cuda()
    layers = {r.layer for r in rep.results}
    assert layers >= {"L0", "L1", "L2", "L3", "L4", "L5", "L6"}, layers
    assert rep.passed, format_report(rep, only_failures=True)


@pytest.mark.parametrize("name,tables", [
    ("dgrs-residual_step1", dict(scalar={"deltas": [1.0], "K": [4], "n": 16384})),
    ("wrapper-drop_zperp", dict(scalar={"deltas": [1.0], "K": [2], "n": 2048},
                                wrapper={"dims": [16], "n": 2048, "K": 2, "chunk": 1024})),
])
def test_mutants_on_cuda(fake_cuda, name, tables):
    """A scalar and a wrapper mutant through the battery on cuda: no device error, and still
    caught (as on CPU: tests/validation/test_battery.py)."""
    rep = run_battery(MUTANTS[name](), _suite(**tables), device="cuda", seed=3)
    assert not fake_cuda(), fake_cuda()
    assert not rep.passed, f"{name} survived on cuda"


@pytest.mark.parametrize("rule,Ks", [("rmc", (1,)), ("dgrs", (1, 4)), ("rass", (1, 4)), ("rass-icdf", (1, 4)),
                                     ("mcrs", (1, 4)), ("mcrs2", (1, 2, 4))])
def test_every_builtin_rule_verifies_on_cuda(fake_cuda, rule, Ks):
    """Each built-in rule's verify on a mixed-delta batch (several groups, tiny to large delta)."""
    g = torch.Generator(device="cuda")
    g.manual_seed(2)
    B = 4096
    deltas = torch.tensor([0.0, 0.003, 0.5, 1.0, 4.0, 15.0], dtype=torch.float64, device="cuda")
    for K in Ks:
        s = torch.randn(B, K, generator=g, dtype=torch.float64, device="cuda")
        d = deltas[torch.arange(B, device="cuda") % deltas.shape[0]]
        s_out, accepted, index = get(rule).verify(d, s, g)
        assert not fake_cuda(), (rule, K, fake_cuda())
        assert s_out.device.type == "cuda" and accepted.device.type == "cuda" and index.device.type == "cuda"
        assert bool(torch.isfinite(s_out).all()), (rule, K)


class _DeviceRecordingTarget:
    """A Gaussian-data target (device-agnostic velocity) that records the device of every call."""

    def __init__(self, d: int = 4):
        from speccheck.targets.gaussian import GaussianData

        self.inner = GaussianData(torch.linspace(-1.0, 1.0, d).numpy(), 0.5)
        self.devices: set[str] = set()

    def velocity(self, x: torch.Tensor, t: torch.Tensor, cond: torch.Tensor | None = None) -> torch.Tensor:
        self.devices.add(x.device.type)
        return self.inner.velocity(x, t, cond)

    def __getattr__(self, name: str):
        return getattr(self.inner, name)


def test_e2e_glue_on_cuda(fake_cuda):
    """speccheck.validation.e2e.run_e2e with device='cuda' on a small analytic model (the digits
    networks cannot run under the emulation: nn.Module.to('cuda') needs a CUDA build): no device
    error, and the sampler's target calls happen on the device."""
    from speccheck.validation import e2e

    target = _DeviceRecordingTarget()
    model = e2e.LoadedModel(target, steps=8, shift=1.0, freeze="velocity", n_cond=0, diffusers_grid=False)
    cfg = e2e.E2EConfig(model="edm-cifar10", verifier="dgrs", K=2, L=2, eps=0.3, samples=40, steps=8,
                        two_sample=False, innovation=True, device="cuda", max_rows=None, alpha=0.01)
    report = e2e.run_e2e(cfg, model=model)
    errors = fake_cuda()
    assert report["summary"]
    assert target.devices == {"cuda"}, f"the target was called on {sorted(target.devices)}"
    assert not errors, errors


def test_digit_classifier_takes_cuda_samples(fake_cuda):
    """The digits label check reads samples made on the device (the GPU run of 2026-12-04 failed
    there: ``.numpy()`` on a CUDA tensor)."""
    from sklearn.linear_model import LogisticRegression

    from speccheck.targets.digits import classify_samples

    x = torch.randn(40, 1, 8, 8, dtype=torch.float64)
    labels = (x.flatten(1)[:, 0] > 0).long()
    clf = LogisticRegression(max_iter=200).fit(x.flatten(1).clamp(-1, 1).numpy(), labels.numpy())
    agreement = classify_samples(x.to("cuda"), labels.to("cuda"), clf)
    assert not fake_cuda(), fake_cuda()
    assert agreement >= 0.9
