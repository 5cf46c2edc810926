"""The exactness battery: run a suite of statistical and contract tests on one verifier.

Layers (see ``validation/*.toml`` for their sizes):

1. scalar kernel on a delta x K grid: KS of s_out against N(delta, 1) (DKW-Massart
   threshold), a binned test of the lower and upper ``tail_q`` tails (exact binomial), and
   the contract (shapes, dtype, device; accepted => s_out == s[index]; index == K iff
   rejected; finite output; same generator seed => same output; different seeds differ);
2. acceptance: exact binomial test against the verifier's declared ``acceptance(delta, K)``
   (when it declares one), and a one-sided test against the i.i.d.-list bound (a rule whose
   acceptance is significantly above it cannot be exact);
3. the d-dimensional wrapper (``verify_states``, or the verifier's own ``verify_states``
   method if it defines one): the standardised output (Y - mu_q) / sigma projected on the
   displacement direction and on a fresh random direction per row (KS vs N(0, 1)), its squared
   norm (KS vs chi^2_d), a linear-time MMD against fresh N(0, I) draws, and the contract
   (accepted => Y == the accepted child);
4. trajectory (``speccheck.validation.trajectory``, when present).

Error control: every statistical test has a valid p-value; the suite's family-wise
false-failure rate ``family_alpha`` is split by Holm; thresholds are quoted at the binding
level family_alpha / m. Contract checks are deterministic (false-failure rate 0).
"""

from __future__ import annotations

import dataclasses
import math
import re
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import torch
from scipy import special, stats as sstats

from speccheck.validation.stats import (
    TestResult,
    binom_test,
    holm_adjust,
    ks_dkw_test,
    tail_test,
)
from speccheck.validation.suites import Suite, load_suite


@dataclass
class BatteryReport:
    """Everything a run produced; ``passed`` iff no test failed."""

    verifier: str
    suite: str
    seed: int
    family_alpha: float
    per_test_alpha: float
    device: str
    results: list[TestResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    wall_s: float = 0.0
    cpu_s: float = 0.0  # process CPU time (all threads) spent in the run

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.results)

    @property
    def failures(self) -> list[TestResult]:
        return [r for r in self.results if not r.passed]


# ----------------------------------------------------------------------------- loading
def load_verifier(spec: Any):
    """A verifier from a name / "module:attr" / object via ``speccheck.verifiers.get``.

    Raises ValueError when it cannot be loaded (the CLI's exit code 2)."""
    if not isinstance(spec, str):
        if not callable(getattr(spec, "verify", None)):
            raise ValueError(f"verifier object {spec!r} has no verify method")
        return spec
    try:
        from speccheck.verifiers import get
    except ImportError:
        get = None
    if get is not None:
        v = get(spec)
    elif ":" in spec:
        v = _load_attr(spec)
    else:
        raise ValueError(f"unknown verifier {spec!r} (speccheck.verifiers is not available; use module:attr)")
    if not callable(getattr(v, "verify", None)):
        raise ValueError(f"verifier {spec!r} loaded {v!r}, which has no verify method")
    return v


def _load_attr(spec: str):
    import importlib

    mod, _, attr = spec.partition(":")
    try:
        obj = importlib.import_module(mod)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"cannot load verifier {spec!r}: {exc}") from exc
    if isinstance(obj, type) or (callable(obj) and not hasattr(obj, "verify")):
        obj = obj()
    return obj


def _supports(verifier, K: int) -> bool:
    f = getattr(verifier, "supports_K", None)
    if f is None:
        return True
    try:
        return bool(f(K))
    except Exception:  # noqa: BLE001 - a broken supports_K is not a reason to skip tests
        return True


def _cell_seed(base: int, *key: int) -> int:
    """A 63-bit seed per (suite seed, layer, cell...), stable across runs and platforms."""
    return int(np.random.SeedSequence([base, *key]).generate_state(2, np.uint64)[0] >> np.uint64(1))


def _generator(device: torch.device, seed: int) -> torch.Generator:
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    return g


# -------------------------------------------------------------------------- the plan
@dataclass
class _Plan:
    scalar_cells: list[tuple[float, int, int]]  # (delta, K, n)
    n_stat: int
    has_acceptance: bool


def _plan(verifier, suite: Suite, traj_tests: int) -> _Plan:
    cells = []
    if suite.scalar is not None:
        sc = suite.scalar
        cells = [(d, K, sc.n) for K in sc.K for d in sc.deltas if _supports(verifier, K)]
        cells += [(d, K, n) for d, K, n in sc.extra if _supports(verifier, K)]
    has_acc = callable(getattr(verifier, "acceptance", None))
    per_cell = 2 + 1 + (1 if has_acc else 0)  # ks, tails, list bound, declared acceptance
    n = per_cell * len(cells)
    if suite.wrapper is not None:
        n += 4 * len(suite.wrapper.dims)
    return _Plan(cells, n + traj_tests, has_acc)


# ------------------------------------------------------------------------------ layer 1+2
def _contract(cell: str, test: str, bad: int, n: int, note: str = "", layer: str = "L1") -> TestResult:
    return TestResult(cell, test, float(bad), 0.0, 0.0 if bad else 1.0, 0.0, n, kind="contract",
                      passed=bad == 0, note=note, layer=layer)


def _check_outputs(cell: str, s: torch.Tensor, out, layer: str = "L1") -> tuple[list[TestResult], tuple | None]:
    """Shapes, dtypes, device, index range, accepted => s_out == s[index], rejected <=> K."""
    B, K = s.shape
    try:
        s_out, accepted, index = out
    except (TypeError, ValueError):
        return [_contract(cell, "contract:shape", 1, B, f"verify must return (s_out, accepted, index), got {type(out).__name__}", layer)], None
    msgs = []
    for name, t, shape in (("s_out", s_out, (B,)), ("accepted", accepted, (B,)), ("index", index, (B,))):
        if not torch.is_tensor(t):
            msgs.append(f"{name} is {type(t).__name__}, not a tensor")
        elif tuple(t.shape) != shape:
            msgs.append(f"{name} has shape {tuple(t.shape)}, expected {shape}")
        elif t.device != s.device:
            msgs.append(f"{name} is on {t.device}, inputs on {s.device}")
    if msgs:
        return [_contract(cell, "contract:shape", len(msgs), B, "; ".join(msgs), layer)], None
    res = []
    dt_msgs = []
    if s_out.dtype != s.dtype:
        dt_msgs.append(f"s_out dtype {s_out.dtype} != input dtype {s.dtype}")
    if accepted.dtype != torch.bool:
        dt_msgs.append(f"accepted dtype {accepted.dtype} (expected torch.bool)")
    if index.dtype != torch.long:
        dt_msgs.append(f"index dtype {index.dtype} (expected torch.int64)")
    res.append(_contract(cell, "contract:dtype", len(dt_msgs), B, "; ".join(dt_msgs), layer))
    acc = accepted.to(torch.bool)
    idx = index.to(torch.long)
    bad_range = int(((idx < 0) | (idx > K)).sum())
    bad_iff = int(((idx == K) != ~acc).sum())
    safe = torch.clamp(idx, 0, K - 1)
    picked = torch.gather(s, 1, safe[:, None])[:, 0]
    bad_eq = int((acc & (s_out.to(s.dtype) != picked)).sum())
    bad_fin = int((~torch.isfinite(s_out)).sum())
    res.append(_contract(cell, "contract:index", bad_range + bad_iff, B,
                         f"{bad_range} index out of [0, K], {bad_iff} rows where (index == K) != rejected" if bad_range + bad_iff else "", layer))
    res.append(_contract(cell, "contract:accepted-equals-child", bad_eq, B,
                         f"{bad_eq} accepted rows with s_out != s[index]" if bad_eq else "", layer))
    res.append(_contract(cell, "contract:finite", bad_fin, B, f"{bad_fin} non-finite s_out" if bad_fin else "", layer))
    return res, (s_out.to(s.dtype), acc, idx)


def _determinism(verifier, cell: str, delta: float, K: int, n: int, device, seed: int,
                 acc_frac: float) -> list[TestResult]:
    g = _generator(device, seed)
    s = torch.randn(n, K, generator=g, dtype=torch.float64, device=device)
    d = torch.full((n,), delta, dtype=torch.float64, device=device)
    outs = []
    for sd in (seed + 1, seed + 1, seed + 2):
        o = verifier.verify(d.clone(), s.clone(), _generator(device, sd))
        outs.append(tuple(t.detach().clone() for t in o))
    same = all(torch.equal(a, b) for a, b in zip(outs[0], outs[1]))
    res = [_contract(cell, "contract:same-seed", 0 if same else 1, n,
                     "" if same else "two calls with the same generator seed gave different outputs")]
    # a different seed must change something where the accept/reject decision is random:
    # checked in cells whose measured acceptance is in [0.05, 0.95] (RMC at large delta, e.g.,
    # rejects and reflects deterministically)
    if delta > 0 and 0.05 <= acc_frac <= 0.95:
        differ = not all(torch.equal(a, b) for a, b in zip(outs[0], outs[2]))
        res.append(_contract(cell, "contract:seed-used", 0 if differ else 1, n,
                             "" if differ else "different generator seeds gave identical outputs (generator ignored?)"))
    # generator=None must work too
    try:
        o = verifier.verify(d.clone(), s.clone(), None)
        ok = len(o) == 3 and tuple(o[0].shape) == (n,)
        res.append(_contract(cell, "contract:generator-none", 0 if ok else 1, n, "" if ok else "bad output with generator=None"))
    except Exception as exc:  # noqa: BLE001
        res.append(_contract(cell, "contract:generator-none", 1, n, f"raised {exc!r}"))
    return res


def _scalar_cell(verifier, delta: float, K: int, n_draws: int, suite: Suite, alpha_t: float, device, seed: int,
                 has_acc: bool, tick: Callable[[int], None]) -> list[TestResult]:
    from speccheck.theory import list_bound_iid

    spec = suite.scalar
    cell = f"delta={delta:g},K={K}" + ("" if n_draws == spec.n else f",n={n_draws}")
    g = _generator(device, seed)
    results: list[TestResult] = []
    outs, n_acc, n_done = [], 0, 0
    contract_fail = {}
    while n_done < n_draws:
        b = min(spec.chunk, n_draws - n_done)
        s = torch.randn(b, K, generator=g, dtype=torch.float64, device=device)
        d = torch.full((b,), delta, dtype=torch.float64, device=device)
        out = verifier.verify(d, s.clone(), g)
        checks, parsed = _check_outputs(cell, s, out)
        for r in checks:
            if r.test not in contract_fail or (not r.passed and contract_fail[r.test].passed):
                contract_fail[r.test] = r
        if parsed is None:
            break
        outs.append(parsed[0].detach().cpu().numpy())
        n_acc += int(parsed[1].sum())
        n_done += b
        tick(b)
    results.extend(contract_fail.values())
    results.extend(_determinism(verifier, cell, delta, K, suite.contract_n, device, seed ^ 0x5EED,
                                n_acc / max(n_done, 1)))
    if not outs:
        return results
    x = np.concatenate(outs)
    n = x.size

    def cdf(v):
        return special.ndtr(v - delta)

    ks = ks_dkw_test(x, cdf, alpha_t, cell=cell, test="ks", power=suite.power)
    tl = tail_test(x, cdf, alpha_t, q=spec.tail_q, cell=cell, test=f"tails{spec.tail_q:g}", power=suite.power)
    results += [ks, tl]
    bound = float(list_bound_iid(np.array(delta), K))
    lb = binom_test(n_acc, n, bound, alpha_t, cell=cell, test="acceptance<=list-bound", one_sided_upper=True,
                    power=suite.power)
    results.append(lb)
    if has_acc:
        try:
            a_th = float(np.asarray(verifier.acceptance(np.array([delta]), K), np.float64).ravel()[0])
            if not (0.0 <= a_th <= 1.0):
                raise ValueError(f"declared acceptance {a_th!r} is not a probability")
            results.append(binom_test(n_acc, n, a_th, alpha_t, cell=cell, test="acceptance=declared",
                                      power=suite.power))
        except Exception as exc:  # noqa: BLE001
            results.append(TestResult(cell, "acceptance=declared", math.nan, math.nan, 0.0, math.nan, n,
                                      passed=False, note=f"acceptance() raised {exc!r}"))
    for r in results:
        r.layer = r.layer or ("L2" if r.test.startswith("acceptance") else "L1")
    return results


# ------------------------------------------------------------------------------- layer 3
def _wrapper_fn(verifier):
    own = getattr(verifier, "verify_states", None)
    if callable(own):
        return own
    from speccheck.verifiers import verify_states

    return lambda mu_p, mu_q, sigma, children, generator: verify_states(verifier, mu_p, mu_q, sigma, children, generator)


def _state_shape(d: int) -> tuple[int, ...]:
    # exercise a multi-axis state where it factors nicely (64 = 4 x 16)
    return (4, 16) if d == 64 else (d,)


def _wrapper_cell(fn, verifier, dim: int, suite: Suite, alpha_t: float, device, seed: int,
                  tick: Callable[[int], None]) -> list[TestResult]:
    spec = suite.wrapper
    cell = f"d={dim}"
    g = _generator(device, seed)
    shape = _state_shape(dim)
    K = spec.K
    if not _supports(verifier, K):
        K = 1
    deltas = torch.tensor(spec.deltas, dtype=torch.float64, device=device)
    ze, zu, sq, h = [], [], [], []
    bad = {"shape": [], "index": 0, "accepted-equals-child": 0, "finite": 0}
    n_done = 0
    bw2 = 2.0 * (2.0 * dim)  # 2 * bandwidth^2, bandwidth^2 = 2 d
    while n_done < spec.n:
        b = min(spec.chunk, spec.n - n_done)
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
        children = mu_p[:, None] + sig_b[:, None] * torch.randn((b, K) + shape, generator=g, dtype=torch.float64, device=device)
        out = fn(mu_p.clone(), mu_q.clone(), sig_arg, children.clone(), g)
        try:
            y, acc, idx = out
        except (TypeError, ValueError):
            bad["shape"].append("verify_states must return (y, accepted, index)")
            break
        if not (torch.is_tensor(y) and tuple(y.shape) == (b,) + shape and y.dtype == torch.float64 and y.device == mu_p.device
                and torch.is_tensor(acc) and tuple(acc.shape) == (b,) and torch.is_tensor(idx) and tuple(idx.shape) == (b,)):
            bad["shape"].append(f"y {getattr(y, 'shape', None)} {getattr(y, 'dtype', None)}, expected {(b,) + shape} float64 on {device}")
            break
        acc = acc.to(torch.bool)
        idx = idx.to(torch.long)
        bad["index"] += int(((idx == K) != ~acc).sum() + ((idx < 0) | (idx > K)).sum())
        bad["finite"] += int((~torch.isfinite(y)).reshape(b, -1).any(dim=1).sum())
        rows = torch.nonzero(acc & (idx < K)).flatten()
        if rows.numel():
            child = children[rows, idx[rows]]
            tol = 1e-9 * (1.0 + mu_p[rows].abs() + sig_b[rows] * 10.0)
            bad["accepted-equals-child"] += int(((y[rows] - child).abs() > tol).reshape(rows.numel(), -1).any(dim=1).sum())
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
        tick(b)
    res = [_contract(cell, "contract:states-shape", len(bad["shape"]), spec.n, "; ".join(bad["shape"]), "L3")]
    for key in ("index", "accepted-equals-child", "finite"):
        res.append(_contract(cell, f"contract:states-{key}", bad[key], spec.n,
                             f"{bad[key]} rows violate it" if bad[key] else "", "L3"))
    if not ze:
        return res
    ze_, zu_, sq_, h_ = (np.concatenate(a) for a in (ze, zu, sq, h))
    res.append(ks_dkw_test(ze_, special.ndtr, alpha_t, cell=cell, test="direction", power=suite.power))
    res.append(ks_dkw_test(zu_, special.ndtr, alpha_t, cell=cell, test="random-direction", power=suite.power))
    res.append(ks_dkw_test(sq_, lambda v: sstats.chi2.cdf(v, dim), alpha_t, cell=cell, test="chi2-norm", power=suite.power))
    res.append(_mmd_from_h(h_, alpha_t, cell, suite.power))
    for r in res:
        r.layer = "L3"
    return res


def _mmd_from_h(h: np.ndarray, alpha: float, cell: str, power: float) -> TestResult:
    m = h.size
    if not np.all(np.isfinite(h)):
        return TestResult(cell, "mmd", math.inf, math.nan, 0.0, math.nan, m, passed=False, note="non-finite output")
    se = float(np.std(h, ddof=1) / math.sqrt(m))
    z_a = float(special.ndtri(1.0 - alpha))
    stat = float(np.mean(h) / se) if se > 0 else 0.0
    return TestResult(cell, "mmd", stat, z_a, float(special.ndtr(-stat)), (z_a + float(special.ndtri(power))) * se, m,
                      passed=stat <= z_a, extra={"mmd2": float(np.mean(h))},
                      note="MDD in MMD^2 units")


# ------------------------------------------------------------------------------- layer 4
def _trajectory_module():
    try:
        import speccheck.validation.trajectory as traj  # owned by the sampler engineer
    except ImportError:
        return None
    return traj if callable(getattr(traj, "run_trajectory_checks", None)) else None


_TRAJ_NAME = re.compile(r"^([\w-]+)\((.*)\)(\[[^\]]*\])?\s+(.*)$")


def _trajectory_tests(traj, verifier, opts: dict, seed: int) -> list[TestResult]:
    """Layer 4: the sampler engineer's trajectory checks (innovations stratified by commit
    depth; Gaussian data vs the exact chain law), each a p-value entering the Holm family."""
    kw = {k: opts[k] for k in ("n_traj", "K", "L", "d") if k in opts}
    factory = getattr(verifier, "sampler_factory", None)
    if factory is not None:
        kw["sampler_factory"] = factory
    base = getattr(verifier, "base", verifier) if factory is not None else verifier
    checks = traj.run_trajectory_checks(base, seed=seed % (2 ** 31), alpha=1e-3, **kw)
    out = []
    for c in checks:
        m = _TRAJ_NAME.match(c.name)
        if m:
            target = m.group(2).split(",")[0].strip()
            cell = f"traj:{target}{m.group(3) or ''}"
            test = f"{m.group(1)} {m.group(4)}".strip()
        else:
            cell, test = "traj", c.name
        n = int(c.detail.get("count", 0)) if isinstance(c.detail, dict) else 0
        out.append(TestResult(cell, test, float(c.statistic), math.nan, float(c.p_value), math.nan, n,
                              layer="L4", passed=True, note="p-value test (threshold = the Holm level)"))
    return out


# ----------------------------------------------------------------------------------- run
def run_battery(verifier: Any, suite: str | Suite = "gate", *, device: str = "cpu", seed: int | None = None,
                progress: bool = False, family_alpha: float | None = None) -> BatteryReport:
    """Run ``suite`` on ``verifier`` (a spec string or an object). Raises ValueError only when
    the verifier cannot be loaded or an option is bad; anything a verifier raises during the
    tests becomes a failed test in the report."""
    t0, c0 = time.perf_counter(), time.process_time()
    v = load_verifier(verifier)
    st = load_suite(suite) if isinstance(suite, str) else suite
    if device not in ("cpu", "cuda") and not str(device).startswith("cuda:"):
        raise ValueError(f"device must be 'cpu' or 'cuda', got device={device!r}")
    if str(device).startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"device={device!r} requested but CUDA is not available")
    dev = torch.device(device)
    base = st.seed if seed is None else int(seed)
    alpha = st.family_alpha if family_alpha is None else float(family_alpha)
    traj = _trajectory_module() if st.trajectory is not None else None
    traj_results: list[TestResult] = []
    traj_note = ""
    if st.trajectory is not None and traj is None:
        traj_note = "L4: not available (speccheck.validation.trajectory.run_trajectory_checks is missing)"
    elif traj is not None:
        # run first: the number of strata (hence tests) is random, and Holm needs the count
        try:
            traj_results = _trajectory_tests(traj, v, st.trajectory, _cell_seed(base, 4))
        except Exception as exc:  # noqa: BLE001 - a defect, not a load error
            traj_results = [TestResult("trajectory", "contract:no-exception", 1.0, 0.0, 0.0, 0.0, 0,
                                       kind="contract", passed=False, layer="L4",
                                       note=f"trajectory checks raised {type(exc).__name__}: {exc}")]
    plan = _plan(v, st, sum(r.kind == "stat" for r in traj_results))
    alpha_t = alpha / max(plan.n_stat, 1)
    for r in traj_results:
        if r.kind == "stat":
            r.threshold = alpha_t  # L4 tests are p-value tests: threshold on p
    rep = BatteryReport(getattr(v, "name", type(v).__name__), st.name, base, alpha, alpha_t, str(dev))
    total = sum(c[2] for c in plan.scalar_cells) + (st.wrapper.n * len(st.wrapper.dims) if st.wrapper else 0)
    from tqdm import tqdm

    bar = tqdm(total=total, file=sys.stderr, disable=not progress, unit="draw", unit_scale=True,
               desc=f"{rep.verifier}/{st.name}", leave=False)
    try:
        if st.scalar is not None:
            skipped = [K for K in st.scalar.K if not _supports(v, K)]
            if skipped:
                rep.notes.append(f"L1/L2: K={skipped} skipped (supports_K is false)")
            for i, (delta, K, n_draws) in enumerate(plan.scalar_cells):
                bar.set_postfix_str(f"delta={delta:g} K={K}")
                try:
                    rep.results += _scalar_cell(v, delta, K, n_draws, st, alpha_t, dev, _cell_seed(base, 1, i),
                                                plan.has_acceptance, bar.update)
                except Exception as exc:  # noqa: BLE001 - a defect, not a load error
                    rep.results.append(TestResult(f"delta={delta:g},K={K}", "contract:no-exception", 1.0, 0.0, 0.0, 0.0,
                                                  n_draws, kind="contract", passed=False, layer="L1",
                                                  note=f"verify raised {type(exc).__name__}: {exc}"))
            if not plan.has_acceptance:
                rep.notes.append("L2: the verifier declares no acceptance(delta, K); only the list-bound test ran")
        if st.wrapper is not None:
            try:
                fn = _wrapper_fn(v)
            except ImportError:
                fn = None
                rep.notes.append("L3: not available (speccheck.verifiers.verify_states is missing)")
            for j, dim in enumerate(st.wrapper.dims if fn is not None else []):
                bar.set_postfix_str(f"d={dim}")
                try:
                    rep.results += _wrapper_cell(fn, v, dim, st, alpha_t, dev, _cell_seed(base, 3, j), bar.update)
                except Exception as exc:  # noqa: BLE001
                    rep.results.append(TestResult(f"d={dim}", "contract:no-exception", 1.0, 0.0, 0.0, 0.0, st.wrapper.n,
                                                  kind="contract", passed=False, layer="L3",
                                                  note=f"verify_states raised {type(exc).__name__}: {exc}"))
        if traj_note:
            rep.notes.append(traj_note)
        rep.results += traj_results
    finally:
        bar.close()
    n_stat = sum(r.kind == "stat" for r in rep.results)
    if n_stat > plan.n_stat:  # a layer ran more tests than planned: keep the family-wise rate
        rep.notes.append(f"{n_stat} statistical tests ran, {plan.n_stat} planned; Holm over all of them")
    holm_adjust(rep.results, alpha)
    rep.wall_s = time.perf_counter() - t0
    rep.cpu_s = time.process_time() - c0
    return rep


def assert_battery_passes(verifier: Any, suite: str | Suite = "smoke", *, device: str = "cpu",
                          seed: int | None = None) -> BatteryReport:
    """Run the battery and fail (AssertionError with the report table) if a defect is found.

    The pytest fixture ``speccheck_battery`` returns this function, so a verifier author's
    CI test is ``def test_mine(speccheck_battery): speccheck_battery("pkg.module:Rule")``.
    """
    from speccheck.validation.report import format_report

    rep = run_battery(verifier, suite, device=device, seed=seed)
    if not rep.passed:
        raise AssertionError("speccheck battery found a defect:\n" + format_report(rep, only_failures=True))
    return rep


# ------------------------------------------------------------------------------- mutants
class SamplerMutantRule:
    """A correct verifier run inside a mutant sampler (layer 4 only: layers 1-3 do not involve
    the sampler)."""

    def __init__(self, name: str, factory: Callable, base: str = "dgrs"):
        self.base = load_verifier(base)
        self.sampler_factory = factory
        self.name = f"sampler-{name}"

    def acceptance(self, delta, K: int):
        return self.base.acceptance(delta, K)

    def verify(self, delta, s, generator=None):
        return self.base.verify(delta, s, generator)


def mutant_factories(include_sampler: bool = True) -> dict[str, Callable[[], Any]]:
    """The scalar/wrapper mutants, plus the sampler engineer's SAMPLER_MUTANTS when present."""
    from functools import partial

    from speccheck.validation.mutants import MUTANTS

    out = dict(MUTANTS)
    if include_sampler:
        try:
            from speccheck.validation.sampler_mutants import SAMPLER_MUTANTS
        except ImportError:
            SAMPLER_MUTANTS = {}
        for k, f in dict(SAMPLER_MUTANTS).items():
            out[f"sampler-{k}"] = partial(SamplerMutantRule, str(k), f)
    return out


def run_mutants(suite: str | Suite = "gate", *, names: list[str] | None = None, device: str = "cpu",
                seed: int | None = None, progress: bool = False) -> dict[str, BatteryReport]:
    """Run the suite on every mutant (or ``names``); returns {mutant: report}."""
    facts = mutant_factories()
    if names:
        unknown = [n for n in names if n not in facts]
        if unknown:
            raise ValueError(f"unknown mutant(s) {unknown}; known: {sorted(facts)}")
        facts = {n: facts[n] for n in names}
    st = load_suite(suite) if isinstance(suite, str) else suite
    out = {}
    for name, f in facts.items():
        if progress:
            print(f"[mutants] {name} ...", file=sys.stderr, flush=True)
        v = f()
        st_v = st
        if getattr(v, "sampler_factory", None) is not None:
            if st.trajectory is None:
                continue  # sampler mutants need layer 4
            st_v = dataclasses.replace(st, scalar=None, wrapper=None)
        out[name] = run_battery(v, st_v, device=device, seed=seed, progress=progress)
        if st_v is not st:
            out[name].notes.append("sampler mutant: only layer 4 was run (layers 1-3 do not involve the sampler)")
    return out
