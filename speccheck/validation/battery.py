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

Error control: every statistical test has a valid p-value; the suite's family-wise
false-failure rate ``family_alpha`` is split by Holm over all of them; thresholds are quoted
at the binding level family_alpha / m; each test carries its minimum detectable deviation at
the suite's power. When the run fails, :mod:`speccheck.validation.localise` confirms the
failing delta window and K on fresh draws, with an error budget of its own.
"""

from __future__ import annotations

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
from speccheck.validation import continuous, device_stats, localise
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

__all__ = ["BatteryReport", "TestResult", "assert_battery_passes", "contract_checks", "load_verifier",
           "planned_tests", "resolve_layers", "run_battery"]

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
    """Layer ids ("L0".."L5") from ids or names ("contract", "scalar", "acceptance", "wrapper",
    "trajectory", "continuous"); None = all. L1 and L2 share their draws: either runs both."""
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
    dims = list(st.wrapper.dims) if ("L3" in layers and st.wrapper is not None) else []
    n = len(cells) * (2 + 1 + (1 if has_acc else 0))  # ks, tails, list bound, declared (n/a ones drop out later)
    n += continuous.planned_tests(st.continuous, cont_Ks, has_acc) if cont_Ks else 0
    n += 4 * len(dims) + traj_tests
    return _Plan(layers, cells, cont_Ks, dims, has_acc, n, sorted(skipped))


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


def _layer_grid(v: Any, plan: _Plan, st: Suite, alpha_t: float, device: torch.device, base: int,
                beat: Callable[[str], None]) -> list[TestResult]:
    out: list[TestResult] = []
    for i, (delta, K, n_draws, cell) in enumerate(plan.grid_cells):
        beat(f"L1 {cell}")
        try:
            out += _grid_cell(v, delta, K, n_draws, cell, st, alpha_t, device, unit_seed(base, 1, i),
                              plan.has_acceptance)
        except DeviceError:
            raise
        except Exception as exc:  # noqa: BLE001 - a defect, not a load error
            out.append(contract_result(cell, "contract:no-exception", 1, n_draws,
                                       f"verify raised {type(exc).__name__}: {exc}", "L1"))
    return out


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



def _layer_wrapper(v: Any, plan: _Plan, st: Suite, scale: float, alpha_t: float, device: torch.device, base: int,
                   beat: Callable[[str], None]) -> list[TestResult]:
    out: list[TestResult] = []
    fn = _wrapper_fn(v)
    n_rows = continuous.scaled(st.wrapper.n, scale, 64)
    n_rows += n_rows % 2
    for j, dim in enumerate(st.wrapper.dims):
        if dim not in plan.wrapper_dims:
            continue
        beat(f"L3 d={dim}")
        try:
            out += _wrapper_cell(fn, v, dim, st, n_rows, alpha_t, device, unit_seed(base, 3, j))
        except DeviceError:
            raise
        except Exception as exc:  # noqa: BLE001
            out.append(contract_result(f"d={dim}", "contract:no-exception", 1, n_rows,
                                       f"verify_states raised {type(exc).__name__}: {exc}", "L3"))
    return out


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
    results: list[TestResult] = []
    notes: list[str] = []
    if "L0" in lay:
        beat("L0 contract")
        results += contract_checks(v, device=str(dev), seed=unit_seed(base, 0), n=st.contract_n)
    contract_ok = all(r.passed for r in results)
    traj: list[TestResult] = []
    if "L4" in lay and st.trajectory is not None:
        if contract_ok:  # first: the number of strata (hence tests) is random, and Holm needs the count
            beat("L4 trajectory")
            traj = _layer_trajectory(v, st.trajectory, scale, unit_seed(base, 4), dev)
        else:
            notes.append("L4: not run (the contract failed, so sampler trajectories would only repeat it)")
    plan = _plan(v, st, sum(r.kind == "stat" for r in traj), layers=lay, Ks=Ks, scale=scale)
    if plan.n_stat == 0 and contract_ok:
        raise InputError(f"suite {st.name!r} with layers={[LAYERS[x] for x in lay]} and Ks={Ks} selects no "
                         "statistical test: no verdict from no evidence (choose layers or K the suite has)")
    alpha_t = alpha / max(plan.n_stat, 1)
    for r in traj:
        if r.kind == "stat":
            r.threshold = alpha_t  # L4 tests are p-value tests: threshold on p
    rep = BatteryReport(getattr(v, "name", type(v).__name__), st.name, base, alpha, alpha_t, str(dev),
                        power=st.power, scale=scale, layers=lay)
    if plan.skipped_K:
        notes.append(f"K={plan.skipped_K} skipped (supports_K is false)")
    if plan.grid_cells:
        results += _layer_grid(v, plan, st, alpha_t, dev, base, beat)
        if not plan.has_acceptance:
            notes.append("L2: the verifier declares no acceptance(delta, K); only the list-bound tests ran")
    screens: dict = {}
    if plan.continuous_Ks:
        res, screens = continuous.run_layer(v, st.continuous, Ks=plan.continuous_Ks, alpha=alpha_t, power=st.power,
                                            device=dev, base_seed=base, scale=scale,
                                            has_acceptance=plan.has_acceptance, heartbeat=beat)
        results += res
    if plan.wrapper_dims:
        results += _layer_wrapper(v, plan, st, scale, alpha_t, dev, base, beat)
    results += traj
    n_stat = sum(r.kind == "stat" for r in results)
    if n_stat > plan.n_stat:  # a layer ran more tests than planned: Holm keeps the family-wise rate
        notes.append(f"{n_stat} statistical tests ran, {plan.n_stat} planned; Holm over all of them")
    holm_adjust(results, alpha)
    rep.results, rep.notes = results, notes
    failed_stat = [r for r in results if r.kind == "stat" and not r.passed]
    if failed_stat and localise_failures:
        cs = st.continuous
        try:
            rep.localisations = localise.localise(
                v, failed_stat, screens, alpha=alpha, refine=cs.refine if cs else 8,
                confirm_n=continuous.scaled(cs.confirm_n if cs else 16384, scale, 256), device=dev,
                base_seed=unit_seed(base, 6), spec=cs, layer_n=continuous.scaled(cs.n, scale, 16) if cs else 0,
                heartbeat=beat)
        except DeviceError:
            raise
        except Exception as exc:  # noqa: BLE001 - the verdict stands; only the localisation is lost
            notes.append(f"localisation not possible: the verifier raised {type(exc).__name__}: {exc}")
    rep.wall_s = time.perf_counter() - t0
    rep.cpu_s = time.process_time() - c0
    return rep


def assert_battery_passes(verifier: Any, suite: str | Suite = "smoke", *, device: str = "cpu",
                          seed: int | None = None, **options: Any) -> BatteryReport:
    """Run the battery and fail (AssertionError with the report) if a defect is found.

    The pytest fixture ``speccheck_battery`` returns this function, so a verifier author's
    CI test is ``def test_mine(speccheck_battery): speccheck_battery("pkg.module:Rule")``.
    ``options`` go to :func:`run_battery` (``layers``, ``Ks``, ``scale``, ...).
    """
    from speccheck.validation.report import format_report

    rep = run_battery(verifier, suite, device=device, seed=seed, **options)
    if not rep.passed:
        raise AssertionError("speccheck battery found a defect:\n" + format_report(rep))
    return rep


# ------------------------------------------------------------------ moved to mutants
def __getattr__(name: str) -> Any:
    """The mutant runners live in :mod:`speccheck.validation.mutants` (re-exported here)."""
    if name in ("SamplerMutantRule", "mutant_factories", "run_mutants"):
        from speccheck.validation import mutants

        return getattr(mutants, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
