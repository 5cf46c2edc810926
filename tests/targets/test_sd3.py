"""SD3 adapter on a tiny random diffusers SD3Transformer2DModel: guidance in one batched call,
the cross-check against diffusers' FlowMatchEulerDiscreteScheduler (eps -> 0), loading from a
local directory and the clear errors. Deterministic checks only."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("diffusers")
from diffusers import FlowMatchEulerDiscreteScheduler, SD3Transformer2DModel  # noqa: E402

from speccheck.targets.schedules import Schedule  # noqa: E402
from speccheck.targets.sd3 import (  # noqa: E402
    SD3_PRESETS,
    SD3Target,
    diffusers_flow_grid,
    load_sd3_transformer,
    sd35_preset_target,
    shift_time,
)

TINY = dict(sample_size=8, patch_size=2, in_channels=4, out_channels=4, num_layers=1, attention_head_dim=8,
            num_attention_heads=2, joint_attention_dim=16, caption_projection_dim=16, pooled_projection_dim=8,
            pos_embed_max_size=4)

pytestmark = pytest.mark.usefixtures("one_torch_thread")



def _tiny(seed=0, **over):
    torch.manual_seed(seed)
    return SD3Transformer2DModel(**{**TINY, **over}).eval()


def _emb(n=3, seed=1, S=5, D=16, P=8):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(n, S, D, generator=g), torch.randn(n, P, generator=g),
            torch.randn(S, D, generator=g), torch.randn(P, generator=g))


def test_shift_and_grid_match_diffusers():
    assert shift_time(0.5, 3.0) == pytest.approx(0.75)
    assert shift_time(1.0, 3.0) == 1.0 and shift_time(0.0, 3.0) == 0.0
    with pytest.raises(ValueError, match="shift"):
        shift_time(0.5, 0.0)
    for shift in (1.0, 3.0):
        for N in (5, 50):
            sch = FlowMatchEulerDiscreteScheduler(shift=shift)
            sch.set_timesteps(N)
            np.testing.assert_allclose(diffusers_flow_grid(N, shift), sch.sigmas.double().numpy(), rtol=1e-6, atol=1e-7)


def test_guidance_is_one_batched_call():
    model = _tiny()
    pe, pp, ne, npool = _emb()
    calls = []
    orig = model.forward

    def counting(*a, **kw):
        calls.append(kw["hidden_states"].shape[0])
        return orig(*a, **kw)

    model.forward = counting
    target = SD3Target(model, pe, pp, ne, npool, guidance_scale=7.0)
    assert target.state_shape == (4, 8, 8)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(5, 4, 8, 8, generator=g)
    t = torch.tensor([1.0, 0.8, 0.5, 0.2, 0.01])
    cond = torch.tensor([0, 2, 1, 1, 0])
    v = target.velocity(x, t, cond)
    assert calls == [10]                      # cond + uncond rows of every node in ONE call = one NFE
    with torch.no_grad():
        vc = orig(hidden_states=x, encoder_hidden_states=pe[cond], pooled_projections=pp[cond], timestep=1000 * t,
                  return_dict=False)[0]
        vu = orig(hidden_states=x, encoder_hidden_states=ne.expand(5, -1, -1), pooled_projections=npool.expand(5, -1),
                  timestep=1000 * t, return_dict=False)[0]
    torch.testing.assert_close(v, vu + 7.0 * (vc - vu), rtol=1e-4, atol=1e-4)
    # no guidance: one call on R rows, equals the conditional output
    calls.clear()
    unguided = SD3Target(model, pe, pp, guidance_scale=1.0)
    torch.testing.assert_close(unguided.velocity(x, t, cond), vc, rtol=1e-5, atol=1e-5)
    assert calls == [5]


@pytest.mark.parametrize("shift", [1.0, 3.0])
def test_eps_to_zero_mean_equals_diffusers_scheduler_step(shift):
    """Run a 6-step chain: our churn mean m^q_n (eps -> 0) vs scheduler.step on the same model output."""
    model = _tiny(seed=2)
    pe, pp, ne, npool = _emb(n=2, seed=3)
    target = SD3Target(model, pe, pp, ne, npool, guidance_scale=4.0)
    N = 6
    sch = FlowMatchEulerDiscreteScheduler(shift=shift)
    sch.set_timesteps(N)
    grid = diffusers_flow_grid(N, shift)
    for eps in (0.0, 1e-6):
        ours = Schedule(grid, eps)
        g = torch.Generator().manual_seed(4)
        x_ref = torch.randn(2, 4, 8, 8, generator=g)
        x_ours = x_ref.double()
        cond = torch.tensor([0, 1])
        sch.set_timesteps(N)
        for n, ts in enumerate(sch.timesteps):
            t_ours = torch.full((2,), float(ours.t[n]), dtype=torch.float64)
            assert float(ts) / 1000 == pytest.approx(float(ours.t[n]), rel=1e-6)   # model sees the same time
            v_ref = target.velocity(x_ref, torch.full((2,), float(ts) / 1000), cond)
            x_ref = sch.step(v_ref, ts, x_ref, return_dict=False)[0]
            v = target.velocity(x_ours, t_ours, cond)
            x_ours = ours.a[n] * x_ours + ours.c[n] * v           # m^q_n(x); sigma_n -> 0
            torch.testing.assert_close(x_ours.float(), x_ref, rtol=1e-4, atol=1e-4)


def test_errors():
    model = _tiny()
    pe, pp, ne, npool = _emb()
    with pytest.raises(ValueError, match="negative_prompt_embeds"):
        SD3Target(model, pe, pp, guidance_scale=7.0)
    with pytest.raises(ValueError, match="prompt_embeds must be"):
        SD3Target(model, pe[0], pp, ne, npool)
    with pytest.raises(ValueError, match="do not match"):
        SD3Target(model, pe, pp, ne[:, :3], npool)
    target = SD3Target(model, pe, pp, ne, npool)
    x = torch.randn(2, 4, 8, 8)
    t = torch.tensor([0.5, 0.5])
    with pytest.raises(ValueError, match="cond"):
        target.velocity(x, t, None)
    with pytest.raises(ValueError, match="cond must index"):
        target.velocity(x, t, torch.tensor([0, 3]))
    with pytest.raises(ValueError, match="t must lie"):
        target.velocity(x, torch.tensor([0.5, 1.5]), torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="x must have shape"):
        target.velocity(torch.randn(2, 3, 8, 8), t, torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="--weights"):
        sd35_preset_target(None)
    with pytest.raises(ValueError, match="not found"):
        sd35_preset_target("/nonexistent/sd35")


def test_load_from_directory_and_preset(tmp_path):
    pre = SD3_PRESETS["sd35-medium"]
    settings = (pre.steps, pre.shift, pre.guidance_scale, pre.eps, pre.L, pre.K)
    assert settings == (50, 3.0, 7.0, 0.8, 2, (2, 3, 4, 5, 6, 7))
    assert [sum(K**j for j in (1, 2)) for K in pre.K] == [6, 12, 20, 30, 42, 56]
    # a pipeline-style directory with a tiny transformer of SD3.5's latent shape (16 x 64 x 64)
    model = _tiny(seed=5, sample_size=64, in_channels=16, out_channels=16, patch_size=8, pos_embed_max_size=8)
    model.save_pretrained(str(tmp_path / "transformer"))
    loaded = load_sd3_transformer(str(tmp_path))
    pe, pp, ne, npool = _emb(n=2, seed=6)
    emb_path = tmp_path / "emb.pt"
    torch.save({"prompt_embeds": pe, "pooled_prompt_embeds": pp, "negative_prompt_embeds": ne,
                "negative_pooled_prompt_embeds": npool}, emb_path)
    target, pre = sd35_preset_target(str(tmp_path), embeddings=str(emb_path))
    assert target.state_shape == (16, 64, 64) and target.guidance_scale == 7.0
    x = torch.randn(1, 16, 64, 64)
    t = torch.tensor([0.7])
    v = target.velocity(x, t, torch.tensor([1]))
    ref = SD3Target(model, pe, pp, ne, npool, guidance_scale=7.0).velocity(x, t, torch.tensor([1]))
    torch.testing.assert_close(v, ref)
    assert isinstance(loaded, SD3Transformer2DModel)
