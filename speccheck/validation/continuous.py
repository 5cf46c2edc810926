"""Layer 5 of the battery: rows that carry their own delta, so no delta is left between grid points.

Law of the rows (:class:`speccheck.validation.suites.ContinuousSpec`): strata = the atom at
delta = 0 and bins [lo, hi) of the suite's ``edges``; per stratum and K, ``n`` rows with delta
log-uniform on the bin, s[b, :] i.i.d. N(0, 1). The strata are shuffled together, so one
``verify`` call mixes deltas as a trajectory does.

Under exactness, whatever the deltas:

- the probability integral transform u = Phi(s_out - delta) is U(0, 1), i.i.d. over rows
  (KS against the identity, DKW-Massart threshold), per stratum and pooled per K;
- the number of acceptances is a sum of independent Bernoulli(a(delta_b)) with the declared
  acceptance a (two-sided; evaluated at ``declared_deltas`` shared deltas per stratum, as it
  may be slow) and is stochastically below the sum of Bernoulli(list bound(delta_b, K))
  (one-sided); both by :func:`speccheck.validation.stats.bernoulli_sum_test`.

Every test enters the battery's Holm family; each carries its minimum detectable deviation at
the suite's power. The screening data (delta, u, accepted per row) stay available for
:mod:`speccheck.validation.localise`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch

from speccheck.errors import DeviceError
from speccheck.seeding import generator as make_generator
from speccheck.seeding import unit_seed
from speccheck.validation.contract import call_verify, check_batch, contract_result, supports
from speccheck.validation.results import TestResult
from speccheck.validation.stats import bernoulli_sum_test, ks_dkw_test
from speccheck.validation.suites import ContinuousSpec

LAYER = "L5"


@dataclass
class Screen:
    """One K's rows: delta, u = Phi(s_out - delta), accepted (numpy, row order as drawn)."""

    K: int
    delta: np.ndarray
    u: np.ndarray
    accepted: np.ndarray


def stratum_cell(lo: float, hi: float, K: int) -> str:
    """Cell label of a stratum: "delta=0,K=3" for the atom, "delta in [0.1, 0.3),K=3" for a bin."""
    if lo == hi:
        return f"delta={lo:g},K={K}"
    return f"delta in [{lo:g}, {hi:g}),K={K}"


def draw_deltas(lo: float, hi: float, n: int, n_shared: int, shared_rows: int, g: torch.Generator,
                device: torch.device) -> torch.Tensor:
    """n deltas of a stratum: 0 for the atom (lo == hi == 0), else log-uniform on [lo, hi); the
    first n_shared * shared_rows rows come in n_shared groups sharing one such delta."""
    if hi <= 0.0:
        return torch.zeros(n, dtype=torch.float64, device=device)
    log_lo, log_hi = math.log(lo), math.log(hi)
    n_free = n - n_shared * shared_rows
    shared = torch.empty(n_shared, dtype=torch.float64, device=device).uniform_(log_lo, log_hi, generator=g)
    free = torch.empty(n_free, dtype=torch.float64, device=device).uniform_(log_lo, log_hi, generator=g)
    deltas = torch.cat([shared.repeat_interleave(shared_rows), free]).exp()
    return deltas.clamp(min=lo, max=math.nextafter(hi, 0.0))


def scaled(n: int, scale: float, minimum: int = 1) -> int:
    """A draw count times ``scale`` (at least ``minimum``)."""
    return max(minimum, int(round(n * scale)))


def _declared(verifier: Any, deltas: np.ndarray, K: int) -> np.ndarray:
    values = np.asarray(verifier.acceptance(np.asarray(deltas, np.float64), K), np.float64).reshape(-1)
    if values.shape != (deltas.size,) or not np.all((values >= 0) & (values <= 1)):
        raise ValueError(f"acceptance(delta, {K}) must return one probability per delta, got {values[:4]!r}...")
    return values


def stratum_tests(verifier: Any, screen: Screen, rows: np.ndarray, lo: float, hi: float, K: int, alpha: float,
                  power: float, n_shared: int, shared_rows: int, has_acceptance: bool) -> list[TestResult]:
    """PIT KS, acceptance <= list bound and (if declared) acceptance = declared on ``rows``."""
    from speccheck.theory import list_bound_iid

    cell = stratum_cell(lo, hi, K)
    where = {"lo": lo, "hi": hi, "K": K}
    delta, u, acc = screen.delta[rows], screen.u[rows], screen.accepted[rows]
    out = [ks_dkw_test(u, _identity, alpha, cell=cell, test="pit-ks", power=power)]
    bound = list_bound_iid(delta, K) if hi > 0 else np.ones_like(delta)
    out.append(bernoulli_sum_test(int(acc.sum()), bound, alpha, cell=cell, test="acceptance<=list-bound",
                                  one_sided_upper=True, power=power))
    if has_acceptance:
        if hi > 0:  # the declared acceptance at the stratum's shared deltas, on their rows
            shared = rows[: n_shared * shared_rows]
            d_shared, per_delta = screen.delta[shared][::shared_rows], shared_rows
        else:  # the atom: one delta (0) for all rows
            shared, d_shared, per_delta = rows, np.zeros(1), rows.size
        try:
            a = _declared(verifier, d_shared, K)
            k = int(screen.accepted[shared].sum())
            out.append(bernoulli_sum_test(k, a, alpha, counts=np.full(a.size, per_delta), cell=cell,
                                          test="acceptance=declared", power=power))
        except Exception as exc:  # noqa: BLE001 - a broken declaration is a defect
            out.append(TestResult(cell, "acceptance=declared", math.nan, math.nan, 0.0, math.nan, shared.size,
                                  passed=False, note=f"acceptance() raised {type(exc).__name__}: {exc}"))
    for r in out:
        r.layer = LAYER
        r.extra.update(where)
    return out


def _identity(v: np.ndarray) -> np.ndarray:
    return v


def run_k(verifier: Any, spec: ContinuousSpec, K: int, n: int, n_shared: int, alpha: float, power: float,
          device: torch.device, seed: int, has_acceptance: bool) -> tuple[list[TestResult], Screen | None]:
    """All strata of one K: draw, verify (chunks mixing strata), contract, then the tests."""
    strata = spec.strata()
    g = make_generator(seed, device)
    shared_rows = min(spec.declared_rows, n // max(n_shared, 1)) if n_shared else 0
    deltas = torch.cat([draw_deltas(lo, hi, n, n_shared, shared_rows, g, device) for lo, hi in strata])
    stratum_of = torch.arange(len(strata), device=device).repeat_interleave(n)
    order = torch.randperm(deltas.numel(), generator=g, device=device)
    deltas, stratum_of = deltas[order], stratum_of[order]
    u_parts, acc_parts, contract = [], [], {}
    label = f"K={K} (all strata)"
    for start in range(0, deltas.numel(), spec.chunk):
        d = deltas[start:start + spec.chunk]
        s = torch.randn(d.numel(), K, generator=g, dtype=torch.float64, device=device)
        try:
            out = call_verify(verifier, d.clone(), s.clone(), g)
        except DeviceError:
            raise
        except Exception as exc:  # noqa: BLE001 - a defect of the verifier, reported
            return [contract_result(label, "contract:no-exception", 1, d.numel(),
                                    f"verify raised {type(exc).__name__}: {exc}", LAYER)], None
        checks, parsed = check_batch(label, d, s, out, LAYER)
        for r in checks:
            if r.test not in contract or (not r.passed and contract[r.test].passed):
                contract[r.test] = r
        if parsed is None:
            return list(contract.values()), None
        s_out, accepted, _ = parsed
        u_parts.append(torch.special.ndtr(s_out - d))
        acc_parts.append(accepted)
    results = list(contract.values())
    u = torch.cat(u_parts)
    if not bool(torch.isfinite(u).all()):
        return results, None  # the contract:finite check failed and says so
    inverse = torch.argsort(order)  # back to the drawn order: stratum j is rows j*n ... (j+1)*n - 1
    screen = Screen(K, deltas[inverse].cpu().numpy(), u[inverse].cpu().numpy(),
                    torch.cat(acc_parts)[inverse].cpu().numpy())
    for j, (lo, hi) in enumerate(strata):
        rows = np.arange(j * n, (j + 1) * n)
        results += stratum_tests(verifier, screen, rows, lo, hi, K, alpha, power, n_shared if hi > 0 else 0,
                                 shared_rows, has_acceptance)
    pooled = ks_dkw_test(screen.u, _identity, alpha, cell=f"all deltas,K={K}", test="pit-ks", power=power)
    pooled.layer = LAYER
    pooled.extra.update({"K": K, "pooled": True})  # names no delta window: not a localisation candidate
    results.append(pooled)
    return results, screen


def planned_tests(spec: ContinuousSpec, Ks: list[int], has_acceptance: bool) -> int:
    """Statistical tests the layer runs for ``Ks`` (list-bound tests at delta = 0 included)."""
    per_stratum = 2 + (1 if has_acceptance else 0)
    return len(Ks) * (len(spec.strata()) * per_stratum + 1)


def run_layer(verifier: Any, spec: ContinuousSpec, *, Ks: list[int], alpha: float, power: float,
              device: torch.device, base_seed: int, scale: float, has_acceptance: bool,
              heartbeat: Callable[[str], None]) -> tuple[list[TestResult], dict[int, Screen]]:
    """Layer 5 for every K in ``Ks`` the verifier supports; returns (results, screens by K)."""
    n = scaled(spec.n, scale, minimum=16)
    n_shared = spec.declared_deltas if has_acceptance else 0
    results: list[TestResult] = []
    screens: dict[int, Screen] = {}
    for K in Ks:
        if not supports(verifier, K):
            continue
        heartbeat(f"L5 continuous K={K}")
        res, screen = run_k(verifier, spec, K, n, n_shared, alpha, power, device, unit_seed(base_seed, 5, K),
                            has_acceptance)
        results += res
        if screen is not None:
            screens[K] = screen
    return results, screens


__all__ = ["Screen", "draw_deltas", "planned_tests", "run_k", "run_layer", "scaled", "stratum_cell",
           "stratum_tests"]
