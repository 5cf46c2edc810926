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
6. calibration: the acceptance calibration z (accepts against the theory acceptance of the
   realised deltas) is a test like the others: two-sided normal threshold at its level.
The false-failure rate of the whole verdict is <= alpha: Bonferroni over the families that run
(innovation, two-sample, calibration), alpha / m each. ``exact`` comes only from tests that
ran: a cell where no exactness test (innovation or two-sample) ran has ``exact = None`` (no
verdict), and options under which a test cannot fail (``n_perm`` too small for the level,
fewer than 2 samples, both exactness tests off) are refused up front with InputError.

Steps 1-2 and 5 need the model and the verifier (:func:`draw_e2e`: raw outputs); steps 3, 4 and
6 need only those raw outputs (:func:`judge_e2e`), so :func:`speccheck.api.e2e` runs the first
half in a child process and judges in its own, which never imports the verifier's code.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable, Optional

import numpy as np
import torch
from scipy.stats import norm

from speccheck.errors import DefectError, DeviceError, InputError, SpeccheckError
from speccheck.seeding import generator as seeded_generator

if TYPE_CHECKING:
    from speccheck.sampler.tree import DraftTree
    from speccheck.targets.schedules import Schedule

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


def cell_schedule(cfg: E2EConfig, model: LoadedModel) -> "Schedule":
    """The schedule a cell of ``cfg`` runs on ``model``: its steps, shift and grid unless ``cfg``
    sets them."""
    shift = model.shift if cfg.shift is None else cfg.shift
    return make_schedule(cfg.steps or model.steps, cfg.eps, shift, model.diffusers_grid)


def model_schedule(cfg: E2EConfig) -> "Schedule":
    """The schedule a cell of ``cfg`` runs, from the model's preset (steps, shift, grid) and
    ``cfg`` alone, no weights loaded: what :func:`draw_e2e` builds with the loaded model."""
    steps, shift, diffusers_grid = _grid_preset(cfg.model)
    return make_schedule(cfg.steps or steps, cfg.eps, shift if cfg.shift is None else cfg.shift, diffusers_grid)


def _grid_preset(model: str) -> tuple[int, float, bool]:
    """``model``'s default (steps, shift, diffusers_grid), known without its weights."""
    if model not in MODELS:
        raise InputError(f"unknown model {model!r}; choose from {MODELS}")
    if model.startswith("digits"):
        return 100, 1.0, False
    if model.startswith("edm"):
        from speccheck.targets.edm import EDM_PRESETS

        return EDM_PRESETS[model].steps, 1.0, False
    from speccheck.targets.sd3 import SD3_PRESETS

    return SD3_PRESETS["sd35-medium"].steps, SD3_PRESETS["sd35-medium"].shift, True


def load_model(cfg: E2EConfig) -> LoadedModel:
    """The target and its defaults (grid, steps, natural freeze) for ``cfg.model``."""
    steps, shift, diffusers_grid = _grid_preset(cfg.model)
    if cfg.model.startswith("digits"):
        from speccheck.targets import digits

        g = 1.0 if cfg.guidance is None else cfg.guidance
        target = digits.digits_target(cfg.model, cfg.weights, guidance_scale=g, device=cfg.device)
        target.max_rows = cfg.max_rows
        freeze = "denoised" if cfg.model == "digits-edm" else "velocity"
        info = {"weights": cfg.weights or digits.default_checkpoint(cfg.model)}
        if cfg.model == "digits-flow":
            info["guidance_scale"] = g
        return LoadedModel(target, steps, shift, freeze, digits.N_CLASSES, diffusers_grid, info)
    if cfg.model.startswith("edm"):
        from speccheck.targets.edm import edm_preset_target

        target, pre = edm_preset_target(cfg.model, cfg.weights, device=cfg.device, max_rows=cfg.max_rows)
        return LoadedModel(target, steps, shift, "denoised", pre.label_dim, diffusers_grid, {"weights": cfg.weights})
    from speccheck.targets.sd3 import sd35_preset_target

    if cfg.dtype not in ("float32", "bfloat16", "float16"):
        raise ValueError(f"dtype must be float32, bfloat16 or float16, got dtype={cfg.dtype!r}")
    target, _ = sd35_preset_target(cfg.weights, embeddings=cfg.embeddings, device=cfg.device,
                                     dtype=getattr(torch, cfg.dtype), max_rows=cfg.max_rows)
    if cfg.guidance is not None:
        target.guidance_scale = float(cfg.guidance)
    return LoadedModel(target, steps, shift, "velocity", target.n_prompts, diffusers_grid,
                       {"weights": cfg.weights, "guidance_scale": target.guidance_scale})


def make_schedule(steps: int, eps: float, shift: float, diffusers_grid: bool) -> "Schedule":
    """The flow-matching grid (diffusers' set_timesteps grid when ``diffusers_grid``) with churn eps."""
    from speccheck.targets.schedules import Schedule, flow_matching
    from speccheck.targets.sd3 import diffusers_flow_grid

    if diffusers_grid:
        return Schedule(diffusers_flow_grid(steps, shift), eps, f"diffusers-flow(shift={shift})")
    return flow_matching(steps, eps, shift)


@torch.no_grad()
def standard_sample(target: Any, schedule: Any, x0: torch.Tensor, cond: Optional[torch.Tensor],
                    generator: torch.Generator) -> torch.Tensor:
    """The target chain: x <- a_n x + c_n v_{t_n}(x) + sigma_n z (N calls). Returns final states."""
    x = x0.clone()
    R = x.shape[0]
    for n in range(schedule.N):
        t = torch.full((R,), float(schedule.t[n]), dtype=x.dtype, device=x.device)
        v = target.velocity(x, t, cond)
        x = schedule.a[n] * x + schedule.c[n] * v
        if schedule.sigma[n] > 0:
            x = x + schedule.sigma[n] * torch.randn(x.shape, generator=generator, dtype=x.dtype, device=x.device)
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


def save_grid_png(x: torch.Tensor, path: str, nrow: int, value_range: tuple[float, float] = (-1.0, 1.0)) -> None:
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
        return torch.arange(n, device=g.device) % model.n_cond  # balanced digits, label i % 10
    return torch.randint(0, model.n_cond, (n,), generator=g, device=g.device)  # paper: labels/prompts uniform


def build_tree(cfg: E2EConfig, verifier: object) -> "DraftTree":
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


def run_e2e(cfg: E2EConfig, model: Optional[LoadedModel] = None,
            log: Optional[Callable[[str], None]] = None) -> dict:
    """One end-to-end cell; returns a JSON-friendly report (see module docstring): the report of
    :func:`judge_e2e` on :func:`draw_e2e`'s outputs, both in this process."""
    model = model or load_model(validate_config(cfg))
    report, raw = draw_e2e(cfg, model, log)
    return judge_e2e(cfg, report, raw, stochastic=cell_schedule(cfg, model).stochastic)


def draw_e2e(cfg: E2EConfig, model: Optional[LoadedModel] = None,
             log: Optional[Callable[[str], None]] = None) -> tuple[dict, dict]:
    """The half of :func:`run_e2e` that runs the model and the verifier: (the report's descriptive
    part: config, model, protocol, state shape, timings, standard NFE, digit label agreement,
    figures; the raw outputs the tests need, as host numpy arrays: ``run`` (the speculative run
    and the verifier's declared acceptance per event, :func:`speccheck.sampler.analysis.run_raw`),
    ``tree_L``, ``stochastic`` (the schedule's stochastic steps), ``innovation``
    (:func:`speccheck.validation.trajectory.innovation_raw`, with the model's drift) when the
    innovation test runs, ``x`` and ``x_std`` [n, D] (final samples) when the two-sample test
    runs). :func:`judge_e2e` computes every statistic from them."""
    from speccheck.sampler.analysis import declared_acceptance, run_raw
    from speccheck.sampler.core import SpeculativeSampler, resolve_verifier, verifier_name
    from speccheck.validation.trajectory import innovation_raw

    validate_config(cfg)
    log = log or (lambda m: None)
    model = model or load_model(cfg)
    schedule = cell_schedule(cfg, model)
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
    g = seeded_generator(cfg.seed, cfg.device)
    shape = tuple(model.target.state_shape)
    x0 = torch.randn((n, *shape), generator=g, dtype=torch.float64, device=cfg.device)
    cond = _conditioning(model, n, g, cfg.model)
    report: dict = {"config": asdict(cfg), "model": model.info, "protocol": sampler.protocol(),
                    "state_shape": list(shape)}

    t0 = time.time()
    res = sampler.run(x0, seeded_generator(cfg.seed + 1, cfg.device), cond=cond, record_states=cfg.innovation,
                      threads=None)  # the threads the e2e run was given (--threads), not the sampler's default
    report["wall_s_speculative"] = round(time.time() - t0, 2)
    log(f"speculative run: {report['wall_s_speculative']} s")
    t0 = time.time()
    x_std = standard_sample(model.target, schedule, x0, cond, seeded_generator(cfg.seed + 2, cfg.device))
    report["wall_s_standard"] = round(time.time() - t0, 2)
    log(f"standard run: {report['wall_s_standard']} s")

    report["standard_nfe"] = {"stochastic": schedule.n_stochastic, "total": schedule.N}
    raw: dict = {"run": run_raw(res, declared_acceptance(res, verifier)), "tree_L": int(tree.L),
                 "stochastic": np.asarray(schedule.stochastic, dtype=bool)}
    if cfg.innovation:
        t0 = time.time()
        raw["innovation"] = innovation_raw(res, model.target, schedule, cond)
        log(f"innovations: {time.time() - t0:.1f} s")
    if cfg.two_sample:
        raw["x"] = res.x.detach().cpu().double().reshape(n, -1).numpy()
        raw["x_std"] = x_std.detach().cpu().double().reshape(n, -1).numpy()
    if cfg.model.startswith("digits"):
        from speccheck.targets.digits import classify_samples, fit_digit_classifier

        clf, acc = fit_digit_classifier()
        report["digit_label_agreement"] = {"speculative": classify_samples(res.x, cond, clf),
                                           "standard": classify_samples(x_std, cond, clf),
                                           "classifier_real_heldout": acc, "chance": 0.1}
    if cfg.figures:
        tag = cell_tag(cfg, verifier_name(verifier))
        m = min(n, 100)
        by_label = cond is not None and cfg.model.startswith("digits")
        order = torch.argsort(cond[:m], stable=True) if by_label else torch.arange(m)
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
    return report, raw


def judge_e2e(cfg: E2EConfig, report: dict, raw: dict, *, stochastic: Optional[np.ndarray] = None) -> dict:
    """The statistics half of :func:`run_e2e`, from :func:`draw_e2e`'s raw outputs alone (no model,
    no verifier): the summary (speed-up, NFE, calibration z, predicted NFE), the exactness tests
    at level alpha / m each and the verdict, added to ``report`` (whose ``config`` is set to
    ``cfg``'s). The run is checked against the schedule's ``stochastic`` steps (default: those of
    :func:`model_schedule`, the model's preset). Malformed raw outputs raise ValueError; a run
    that breaks Algorithm 1, :class:`~speccheck.errors.DefectError`."""
    from speccheck.sampler.analysis import check_run, run_from_raw, summarize_declared
    from speccheck.validation.trajectory import innovation_tests

    if not isinstance(raw, dict):
        raise ValueError("e2e raw outputs: expected a table")
    _check_described(report)
    result, declared = run_from_raw(raw.get("run"))
    stochastic = np.asarray(model_schedule(cfg).stochastic if stochastic is None else stochastic, dtype=bool)
    if not np.array_equal(np.asarray(raw.get("stochastic")), stochastic):
        raise ValueError(f"e2e raw outputs: the stochastic steps are not those of the cell's schedule "
                         f"({int(stochastic.sum())} of {stochastic.size})")
    tree = judged_tree(cfg, chained=len(result.events) > 0 and bool((result.events.K == 1).all()))
    if raw.get("tree_L") != tree.L or report["protocol"]["tree"]["tree"] != tree.name:
        raise ValueError(f"e2e raw outputs: tree {report['protocol']['tree']['tree']!r} of depth "
                         f"{raw.get('tree_L')!r} is not the cell's {tree.name}")
    check_run(result, declared, stochastic, n_traj=cfg.samples, tree_L=tree.L, width=tree.max_K,
              prefetch=cfg.prefetch)
    summary = summarize_declared(result, declared, stochastic, tree.L)
    level = exactness_level(cfg)
    checks = {}
    if cfg.innovation:
        innovation = raw.get("innovation")
        if not isinstance(innovation, dict):
            raise ValueError("e2e raw outputs: no innovations")
        if not np.array_equal(np.asarray(innovation.get("depth")), commit_depths(result, stochastic)):
            raise ValueError("e2e raw outputs: the innovations' commit depths are not the run's")
        inn = innovation_tests(innovation, alpha=level, label=f"({cfg.model})",
                               shape=(cfg.samples, result.n_stochastic), max_depth=tree.L)
        checks["innovation"] = {
            "ran": len(inn) > 0, "passed": all(r.passed for r in inn), "n_tests": len(inn),
            "level": inn[0].level if inn else level, "min_p": min((r.p_value for r in inn), default=float("nan")),
            "failed": [{"name": r.name, "p": r.p_value} for r in inn if not r.passed][:10],
        }
    if cfg.two_sample:
        x, x_std = np.asarray(raw.get("x")), np.asarray(raw.get("x_std"))
        if x.ndim != 2 or x.shape != x_std.shape or x.shape[0] != cfg.samples or x.dtype != np.float64 \
                or x_std.dtype != np.float64 or not (np.isfinite(x).all() and np.isfinite(x_std).all()):
            raise ValueError(f"e2e raw outputs: x and x_std must be finite float64 [{cfg.samples}, D] arrays, got "
                             f"{x.shape} and {x_std.shape}")
        if x.shape[1] != math.prod(report.get("state_shape") or [0]) or np.array_equal(x, x_std):
            raise ValueError("e2e raw outputs: x and x_std must have the state's size and come from two runs")
        ts = energy_distance_test(torch.from_numpy(x), torch.from_numpy(x_std), cfg.n_perm,
                                  seeded_generator(cfg.seed + 3))
        ts.update(level=level, ran=True, passed=bool(ts["p_value"] >= level), n_at_least_2000=cfg.samples >= 2000)
        checks["two_sample"] = ts
    checks["calibration"] = calibration_check(summary, level)
    described = {k: report[k] for k in _DESCRIBED if k in report}  # what the drawing side may say; no verdict
    return {"config": asdict(cfg), **{k: described.pop(k) for k in _DESCRIBED[:5] if k in described},
            "summary": summary, "standard_nfe": described.pop("standard_nfe", None), "exactness": checks,
            "exact": verdict(checks), **described}


def commit_depths(result: Any, stochastic: np.ndarray) -> np.ndarray:
    """[n, S] the depth in its round at which each trajectory committed each of the S stochastic
    steps, from the run's events (one per trajectory and stochastic step, checked by
    :func:`speccheck.sampler.analysis.check_run`)."""
    events = result.events
    column = np.cumsum(stochastic) - 1                      # step -> index among the stochastic steps
    depths = np.zeros((result.nfe.numel(), int(stochastic.sum())), dtype=np.int64)
    depths[events.traj, column[events.step]] = events.depth
    return depths


def judged_tree(cfg: E2EConfig, *, chained: bool) -> "DraftTree":
    """The tree :func:`build_tree` builds for ``cfg``, known without the verifier: a chain of L
    for K = 1; for K > 1 the (K, L) tree, or (``chained``: the run's events are all single-child,
    a K = 1-only rule) the chain ``cfg.match`` matches to it."""
    from speccheck.sampler.tree import chain, chain_matched, uniform_tree

    if cfg.K == 1:
        return chain(cfg.L)
    if not chained:
        return uniform_tree(cfg.K, cfg.L)
    return chain(cfg.L) if cfg.match == "none" else chain_matched(uniform_tree(cfg.K, cfg.L), cfg.match, cfg.leaves)


def _check_described(report: dict) -> None:
    """The descriptive fields the drawing side sends, in the form :func:`format_report` reads."""
    if not isinstance(report, dict):
        raise ValueError("e2e report: expected a table")
    protocol = report.get("protocol")
    if not (isinstance(protocol, dict) and isinstance(protocol.get("verifier"), str)
            and isinstance(protocol.get("tree"), dict) and isinstance(protocol["tree"].get("tree"), str)
            and all(k in protocol for k in ("freeze", "leaves", "prefetch"))):
        raise ValueError("e2e report: protocol lacks verifier, tree, freeze, leaves or prefetch")
    numbers = [report.get("wall_s_speculative"), report.get("wall_s_standard")]
    agreement = report.get("digit_label_agreement")
    if agreement is not None:
        numbers += [agreement.get("speculative"), agreement.get("standard")] if isinstance(agreement, dict) else [None]
    if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in numbers):
        raise ValueError("e2e report: timings and digit label agreement must be numbers")


#: the report fields :func:`draw_e2e` fills (descriptions, no statistic), in report order
_DESCRIBED = ("model", "protocol", "state_shape", "wall_s_speculative", "wall_s_standard", "standard_nfe",
              "digit_label_agreement", "figures")


EXACTNESS_TESTS = ("innovation", "two_sample")


def _n_families(cfg: E2EConfig) -> int:
    return int(cfg.innovation) + int(cfg.two_sample) + 1   # + the calibration test


def exactness_level(cfg: E2EConfig) -> float:
    """Per-family level alpha / m, m = the families that run (innovation, two-sample, calibration)."""
    return cfg.alpha / _n_families(cfg)


def min_n_perm(level: float) -> int:
    """Smallest permutation count whose smallest p-value 1 / (1 + n_perm) is below ``level``."""
    return int(math.floor(1.0 / level - 1.0)) + 1


def check_n_perm(n_perm: int, alpha: float, families: int = 3, option: str = "n_perm") -> int:
    """A two-sample permutation test that can fail: 1 / (1 + n_perm) < alpha / families, n_perm <= 1e5."""
    level = alpha / families
    need = min_n_perm(level)
    if not need <= n_perm <= 100_000:
        raise InputError(f"{option} must be in [{need}, 100000] so that the permutation p-value "
                         f"(>= 1/(1 + n_perm)) can fall below the test's level {level:.3g}; got {n_perm}")
    return n_perm


def check_device(device: str) -> str:
    """'cpu', 'cuda' or 'cuda:N' that exists on this machine; else DeviceError naming it."""
    text = str(device)
    if text == "cpu":
        return text
    if text != "cuda" and not (text.startswith("cuda:") and text[5:].isdigit()):
        raise DeviceError(f"--device must be cpu, cuda or cuda:N, got {text!r}")
    if not torch.cuda.is_available():
        raise DeviceError(f"--device {text}: CUDA is not available on this machine")
    index = int(text[5:]) if ":" in text else 0
    if index >= torch.cuda.device_count():
        raise DeviceError(f"--device {text}: only {torch.cuda.device_count()} CUDA device(s) are visible")
    return text


def validate_config(cfg: E2EConfig) -> E2EConfig:
    """Every field in its domain (InputError naming it): a cell that cannot fail is refused."""
    if cfg.model not in MODELS:
        raise InputError(f"unknown model {cfg.model!r}; choose from {MODELS}")
    if not 2 <= cfg.samples <= 1_000_000:
        raise InputError(f"samples must be in [2, 1000000], got samples={cfg.samples}")
    if not (isinstance(cfg.eps, (int, float)) and 0 < cfg.eps <= 1):
        raise InputError(f"eps must be in (0, 1] for speculation, got eps={cfg.eps}")
    if not (1 <= cfg.K <= 128 and 1 <= cfg.L <= 64):
        raise InputError(f"K must be in [1, 128] and L in [1, 64], got K={cfg.K}, L={cfg.L}")
    if not (isinstance(cfg.alpha, (int, float)) and 0 < cfg.alpha < 1):
        raise InputError(f"alpha must be in (0, 1), got alpha={cfg.alpha}")
    if cfg.steps is not None and not 2 <= cfg.steps <= 10_000:
        raise InputError(f"steps must be in [2, 10000], got steps={cfg.steps}")
    if cfg.max_rows is not None and cfg.max_rows < 1:
        raise InputError(f"max_rows must be >= 1 (or None), got max_rows={cfg.max_rows}")
    if cfg.seed < 0:
        raise InputError(f"seed must be >= 0, got seed={cfg.seed}")
    if not (cfg.innovation or cfg.two_sample):
        raise InputError("innovation and two_sample are both off: no exactness test would run (no verdict from "
                         "no evidence)")
    if cfg.two_sample:
        check_n_perm(cfg.n_perm, cfg.alpha, _n_families(cfg))
    return cfg


def calibration_check(summary: dict, level: float) -> dict:
    """The acceptance calibration z as a two-sided test at ``level``: |z| <= Phi^-1(1 - level/2).
    Not run (``ran`` False) when there were no verification events or z is not finite."""
    z = float(summary.get("calibration_z", float("nan")))
    events = int(summary.get("n_events", 0) or 0)
    threshold = float(norm.isf(level / 2))
    ran = events > 0 and math.isfinite(z)
    return {"ran": ran, "z": z, "threshold": threshold, "level": level, "n_events": events,
            "passed": bool(abs(z) <= threshold) if ran else True}


def verdict(checks: dict) -> Optional[bool]:
    """True / False from the tests that ran; None (no verdict) when no exactness test ran."""
    ran = {name: c for name, c in checks.items() if c.get("ran", True)}
    if not any(name in ran for name in EXACTNESS_TESTS):
        return None
    return all(c["passed"] for c in ran.values())


def out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` is an allocation failure (host or device) rather than a defect."""
    if isinstance(exc, MemoryError) or isinstance(exc, getattr(torch, "OutOfMemoryError", ())):
        return True
    text = str(exc).lower()
    return isinstance(exc, RuntimeError) and any(k in text for k in ("out of memory", "can't allocate memory",
                                                                      "not enough memory"))


def run_e2e_grid(base: E2EConfig, verifiers: list[str], Ks: list[int], Ls: list[int], epss: list[float], *,
                 heartbeat: Optional[Callable[[str], None]] = None,
                 log: Optional[Callable[[str], None]] = None) -> list[dict]:
    """Every (eps, verifier, K, L) cell of :func:`grid_cells` on one loaded model, drawn by
    :func:`draw_e2e_grid` and judged by :func:`judge_e2e_cell`, both in this process."""
    cells = grid_cells(base, verifiers, Ks, Ls, epss)
    reports: list[dict] = []
    draw_e2e_grid(cells, heartbeat=heartbeat, log=log,
                  emit=lambda message: reports.append(judge_e2e_cell(cells[message["cell"]], message)))
    return reports


def grid_cells(base: E2EConfig, verifiers: list[str], Ks: list[int], Ls: list[int], epss: list[float]
               ) -> list[E2EConfig]:
    """The grid's cells in run order (eps, verifier, K, L), each validated (InputError)."""
    cells = [replace(base, verifier=v, K=K, L=L, eps=e) for e in epss for v in verifiers for K in Ks for L in Ls]
    for cfg in cells:
        validate_config(cfg)
    return cells


def draw_e2e_grid(cells: list[E2EConfig], *, emit: Callable[[dict], None],
                  heartbeat: Optional[Callable[[str], None]] = None,
                  log: Optional[Callable[[str], None]] = None) -> None:
    """:func:`draw_e2e` on every cell with one loaded model, emitting ``{"cell": index, "report",
    "raw"}`` as each is drawn. A cell that cannot be run (its verifier does not load, or a
    speccheck error such as a bad value) is emitted without ``raw``, its report with ``error``
    and ``error_kind`` "cannot-run"; one whose run raised anything else (a verifier returning
    malformed outputs, a broken sampler) with "defect". A missing device or out-of-memory stops
    the grid (DeviceError)."""
    from speccheck.sampler.core import resolve_verifier

    beat = heartbeat or (lambda label: None)
    log = log or (lambda m: None)
    if not cells:
        return
    check_device(cells[0].device)
    beat(f"loading model {cells[0].model}")
    model = load_model(cells[0])
    for index, cfg in enumerate(cells):
        label = f"{cfg.model} {cfg.verifier} K={cfg.K} L={cfg.L} eps={cfg.eps:g}"
        beat(label)
        try:
            resolve_verifier(cfg.verifier)
        except Exception as exc:  # noqa: BLE001 - any failure to load is "cannot run"
            log(f"{label}: error: {type(exc).__name__}: {exc}")
            emit({"cell": index, "report": _error_report(cfg, exc, "cannot-run")})
            continue
        try:
            report, raw = draw_e2e(cfg, model, log=log)
        except SpeccheckError as exc:
            log(f"{label}: error: {type(exc).__name__}: {exc}")
            emit({"cell": index, "report": _error_report(cfg, exc, "cannot-run")})
            continue
        except Exception as exc:  # noqa: BLE001 - code under test raised: a defect of that code
            if out_of_memory(exc):
                first_line = (str(exc).splitlines() or [""])[0][:200]
                raise DeviceError(f"out of memory on {cfg.device} in cell {label}; reduce --max-rows or --samples "
                                  f"({type(exc).__name__}: {first_line})") from None
            log(f"{label}: error: {type(exc).__name__}: {exc}")
            emit({"cell": index, "report": _error_report(cfg, exc, "defect")})
            continue
        emit({"cell": index, "report": report, "raw": raw})


def _error_report(cfg: E2EConfig, exc: BaseException, kind: str) -> dict:
    return {"config": asdict(cfg), "error": f"{type(exc).__name__}: {exc}", "error_kind": kind,
            "exact": None if kind == "cannot-run" else False}


def judge_e2e_cell(cfg: E2EConfig, message: dict) -> dict:
    """A cell's report from :func:`draw_e2e_grid`'s message: judged by :func:`judge_e2e` from its
    raw outputs; a cell that could not run or raised keeps its error report (the kind and verdict
    set here: "cannot-run" has no verdict, "defect" is not exact); a run that breaks Algorithm 1
    or declares an impossible law is a "defect"; malformed raw outputs are "cannot-run" (no
    verdict from corrupt evidence)."""
    report = message.get("report") if isinstance(message, dict) else None
    report = report if isinstance(report, dict) else {}
    if "raw" not in message:
        kind = "defect" if report.get("error_kind") == "defect" else "cannot-run"
        return {"config": asdict(cfg), "error": str(report.get("error", "the cell sent no raw outputs")),
                "error_kind": kind, "exact": None if kind == "cannot-run" else False}
    try:
        return judge_e2e(cfg, report, message["raw"])
    except DefectError as exc:  # the run broke Algorithm 1 (a sampler mutant) or declared an impossible law
        return {"config": asdict(cfg), "error": str(exc), "error_kind": "defect", "exact": False}
    except (ValueError, TypeError, AttributeError, KeyError, OverflowError) as exc:
        return {"config": asdict(cfg), "error": f"malformed raw outputs ({exc}); no verdict from them",
                "error_kind": "cannot-run", "exact": None}


def grid_exit_code(reports: list[dict]) -> int:
    """2 if a cell could not run or has no verdict, else 1 if a cell is not exact, else 0."""
    if not reports or any(r.get("error_kind") == "cannot-run" or r.get("exact") is None for r in reports):
        return 2
    return 0 if all(r.get("exact") is True for r in reports) else 1


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
        f"{c['model']} {r['protocol']['verifier']} {r['protocol']['tree']['tree']} eps={c['eps']} "
        f"n={s['trajectories']} "
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
        status = ("PASS" if i["passed"] else "FAIL") if i.get("ran", True) else "NOT RUN (no strata)"
        lines.append(f"  innovation test: {status} ({i['n_tests']} tests, min p {i['min_p']:.2e}, "
                     f"level {i['level']:.1e})")
    if "two_sample" in ex:
        t = ex["two_sample"]
        lines.append(f"  energy two-sample (paired, n={t['n']}): {'PASS' if t['passed'] else 'FAIL'} "
                     f"E={t['energy_distance']:.3e} p={t['p_value']:.4f}")
    cal = ex.get("calibration")
    if cal and cal.get("ran"):
        lines.append(f"  calibration test: {'PASS' if cal['passed'] else 'FAIL'} (|z| {abs(cal['z']):.2f} vs "
                     f"threshold {cal['threshold']:.2f})")
    verdict_text = {True: "exact", False: "NOT EXACT", None: "no verdict (no exactness test ran)"}[r.get("exact")]
    lines.append(f"  verdict: {verdict_text}")
    if "digit_label_agreement" in r:
        d = r["digit_label_agreement"]
        lines.append(f"  digit label agreement: speculative {d['speculative']:.3f}, standard {d['standard']:.3f}")
    lines.append(f"  wall: speculative {r['wall_s_speculative']} s, standard {r['wall_s_standard']} s")
    return "\n".join(lines)


def write_json(report: dict | list, path: str) -> None:
    """Write ``report`` (one cell or a list) as strict JSON (non-finite floats as null), creating the folder."""
    from speccheck.strict_json import dumps

    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        f.write(dumps(report, indent=2, default=float))


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
            f"| {{True: 'exact', False: 'FAIL', None: 'no verdict'}}[r['exact']] |"
        )
    return "\n".join(rows)
