"""EDM adapter: preconditioning, the velocity conversion (against a Gaussian mixture's closed form),
loading (EDM-style pickle under 'ema', speccheck state dicts) and the clear errors.
All checks are deterministic (no statistical tests here)."""

from __future__ import annotations

import math
import pickle
import sys
import textwrap

import numpy as np
import pytest
import torch
from torch import nn

from speccheck.targets.edm import (
    EDM_PRESETS,
    EDMCodeMissingError,
    EDMPrecond,
    EDMTarget,
    edm_coefficients,
    edm_preset_target,
    load_edm_denoiser,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")



class MixtureDenoiser(nn.Module):
    """Exact D(y; s) = E[x0 | x0 + s xi = y] for x0 ~ sum_i w_i N(mu_i, s_i^2 I) (written independently
    of speccheck.targets.gmm): responsibilities from N(y; mu_i, (s_i^2 + s^2) I), component posterior
    mean (s_i^2 y + s^2 mu_i) / (s_i^2 + s^2)."""

    def __init__(self, means: np.ndarray, stds: np.ndarray) -> None:
        super().__init__()
        self.mu = torch.as_tensor(means, dtype=torch.float64)
        self.s2 = torch.as_tensor(stds, dtype=torch.float64) ** 2
        self.dummy = nn.Parameter(torch.zeros((), dtype=torch.float64))
        self.label_dim = 0
        self.state_shape = (means.shape[1],)

    def forward(self, y, sigma, class_labels=None):
        v = self.s2[None, :] + sigma[:, None] ** 2                                  # [R, C]
        sq = ((y[:, None, :] - self.mu[None]) ** 2).sum(-1)                          # [R, C]
        logit = -0.5 * sq / v - 0.5 * y.shape[1] * torch.log(v)
        r = torch.softmax(logit, 1)
        post = (self.s2[None, :, None] * y[:, None, :] + (sigma[:, None, None] ** 2) * self.mu[None]) / v[..., None]
        return (r[..., None] * post).sum(1)


def _closed_form_velocity(means, stds, x, t):
    """v_t(x) of the mixture on x_t = (1 - t) x0 + t xi, from speccheck.targets.gmm if present."""
    try:
        from speccheck.targets.gmm import GaussianMixture
    except ImportError:  # pragma: no cover - the sampler engineer's module
        GaussianMixture = None
    if GaussianMixture is not None:
        return GaussianMixture(means, stds).velocity(x, t)
    mu = torch.as_tensor(means)
    s2 = torch.as_tensor(stds) ** 2
    u, tt = (1 - t)[:, None], t[:, None]
    S2 = u**2 * s2 + tt**2
    sq = ((x[:, None, :] - u[..., None] * mu[None]) ** 2).sum(-1)
    r = torch.softmax(-0.5 * sq / S2 - 0.5 * x.shape[1] * torch.log(S2), 1)
    x0 = mu[None] + (u * s2 / S2)[..., None] * (x[:, None, :] - u[..., None] * mu[None])
    return (x - (r[..., None] * x0).sum(1)) / t[:, None]


def _mixture(d=6, C=3, seed=3):
    rng = np.random.default_rng(seed)
    return rng.uniform(-2, 2, (C, d)), rng.uniform(0.1, 0.25, C)


def test_coefficients_match_karras_table():
    s = torch.tensor([0.5, 2.0], dtype=torch.float64)
    c_skip, c_out, c_in, c_noise = edm_coefficients(s)
    torch.testing.assert_close(c_skip, torch.tensor([0.5, 0.25 / 4.25], dtype=torch.float64))
    torch.testing.assert_close(c_out, torch.tensor([0.25 / math.sqrt(0.5), 1.0 / math.sqrt(4.25)], dtype=torch.float64))
    torch.testing.assert_close(c_in, torch.tensor([1 / math.sqrt(0.5), 1 / math.sqrt(4.25)], dtype=torch.float64))
    torch.testing.assert_close(c_noise, s.log() / 4)
    # c_out^2 = s^2 sd^2 / (s^2 + sd^2): the std of the effective training target
    torch.testing.assert_close(c_out**2, 0.25 * s**2 / (s**2 + 0.25))


def test_precond_applies_formula():
    torch.manual_seed(0)
    lin = nn.Linear(4, 4).double()

    class Raw(nn.Module):
        def forward(self, x, c_noise, labels):
            return lin(x) * (1 + c_noise[:, None])

    D = EDMPrecond(Raw(), (4,))
    y = torch.randn(5, 4, dtype=torch.float64)
    s = torch.rand(5, dtype=torch.float64) * 3 + 0.01
    c_skip, c_out, c_in, c_noise = edm_coefficients(s)
    expect = c_skip[:, None] * y + c_out[:, None] * lin(c_in[:, None] * y) * (1 + c_noise[:, None])
    torch.testing.assert_close(D(y, s), expect)


def test_velocity_conversion_matches_mixture_closed_form():
    means, stds = _mixture()
    target = EDMTarget(MixtureDenoiser(means, stds))
    g = torch.Generator().manual_seed(0)
    # t inside the unclipped range: varsigma = t/(1-t) in [1e-3, 80] <=> t in [1e-3/1.001, 80/81]
    t = torch.tensor([0.0011, 0.01, 0.1, 0.3, 0.5, 0.7, 0.9, 0.95, 0.98], dtype=torch.float64)
    x0 = torch.as_tensor(means)[torch.arange(t.numel()) % 3]
    x = (1 - t)[:, None] * x0 + t[:, None] * torch.randn(t.numel(), 6, generator=g, dtype=torch.float64)
    v = target.velocity(x, t)
    torch.testing.assert_close(v, _closed_form_velocity(means, stds, x, t), rtol=1e-9, atol=1e-9)


def test_varsigma_clip_and_t_equal_one():
    means, stds = _mixture()
    den = MixtureDenoiser(means, stds)
    target = EDMTarget(den)
    t = torch.tensor([1e-4, 0.99, 1.0], dtype=torch.float64)
    torch.testing.assert_close(target.varsigma(t), torch.tensor([1e-3, 80.0, 80.0], dtype=torch.float64))
    x = torch.randn(3, 6, dtype=torch.float64)
    v = target.velocity(x, t)
    assert torch.all(torch.isfinite(v))
    # clipped rows see the input scaled by 1 + varsigma_c (the noise level they are told)
    vs = torch.tensor([1e-3, 80.0, 80.0], dtype=torch.float64)
    torch.testing.assert_close(v, (x - den((1 + vs)[:, None] * x, vs)) / t[:, None])


def test_dtype_and_chunking_preserve_result():
    means, stds = _mixture()
    den = MixtureDenoiser(means, stds)
    t = torch.linspace(0.05, 0.95, 7, dtype=torch.float64)
    x = torch.randn(7, 6, dtype=torch.float64)
    full = EDMTarget(den).velocity(x, t)
    torch.testing.assert_close(EDMTarget(den, max_rows=2).velocity(x, t), full)


class _LabelDenoiser(nn.Module):
    """D(y; s, onehot) = label index broadcast (so the one-hot encoding is visible)."""

    label_dim = 3

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.ones(()))

    def forward(self, y, sigma, class_labels=None):
        idx = class_labels.argmax(1).to(y.dtype)
        assert torch.allclose(class_labels.sum(1), torch.ones_like(idx))
        return idx[:, None].expand_as(y) * self.w


def test_class_labels_one_hot_and_errors():
    target = EDMTarget(_LabelDenoiser(), state_shape=(2,))
    assert target.label_dim == 3
    x = torch.zeros(3, 2)
    t = torch.full((3,), 0.5)
    v = target.velocity(x, t, torch.tensor([0, 1, 2]))
    torch.testing.assert_close(v, -torch.tensor([[0.0, 0.0], [2.0, 2.0], [4.0, 4.0]]))
    with pytest.raises(ValueError, match="cond"):
        target.velocity(x, t, None)
    with pytest.raises(ValueError, match="labels must lie"):
        target.velocity(x, t, torch.tensor([0, 1, 3]))
    with pytest.raises(ValueError, match="t must lie"):
        target.velocity(x, torch.tensor([0.5, 0.0, 0.2]), torch.tensor([0, 1, 2]))
    with pytest.raises(ValueError, match="x must have shape"):
        target.velocity(torch.zeros(3, 3), t, torch.tensor([0, 1, 2]))
    with pytest.raises(ValueError, match="t must have shape"):
        target.velocity(x, torch.full((2,), 0.5), torch.tensor([0, 1, 2]))


# --------------------------------------------------------------------------- loading
_FAKE_CODE = textwrap.dedent(
    """
    import torch
    from torch import nn

    class TinyEDM(nn.Module):
        # stands in for the EDM release's EDMPrecond: forward(x, sigma, class_labels, force_fp32)
        def __init__(self, res=4, ch=2, label_dim=0):
            super().__init__()
            self.img_resolution, self.img_channels, self.label_dim = res, ch, label_dim
            self.conv = nn.Conv2d(ch, ch, 3, padding=1)
            self.emb = nn.Linear(max(label_dim, 1), ch)

        def forward(self, x, sigma, class_labels=None, force_fp32=False):
            sigma = sigma.reshape(-1, 1, 1, 1)
            h = self.conv(x / (1 + sigma))
            if self.label_dim:
                h = h + self.emb(class_labels)[:, :, None, None]
            return h
    """
)


def _write_fake_module(tmp_path, dotted: str) -> None:
    parts = dotted.split(".")
    d = tmp_path
    for p in parts[:-1]:
        d = d / p
        d.mkdir(exist_ok=True)
        (d / "__init__.py").write_text("")
    (d / f"{parts[-1]}.py").write_text(_FAKE_CODE)


def _pickle_fake(tmp_path, monkeypatch, dotted: str, **kw):
    _write_fake_module(tmp_path, dotted)
    monkeypatch.syspath_prepend(str(tmp_path))
    mod = __import__(dotted, fromlist=["TinyEDM"])
    torch.manual_seed(1)
    net = mod.TinyEDM(**kw)
    path = tmp_path / "net.pkl"
    with open(path, "wb") as f:
        pickle.dump({"ema": net, "augment_pipe": None, "dataset_kwargs": {}}, f)
    return net, path


def _forget(monkeypatch, tmp_path, top: str) -> None:
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p != str(tmp_path)])
    for name in [m for m in sys.modules if m == top or m.startswith(top + ".")]:
        monkeypatch.delitem(sys.modules, name)


def test_edm_pickle_round_trip_and_missing_code(tmp_path, monkeypatch):
    net, path = _pickle_fake(tmp_path, monkeypatch, "speccheck_fake_edm_code", res=4, ch=2, label_dim=3)
    loaded = load_edm_denoiser(str(path))
    target = EDMTarget(loaded)
    assert target.state_shape == (2, 4, 4) and target.label_dim == 3
    x = torch.randn(4, 2, 4, 4)
    t = torch.tensor([0.2, 0.4, 0.6, 0.8])
    labels = torch.tensor([0, 2, 1, 0])
    vs = t / (1 - t)
    denoised = net((1 + vs)[:, None, None, None] * x, vs, nn.functional.one_hot(labels, 3).float())
    expect = (x - denoised) / t[:, None, None, None]
    torch.testing.assert_close(target.velocity(x, t, labels), expect.detach())
    _forget(monkeypatch, tmp_path, "speccheck_fake_edm_code")
    with pytest.raises(EDMCodeMissingError, match="speccheck_fake_edm_code"):
        load_edm_denoiser(str(path))


def test_missing_edm_release_code_says_how_to_fix(tmp_path, monkeypatch):
    _, path = _pickle_fake(tmp_path, monkeypatch, "torch_utils.persistence")
    _forget(monkeypatch, tmp_path, "torch_utils")
    with pytest.raises(EDMCodeMissingError, match="NVlabs/edm") as info:
        load_edm_denoiser(str(path))
    assert "torch_utils" in str(info.value)


def test_state_dict_round_trip(tmp_path):
    from speccheck.targets.digits import make_digits_edm, save_checkpoint

    torch.manual_seed(0)
    den = make_digits_edm(hidden=16, blocks=1)
    path = tmp_path / "tiny.pt"
    save_checkpoint(den, "digits-mlp", str(path), {"seed": 0})
    loaded = load_edm_denoiser(str(path))
    y = torch.randn(3, 1, 8, 8)
    s = torch.tensor([0.1, 1.0, 10.0])
    lab = nn.functional.one_hot(torch.tensor([1, 5, 9]), 10).float()
    torch.testing.assert_close(loaded(y, s, lab), den(y, s, lab))
    # a bare state dict of the default digits network loads too; one of another shape does not
    full = make_digits_edm()
    torch.save(full.state_dict(), tmp_path / "bare.pt")
    torch.testing.assert_close(load_edm_denoiser(str(tmp_path / "bare.pt"))(y, s, lab), full(y, s, lab))
    torch.save(den.state_dict(), tmp_path / "bare_small.pt")
    with pytest.raises(ValueError, match="bare state dict"):
        load_edm_denoiser(str(tmp_path / "bare_small.pt"))


def test_bad_files(tmp_path):
    with pytest.raises(ValueError, match="weights file not found"):
        load_edm_denoiser(str(tmp_path / "nope.pkl"))
    p = tmp_path / "plain.pt"
    torch.save({"w": torch.zeros(2), "note": "x"}, p)
    with pytest.raises(ValueError, match="not a speccheck checkpoint"):
        load_edm_denoiser(str(p))
    q = tmp_path / "noema.pkl"
    with open(q, "wb") as f:
        pickle.dump({"net": 1}, f)
    with pytest.raises(ValueError, match="no 'ema'"):
        load_edm_denoiser(str(q))


def test_presets_need_weights_and_match_paper(tmp_path, monkeypatch):
    for name in ("edm-cifar10", "edm-ffhq"):
        with pytest.raises(ValueError, match="--weights"):
            edm_preset_target(name, None)
        pre = EDM_PRESETS[name]
        assert pre.steps == 100 and pre.eps == (0.1, 0.3, 0.6)
        assert sorted(sum(K**j for j in range(1, L + 1)) for K, L in pre.KL) == [14, 62, 120, 340]
    assert EDM_PRESETS["edm-cifar10"].state_shape == (3, 32, 32) and EDM_PRESETS["edm-cifar10"].label_dim == 10
    assert EDM_PRESETS["edm-ffhq"].state_shape == (3, 64, 64) and EDM_PRESETS["edm-ffhq"].label_dim == 0
    with pytest.raises(ValueError, match="unknown EDM preset"):
        edm_preset_target("edm-imagenet", "x")
    # a (tiny) release-style pickle with CIFAR-10's shape loads through the preset
    _, path = _pickle_fake(tmp_path, monkeypatch, "speccheck_fake_edm_code2", res=32, ch=3, label_dim=10)
    target, pre = edm_preset_target("edm-cifar10", str(path))
    v = target.velocity(torch.randn(2, 3, 32, 32), torch.tensor([0.3, 1.0]), torch.tensor([3, 7]))
    assert v.shape == (2, 3, 32, 32) and torch.all(torch.isfinite(v))
    with pytest.raises(ValueError, match="state shape"):
        edm_preset_target("edm-ffhq", str(path))
