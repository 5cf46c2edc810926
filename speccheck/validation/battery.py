"""The exactness battery: run a suite of statistical and contract tests on one verifier.

Layers (sizes in the suite's TOML, ``speccheck/data/suites/*.toml``; ``layers=`` picks some):

- L0 contract (:func:`speccheck.validation.contract.contract_checks`): shapes, dtypes, device,
  index == K iff rejected, accepted => s_out == s[index], same seed => same output, another
  seed changes it, ``generator=None`` works, inputs unchanged. Deterministic (rate 0).
- L1 scalar grid: KS of s_out against N(delta, 1) (DKW-Massart) and the lower/upper
  ``tail_q`` tails (exact binomial) on a delta x K grid, plus the contract on every batch
  (the samples stay on the device; :mod:`speccheck.validation.device_stats` reduces them);
- L2 acceptance on the same draws: exact binomial test against the declared
  ``acceptance(delta, K)`` and a one-sided test against the i.i.d.-list bound (n/a where the
  bound is 1);
- L3 the d-dimensional wrapper (``verify_states``, or the verifier's own method): the
  standardised output projected on the displacement and on a random direction (KS vs
  N(0, 1)), its squared norm (KS vs chi^2_d), a linear-time MMD, and the wrapper contract;
- L4 trajectory (:mod:`speccheck.validation.trajectory`): innovations by commit depth and the
  exact Gaussian chain law;
- L5 continuous (:mod:`speccheck.validation.continuous`): rows with their own delta over
  [0, 40] and every K of the suite: PIT and acceptance, per stratum (delta bin x K).
- L6 sequence (:mod:`speccheck.validation.sequence`): one instance through many calls as a
  sampler makes them (K changing, batches of 1..256 rows, constant / near-constant / mixed
  deltas): pooled PIT, mean and delta-proportional shift, row independence, acceptance at small
  and large anchors (and, where a suite asks, a replay on a fresh instance).

Error control: every statistical test has a valid p-value; the suite's family-wise
false-failure rate ``family_alpha`` is split by Holm over all of them; thresholds are quoted
at the binding level family_alpha / m; each test carries its minimum detectable deviation at
the suite's power. When the run fails, :mod:`speccheck.validation.localise` confirms the
failing delta window and K on fresh draws, with an error budget of its own.
"""

from __future__ import annotations

import copy
import math
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch
from scipy import special
from scipy import stats as sstats

from speccheck.errors import DeviceError, InputError, LoadError
from speccheck.seeding import generator as make_generator
from speccheck.seeding import unit_seed
from speccheck.validation import continuous, device_stats, localise, sequence
from speccheck.validation.contract import (
    call_verify,
    check_batch,
    contract_checks,
    contract_result,
    is_device_failure,
    supports,
)
from speccheck.validation.results import LAYERS, BatteryReport, TestResult
from speccheck.validation.stats import binom_test, holm_adjust, ks_dkw_test
from speccheck.validation.suites import Suite, load_suite
from speccheck.validation.trajectory import run_trajectory_checks

__all__ = ["BatteryReport", "TestResult", "assemble_report", "assert_battery_passes", "battery_cells", "check_evidence",
           "contract_checks", "failures_to_localise", "first_cells", "fresh_verifier", "load_verifier",
           "localise_report", "per_test_alpha", "plan_battery", "planned_tests", "rejudge_sequence",
           "resolve_layers", "run_battery",
           "run_cell"]

# kept for callers of the old private names
_supports = supports
_contract = contract_result


# ----------------------------------------------------------------------------- loading
def load_verifier(spec: Any) -> Any:
    """A verifier from a name / "module:attr" / object, through ``speccheck.verifiers.get``.

    Raises :class:`speccheck.errors.LoadError` (exit code 2) when it cannot be loaded."""
    from speccheck.verifiers import get

    try:
        v = get(spec)
    except LoadError:
        raise
    except ValueError as exc:
        raise LoadError(str(exc)) from None
    if not callable(getattr(v, "verify", None)):
        raise LoadError(f"verifier {spec!r} loaded {v!r}, which has no verify method")
    return v


def fresh_verifier(verifier: Any) -> Any:
    """A fresh instance of a loaded verifier for one unit of work (a deep copy; the object itself
    when it cannot be copied). Every path (API, CLI, Dask units) gives each battery cell its
    own instance in the same initial state, so state a verifier keeps between calls cannot make
    the verdict depend on how the cells were scheduled."""
    try:
        return copy.deepcopy(verifier)
    except Exception:  # noqa: BLE001 - an uncopyable verifier (a lock, a handle) is used as it is
        return verifier


def _check_outputs(cell: str, s: torch.Tensor, out: Any, layer: str = "L1") -> tuple[list[TestResult], tuple | None]:
    """Old name of :func:`speccheck.validation.contract.check_batch` (delta unused there)."""
    return check_batch(cell, torch.zeros(s.shape[0], dtype=s.dtype, device=s.device), s, out, layer)


# ----------------------------------------------------------------------------- options
def _check_seed(seed: Any) -> int | None:
    if seed is None:
        return None
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or int(seed) < 0:
        raise InputError(f"seed must be an integer >= 0, got seed={seed!r}")
    return int(seed)


def _check_scale(scale: Any) -> float:
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale) or scale <= 0:
        raise InputError(f"scale must be a finite number > 0 (a factor on every draw count), got scale={scale!r}")
    return float(scale)


def _check_alpha(alpha: Any) -> float | None:
    if alpha is None:
        return None
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0.0 < float(alpha) < 1.0:
        raise InputError(f"family_alpha must be in (0, 1), got family_alpha={alpha!r}")
    return float(alpha)


def resolve_layers(layers: Any) -> list[str]:
    """Layer ids ("L0".."L6") from ids or names ("contract", "scalar", "acceptance", "wrapper",
    "trajectory", "continuous", "sequence"); None = all. L1 and L2 share their draws: either runs both."""
    if layers is None:
        return list(LAYERS)
    if isinstance(layers, str):
        layers = [layers]
    layers = [x.strip() for item in layers for x in (item.split(",") if isinstance(item, str) else [item])
              if not isinstance(x, str) or x.strip()]
    by_name = {name: lid for lid, name in LAYERS.items()}
    out = []
    for item in layers:
        lid = item.upper() if isinstance(item, str) and item.upper() in LAYERS else by_name.get(item)
        if lid is None:
            allowed = ", ".join(f"{k} ({v})" for k, v in LAYERS.items())
            raise InputError(f"layers: unknown layer {item!r}; allowed: {allowed}")
        out.append(lid)
    if "L1" in out or "L2" in out:
        out += ["L1", "L2"]
    return [lid for lid in LAYERS if lid in out]


def _check_Ks(Ks: Any) -> list[int] | None:
    if Ks is None:
        return None
    if isinstance(Ks, (int, np.integer)) and not isinstance(Ks, bool):
        Ks = [Ks]
    try:
        values = list(Ks)
    except TypeError:
        raise InputError(f"Ks must be a list of integers >= 1, got Ks={Ks!r}") from None
    if not values or any(isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1 for k in values):
        raise InputError(f"Ks must be a non-empty list of integers >= 1, got Ks={Ks!r}")
    return sorted({int(k) for k in values})


def resolve_device(device: Any) -> torch.device:
    """'cpu', 'cuda' or 'cuda:N' that exists here; :class:`DeviceError` naming it otherwise."""
    text = str(device)
    if text != "cpu" and text != "cuda" and not text.startswith("cuda:"):
        raise DeviceError(f"device must be 'cpu', 'cuda' or 'cuda:N', got device={device!r}")
    try:
        dev = torch.device(text)
    except RuntimeError as exc:
        raise DeviceError(f"device={device!r} is not a valid torch device: {exc}") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise DeviceError(f"device={device!r} requested but CUDA is not available here; use device='cpu'")
        count = torch.cuda.device_count()
        if dev.index is not None and dev.index >= count:
            raise DeviceError(f"device={device!r}: there are {count} CUDA device(s), indices 0..{count - 1}")
    return dev


# -------------------------------------------------------------------------- the plan
@dataclass
class _Plan:
    layers: list[str]
    grid_cells: list[tuple[float, int, int, str]]  # (delta, K, n, cell label)
    continuous_Ks: list[int]
    wrapper_dims: list[int]
    has_acceptance: bool
    n_stat: int
    skipped_K: list[int]
    sequence_Ks: list[int]


def _grid_cells(v: Any, st: Suite, Ks: list[int] | None, scale: float) -> tuple[list, list[int]]:
    if st.scalar is None:
        return [], []
    sc = st.scalar
    chosen = [K for K in sc.K if Ks is None or K in Ks]
    skipped = [K for K in chosen if not supports(v, K)]
    n_cell = continuous.scaled(sc.n, scale, 16)
    cells = [(d, K, n_cell, f"delta={d:g},K={K}") for K in chosen if K not in skipped for d in sc.deltas]
    for d, K, n in sc.extra:
        if (Ks is None or K in Ks) and supports(v, K):
            n_extra = continuous.scaled(n, scale, 16)
            cells.append((d, K, n_extra, f"delta={d:g},K={K},n={n_extra}"))
    return cells, skipped


def _plan(v: Any, st: Suite, traj_tests: int = 0, *, layers: list[str] | None = None, Ks: list[int] | None = None,
          scale: float = 1.0) -> _Plan:
    layers = resolve_layers(None) if layers is None else layers
    has_acc = callable(getattr(v, "acceptance", None))
    cells, skipped = _grid_cells(v, st, Ks, scale) if "L1" in layers else ([], [])
    cont_Ks = []
    if "L5" in layers and st.continuous is not None:
        cont_Ks = [K for K in st.continuous.K if (Ks is None or K in Ks) and supports(v, K)]
        skipped += [K for K in st.continuous.K if (Ks is None or K in Ks) and not supports(v, K) and K not in skipped]
    seq_Ks = []
    if "L6" in layers and st.sequence is not None:
        seq_Ks = [K for K in st.sequence.K if (Ks is None or K in Ks) and supports(v, K)]
    dims = list(st.wrapper.dims) if ("L3" in layers and st.wrapper is not None) else []
    n = len(cells) * (2 + 1 + (1 if has_acc else 0))  # ks, tails, list bound, declared (n/a ones drop out later)
    n += continuous.planned_tests(st.continuous, cont_Ks, has_acc) if cont_Ks else 0
    n += 4 * len(dims) + traj_tests
    n += sequence.planned_tests(st.sequence, has_acc) if seq_Ks else 0
    return _Plan(layers, cells, cont_Ks, dims, has_acc, n, sorted(skipped), seq_Ks)


def planned_tests(verifier: Any, suite: str | Suite = "gate", *, layers: Any = None, Ks: Any = None,
                  scale: float = 1.0) -> int:
    """How many statistical tests a run plans without layer L4 (whose count depends on the
    draws); the binding per-test level is family_alpha / (this + L4's tests)."""
    v = load_verifier(verifier)
    st = load_suite(suite) if isinstance(suite, str) else suite
    return _plan(v, st, 0, layers=resolve_layers(layers), Ks=_check_Ks(Ks), scale=_check_scale(scale)).n_stat


# ------------------------------------------------------------------------- L1 + L2
def _grid_cell(v: Any, delta: float, K: int, n_draws: int, cell: str, st: Suite, alpha_t: float,
               device: torch.device, seed: int, has_acc: bool) -> list[TestResult]:
    """One (delta, K) cell of the grid: contract on every batch, KS, tails, acceptance tests."""
    from speccheck.theory import list_bound_iid

    spec = st.scalar
    g = make_generator(seed, device)
    outs, n_acc, n_done = [], 0, 0
    contract: dict[str, TestResult] = {}
    while n_done < n_draws:
        b = min(spec.chunk, n_draws - n_done)
        s = torch.randn(b, K, generator=g, dtype=torch.float64, device=device)
        d = torch.full((b,), delta, dtype=torch.float64, device=device)
        out = call_verify(v, d.clone(), s.clone(), g)
        checks, parsed = check_batch(cell, d, s, out, "L1")
        for r in checks:
            if r.test not in contract or (not r.passed and contract[r.test].passed):
                contract[r.test] = r
        if parsed is None:
            break
        outs.append(parsed[0])
        n_acc += int(parsed[1].sum())
        n_done += b
    results = list(contract.values())
    if not outs or not all(r.passed for r in results if r.test == "contract:finite"):
        return results  # no usable sample: the contract failures say why
    x = torch.cat(outs)  # stays on the device: the statistics are reduced there, scalars come back
    where = {"delta": delta, "K": K}
    cdf = device_stats.normal_cdf(delta)
    stat = [device_stats.ks_dkw_test(x, cdf, alpha_t, cell=cell, test="ks", power=st.power),
            device_stats.tail_test(x, cdf, alpha_t, q=spec.tail_q, cell=cell, test=f"tails{spec.tail_q:g}",
                                   power=st.power)]
    n = x.numel()
    bound = float(list_bound_iid(np.array(delta), K))
    if bound >= 1.0:
        stat.append(TestResult(cell, "acceptance<=list-bound", n_acc / n - 1.0, math.inf, 1.0, math.inf, n,
                               kind="n/a", note="n/a: the list bound is 1 here, so no count can exceed it"))
    else:
        stat.append(binom_test(n_acc, n, bound, alpha_t, cell=cell, test="acceptance<=list-bound",
                               one_sided_upper=True, power=st.power))
    if has_acc:
        try:
            declared = float(np.asarray(v.acceptance(np.array([delta]), K), np.float64).ravel()[0])
            if not 0.0 <= declared <= 1.0:
                raise ValueError(f"declared acceptance {declared!r} is not a probability")
            stat.append(binom_test(n_acc, n, declared, alpha_t, cell=cell, test="acceptance=declared",
                                   power=st.power))
        except Exception as exc:  # noqa: BLE001 - a broken declaration is a defect
            stat.append(TestResult(cell, "acceptance=declared", math.nan, math.nan, 0.0, math.nan, n,
                                   passed=False, note=f"acceptance() raised {type(exc).__name__}: {exc}"))
    for r in stat:
        r.layer = "L2" if r.test.startswith("acceptance") else "L1"
        r.extra.update(where)
    return results + stat


def _run_grid_cell(v: Any, plan: _Plan, st: Suite, label: str, alpha_t: float, device: torch.device,
                   base: int) -> list[TestResult]:
    """The grid cell named ``label``, seeded by its identity: ``unit_seed(base, 1, label)``."""
    delta, K, n_draws, cell = next(c for c in plan.grid_cells if c[3] == label)
    try:
        return _grid_cell(v, delta, K, n_draws, cell, st, alpha_t, device, unit_seed(base, 1, cell),
                          plan.has_acceptance)
    except DeviceError:
        raise
    except Exception as exc:  # noqa: BLE001 - a defect, not a load error
        return [contract_result(cell, "contract:no-exception", 1, n_draws,
                                f"verify raised {type(exc).__name__}: {exc}", "L1")]


# ------------------------------------------------------------------------------- L3
def _wrapper_fn(verifier: Any) -> Callable:
    own = getattr(verifier, "verify_states", None)
    if callable(own):
        return own
    from speccheck.verifiers import verify_states

    def wrapped(mu_p: torch.Tensor, mu_q: torch.Tensor, sigma: Any, children: torch.Tensor,
                generator: torch.Generator | None) -> tuple:
        return verify_states(verifier, mu_p, mu_q, sigma, children, generator)

    return wrapped


def _state_shape(d: int) -> tuple[int, ...]:
    # exercise a multi-axis state where it factors nicely (64 = 4 x 16)
    return (4, 16) if d == 64 else (d,)


def _wrapper_cell(fn: Callable, verifier: Any, dim: int, suite: Suite, n_rows: int, alpha_t: float,
                  device: torch.device, seed: int) -> list[TestResult]:
    spec = suite.wrapper
    cell = f"d={dim}"
    g = make_generator(seed, device)
    shape = _state_shape(dim)
    K = spec.K
    if not supports(verifier, K):
        K = 1
    deltas = torch.tensor(spec.deltas, dtype=torch.float64, device=device)
    ze, zu, sq, h = [], [], [], []
    bad = {"shape": [], "index": 0, "accepted-equals-child": 0, "finite": 0}
    n_done = 0
    bw2 = 2.0 * (2.0 * dim)  # 2 * bandwidth^2, bandwidth^2 = 2 d
    while n_done < n_rows:
        b = min(spec.chunk, n_rows - n_done)
        b -= b % 2
        mu_p = 2.0 * torch.randn((b,) + shape, generator=g, dtype=torch.float64, device=device)
        sigma = 0.5 + 1.5 * torch.rand(b, generator=g, dtype=torch.float64, device=device)
        sig_arg: Any = sigma
        if dim == 2:  # exercise the float-sigma path
            sig_arg = float(sigma[0])
            sigma = torch.full_like(sigma, sig_arg)
        e = torch.randn(b, dim, generator=g, dtype=torch.float64, device=device)
        e = e / torch.linalg.vector_norm(e, dim=1, keepdim=True)
        dl = deltas[torch.randint(len(spec.deltas), (b,), generator=g, device=device)]
        mu_q = mu_p + (sigma * dl)[:, None].mul(e).reshape((b,) + shape)
        sig_b = sigma.reshape((b,) + (1,) * len(shape))
        noise = torch.randn((b, K) + shape, generator=g, dtype=torch.float64, device=device)
        children = mu_p[:, None] + sig_b[:, None] * noise
        try:
            out = fn(mu_p.clone(), mu_q.clone(), sig_arg, children.clone(), g)
        except Exception as exc:
            if isinstance(exc, DeviceError) or is_device_failure(exc):
                raise DeviceError(f"device {device} failed in verify_states ({type(exc).__name__}: {exc})") from exc
            raise
        try:
            y, acc, idx = out
        except (TypeError, ValueError):
            bad["shape"].append("verify_states must return (y, accepted, index)")
            break
        y_ok = torch.is_tensor(y) and tuple(y.shape) == (b,) + shape and y.dtype == torch.float64
        if not (y_ok and y.device == mu_p.device and torch.is_tensor(acc) and tuple(acc.shape) == (b,)
                and torch.is_tensor(idx) and tuple(idx.shape) == (b,)):
            bad["shape"].append(f"y {getattr(y, 'shape', None)} {getattr(y, 'dtype', None)}, "
                                f"expected {(b,) + shape} float64 on {device}")
            break
        acc = acc.to(torch.bool)
        idx = idx.to(torch.long)
        bad["index"] += int(((idx == K) != ~acc).sum() + ((idx < 0) | (idx > K)).sum())
        bad["finite"] += int((~torch.isfinite(y)).reshape(b, -1).any(dim=1).sum())
        rows = torch.nonzero(acc & (idx < K)).flatten()
        if rows.numel():
            child = children[rows, idx[rows]]
            tol = 1e-9 * (1.0 + mu_p[rows].abs() + sig_b[rows] * 10.0)
            off = ((y[rows] - child).abs() > tol).reshape(rows.numel(), -1)
            bad["accepted-equals-child"] += int(off.any(dim=1).sum())
        z = ((y - mu_q) / sig_b).reshape(b, dim)
        ze.append(torch.einsum("bd,bd->b", z, e).cpu().numpy())
        u = torch.randn(b, dim, generator=g, dtype=torch.float64, device=device)
        u = u / torch.linalg.vector_norm(u, dim=1, keepdim=True)
        zu.append(torch.einsum("bd,bd->b", z, u).cpu().numpy())
        sq.append((z * z).sum(dim=1).cpu().numpy())
        w = torch.randn(b, dim, generator=g, dtype=torch.float64, device=device)
        x1, x2, w1, w2 = z[0::2], z[1::2], w[0::2], w[1::2]

        def k(a, c):
            return torch.exp(-((a - c) ** 2).sum(dim=1) / bw2)

        h.append((k(x1, x2) + k(w1, w2) - k(x1, w2) - k(x2, w1)).cpu().numpy())
        n_done += b
    res = [contract_result(cell, "contract:states-shape", len(bad["shape"]), n_rows, "; ".join(bad["shape"]), "L3")]
    for key in ("index", "accepted-equals-child", "finite"):
        res.append(contract_result(cell, f"contract:states-{key}", bad[key], n_rows,
                             f"{bad[key]} rows violate it" if bad[key] else "", "L3"))
    if not ze:
        return res
    ze_, zu_, sq_, h_ = (np.concatenate(a) for a in (ze, zu, sq, h))
    res.append(ks_dkw_test(ze_, special.ndtr, alpha_t, cell=cell, test="direction", power=suite.power))
    res.append(ks_dkw_test(zu_, special.ndtr, alpha_t, cell=cell, test="random-direction", power=suite.power))
    res.append(ks_dkw_test(sq_, lambda v: sstats.chi2.cdf(v, dim), alpha_t, cell=cell, test="chi2-norm",
                           power=suite.power))
    res.append(_mmd_from_h(h_, alpha_t, cell, suite.power))
    for r in res:
        r.layer = "L3"
    return res


def _mmd_from_h(h: np.ndarray, alpha: float, cell: str, power: float) -> TestResult:
    """Studentised linear-time MMD^2 from its i.i.d. terms h (one-sided, normal reference)."""
    m = h.size
    if not np.all(np.isfinite(h)):
        return TestResult(cell, "mmd", math.inf, math.nan, 0.0, math.nan, m, passed=False, note="non-finite output")
    se = float(np.std(h, ddof=1) / math.sqrt(m))
    z_a = float(special.ndtri(1.0 - alpha))
    stat = float(np.mean(h) / se) if se > 0 else 0.0
    mdd = (z_a + float(special.ndtri(power))) * se
    return TestResult(cell, "mmd", stat, z_a, float(special.ndtr(-stat)), mdd, m,
                      passed=stat <= z_a, extra={"mmd2": float(np.mean(h))},
                      note="MDD in MMD^2 units")



def _run_wrapper_cell(v: Any, st: Suite, dim: int, scale: float, alpha_t: float, device: torch.device,
                      base: int) -> list[TestResult]:
    """The wrapper cell of dimension ``dim``, seeded by its identity: ``unit_seed(base, 3, dim)``."""
    n_rows = continuous.scaled(st.wrapper.n, scale, 64)
    n_rows += n_rows % 2
    try:
        return _wrapper_cell(_wrapper_fn(v), v, dim, st, n_rows, alpha_t, device, unit_seed(base, 3, dim))
    except DeviceError:
        raise
    except Exception as exc:  # noqa: BLE001
        return [contract_result(f"d={dim}", "contract:no-exception", 1, n_rows,
                                f"verify_states raised {type(exc).__name__}: {exc}", "L3")]


# ------------------------------------------------------------------------------- L4
def _layer_trajectory(v: Any, opts: dict, scale: float, seed: int, device: torch.device) -> list[TestResult]:
    """The trajectory checks (innovations by commit depth; Gaussian data vs the exact chain law)."""
    kw = {k: opts[k] for k in ("n_traj", "K", "L", "d") if k in opts}
    if "n_traj" in kw:
        kw["n_traj"] = continuous.scaled(int(kw["n_traj"]), scale, 20)
    factory = getattr(v, "sampler_factory", None)
    if factory is not None:
        kw["sampler_factory"] = factory
    base = getattr(v, "base", v) if factory is not None else v
    try:
        checks = run_trajectory_checks(base, seed=seed % (2 ** 31), alpha=1e-3, device=device, **kw)
    except DeviceError:
        raise
    except Exception as exc:  # noqa: BLE001 - a defect, not a load error
        return [contract_result("trajectory", "contract:no-exception", 1, 0,
                                f"trajectory checks raised {type(exc).__name__}: {exc}", "L4")]
    for r in checks:
        r.layer = "L4"
        r.note = r.note or "p-value test (threshold = the Holm level on p)"
    return checks


# ----------------------------------------------------------------------------------- run
def _beat(heartbeat: Callable[[str], None] | None, progress: bool, t0: float) -> Callable[[str], None]:
    def beat(label: str) -> None:
        if progress:
            print(f"[battery {time.perf_counter() - t0:7.1f} s] {label}", file=sys.stderr, flush=True)
        if heartbeat is not None:
            heartbeat(label)

    return beat


# ------------------------------------------------------------------- cells (units of work)
def plan_battery(verifier: Any, suite: Suite, *, layers: list[str], Ks: list[int] | None, scale: float) -> dict:
    """The run's plan as plain JSON (needs the verifier: ``supports_K``, ``acceptance``): its name,
    layers, grid cells ``[delta, K, n, label]``, continuous K, wrapper dims, whether it declares
    its acceptance, the planned statistical tests without layer L4, and the skipped K."""
    plan = _plan(verifier, suite, 0, layers=layers, Ks=Ks, scale=scale)
    return {"verifier": getattr(verifier, "name", type(verifier).__name__), "layers": list(plan.layers),
            "grid_cells": [[float(d), int(K), int(n), str(label)] for d, K, n, label in plan.grid_cells],
            "continuous_Ks": [int(K) for K in plan.continuous_Ks], "wrapper_dims": [int(d) for d in plan.wrapper_dims],
            "has_acceptance": bool(plan.has_acceptance), "n_stat": int(plan.n_stat),
            "skipped_K": [int(K) for K in plan.skipped_K], "sequence_Ks": [int(K) for K in plan.sequence_Ks]}


def _plan_of(plan: dict) -> _Plan:
    grid = [(float(d), int(K), int(n), str(label)) for d, K, n, label in plan["grid_cells"]]
    return _Plan(list(plan["layers"]), grid,
                 list(plan["continuous_Ks"]), list(plan["wrapper_dims"]), bool(plan["has_acceptance"]),
                 int(plan["n_stat"]), list(plan["skipped_K"]), list(plan.get("sequence_Ks", [])))


def first_cells(suite: Suite, layers: list[str]) -> list[tuple]:
    """The cells that run before the plan's per-test level is known: the contract ``("L0",)`` and
    the trajectory layer ``("L4",)`` (its number of tests is random, and Holm needs the count)."""
    cells = [("L0",)] if "L0" in layers else []
    return cells + ([("L4",)] if "L4" in layers and suite.trajectory is not None else [])


def battery_cells(plan: dict) -> list[tuple]:
    """The plan's other cells, in report order: ``("L1", grid-cell label)`` (layers 1-2 share
    their draws), ``("L5", K)`` (the continuous layer at one K), ``("L3", dim)`` (the wrapper),
    ``("L6",)`` (the sequence layer: one instance through all its calls)."""
    return ([("L1", label) for _, _, _, label in plan["grid_cells"]] + [("L5", K) for K in plan["continuous_Ks"]]
            + [("L3", d) for d in plan["wrapper_dims"]] + ([("L6",)] if plan.get("sequence_Ks") else []))


def run_cell(verifier: Any, suite: Suite, cell: tuple, *, plan: dict | None, base: int, alpha_t: float,
             device: torch.device, scale: float) -> tuple[list[TestResult], Any]:
    """One cell of a battery run: ``(results, screen)`` (the continuous layer's rows at that K for
    localisation, else None). Its seed comes from its identity (``unit_seed(base, layer number,
    label)``), so a cell gives the same results wherever and in whatever order it runs. The L0
    and L4 cells need no plan; the others take the per-test level ``alpha_t`` of the whole family."""
    layer = cell[0]
    if layer == "L0":
        return contract_checks(verifier, device=str(device), seed=unit_seed(base, 0), n=suite.contract_n), None
    if layer == "L4":
        return _layer_trajectory(verifier, suite.trajectory, scale, unit_seed(base, 4), device), None
    if plan is None:
        raise InputError(f"battery cell {cell!r} needs the run's plan")
    if layer == "L1":
        return _run_grid_cell(verifier, _plan_of(plan), suite, str(cell[1]), alpha_t, device, base), None
    if layer == "L3":
        return _run_wrapper_cell(verifier, suite, int(cell[1]), scale, alpha_t, device, base), None
    if layer == "L6":  # the second value: the raw outputs its statistics are judged from
        return sequence.run_layer(verifier, suite.sequence, Ks=list(plan["sequence_Ks"]), alpha=alpha_t,
                                  power=suite.power, device=device, base=base, scale=scale,
                                  has_acceptance=bool(plan["has_acceptance"]))
    if layer == "L5":
        K = int(cell[1])
        results, screens = continuous.run_layer(verifier, suite.continuous, Ks=[K], alpha=alpha_t, power=suite.power,
                                                device=device, base_seed=base, scale=scale,
                                                has_acceptance=bool(plan["has_acceptance"]),
                                                heartbeat=lambda label: None)
        return results, screens.get(K)
    raise InputError(f"unknown battery cell {cell!r}; cells are ('L0',), ('L4',), ('L1', label), ('L5', K), ('L6',), "
                     "('L3', dim)")


def per_test_alpha(plan: dict, trajectory: list[TestResult], alpha: float) -> float:
    """The binding per-test level alpha / m, m = the plan's statistical tests + layer L4's."""
    return alpha / max(int(plan["n_stat"]) + sum(r.kind == "stat" for r in trajectory), 1)


def check_evidence(plan: dict, suite: Suite, contract: list[TestResult], trajectory: list[TestResult],
                   Ks: list[int] | None) -> None:
    """A run that plans no statistical test has no verdict: :class:`InputError` (unless the
    contract already failed, which is a verdict)."""
    n_stat = int(plan["n_stat"]) + sum(r.kind == "stat" for r in trajectory)
    if n_stat == 0 and all(r.passed for r in contract):
        raise InputError(f"suite {suite.name!r} with layers={[LAYERS[x] for x in plan['layers']]} and Ks={Ks} "
                         "selects no statistical test: no verdict from no evidence (choose layers or K the suite has)")


def assemble_report(plan: dict, suite: Suite, *, base: int, alpha: float, device: str, scale: float,
                    contract: list[TestResult], trajectory: list[TestResult] | None,
                    cells: list[list[TestResult]]) -> BatteryReport:
    """One report from the cells' results (``cells`` in :func:`battery_cells` order;
    ``trajectory`` None: layer L4 was not run because the contract failed): the results in
    layer order, Holm over the whole family at ``alpha``, the notes. No localisation yet."""
    traj = trajectory or []
    alpha_t = per_test_alpha(plan, traj, alpha)
    for r in traj:
        if r.kind == "stat":
            r.threshold = alpha_t  # L4 tests are p-value tests: threshold on p
    rep = BatteryReport(plan["verifier"], suite.name, base, alpha, alpha_t, device, power=suite.power, scale=scale,
                        layers=list(plan["layers"]))
    notes: list[str] = []
    if trajectory is None and "L4" in plan["layers"] and suite.trajectory is not None:
        notes.append("L4: not run (the contract failed, so sampler trajectories would only repeat it)")
    if plan["skipped_K"]:
        notes.append(f"K={plan['skipped_K']} skipped (supports_K is false)")
    if plan["grid_cells"] and not plan["has_acceptance"]:
        notes.append("L2: the verifier declares no acceptance(delta, K); only the list-bound tests ran")
    results = list(contract) + [r for cell in cells for r in cell] + traj
    n_planned = int(plan["n_stat"]) + sum(r.kind == "stat" for r in traj)
    n_stat = sum(r.kind == "stat" for r in results)
    if n_stat > n_planned:  # a layer ran more tests than planned: Holm keeps the family-wise rate
        notes.append(f"{n_stat} statistical tests ran, {n_planned} planned; Holm over all of them")
    holm_adjust(results, alpha)
    rep.results, rep.notes = results, notes
    return rep


def rejudge_sequence(report: BatteryReport, raw: dict | None, suite: Suite) -> BatteryReport:
    """``report`` with layer L6's statistics computed HERE from its raw outputs (whatever the
    process that ran the verifier said of them), then Holm over the whole family again at the
    suite's rate. The battery's verdict paths call it in the process that judges, which never
    imports the verifier: code that patches speccheck's statistics inside the verifier's process
    cannot make L6 pass. L6 statistics without raw outputs raise FileFormatError (no verdict)."""
    from speccheck.errors import FileFormatError

    stats = [i for i, r in enumerate(report.results) if r.layer == "L6" and r.kind != "contract"]
    if raw is None:
        if stats:
            raise FileFormatError("the battery's worker reported layer L6 statistics without the raw outputs they "
                                  "come from; no verdict")
        return report
    if suite.sequence is None:
        raise FileFormatError("the battery's worker sent layer L6 outputs for a suite without [sequence]; no verdict")
    try:
        fresh = sequence.judge_layer(raw, sequence.scaled_spec(suite.sequence, report.scale),
                                     alpha=report.per_test_alpha, power=suite.power, base=report.seed)
    except (KeyError, TypeError, ValueError) as exc:
        raise FileFormatError(f"the battery's worker sent malformed layer L6 outputs ({exc}); no verdict") from None
    at = stats[0] if stats else len(report.results)
    kept = [r for i, r in enumerate(report.results) if i not in set(stats)]
    report.results = kept[:at] + fresh + kept[at:]
    holm_adjust(report.results, suite.family_alpha)
    report.sequence_raw = raw
    return report


def failures_to_localise(rep: BatteryReport) -> list[TestResult]:
    """The failed statistical tests (after Holm), the candidates of :func:`localise_report`."""
    return [r for r in rep.results if r.kind == "stat" and not r.passed]


def localise_report(verifier: Any, suite: Suite, plan: dict, failures: list[TestResult], screens: dict | None, *,
                    base: int, alpha: float, alpha_t: float, device: torch.device, scale: float,
                    heartbeat: Callable[[str], None] | None = None) -> tuple[list, list[str]]:
    """Localise ``failures`` on fresh draws: ``(localisations, notes)``. ``screens`` None: the
    continuous layer's rows are redrawn for the failing K (same seeds, so the same rows as the
    run's; a worker that localises need not receive them)."""
    cs = suite.continuous
    try:
        if screens is None:
            needed = sorted({int(r.extra["K"]) for r in failures if "K" in r.extra} & set(plan["continuous_Ks"]))
            screens = {}
            for K in needed:
                _, screen = run_cell(verifier, suite, ("L5", K), plan=plan, base=base, alpha_t=alpha_t,
                                     device=device, scale=scale)
                if screen is not None:
                    screens[K] = screen
        found = localise.localise(
            verifier, failures, screens, alpha=alpha, refine=cs.refine if cs else 8,
            confirm_n=continuous.scaled(cs.confirm_n if cs else 16384, scale, 256), device=device,
            base_seed=unit_seed(base, 6), spec=cs, layer_n=continuous.scaled(cs.n, scale, 16) if cs else 0,
            heartbeat=heartbeat or (lambda label: None))
    except DeviceError:
        raise
    except Exception as exc:  # noqa: BLE001 - the verdict stands; only the localisation is lost
        return [], [f"localisation not possible: the verifier raised {type(exc).__name__}: {exc}"]
    return found, []


def _cell_label(cell: tuple) -> str:
    return {"L0": "L0 contract", "L4": "L4 trajectory", "L6": "L6 sequence", "L5": f"L5 continuous K={cell[-1]}",
            "L3": f"L3 d={cell[-1]}"}.get(cell[0], f"{cell[0]} {cell[-1]}")


def run_battery(verifier: Any, suite: str | Suite = "gate", *, device: str = "cpu", seed: int | None = None,
                progress: bool = False, family_alpha: float | None = None, layers: Any = None, Ks: Any = None,
                scale: float = 1.0, heartbeat: Callable[[str], None] | None = None,
                localise_failures: bool = True) -> BatteryReport:
    """Run ``suite`` (a shipped name, a .toml path or a :class:`Suite`) on ``verifier`` (a spec
    string or an object).

    ``layers``: ids or names of the layers to run (default all the suite has); ``Ks``: run
    only these K (scalar grid and continuous layers); ``scale``: a factor on every draw count
    (the printed minimum detectable deviations show the power it implies); ``heartbeat(label)``
    is called at the start of every unit of work. Raises :class:`InputError` for a bad option
    or a selection with no statistical test, :class:`LoadError` for an unloadable verifier or
    suite, :class:`DeviceError` for an unusable device; whatever the verifier does wrong
    (raises, NaN, wrong law) is a failed test in the report.

    The run is a set of cells (:func:`first_cells`, :func:`battery_cells`), each seeded from
    its identity and run by :func:`run_cell`, merged by :func:`assemble_report` with Holm over
    the whole family; ``speccheck.scale.jobs.battery_job`` runs the same cells as units on
    several processes and gives the same report.
    """
    t0, c0 = time.perf_counter(), time.process_time()
    seed = _check_seed(seed)
    scale = _check_scale(scale)
    alpha_opt = _check_alpha(family_alpha)
    Ks = _check_Ks(Ks)
    lay = resolve_layers(layers)
    dev = resolve_device(device)
    v = load_verifier(verifier)
    if isinstance(suite, str):
        st = load_suite(suite)
    elif isinstance(suite, Suite):
        st = suite
    else:
        raise InputError(f"suite must be a name, a .toml path or a Suite, got {type(suite).__name__}")
    base = st.seed if seed is None else seed
    alpha = st.family_alpha if alpha_opt is None else alpha_opt
    beat = _beat(heartbeat, progress, t0)

    def cell_results(cell: tuple, plan: dict | None, alpha_t: float) -> tuple[list[TestResult], Any]:
        beat(_cell_label(cell))
        return run_cell(fresh_verifier(v), st, cell, plan=plan, base=base, alpha_t=alpha_t, device=dev, scale=scale)

    contract: list[TestResult] = []
    trajectory: list[TestResult] | None = None
    for cell in first_cells(st, lay):
        if cell[0] == "L0":
            contract = cell_results(cell, None, alpha)[0]
        elif all(r.passed for r in contract):  # L4 only on a verifier that keeps the contract
            trajectory = cell_results(cell, None, alpha)[0]
    plan = plan_battery(fresh_verifier(v), st, layers=lay, Ks=Ks, scale=scale)
    check_evidence(plan, st, contract, trajectory or [], Ks)
    alpha_t = per_test_alpha(plan, trajectory or [], alpha)
    cells, screens = [], {}
    sequence_raw = None
    for cell in battery_cells(plan):
        results, screen = cell_results(cell, plan, alpha_t)
        cells.append(results)
        if cell[0] == "L6":
            sequence_raw = screen
        elif screen is not None:
            screens[int(cell[1])] = screen
    rep = assemble_report(plan, st, base=base, alpha=alpha, device=str(dev), scale=scale, contract=contract,
                          trajectory=trajectory, cells=cells)
    rep.sequence_raw = sequence_raw
    failed_stat = failures_to_localise(rep)
    if failed_stat and localise_failures:
        rep.localisations, notes = localise_report(fresh_verifier(v), st, plan, failed_stat, screens, base=base,
                                                   alpha=alpha, alpha_t=alpha_t, device=dev, scale=scale,
                                                   heartbeat=beat)
        rep.notes += notes
    rep.wall_s = time.perf_counter() - t0
    rep.cpu_s = time.process_time() - c0
    return rep


def assert_battery_passes(verifier: Any, suite: str | Suite = "smoke", *, device: str = "cpu",
                          seed: int | None = None, **options: Any) -> BatteryReport:
    """Run the battery in this process and judge it
    (:func:`speccheck.validation.verdict.judge`): AssertionError with the report on a defect
    and on no verdict (no evidence, no power, out of memory); the report when exact.

    For a verifier object in a test. The pytest fixture ``speccheck_battery`` runs a spec string
    isolated instead (``speccheck.api.battery``), as the command does. ``options`` go to
    :func:`run_battery` (``layers``, ``Ks``, ``scale``, ...)."""
    from speccheck.validation.report import format_report
    from speccheck.validation.verdict import judge

    try:
        rep = run_battery(verifier, suite, device=device, seed=seed, **options)
    except DeviceError as exc:
        raise AssertionError(f"speccheck battery: no verdict: {exc}") from None
    outcome = judge(rep)
    if outcome.verdict != "exact":
        what = "found a defect" if outcome.verdict == "defect" else f"has no verdict ({outcome.reason})"
        raise AssertionError(f"speccheck battery {what}:\n" + format_report(rep))
    return rep


# ------------------------------------------------------------------ moved to mutants
def __getattr__(name: str) -> Any:
    """The mutant runners live in :mod:`speccheck.validation.mutants` (re-exported here)."""
    if name in ("SamplerMutantRule", "mutant_factories", "run_mutants"):
        from speccheck.validation import mutants

        return getattr(mutants, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
