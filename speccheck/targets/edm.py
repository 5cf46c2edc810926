"""EDM denoisers as velocity targets (SPEC section 3; Karras et al. 2022).

An EDM network is a denoiser D(y; varsigma) ~ E[x_0 | x_0 + varsigma xi = y] with the
preconditioning (sigma_data = 0.5)

    c_skip = sd^2 / (varsigma^2 + sd^2),   c_out = varsigma sd / sqrt(varsigma^2 + sd^2),
    c_in = 1 / sqrt(varsigma^2 + sd^2),     c_noise = ln(varsigma) / 4,
    D(y; varsigma) = c_skip y + c_out F(c_in y, c_noise, labels).

On the linear path x_t = (1 - t) x_0 + t xi we have x_t / (1 - t) = x_0 + varsigma xi with
varsigma = t / (1 - t), so v_t(x) = (x - D(x / (1 - t); varsigma)) / t.
varsigma is clipped to [1e-3, 80]. The input is scaled as y = (1 + varsigma_c) x, which is
x / (1 - t) wherever the clip is inactive; where it is active (t > 80/81, in particular the
t = 1 node of a flow grid, where x / (1 - t) is infinite) the denoiser sees an input whose noise
level is the one it is told.

Loading (:func:`load_edm_denoiser`): an EDM release pickle (network under ``'ema'``; needs the
EDM code -- ``torch_utils``, ``dnnlib`` -- importable) or a torch-saved
``{"arch", "config", "state_dict"}`` checkpoint of speccheck's own network.
"""

from __future__ import annotations

import importlib
import math
import os
import pickle
import zipfile
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import torch
from torch import nn

from speccheck.errors import FileFormatError, InputError, LoadError
from speccheck.targets.base import check_rows

SIGMA_DATA = 0.5
VARSIGMA_MIN = 1e-3
VARSIGMA_MAX = 80.0

# speccheck's own networks that a state-dict checkpoint may name in its "arch" field.
_ARCHS = {
    "digits-mlp": "speccheck.targets.digits:DigitsMLP",
}


class EDMCodeMissingError(ImportError, ValueError):
    """An EDM pickle cannot be unpickled because the module it was saved with is not importable
    (also a ValueError, so the CLI reports it as bad input with exit code 2)."""


def edm_coefficients(
    sigma: torch.Tensor, sigma_data: float = SIGMA_DATA
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(c_skip, c_out, c_in, c_noise) of Karras et al. (2022), Table 1, elementwise in sigma > 0."""
    s2 = sigma * sigma + sigma_data**2
    c_skip = sigma_data**2 / s2
    c_out = sigma * sigma_data / s2.sqrt()
    c_in = 1.0 / s2.sqrt()
    c_noise = sigma.log() / 4
    return c_skip, c_out, c_in, c_noise


class EDMPrecond(nn.Module):
    """D(y; sigma, class_labels) = c_skip y + c_out F(c_in y, c_noise, class_labels).

    ``net(x_in [R,*shape], c_noise [R], class_labels [R, label_dim] | None) -> [R, *shape]`` is the
    raw network. The forward signature matches the EDM release's ``EDMPrecond`` (sigma [R] or
    scalar, class_labels one-hot [R, label_dim]), so :class:`EDMTarget` drives either.
    """

    def __init__(
        self,
        net: nn.Module,
        state_shape: tuple[int, ...],
        label_dim: int = 0,
        sigma_data: float = SIGMA_DATA,
    ) -> None:
        super().__init__()
        self.net = net
        self.state_shape = tuple(int(s) for s in state_shape)
        self.label_dim = int(label_dim)
        self.sigma_data = float(sigma_data)

    def forward(
        self, x: torch.Tensor, sigma: torch.Tensor, class_labels: Optional[torch.Tensor] = None
    ) -> torch.Tensor:
        sigma = torch.as_tensor(sigma, dtype=x.dtype, device=x.device).reshape(-1)
        sigma = sigma.expand(x.shape[0]) if sigma.numel() == 1 else sigma
        c_skip, c_out, c_in, c_noise = edm_coefficients(sigma, self.sigma_data)
        bshape = (-1,) + (1,) * (x.dim() - 1)
        if self.label_dim and class_labels is None:
            raise InputError(f"class_labels required for a class-conditional denoiser (label_dim={self.label_dim})")
        f = self.net(c_in.reshape(bshape) * x, c_noise, class_labels if self.label_dim else None)
        return c_skip.reshape(bshape) * x + c_out.reshape(bshape) * f


def edm_loss_weight(sigma: torch.Tensor, sigma_data: float = SIGMA_DATA) -> torch.Tensor:
    """lambda(sigma) = (sigma^2 + sd^2) / (sigma sd)^2, the EDM training weight."""
    return (sigma**2 + sigma_data**2) / (sigma * sigma_data) ** 2


def edm_training_loss(
    denoiser: nn.Module,
    x0: torch.Tensor,
    labels: Optional[torch.Tensor],
    generator: Optional[torch.Generator] = None,
    p_mean: float = -1.2,
    p_std: float = 1.2,
) -> torch.Tensor:
    """EDM loss: ln sigma ~ N(p_mean, p_std^2), E[lambda(sigma) |D(x0 + sigma n; sigma) - x0|^2]."""
    R = x0.shape[0]
    ln_sigma = p_mean + p_std * torch.randn(R, generator=generator, dtype=x0.dtype)
    sigma = ln_sigma.exp()
    noise = torch.randn(x0.shape, generator=generator, dtype=x0.dtype)
    y = x0 + sigma.reshape((-1,) + (1,) * (x0.dim() - 1)) * noise
    d = denoiser(y, sigma, labels)
    w = edm_loss_weight(sigma, getattr(denoiser, "sigma_data", SIGMA_DATA))
    return (w * (d - x0).pow(2).flatten(1).mean(1)).mean()


def _label_dim(denoiser: nn.Module) -> int:
    return int(getattr(denoiser, "label_dim", 0) or 0)


def _state_shape(denoiser: nn.Module) -> Optional[tuple[int, ...]]:
    shape = getattr(denoiser, "state_shape", None)
    if shape is not None:
        return tuple(int(s) for s in shape)
    res, ch = getattr(denoiser, "img_resolution", None), getattr(denoiser, "img_channels", None)
    if res is not None and ch is not None:  # EDM release networks
        return (int(ch), int(res), int(res))
    return None


class EDMTarget:
    """Velocity target from an EDM denoiser: v_t(x) = (x - D((1 + varsigma_c) x; varsigma_c)) / t.

    ``denoiser(y [R,*shape], sigma [R], class_labels [R, label_dim] | None)``. ``cond``: [R] integer
    class labels (one-hot encoded here) for class-conditional denoisers, None otherwise.
    Rows are evaluated in chunks of ``max_rows`` (still one NFE). Inputs of any float dtype;
    the network runs in its own dtype/device and the result comes back in x's dtype/device.
    """

    #: which quantity the natural delayed-drift proposal freezes for this target (SPEC section 2)
    natural_freeze = "denoised"

    def __init__(
        self,
        denoiser: nn.Module,
        state_shape: Optional[tuple[int, ...]] = None,
        label_dim: Optional[int] = None,
        device: Optional[torch.device | str] = None,
        dtype: Optional[torch.dtype] = None,
        max_rows: Optional[int] = None,
        varsigma_min: float = VARSIGMA_MIN,
        varsigma_max: float = VARSIGMA_MAX,
    ) -> None:
        shape = state_shape if state_shape is not None else _state_shape(denoiser)
        if shape is None:
            raise InputError("state_shape must be given for a denoiser without state_shape/img_resolution")
        if not 0 < varsigma_min < varsigma_max:
            raise InputError(f"need 0 < varsigma_min < varsigma_max, got {varsigma_min}, {varsigma_max}")
        self.state_shape = tuple(int(s) for s in shape)
        self.label_dim = _label_dim(denoiser) if label_dim is None else int(label_dim)
        p = next(iter(denoiser.parameters()), None)
        default_device = p.device if p is not None else torch.device("cpu")
        self.device = torch.device(device) if device is not None else default_device
        self.dtype = dtype if dtype is not None else (p.dtype if p is not None else torch.float32)
        self.denoiser = denoiser.to(self.device).eval()
        self.max_rows = max_rows
        self.varsigma_min = float(varsigma_min)
        self.varsigma_max = float(varsigma_max)

    def varsigma(self, t: torch.Tensor) -> torch.Tensor:
        """varsigma_c = clip(t / (1 - t), varsigma_min, varsigma_max); t = 1 gives varsigma_max."""
        with torch.no_grad():
            ratio = torch.where(t < 1, t / (1 - t).clamp_min(1e-300), torch.full_like(t, math.inf))
        return ratio.clamp(self.varsigma_min, self.varsigma_max)

    def _check(self, x: torch.Tensor, t: torch.Tensor, cond: Optional[torch.Tensor]) -> None:
        check_rows(x, t, self.state_shape, t_in_unit=True)
        if self.label_dim:
            if cond is None:
                raise InputError(f"cond (class labels) required: the denoiser is class-conditional "
                                 f"(label_dim={self.label_dim})")
            if cond.shape != (x.shape[0],):
                raise InputError(f"cond must have shape [{x.shape[0]}], got {tuple(cond.shape)}")
            if cond.min() < 0 or cond.max() >= self.label_dim:
                raise InputError(f"cond labels must lie in [0, {self.label_dim}), "
                                 f"got [{int(cond.min())}, {int(cond.max())}]")

    @torch.no_grad()
    def denoise(self, y: torch.Tensor, varsigma: torch.Tensor, cond: Optional[torch.Tensor] = None) -> torch.Tensor:
        """D(y; varsigma) on the model's device/dtype, returned in y's dtype/device."""
        out = torch.empty_like(y)
        step = self.max_rows or y.shape[0] or 1
        for i in range(0, y.shape[0], step):
            sl = slice(i, i + step)
            yi = y[sl].to(self.device, self.dtype)
            si = varsigma[sl].to(self.device, self.dtype)
            labels = None
            if self.label_dim:
                labels = torch.nn.functional.one_hot(cond[sl].to(self.device).long(), self.label_dim).to(self.dtype)
            out[sl] = self.denoiser(yi, si, labels).to(y.dtype).to(y.device)
        return out

    @torch.no_grad()
    def velocity(self, x: torch.Tensor, t: torch.Tensor, cond: Optional[torch.Tensor] = None) -> torch.Tensor:
        """v_t(x) = (x - D((1 + varsigma_c) x; varsigma_c)) / t for x [R,*shape], t [R] in (0, 1]."""
        t = t.to(x.dtype)
        self._check(x, t, cond)
        vs = self.varsigma(t)
        b = (-1,) + (1,) * (x.dim() - 1)
        d = self.denoise(x * (1 + vs).reshape(b), vs, cond)
        return (x - d) / t.reshape(b)


# --------------------------------------------------------------------------- loading
def _unpickle_edm(path: str) -> Any:
    try:
        with open(path, "rb") as f:
            return pickle.load(f)
    except ModuleNotFoundError as exc:
        mod = exc.name or str(exc)
        hint = ""
        if mod.split(".")[0] in ("torch_utils", "dnnlib"):
            hint = (
                " EDM release pickles need the EDM code importable: clone "
                "https://github.com/NVlabs/edm and add its root to PYTHONPATH."
            )
        raise EDMCodeMissingError(
            f"cannot unpickle EDM checkpoint {path!r}: module {mod!r} is not importable "
            f"(the pickle was saved with code that must be on the Python path).{hint}",
            name=exc.name,
        ) from exc


def build_arch(arch: str, config: dict) -> nn.Module:
    """Instantiate speccheck's own denoiser ``arch`` (a key of the registry) from ``config``."""
    if arch not in _ARCHS:
        raise InputError(f"unknown arch {arch!r}; known: {sorted(_ARCHS)}")
    mod, attr = _ARCHS[arch].split(":")
    return getattr(importlib.import_module(mod), attr).from_config(config)


def load_edm_denoiser(path: str, map_location: str | torch.device = "cpu") -> nn.Module:
    """Load an EDM denoiser D(y, sigma, class_labels) from ``path``.

    - a torch-saved dict {"arch", "config", "state_dict"} (speccheck's own networks; loaded with
      ``weights_only=True``, no code runs);
    - an EDM release pickle: a dict whose ``'ema'`` entry is the network (the public EDM
      checkpoints). Unpickling runs code: load only trusted files. Raises
      :class:`EDMCodeMissingError` when the module the pickle refers to is not importable.
    Raises LoadError for a missing file, FileFormatError for an unrecognised content.
    """
    if path is None or not os.path.isfile(path):
        raise LoadError(f"weights file not found: weights={path!r}")
    if zipfile.is_zipfile(path):
        obj = torch.load(path, map_location=map_location, weights_only=True)
        if isinstance(obj, dict) and "state_dict" in obj and "arch" in obj:
            net = build_arch(obj["arch"], obj.get("config", {}))
            net.load_state_dict(obj["state_dict"])
            return net.to(map_location).eval()
        if isinstance(obj, dict) and obj and all(isinstance(v, torch.Tensor) for v in obj.values()):
            # a bare state dict: speccheck's default digits denoiser, if the keys fit
            net = build_arch("digits-mlp", {})
            try:
                net.load_state_dict(obj)
            except RuntimeError as exc:
                raise FileFormatError(
                    f"{path!r} is a bare state dict that does not fit the default digits-mlp network "
                    f"(save {{'arch', 'config', 'state_dict'}} instead): {str(exc).splitlines()[0]}"
                ) from exc
            return net.to(map_location).eval()
        raise FileFormatError(
            f"{path!r} is a torch file but not a speccheck checkpoint (expected keys 'arch', 'config', 'state_dict')"
        )
    obj = _unpickle_edm(path)
    if isinstance(obj, dict):
        if "ema" not in obj:
            raise FileFormatError(f"EDM pickle {path!r} has no 'ema' entry (keys: {sorted(map(str, obj))})")
        obj = obj["ema"]
    if not isinstance(obj, nn.Module):
        raise FileFormatError(f"EDM pickle {path!r} does not hold a torch module (got {type(obj).__name__})")
    return obj.to(map_location).eval()


# --------------------------------------------------------------------------- presets
@dataclass(frozen=True)
class EDMPreset:
    """Paper settings (D-GRS paper section 5.2) for an EDM release network."""

    name: str
    state_shape: tuple[int, ...]
    label_dim: int
    steps: int = 100
    eps: tuple[float, ...] = (0.1, 0.3, 0.6)
    KL: tuple[tuple[int, int], ...] = ((2, 3), (2, 5), (3, 4), (4, 4))
    notes: str = field(default="")


EDM_PRESETS = {
    "edm-cifar10": EDMPreset(
        "edm-cifar10", (3, 32, 32), 10,
        notes="edm-cifar10-32x32-cond-vp.pkl from the EDM release; labels uniform over 10 classes",
    ),
    "edm-ffhq": EDMPreset("edm-ffhq", (3, 64, 64), 0, notes="edm-ffhq-64x64-uncond-vp.pkl from the EDM release"),
}


def edm_preset_target(
    name: str,
    weights: Optional[str],
    device: str | torch.device = "cpu",
    max_rows: Optional[int] = None,
) -> tuple[EDMTarget, EDMPreset]:
    """(target, preset) for ``edm-cifar10`` / ``edm-ffhq``; ``weights`` (the release pickle) is required."""
    if name not in EDM_PRESETS:
        raise InputError(f"unknown EDM preset {name!r}; known: {sorted(EDM_PRESETS)}")
    preset = EDM_PRESETS[name]
    if not weights:
        raise InputError(
            f"model {name!r} needs --weights PATH (the EDM release pickle, e.g. {preset.notes.split(' ')[0]}); "
            "no weights can be downloaded by speccheck"
        )
    net = load_edm_denoiser(weights, map_location=device)
    target = EDMTarget(net, state_shape=preset.state_shape, label_dim=preset.label_dim, device=device,
                       max_rows=max_rows)
    shape = _state_shape(net)
    if shape is not None and shape != preset.state_shape:
        raise InputError(f"weights {weights!r} have state shape {shape}, preset {name!r} expects {preset.state_shape}")
    return target, preset


Denoiser = Callable[[torch.Tensor, torch.Tensor, Optional[torch.Tensor]], torch.Tensor]
