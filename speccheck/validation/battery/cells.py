"""The battery's cell loop: one unit of work per cell (the contract, a delta x K grid cell, a
continuous-layer K, a wrapper dimension, the trajectory, the sequence), each seeded from its
identity so it gives the same results wherever and in whatever order it runs."""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
import torch
from scipy import special
from scipy import stats as sstats

from speccheck.errors import DeviceError, InputError
from speccheck.seeding import generator as make_generator
from speccheck.seeding import pinned_global_rngs, unit_seed
from speccheck.validation import continuous, device_stats, sequence
from speccheck.validation.battery.plan import _Plan, _plan_of
from speccheck.validation.contract import (
    call_verify,
    check_batch,
    contract_checks,
    contract_result,
    is_device_failure,
    supports,
)
from speccheck.validation.results import TestResult
from speccheck.validation.stats import binom_test, ks_dkw_test
from speccheck.validation.suites import Suite
from speccheck.validation.trajectory import run_trajectory_checks

__all__ = ["run_cell"]


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


def run_cell(verifier: Any, suite: Suite, cell: tuple, *, plan: dict | None, base: int, alpha_t: float,
             device: torch.device, scale: float) -> tuple[list[TestResult], Any]:
    """One cell of a battery run: ``(results, screen)`` (the continuous layer's rows at that K for
    localisation, else None). Its seed comes from its identity (``unit_seed(base, layer number,
    label)``), and the global generators start from a seed of that identity too
    (:func:`speccheck.seeding.pinned_global_rngs`), so a cell gives the same results wherever and
    in whatever order it runs. The L0 and L4 cells need no plan; the others take the per-test
    level ``alpha_t`` of the whole family."""
    with pinned_global_rngs(unit_seed(base, "global-rngs", repr(tuple(cell))), device):
        return _run_cell(verifier, suite, cell, plan=plan, base=base, alpha_t=alpha_t, device=device, scale=scale)


def _run_cell(verifier: Any, suite: Suite, cell: tuple, *, plan: dict | None, base: int, alpha_t: float,
              device: torch.device, scale: float) -> tuple[list[TestResult], Any]:
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
