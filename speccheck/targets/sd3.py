"""Stable Diffusion 3(.5) rectified-flow transformers as velocity targets (SPEC section 3).

diffusers' SD3 transformers predict v = d x_t / d t = xi - x_0 on x_t = (1 - t) x_0 + t xi (the
scheduler step is x_{t'} = x_t + (t' - t) v), i.e. SPEC's v_t; the model's ``timestep`` input is
1000 t. With classifier-free guidance of scale w the target velocity is
v = v_uncond + w (v_cond - v_uncond); the conditional and unconditional rows of every node go
through the transformer in ONE batched call (2R rows), which is one NFE.

Grids: :func:`diffusers_flow_grid` reproduces FlowMatchEulerDiscreteScheduler.set_timesteps
(its shift is applied to the training sigmas AND to the inference grid, so the last nonzero
t of a shift-3 grid is ~0.0089, not shift(0.001)).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np
import torch
from torch import nn

from speccheck.errors import FileFormatError, InputError, LoadError
from speccheck.targets.base import check_rows

#: prompts used by the sd35-medium preset when none are given (written for speccheck)
DEFAULT_PROMPTS = (
    "a red bicycle leaning against a brick wall",
    "a bowl of fresh fruit on a wooden kitchen table",
    "a small sailing boat on a calm lake at sunset",
    "a tabby cat sleeping on a blue sofa",
    "a city street with yellow taxis in the rain",
    "a snowy mountain peak under a clear sky",
    "two children flying a kite on a beach",
    "a plate of pasta with tomato sauce and basil",
)


def shift_time(t: float | np.ndarray | torch.Tensor, k: float) -> float | np.ndarray | torch.Tensor:
    """t -> k t / (1 + (k - 1) t) (SD3 timestep shift, k = 3 for 512x512); works on floats, arrays, tensors."""
    if not np.isfinite(k) or k <= 0:
        raise InputError(f"shift k must be > 0, got k={k!r}")
    return k * t / (1 + (k - 1) * t)


def diffusers_flow_grid(N: int, shift: float = 1.0, num_train_timesteps: int = 1000) -> np.ndarray:
    """The t grid (N + 1 points, terminal 0) that FlowMatchEulerDiscreteScheduler(shift=shift)
    uses after set_timesteps(N): t_max = 1, t_min = shift(1/num_train_timesteps); linspace between
    them in timestep units; shift applied again; append 0."""
    if not isinstance(N, (int, np.integer)) or N < 1:
        raise InputError(f"N must be an integer >= 1, got N={N!r}")
    t_min = float(shift_time(1.0 / num_train_timesteps, shift))
    base = np.linspace(1.0 * num_train_timesteps, t_min * num_train_timesteps, N) / num_train_timesteps
    return np.append(shift_time(base, shift), 0.0)


class SD3Target:
    """Velocity target from an SD3-family transformer with classifier-free guidance.

    transformer(hidden_states [R,C,H,W], encoder_hidden_states [R,S,D], pooled_projections [R,P],
    timestep [R] = 1000 t) -> v. prompt_embeds: [Np, S, D], pooled: [Np, P] (one row per prompt;
    ``cond`` picks rows). negative_*: [S, D] / [P] shared, or [Np, S, D] / [Np, P] per prompt;
    required when guidance_scale != 1.
    """

    natural_freeze = "velocity"

    def __init__(
        self,
        transformer: nn.Module,
        prompt_embeds: torch.Tensor,
        pooled_prompt_embeds: torch.Tensor,
        negative_prompt_embeds: Optional[torch.Tensor] = None,
        negative_pooled_prompt_embeds: Optional[torch.Tensor] = None,
        guidance_scale: float = 7.0,
        state_shape: Optional[tuple[int, ...]] = None,
        device: Optional[torch.device | str] = None,
        dtype: Optional[torch.dtype] = None,
        max_rows: Optional[int] = None,
    ) -> None:
        if not np.isfinite(guidance_scale):
            raise InputError(f"guidance_scale must be finite, got {guidance_scale!r}")
        if (prompt_embeds.dim() != 3 or pooled_prompt_embeds.dim() != 2
                or prompt_embeds.shape[0] != pooled_prompt_embeds.shape[0]):
            raise InputError(
                f"prompt_embeds must be [Np, S, D] and pooled_prompt_embeds [Np, P] with the same Np, got "
                f"{tuple(prompt_embeds.shape)} and {tuple(pooled_prompt_embeds.shape)}"
            )
        self.guidance_scale = float(guidance_scale)
        self.cfg = self.guidance_scale != 1.0
        if self.cfg and (negative_prompt_embeds is None or negative_pooled_prompt_embeds is None):
            raise InputError("negative_prompt_embeds and negative_pooled_prompt_embeds are required when "
                             "guidance_scale != 1")
        p = next(iter(transformer.parameters()), None)
        default_device = p.device if p is not None else torch.device("cpu")
        self.device = torch.device(device) if device is not None else default_device
        self.dtype = dtype if dtype is not None else (p.dtype if p is not None else torch.float32)
        self.transformer = transformer.to(self.device).eval()
        cfg = getattr(transformer, "config", None)
        if state_shape is None:
            if cfg is None:
                raise InputError("state_shape must be given for a transformer without a diffusers config")
            state_shape = (int(cfg.in_channels), int(cfg.sample_size), int(cfg.sample_size))
        self.state_shape = tuple(int(s) for s in state_shape)
        self.n_prompts = int(prompt_embeds.shape[0])
        self.prompt_embeds = prompt_embeds.to(self.device, self.dtype)
        self.pooled = pooled_prompt_embeds.to(self.device, self.dtype)
        self.neg = self.neg_pooled = None
        if self.cfg:
            neg, negp = negative_prompt_embeds, negative_pooled_prompt_embeds
            neg = neg[None] if neg.dim() == 2 else neg
            negp = negp[None] if negp.dim() == 1 else negp
            if (neg.shape[0] not in (1, self.n_prompts) or neg.shape[1:] != prompt_embeds.shape[1:]
                    or negp.shape[0] != neg.shape[0]):
                raise InputError(
                    f"negative embeddings {tuple(negative_prompt_embeds.shape)}, "
                    f"{tuple(negative_pooled_prompt_embeds.shape)} "
                    f"do not match prompt embeddings {tuple(prompt_embeds.shape)}"
                )
            self.neg = neg.to(self.device, self.dtype)
            self.neg_pooled = negp.to(self.device, self.dtype)
        self.max_rows = max_rows

    def _check(self, x: torch.Tensor, t: torch.Tensor, cond: Optional[torch.Tensor]) -> torch.Tensor:
        check_rows(x, t, self.state_shape, t_in_unit=True)
        if cond is None:
            if self.n_prompts != 1:
                raise InputError(f"cond (prompt index per row) required with {self.n_prompts} prompts")
            return torch.zeros(x.shape[0], dtype=torch.long, device=self.device)
        if cond.shape != (x.shape[0],):
            raise InputError(f"cond must have shape [{x.shape[0]}], got {tuple(cond.shape)}")
        if cond.min() < 0 or cond.max() >= self.n_prompts:
            raise InputError(f"cond must index prompts in [0, {self.n_prompts}), "
                             f"got [{int(cond.min())}, {int(cond.max())}]")
        return cond.to(self.device).long()

    def _forward(self, x: torch.Tensor, t: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        enc, pooled = self.prompt_embeds[idx], self.pooled[idx]
        if self.cfg:
            nidx = idx if self.neg.shape[0] > 1 else torch.zeros_like(idx)
            x = torch.cat([x, x])
            t = torch.cat([t, t])
            enc = torch.cat([enc, self.neg[nidx]])
            pooled = torch.cat([pooled, self.neg_pooled[nidx]])
        out = self.transformer(
            hidden_states=x, encoder_hidden_states=enc, pooled_projections=pooled, timestep=1000 * t, return_dict=False
        )[0]
        if not self.cfg:
            return out
        v_c, v_u = out.chunk(2)
        return v_u + self.guidance_scale * (v_c - v_u)

    @torch.no_grad()
    def velocity(self, x: torch.Tensor, t: torch.Tensor, cond: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Guided v_t(x) for x [R,*shape], t [R] in (0, 1], cond [R] prompt indices (None with one prompt).
        One batched transformer call on 2R rows (R without guidance) = one NFE."""
        t = t.to(x.dtype)
        idx = self._check(x, t, cond)
        out = torch.empty_like(x)
        step = self.max_rows or x.shape[0] or 1
        for i in range(0, x.shape[0], step):
            sl = slice(i, i + step)
            v = self._forward(x[sl].to(self.device, self.dtype), t[sl].to(self.device, self.dtype), idx[sl])
            out[sl] = v.to(x.dtype).to(x.device)
        return out


# --------------------------------------------------------------------------- loading
def _require_dir(weights: Optional[str], model: str) -> str:
    if not weights:
        raise InputError(
            f"model {model!r} needs --weights DIR (a local diffusers directory of "
            "stabilityai/stable-diffusion-3.5-medium); no weights can be downloaded by speccheck"
        )
    if not os.path.isdir(weights):
        raise LoadError(f"weights directory not found: weights={weights!r}")
    return weights


def load_sd3_transformer(weights: str, device: str | torch.device = "cpu",
                         dtype: torch.dtype = torch.float32) -> nn.Module:
    """SD3Transformer2DModel from a diffusers pipeline directory (``transformer/`` subfolder) or a model directory."""
    from diffusers import SD3Transformer2DModel

    weights = _require_dir(weights, "sd3")
    sub = "transformer" if os.path.isdir(os.path.join(weights, "transformer")) else None
    model = SD3Transformer2DModel.from_pretrained(weights, subfolder=sub, torch_dtype=dtype)
    return model.to(device).eval()


def load_prompt_embeddings(path: str) -> dict[str, torch.Tensor]:
    """Precomputed embeddings saved with torch.save: keys prompt_embeds [Np,S,D],
    pooled_prompt_embeds [Np,P], negative_prompt_embeds, negative_pooled_prompt_embeds."""
    if not os.path.isfile(path):
        raise LoadError(f"prompt embeddings file not found: embeddings={path!r}")
    obj = torch.load(path, map_location="cpu", weights_only=True)
    need = ("prompt_embeds", "pooled_prompt_embeds")
    if not isinstance(obj, dict) or any(k not in obj for k in need):
        raise FileFormatError(f"{path!r} must hold a dict with keys {need} (+ negative_* for guidance)")
    return obj


def encode_prompts(
    weights: str,
    prompts: Sequence[str],
    negative_prompt: str = "",
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
) -> dict[str, torch.Tensor]:
    """Encode prompts with the pipeline's three text encoders (needs ``transformers``; extra ``sd3``)."""
    try:
        from diffusers import StableDiffusion3Pipeline

        pipe = StableDiffusion3Pipeline.from_pretrained(
            _require_dir(weights, "sd3"), transformer=None, vae=None, torch_dtype=dtype
        ).to(device)
    except ImportError as exc:
        raise ImportError(
            f"encoding prompts needs the SD3 text encoders ({exc}); install speccheck[sd3] or pass "
            "precomputed embeddings (--embeddings FILE)"
        ) from exc
    with torch.no_grad():
        pe, npe, ppe, nppe = pipe.encode_prompt(
            prompt=list(prompts), prompt_2=None, prompt_3=None,
            negative_prompt=[negative_prompt] * len(prompts), do_classifier_free_guidance=True, device=device,
        )
    return {"prompt_embeds": pe, "pooled_prompt_embeds": ppe,
            "negative_prompt_embeds": npe, "negative_pooled_prompt_embeds": nppe}


def decode_latents(weights: str, latents: torch.Tensor, device: str | torch.device = "cpu") -> torch.Tensor:
    """Decode SD3 latents with the directory's VAE to images in [-1, 1] ([R, 3, 8H, 8W])."""
    from diffusers import AutoencoderKL

    vae = AutoencoderKL.from_pretrained(_require_dir(weights, "sd3"), subfolder="vae").to(device).eval()
    z = latents.to(device, vae.dtype) / vae.config.scaling_factor + (vae.config.shift_factor or 0.0)
    with torch.no_grad():
        return vae.decode(z, return_dict=False)[0].clamp(-1, 1)


# --------------------------------------------------------------------------- preset
@dataclass(frozen=True)
class SD3Preset:
    """Paper settings (D-GRS paper section 5.3)."""

    name: str = "sd35-medium"
    state_shape: tuple[int, ...] = (16, 64, 64)
    steps: int = 50
    shift: float = 3.0
    guidance_scale: float = 7.0
    eps: float = 0.8
    L: int = 2
    K: tuple[int, ...] = (2, 3, 4, 5, 6, 7)


SD3_PRESETS = {"sd35-medium": SD3Preset()}


def sd35_preset_target(
    weights: Optional[str],
    prompts: Optional[Sequence[str]] = None,
    embeddings: Optional[str] = None,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    max_rows: Optional[int] = None,
) -> tuple[SD3Target, SD3Preset]:
    """(target, preset) for sd35-medium; ``weights`` (local diffusers dir) required. Embeddings come
    from ``embeddings`` (a torch file) when given, else from the directory's text encoders."""
    preset = SD3_PRESETS["sd35-medium"]
    weights = _require_dir(weights, preset.name)
    if embeddings:
        emb = load_prompt_embeddings(embeddings)
    else:
        emb = encode_prompts(weights, prompts or DEFAULT_PROMPTS, device=device, dtype=dtype)
    transformer = load_sd3_transformer(weights, device=device, dtype=dtype)
    target = SD3Target(
        transformer, emb["prompt_embeds"], emb["pooled_prompt_embeds"],
        emb.get("negative_prompt_embeds"), emb.get("negative_pooled_prompt_embeds"),
        guidance_scale=preset.guidance_scale, state_shape=preset.state_shape, device=device, dtype=dtype,
        max_rows=max_rows,
    )
    return target, preset
