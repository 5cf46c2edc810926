"""End to end on learned diffusion models (issue 8): the standard and the speculative sampler on
the same initial noise, then speed-up, calibration, predicted NFE and exactness.

For one (model, verifier, tree, eps) cell, :func:`run_e2e`:
1. draws x0 [n, *shape] and conditioning (digit label / class / prompt index) from ``seed``;
2. runs the standard churn chain (N target calls per trajectory) and the speculative sampler
   (lazy mode: the NFE count and the law are those of Algorithm 1; see sampler.core);
3. reports the NFE speed-up (mean, s.e.), the calibration z of accepts against theory and the
   predicted vs measured NFE (speccheck.sampler.analysis.summarize);
4. exactness: the innovation test with the model's own drift (validation.trajectory) and an
   energy-distance two-sample test of the final samples (speculative vs standard). The test is
   paired: trajectory i of both samplers starts from the same x0, so under exactness
   (X_i, Y_i) is exchangeable and randomly swapping within pairs is an exact permutation test;
5. writes PNG sample grids.
The false-failure rate of the whole exactness verdict is <= alpha (alpha/2 per family).
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import asdict, dataclass, field
from typing import Optional

import numpy as np
import torch

MODELS = ("digits-edm", "digits-flow", "edm-cifar10", "edm-ffhq", "sd35-medium")


@dataclass
class E2EConfig:
    """One end-to-end cell. K = 1 or verifier rmc -> a chain; ``match`` = 'budget' runs rmc on the
    chain with the same drafted budget B as the (K, L) tree (the paper's protocol)."""

    model: str = "digits-edm"
    weights: Optional[str] = None
    embeddings: Optional[str] = None
    verifier: str = "dgrs"
    K: int = 2
    L: int = 3
    eps: float = 0.3
    samples: int = 2000
    steps: Optional[int] = None
    shift: Optional[float] = None
    freeze: Optional[str] = None
    prefetch: str = "nearest"
    leaves: bool = True
    match: str = "budget"
    guidance: Optional[float] = None
    device: str = "cpu"
    seed: int = 0
    alpha: float = 0.01
    n_perm: int = 500
    innovation: bool = True
    two_sample: bool = True
    sampler_mutant: Optional[str] = None
    figures: Optional[str] = None
    max_rows: Optional[int] = 8192
    dtype: str = "float32"           # network dtype for sd35 (float32 / bfloat16 / float16)


@dataclass
class LoadedModel:
    target: object
    steps: int
    shift: float
    freeze: str
    n_cond: int                       # number of classes/prompts (0: unconditional)
    diffusers_grid: bool
    info: dict = field(default_factory=dict)


def load_model(cfg: E2EConfig) -> LoadedModel:
    """The target and its defaults (grid, steps, natural freeze) for ``cfg.model``."""
    if cfg.model not in MODELS:
        raise ValueError(f"unknown model {cfg.model!r}; choose from {MODELS}")
    if cfg.model.startswith("digits"):
        from speccheck.targets import digits

        g = 1.0 if cfg.guidance is None else cfg.guidance
        target = digits.digits_target(cfg.model, cfg.weights, guidance_scale=g, device=cfg.device)
        target.max_rows = cfg.max_rows
        freeze = "denoised" if cfg.model == "digits-edm" else "velocity"
        info = {"weights": cfg.weights or (digits.EDM_CHECKPOINT if cfg.model == "digits-edm" else digits.FLOW_CHECKPOINT)}
        if cfg.model == "digits-flow":
            info["guidance_scale"] = g
        return LoadedModel(target, 100, 1.0, freeze, digits.N_CLASSES, False, info)
    if cfg.model.startswith("edm"):
        from speccheck.targets.edm import edm_preset_target

        target, pre = edm_preset_target(cfg.model, cfg.weights, device=cfg.device, max_rows=cfg.max_rows)
        return LoadedModel(target, pre.steps, 1.0, "denoised", pre.label_dim, False, {"weights": cfg.weights})
    from speccheck.targets.sd3 import sd35_preset_target

    if cfg.dtype not in ("float32", "bfloat16", "float16"):
        raise ValueError(f"dtype must be float32, bfloat16 or float16, got dtype={cfg.dtype!r}")
    target, pre = sd35_preset_target(cfg.weights, embeddings=cfg.embeddings, device=cfg.device,
                                     dtype=getattr(torch, cfg.dtype), max_rows=cfg.max_rows)
    if cfg.guidance is not None:
        target.guidance_scale = float(cfg.guidance)
    return LoadedModel(target, pre.steps, pre.shift, "velocity", target.n_prompts, True,
                       {"weights": cfg.weights, "guidance_scale": target.guidance_scale})


def make_schedule(steps: int, eps: float, shift: float, diffusers_grid: bool):
    """The flow-matching grid (diffusers' set_timesteps grid when ``diffusers_grid``) with churn eps."""
    from speccheck.targets.schedules import Schedule, flow_matching
    from speccheck.targets.sd3 import diffusers_flow_grid

    if diffusers_grid:
        return Schedule(diffusers_flow_grid(steps, shift), eps, f"diffusers-flow(shift={shift})")
    return flow_matching(steps, eps, shift)


@torch.no_grad()
def standard_sample(target, schedule, x0: torch.Tensor, cond: Optional[torch.Tensor],
                    generator: torch.Generator) -> torch.Tensor:
    """The target chain: x <- a_n x + c_n v_{t_n}(x) + sigma_n z (N calls). Returns final states."""
    x = x0.clone()
    R = x.shape[0]
    for n in range(schedule.N):
        t = torch.full((R,), float(schedule.t[n]), dtype=x.dtype)
        v = target.velocity(x, t, cond)
        x = schedule.a[n] * x + schedule.c[n] * v
        if schedule.sigma[n] > 0:
            x = x + schedule.sigma[n] * torch.randn(x.shape, generator=generator, dtype=x.dtype)
    return x


def energy_distance_test(X: torch.Tensor, Y: torch.Tensor, n_perm: int, generator: torch.Generator,
                         paired: bool = True) -> dict:
    """Energy distance E = 2 E|X - Y| - E|X - X'| - E|Y - Y'| (V-statistic) between rows of X and Y
    ([n, ...]), with a permutation p-value (1 + #{E_perm >= E}) / (1 + n_perm). paired: permute by
    swapping X_i <-> Y_i (valid when pairs are exchangeable); else relabel all 2n rows."""
    if X.shape != Y.shape:
        raise ValueError(f"X and Y must have the same shape, got {tuple(X.shape)} and {tuple(Y.shape)}")
    n = X.shape[0]
    Z = torch.cat([X.flatten(1), Y.flatten(1)]).double()
    D = torch.cdist(Z, Z)
    a0 = torch.cat([torch.ones(n), torch.zeros(n)]).double()

    def stat(A: torch.Tensor) -> torch.Tensor:          # A: [2n, P] indicator of group X
        B = 1 - A
        DA, DB = D @ A, D @ B
        return 2 * (A * DB).sum(0) / n**2 - (A * DA).sum(0) / n**2 - (B * DB).sum(0) / n**2

    obs = float(stat(a0[:, None])[0])
    count = 0
    for start in range(0, n_perm, 100):
        P = min(100, n_perm - start)
        if paired:
            s = torch.rand(n, P, generator=generator) < 0.5
            A = torch.cat([(~s).double(), s.double()])
        else:
            idx = torch.argsort(torch.rand(P, 2 * n, generator=generator), dim=1)
            A = (idx < n).double().T
        count += int((stat(A) >= obs - 1e-12).sum())
    return {"energy_distance": obs, "p_value": (1 + count) / (1 + n_perm), "n": n, "n_perm": n_perm,
            "paired": paired}


def save_grid_png(x: torch.Tensor, path: str, nrow: int, value_range=(-1.0, 1.0)) -> None:
    """Tile images x [R, C, H, W] (C in {1, 3}) into a grid PNG with ``nrow`` images per row."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = x.detach().double().cpu().clamp(*value_range)
    x = (x - value_range[0]) / (value_range[1] - value_range[0])
    R, C, H, W = x.shape
    rows = math.ceil(R / nrow)
    grid = torch.ones(C, rows * (H + 1) + 1, nrow * (W + 1) + 1, dtype=torch.float64)
    for i in range(R):
        r, c = divmod(i, nrow)
        grid[:, 1 + r * (H + 1): 1 + r * (H + 1) + H, 1 + c * (W + 1): 1 + c * (W + 1) + W] = x[i]
    img = grid[0].numpy() if C == 1 else grid.permute(1, 2, 0).numpy()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    scale = max(1, 400 // max(img.shape[0], 1))
    img = np.kron(img, np.ones((scale, scale) + ((1,) if C == 3 else ()))) if scale > 1 else img
    plt.imsave(path, img, cmap="gray" if C == 1 else None, vmin=0.0, vmax=1.0)


def _conditioning(model: LoadedModel, n: int, g: torch.Generator, name: str) -> Optional[torch.Tensor]:
    if model.n_cond == 0:
        return None
    if name.startswith("digits"):
        return torch.arange(n) % model.n_cond                # balanced digits, label i % 10
    return torch.randint(0, model.n_cond, (n,), generator=g)  # paper: labels/prompts uniform


def build_tree(cfg: E2EConfig, verifier):
    """(tree, description): uniform (K, L); a chain for K = 1 or a K = 1-only verifier (rmc),
    of length B(K, L) when match == 'budget', else of length L."""
    from speccheck.sampler.tree import chain, chain_matched, uniform_tree

    supports = getattr(verifier, "supports_K", None)
    if cfg.K == 1:
        return chain(cfg.L)
    if supports is not None and not supports(cfg.K):
        if cfg.match == "none":
            return chain(cfg.L)
        return chain_matched(uniform_tree(cfg.K, cfg.L), cfg.match, cfg.leaves)
    return uniform_tree(cfg.K, cfg.L)


def run_e2e(cfg: E2EConfig, model: Optional[LoadedModel] = None, log=None) -> dict:
    """One end-to-end cell; returns a JSON-friendly report (see module docstring)."""
    from speccheck.sampler.analysis import summarize
    from speccheck.sampler.core import SpeculativeSampler, resolve_verifier, verifier_name
    from speccheck.validation.trajectory import innovation_checks

    if cfg.samples < 2:
        raise ValueError(f"samples must be >= 2, got samples={cfg.samples}")
    if not (0 < cfg.eps <= 1):
        raise ValueError(f"eps must be in (0, 1] for speculation, got eps={cfg.eps}")
    if cfg.K < 1 or cfg.L < 1:
        raise ValueError(f"K and L must be >= 1, got K={cfg.K}, L={cfg.L}")
    if not (0 < cfg.alpha < 1):
        raise ValueError(f"alpha must be in (0, 1), got alpha={cfg.alpha}")
    log = log or (lambda m: None)
    model = model or load_model(cfg)
    steps = cfg.steps or model.steps
    shift = model.shift if cfg.shift is None else cfg.shift
    schedule = make_schedule(steps, cfg.eps, shift, model.diffusers_grid)
    verifier = resolve_verifier(cfg.verifier)
    tree = build_tree(cfg, verifier)
    freeze = cfg.freeze or model.freeze
    factory = SpeculativeSampler
    if cfg.sampler_mutant:
        from speccheck.validation.sampler_mutants import SAMPLER_MUTANTS

        if cfg.sampler_mutant not in SAMPLER_MUTANTS:
            raise ValueError(f"unknown sampler_mutant {cfg.sampler_mutant!r}; choose from {sorted(SAMPLER_MUTANTS)}")
        factory = SAMPLER_MUTANTS[cfg.sampler_mutant]
    sampler = factory(model.target, schedule, tree, verifier, freeze=freeze, prefetch=cfg.prefetch,
                      leaves=cfg.leaves, lazy=True)
    n = cfg.samples
    g = torch.Generator().manual_seed(cfg.seed)
    shape = tuple(model.target.state_shape)
    x0 = torch.randn((n, *shape), generator=g, dtype=torch.float64)
    cond = _conditioning(model, n, g, cfg.model)
    report: dict = {"config": asdict(cfg), "model": model.info, "protocol": sampler.protocol(),
                    "state_shape": list(shape)}

    t0 = time.time()
    res = sampler.run(x0, torch.Generator().manual_seed(cfg.seed + 1), cond=cond, record_states=cfg.innovation)
    report["wall_s_speculative"] = round(time.time() - t0, 2)
    log(f"speculative run: {report['wall_s_speculative']} s")
    t0 = time.time()
    x_std = standard_sample(model.target, schedule, x0, cond, torch.Generator().manual_seed(cfg.seed + 2))
    report["wall_s_standard"] = round(time.time() - t0, 2)
    log(f"standard run: {report['wall_s_standard']} s")

    summ = summarize(res, verifier, schedule.stochastic, tree.L)
    report["summary"] = summ
    report["standard_nfe"] = {"stochastic": schedule.n_stochastic, "total": schedule.N}

    checks = {}
    if cfg.innovation:
        t0 = time.time()
        inn = innovation_checks(res, model.target, schedule, alpha=cfg.alpha / 2, cond=cond,
                                label=f"({cfg.model})")
        checks["innovation"] = {
            "passed": all(r.passed for r in inn), "n_tests": len(inn), "level": inn[0].level if inn else None,
            "min_p": min((r.p_value for r in inn), default=1.0),
            "failed": [{"name": r.name, "p": r.p_value} for r in inn if not r.passed][:10],
        }
        log(f"innovation test: {time.time() - t0:.1f} s")
    if cfg.two_sample:
        ts = energy_distance_test(res.x, x_std, cfg.n_perm, torch.Generator().manual_seed(cfg.seed + 3))
        ts["level"] = cfg.alpha / 2
        ts["passed"] = bool(ts["p_value"] >= ts["level"])
        ts["n_at_least_2000"] = n >= 2000
        checks["two_sample"] = ts
    report["exactness"] = checks
    report["exact"] = all(c["passed"] for c in checks.values())

    if cfg.model.startswith("digits"):
        from speccheck.targets.digits import classify_samples, fit_digit_classifier

        clf, acc = fit_digit_classifier()
        report["digit_label_agreement"] = {"speculative": classify_samples(res.x, cond, clf),
                                           "standard": classify_samples(x_std, cond, clf),
                                           "classifier_real_heldout": acc, "chance": 0.1}
    if cfg.figures:
        tag = cell_tag(cfg, verifier_name(verifier))
        m = min(n, 100)
        order = torch.argsort(cond[:m], stable=True) if cond is not None and cfg.model.startswith("digits") else torch.arange(m)
        k = 10 if m >= 100 else max(1, int(math.sqrt(m)))
        imgs = {}
        for name, xs in (("speculative", res.x), ("standard", x_std)):
            xs = xs[:m][order]
            if cfg.model == "sd35-medium":
                from speccheck.targets.sd3 import decode_latents

                try:
                    xs = decode_latents(cfg.weights, xs.float(), device=cfg.device)
                except Exception as exc:  # VAE missing: show the first 3 latent channels
                    log(f"no VAE decode ({exc}); showing latent channels")
                    xs = xs[:, :3].clamp(-2, 2) / 2
            p = os.path.join(cfg.figures, f"{tag}_{name}.png")
            save_grid_png(xs.reshape(xs.shape[0], *xs.shape[-3:]) if xs.dim() >= 4 else xs, p, nrow=k)
            imgs[name] = p
        report["figures"] = imgs
    return report


def cell_tag(cfg: E2EConfig, vname: str) -> str:
    mut = f"_mutant-{cfg.sampler_mutant}" if cfg.sampler_mutant else ""
    g = f"_g{cfg.guidance:g}" if cfg.guidance is not None else ""
    fr = f"_freeze-{cfg.freeze}" if cfg.freeze else ""
    return f"{cfg.model}_{vname}_K{cfg.K}L{cfg.L}_eps{cfg.eps:g}{g}{fr}{mut}"


def format_report(r: dict) -> str:
    """A few human-readable lines for one cell."""
    s = r["summary"]
    c = r["config"]
    lines = [
        f"{c['model']} {r['protocol']['verifier']} {r['protocol']['tree']['tree']} eps={c['eps']} n={s['trajectories']} "
        f"freeze={r['protocol']['freeze']} leaves={r['protocol']['leaves']} prefetch={r['protocol']['prefetch']}"
        + (f" MUTANT={c['sampler_mutant']}" if c.get("sampler_mutant") else ""),
        f"  speed-up {s['speedup']:.3f} +- {s['speedup_se']:.3f} (stochastic steps {s['stochastic_steps']} / NFE "
        f"{s['nfe_mean']:.2f} +- {s['nfe_se']:.2f}); predicted NFE {s['predicted_nfe']:.2f} "
        f"(speed-up {s['predicted_speedup']:.3f}), NFE z {s['nfe_z']:+.2f}",
        f"  acceptance {s['acceptance']:.4f}; calibration z {s['calibration_z']:+.2f} over {s['n_events']} events",
    ]
    ex = r["exactness"]
    if "innovation" in ex:
        i = ex["innovation"]
        lines.append(f"  innovation test: {'PASS' if i['passed'] else 'FAIL'} ({i['n_tests']} tests, min p {i['min_p']:.2e}, "
                     f"level {i['level']:.1e})")
    if "two_sample" in ex:
        t = ex["two_sample"]
        lines.append(f"  energy two-sample (paired, n={t['n']}): {'PASS' if t['passed'] else 'FAIL'} "
                     f"E={t['energy_distance']:.3e} p={t['p_value']:.4f}")
    if "digit_label_agreement" in r:
        d = r["digit_label_agreement"]
        lines.append(f"  digit label agreement: speculative {d['speculative']:.3f}, standard {d['standard']:.3f}")
    lines.append(f"  wall: speculative {r['wall_s_speculative']} s, standard {r['wall_s_standard']} s")
    return "\n".join(lines)


def write_json(report: dict, path: str) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(report, f, indent=2, default=float)


def markdown_table(reports: list[dict]) -> str:
    """One row per cell: speed-up +- s.e., predicted, NFE vs DP, calibration z, exactness p-values."""
    rows = ["| model | verifier | tree | B | eps | n | speed-up | pred. | NFE meas. / DP | cal. z "
            "| innov. min p (level) | energy p | verdict |", "|" + "---|" * 13]
    for r in reports:
        if "error" in r:
            c = r["config"]
            rows.append(f"| {c['model']} | {c['verifier']} | K={c['K']}, L={c['L']} | - | {c['eps']:g} | - | error: "
                        f"{r['error'][:60]} | | | | | | |")
            continue
        c, s, p, ex = r["config"], r["summary"], r["protocol"], r["exactness"]
        inn, ts = ex.get("innovation"), ex.get("two_sample")
        mut = f" (mutant {c['sampler_mutant']})" if c.get("sampler_mutant") else ""
        inn_s = f"{inn['min_p']:.1e} ({inn['level']:.0e})" if inn else "-"
        ts_s = f"{ts['p_value']:.3f}" if ts else "-"
        rows.append(
            f"| {c['model']} | {p['verifier']}{mut} | {p['tree']['tree']} | {p['tree']['B']} | {c['eps']:g} "
            f"| {s['trajectories']} | {s['speedup']:.3f} +- {s['speedup_se']:.3f} | {s['predicted_speedup']:.3f} "
            f"| {s['nfe_mean']:.2f} / {s['predicted_nfe']:.2f} | {s['calibration_z']:+.2f} | {inn_s} | {ts_s} "
            f"| {'exact' if r['exact'] else 'FAIL'} |"
        )
    return "\n".join(rows)


def plot_speedups(reports: list[dict], path: str, title: str = "") -> None:
    """Speed-up (+- s.e.) vs drafted budget B, one line per (verifier, eps)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups: dict = {}
    for r in reports:
        if r["config"].get("sampler_mutant") or "error" in r:
            continue
        key = (r["protocol"]["verifier"], r["config"]["eps"])
        groups.setdefault(key, []).append((r["protocol"]["tree"]["B"], r["summary"]["speedup"], r["summary"]["speedup_se"]))
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for (ver, eps), pts in sorted(groups.items()):
        pts.sort()
        b, s, e = map(np.array, zip(*pts))
        ax.errorbar(b, s, yerr=e, marker="o", capsize=2, label=f"{ver}, eps={eps:g}")
    ax.set_xscale("log")
    bs = sorted({b for pts in groups.values() for b, _, _ in pts})
    ax.set_xticks(bs)
    ax.set_xticklabels([str(b) for b in bs])
    ax.minorticks_off()
    ax.set_xlabel("drafted budget B")
    ax.set_ylabel("NFE speed-up")
    ax.set_title(title)
    ax.legend(fontsize=7)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
