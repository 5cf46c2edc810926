"""Trajectory-level exactness tests of the speculative sampler (SPEC section 2).

Under the target chain the innovations xi_n = (Y_{n+1} - m^q_n(Y_n)) / sigma_n of the stochastic
steps are i.i.d. N(0, I_d) and independent of the past; an exact sampler must reproduce that,
also within each stratum of a past-measurable variable (the depth inside its round at which
step n + 1 was committed). For Gaussian data the whole chain law is Gaussian and known
exactly (:func:`speccheck.targets.gaussian.chain_law`): a one-sample reference.

Every test returns :class:`speccheck.validation.results.TestResult` records (the battery's one
result type; cell "traj:<target>[<stratum>]", ``threshold`` = the level on the p-value,
``extra["name"]`` the full name); a family of m tests run at total false-failure rate alpha
uses the Bonferroni level alpha / m per test.

Entry points for the battery: :func:`run_trajectory_checks` (and the two building blocks
:func:`innovation_checks`, :func:`gaussian_chain_checks`).
"""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any, Callable, Optional

import numpy as np
import torch
from scipy import stats

from speccheck.sampler.core import SamplerResult, SpeculativeSampler, resolve_verifier, verifier_name
from speccheck.sampler.tree import chain, uniform_tree
from speccheck.targets.gaussian import GaussianData, chain_law
from speccheck.targets.gmm import GaussianMixture
from speccheck.targets.schedules import Schedule, shifted
from speccheck.validation.results import TestResult

MIN_STRATUM = 20  # strata with fewer innovations are merged into "rare"



def _results(raw: list, level: float, cell: str) -> list[TestResult]:
    """TestResults from (name, test, stratum, statistic, p, detail) tuples at ``level``."""
    out = []
    for name, test, stratum, stat, p, det in raw:
        where = f"{cell}[{stratum}]" if stratum else cell
        out.append(TestResult(where, test, float(stat), level, float(p), math.nan, int(det.get("count", 0)),
                              passed=bool(p >= level), layer="L4", extra={"name": name, **det}))
    return out


def _cell(label: str) -> str:
    """"traj:gaussian" from a label "(gaussian, dgrs, tree)" (else "traj")."""
    inner = label.strip().strip("()").split(",")[0].strip()
    return f"traj:{inner}" if inner else "traj"


def _ks(x: np.ndarray) -> tuple[float, float]:
    r = stats.kstest(x, "norm")
    return float(r.statistic), float(r.pvalue)


def _chi2_two_sided(q: float, dof: int) -> float:
    lo = stats.chi2.cdf(q, dof)
    hi = stats.chi2.sf(q, dof)
    return float(min(1.0, 2 * min(lo, hi)))


def _z_two_sided(z: float) -> float:
    return float(2 * stats.norm.sf(abs(z)))


def innovations(states: torch.Tensor, target: Any, schedule: Schedule,
                cond: Optional[torch.Tensor] = None) -> tuple:
    """xi[b, n] for every stochastic step n: returns (xi [n_traj, n_sto, d_flat], steps (n_sto,),
    dir_state [n_traj, n_sto, d] unit Y_n, dir_vel [.., d] unit v_{t_n}(Y_n))."""
    steps = np.nonzero(schedule.stochastic)[0]
    nb = states.shape[0]
    Y = states[:, steps]                                       # [nb, S, *shape]
    Y1 = states[:, steps + 1]
    S = steps.size
    rows = Y.reshape(nb * S, *states.shape[2:])
    t = torch.tensor(schedule.t[steps], dtype=states.dtype, device=states.device).repeat(nb)
    c_rows = None if cond is None else cond.repeat_interleave(S)
    v = target.velocity(rows, t, c_rows).reshape(Y.shape)
    a = torch.tensor(schedule.a[steps], dtype=states.dtype, device=states.device)
    c = torch.tensor(schedule.c[steps], dtype=states.dtype, device=states.device)
    sig = torch.tensor(schedule.sigma[steps], dtype=states.dtype, device=states.device)
    sh = (1, S) + (1,) * (Y.dim() - 2)
    mq = a.reshape(sh) * Y + c.reshape(sh) * v
    xi = ((Y1 - mq) / sig.reshape(sh)).flatten(2)
    unit = lambda z: z.flatten(2) / z.flatten(2).norm(dim=2, keepdim=True).clamp_min(1e-300)  # noqa: E731
    return xi, steps, unit(Y), unit(v)


def innovation_checks(result: SamplerResult, target: Any, schedule: Schedule, *, alpha: float,
                      cond: Optional[torch.Tensor] = None, label: str = "") -> list[TestResult]:
    """Innovation test stratified by commit depth: per stratum (1) KS of all coordinates vs
    N(0, 1), (2) chi-square of sum ||xi||^2 with d * count dof, (3) z and KS of the projections
    on the past-measurable unit vectors Y_n/|Y_n| and v(Y_n)/|v(Y_n)|. Bonferroni over all.
    :func:`innovation_tests` of :func:`innovation_raw`."""
    return innovation_tests(innovation_raw(result, target, schedule, cond), alpha=alpha, label=label)


def innovation_raw(result: SamplerResult, target: Any, schedule: Schedule,
                   cond: Optional[torch.Tensor] = None) -> dict:
    """The half of :func:`innovation_checks` that needs the run and the model's drift, as host
    numpy arrays: ``xi`` [n, S, d] the standardised innovations at the S stochastic steps,
    ``depth`` [n, S] the commit depth of each step, ``proj_state`` and ``proj_velocity`` [n, S]
    the projections of xi on the unit vectors Y_n/|Y_n| and v(Y_n)/|v(Y_n)|."""
    if result.states is None:
        raise ValueError("innovation_checks needs a run with record_states=True")
    xi, steps, uy, uv = innovations(result.states, target, schedule, cond)
    return {"xi": xi.cpu().numpy(), "depth": result.commit_depth[:, steps].cpu().numpy(),
            "proj_state": (xi * uy).sum(2).cpu().numpy(), "proj_velocity": (xi * uv).sum(2).cpu().numpy()}


def innovation_tests(raw: dict, *, alpha: float, label: str = "", shape: Optional[tuple[int, int]] = None,
                     max_depth: Optional[int] = None) -> list[TestResult]:
    """The statistics of :func:`innovation_checks` from :func:`innovation_raw`'s arrays alone (no
    model, no verifier). Malformed arrays raise ValueError: shapes that disagree or are empty
    (xi [n, S, d] with d >= 1; [n, S] = ``shape`` when given), depths outside [0, ``max_depth``].
    Non-finite values are the run's own defect, not malformed evidence: a failed test, "finite
    values", counting the trajectories that hold one (p = 0); the other tests use the rest."""
    if not isinstance(raw, dict):
        raise ValueError("innovations: expected a table")
    xi = np.asarray(raw.get("xi"))
    depth = np.asarray(raw.get("depth"))
    projections = {"state-direction": np.asarray(raw.get("proj_state")),
                   "velocity-direction": np.asarray(raw.get("proj_velocity"))}
    if xi.ndim != 3 or xi.dtype.kind != "f" or depth.shape != xi.shape[:2] or depth.dtype.kind not in "iu" or any(
            proj.shape != xi.shape[:2] or proj.dtype.kind != "f" for proj in projections.values()):
        raise ValueError(f"innovations: expected xi [n, S, d] and depth, projections [n, S]; got xi {xi.shape}, "
                         f"depth {depth.shape}, projections {[proj.shape for proj in projections.values()]}")
    if xi.size == 0 or (shape is not None and tuple(xi.shape[:2]) != tuple(shape)):
        want = f"{shape[0]}, {shape[1]}" if shape is not None else "n, S"
        raise ValueError(f"innovations: xi {xi.shape}, expected [{want}, d] with n, S, d >= 1")
    if depth.min() < 0 or (max_depth is not None and depth.max() > max_depth):
        raise ValueError(f"innovations: commit depths outside [0, {max_depth if max_depth is not None else 'inf'}]")
    rows = []
    finite = (np.isfinite(xi).all(axis=2) & np.logical_and.reduce([np.isfinite(p) for p in projections.values()])
              ).all(axis=1)
    if not finite.all():  # an exact chain never leaves the reals: the run itself is the defect
        diverged = int((~finite).sum())
        rows.append((f"innovation{label}[all] finite values", "innovation finite values", "all", diverged, 0.0,
                     {"count": int(xi.shape[0]), "non_finite_trajectories": diverged}))
        xi, depth = xi[finite], depth[finite]          # the other tests on the trajectories that stayed finite
        projections = {name: proj[finite] for name, proj in projections.items()}
    d = xi.shape[2]
    strata: dict = {}
    for level in np.unique(depth).tolist():
        in_level = depth == level
        key = f"depth{level}" if int(in_level.sum()) >= MIN_STRATUM else "rare"
        strata[key] = strata.get(key, np.zeros_like(in_level)) | in_level
    if depth.size:
        strata["all"] = np.ones_like(depth, dtype=bool)
    for key, in_stratum in strata.items():
        x = xi[in_stratum]                                   # [count, d]
        count = x.shape[0]
        if count == 0:
            continue
        s, p = _ks(x.reshape(-1))
        rows.append((f"innovation{label}[{key}] coordinates KS", "innovation coordinates KS", key, s, p,
                     {"count": count}))
        q = float((torch.from_numpy(x) ** 2).sum())
        rows.append((f"innovation{label}[{key}] chi2 of |xi|^2", "innovation chi2 of |xi|^2", key, q / (count * d),
                     _chi2_two_sided(q, count * d), {"count": count, "dof": count * d}))
        for name, proj in projections.items():
            values = proj[in_stratum]
            z = float(values.sum() / np.sqrt(count))
            rows.append((f"innovation{label}[{key}] {name} mean z", f"innovation {name} mean z", key, z,
                         _z_two_sided(z), {"count": count}))
            s, p = _ks(values)
            rows.append((f"innovation{label}[{key}] {name} KS", f"innovation {name} KS", key, s, p, {"count": count}))
    return _results(rows, alpha / len(rows), _cell(label))


def gaussian_chain_checks(result: SamplerResult, target: GaussianData, schedule: Schedule, *,
                          alpha: float, init_mean: float = 0.0, init_var: float = 1.0,
                          label: str = "") -> list[TestResult]:
    """Y_n against the exact chain law at every step n >= 1: KS of the standardised coordinates
    and chi-square of sum ||Y_n - mean_n||^2 / var_n; lag-one: z-test of the standardised
    innovation of the exact affine chain, (Y_{n+1} - gain_n Y_n - offset_n) / sigma_n, against
    N(0, 1) (mean and variance). Bonferroni over all."""
    if result.states is None:
        raise ValueError("gaussian_chain_checks needs a run with record_states=True")
    law = chain_law(schedule, target, init_mean, init_var)
    Y = result.states.double().cpu().numpy()                 # [nb, N+1, d]
    nb, N1, d = Y.shape
    raw = []
    for n in range(1, N1):
        Z = (Y[:, n] - law.mean[n]) / np.sqrt(law.var[n])
        s, p = _ks(Z.reshape(-1))
        raw.append((f"chain-law{label} step {n} KS", f"chain-law step {n} KS", "", s, p, {"count": int(Z.size)}))
        q = float((Z**2).sum())
        raw.append((f"chain-law{label} step {n} chi2", f"chain-law step {n} chi2", "", q / Z.size,
                    _chi2_two_sided(q, Z.size), {"count": int(Z.size)}))
    sto = np.nonzero(schedule.sigma > 0)[0]
    E = np.stack([(Y[:, n + 1] - law.gain[n] * Y[:, n] - law.offset[n]) / schedule.sigma[n] for n in sto], 1)
    z = float(E.sum() / np.sqrt(E.size))
    raw.append((f"chain-law{label} transitions mean z", "chain-law transitions mean z", "", z, _z_two_sided(z),
                {"count": int(E.size)}))
    q = float((E**2).sum())
    raw.append((f"chain-law{label} transitions chi2", "chain-law transitions chi2", "", q / E.size,
                _chi2_two_sided(q, E.size), {"count": int(E.size)}))
    return _results(raw, alpha / len(raw), _cell(label))


def default_schedule(N: int = 12, eps: float = 0.5) -> Schedule:
    """Non-uniform (shifted, k = 2) grid used by the trajectory checks: sigma_n varies by step."""
    return shifted(N, eps, 2.0, t_start=0.95, t_end=0.02)


def small_mixture(d: int = 6, seed: int = 7) -> GaussianMixture:
    rng = np.random.default_rng(seed)
    means = rng.uniform(-1.5, 1.5, size=(3, d))
    stds = rng.uniform(0.2, 0.4, size=3)
    return GaussianMixture(means, stds, seed=seed, name="gmm-small")


def draw_trajectories(verifier: Any, *, n_traj: int = 300, seed: int = 0,
                      sampler_factory: Optional[Callable] = None, lazy: bool = True, K: int = 2, L: int = 3,
                      d: int = 6, device: str | torch.device = "cpu") -> dict:
    """The user-code half of :func:`run_trajectory_checks`: run the sampler on both targets and
    return the raw outputs (numpy, on the host): per target its ``label``, recorded ``states``
    [n_traj, N + 1, d] and ``commit_depth``."""
    if n_traj < 20:
        raise ValueError(f"n_traj must be >= 20, got {n_traj}")
    ver = resolve_verifier(verifier)
    supports = getattr(ver, "supports_K", None)
    tree = uniform_tree(K, L) if (supports is None or supports(K)) else chain(L)
    factory = sampler_factory or SpeculativeSampler
    dev = torch.device(device)
    g = torch.Generator(device=dev).manual_seed(seed)
    raw: dict = {"d": int(d), "targets": []}
    for name, target in (("gaussian", GaussianData(np.linspace(-1.0, 1.0, d), 0.5)), ("mixture", small_mixture(d))):
        sp = factory(target, default_schedule(), tree, ver, freeze="velocity", prefetch="nearest", leaves=False,
                     lazy=lazy)
        x0 = torch.randn(n_traj, d, generator=g, dtype=torch.float64, device=dev)
        res = sp.run(x0, g, record_states=True)
        raw["targets"].append({"name": name, "label": f"({name}, {verifier_name(ver)}, {tree.name})",
                               "states": res.states.cpu().numpy(), "commit_depth": res.commit_depth.cpu().numpy()})
    return raw


def judge_trajectories(raw: dict, *, alpha: float = 1e-3) -> list[TestResult]:
    """The statistics half of :func:`run_trajectory_checks`, from the raw outputs alone (no
    verifier, no user code). Malformed raw outputs raise ValueError."""
    if not (0 < alpha < 1):
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    d, sched = int(raw["d"]), default_schedule()
    targets = {"gaussian": GaussianData(np.linspace(-1.0, 1.0, d), 0.5), "mixture": small_mixture(d)}
    entries = raw["targets"]
    if [e["name"] for e in entries] != list(targets):
        raise ValueError("trajectory raw outputs: expected the gaussian and mixture runs")
    out: list[TestResult] = []
    for entry in entries:
        states = torch.from_numpy(np.ascontiguousarray(entry["states"], dtype=np.float64))
        depth = torch.from_numpy(np.asarray(entry["commit_depth"]).astype(np.int64))
        steps = sched.t.size - 1
        if states.dim() != 3 or tuple(states.shape[1:]) != (steps + 1, d) or tuple(depth.shape) != (
                states.shape[0], steps):
            raise ValueError(f"trajectory raw outputs: states {tuple(states.shape)}, commit depth "
                             f"{tuple(depth.shape)}, expected [n, {steps + 1}, {d}] and [n, {steps}]")
        res = SimpleNamespace(states=states, commit_depth=depth)  # the two fields the checks read
        target, label = targets[entry["name"]], str(entry["label"])
        out += innovation_checks(res, target, sched, alpha=alpha / 3, label=label)
        if entry["name"] == "gaussian":
            out += gaussian_chain_checks(res, target, sched, alpha=alpha / 3, label=label)
    return out


def run_trajectory_checks(verifier: Any, *, n_traj: int = 300, seed: int = 0, alpha: float = 1e-3,
                          sampler_factory: Optional[Callable] = None, lazy: bool = True,
                          K: int = 2, L: int = 3, d: int = 6, device: str | torch.device = "cpu") -> list[TestResult]:
    """The trajectory layer of the exactness battery for one verifier.

    Runs the speculative sampler (``sampler_factory(target, schedule, tree, verifier, **protocol)``,
    default :class:`SpeculativeSampler`; pass a factory from
    :data:`speccheck.validation.sampler_mutants.SAMPLER_MUTANTS` to test a mutant) with a
    (K, L) tree (a chain of length L if the verifier does not support K), velocity freeze and
    'nearest' prefetch, on (i) Gaussian data N(m, 0.5^2 I_d) -> innovation test + exact chain
    law, (ii) a 3-component mixture in d dims -> innovation test. Each of the three families
    gets alpha / 3, so the probability that an exact sampler fails any check is <= alpha.
    Returns all TestResult records (``all(r.passed for r in ...)`` is the verdict).
    ``device``: where the sampler runs (it follows x0 and the generator); the recorded states
    come back to the host for the tests (:func:`draw_trajectories` then :func:`judge_trajectories`).
    """
    if not (0 < alpha < 1):
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    raw = draw_trajectories(verifier, n_traj=n_traj, seed=seed, sampler_factory=sampler_factory, lazy=lazy, K=K,
                            L=L, d=d, device=device)
    return judge_trajectories(raw, alpha=alpha)


def failed(results: list[TestResult]) -> list[TestResult]:
    return [r for r in results if not r.passed]
