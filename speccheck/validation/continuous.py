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
from typing import Any

import numpy as np
import torch

from speccheck.errors import DeviceError
from speccheck.seeding import generator as make_generator
from speccheck.validation.contract import call_verify, check_batch, contract_result
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


def _shared_rows(rows: np.ndarray, hi: float, n_shared: int, shared_rows: int) -> np.ndarray:
    """The rows of a stratum whose delta the declared acceptance is evaluated at: the first
    ``n_shared`` groups of ``shared_rows`` rows (one delta each) of a bin, every row of the atom."""
    return rows[: n_shared * shared_rows] if hi > 0 else rows


def stratum_tests(screen: Screen, rows: np.ndarray, lo: float, hi: float, K: int, alpha: float, power: float,
                  n_shared: int, shared_rows: int, declared: np.ndarray | str | None) -> list[TestResult]:
    """PIT KS, acceptance <= list bound and (``declared``: the verifier's acceptance at the
    stratum's shared deltas, or the error its ``acceptance`` raised) acceptance = declared on
    ``rows``. Pure: no verifier."""
    from speccheck.theory import list_bound_iid

    cell = stratum_cell(lo, hi, K)
    where = {"lo": lo, "hi": hi, "K": K}
    delta, u, acc = screen.delta[rows], screen.u[rows], screen.accepted[rows]
    out = [ks_dkw_test(u, _identity, alpha, cell=cell, test="pit-ks", power=power)]
    bound = list_bound_iid(delta, K) if hi > 0 else np.ones_like(delta)
    out.append(bernoulli_sum_test(int(acc.sum()), bound, alpha, cell=cell, test="acceptance<=list-bound",
                                  one_sided_upper=True, power=power))
    if isinstance(declared, str):
        out.append(TestResult(cell, "acceptance=declared", math.nan, math.nan, 0.0, math.nan,
                              _shared_rows(rows, hi, n_shared, shared_rows).size, passed=False, note=declared))
    elif declared is not None:
        shared = _shared_rows(rows, hi, n_shared, shared_rows)
        per_delta = shared_rows if hi > 0 else rows.size
        a = np.asarray(declared, dtype=np.float64).reshape(-1)
        if a.size != max(1, shared.size // max(per_delta, 1)) or not np.all((a >= 0) & (a <= 1)):
            raise ValueError(f"declared acceptance of stratum {cell!r}: {a.size} values, expected one probability "
                             "per shared delta")
        k = int(screen.accepted[shared].sum())
        out.append(bernoulli_sum_test(k, a, alpha, counts=np.full(a.size, per_delta), cell=cell,
                                      test="acceptance=declared", power=power))
    for r in out:
        r.layer = LAYER
        r.extra.update(where)
    return out


def _identity(v: np.ndarray) -> np.ndarray:
    return v


def draw_k(verifier: Any, spec: ContinuousSpec, K: int, n: int, n_shared: int, device: torch.device, seed: int,
           has_acceptance: bool) -> tuple[list[TestResult], dict | None]:
    """The user-code half of one K: draw every stratum's rows, verify (chunks mixing strata),
    check the contract, read the declared acceptance. Returns the contract results and the raw
    outputs in the drawn order (None when the contract stopped the run): ``delta``, ``z`` =
    s_out - delta, ``accepted`` (numpy), and per stratum the declared acceptance at its shared
    deltas (``declared``: a list with an array, or the error ``acceptance`` raised, per stratum)."""
    strata = spec.strata()
    g = make_generator(seed, device)
    shared_rows = _shared_count(n, n_shared, spec)
    deltas = torch.cat([draw_deltas(lo, hi, n, n_shared, shared_rows, g, device) for lo, hi in strata])
    order = torch.randperm(deltas.numel(), generator=g, device=device)
    deltas = deltas[order]
    z_parts, acc_parts, contract = [], [], {}
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
        z_parts.append(s_out - d)
        acc_parts.append(accepted)
    z = torch.cat(z_parts)
    if bool(torch.isnan(z).any()):  # (an infinite s_out has PIT 0 or 1: it is judged, and contract:finite fails)
        return list(contract.values()), None  # the contract:finite check failed and says so
    inverse = torch.argsort(order)  # back to the drawn order: stratum j is rows j*n ... (j+1)*n - 1
    raw = {"delta": deltas[inverse].cpu().numpy(), "z": z[inverse].cpu().numpy(),
           "accepted": torch.cat(acc_parts)[inverse].cpu().numpy()}
    if has_acceptance:
        raw["declared"] = [_declared_or_error(verifier, raw["delta"], np.arange(j * n, (j + 1) * n), hi, K,
                                              n_shared if hi > 0 else 0, shared_rows)
                           for j, (_, hi) in enumerate(strata)]
    return list(contract.values()), raw


def _shared_count(n: int, n_shared: int, spec: ContinuousSpec) -> int:
    return min(spec.declared_rows, n // max(n_shared, 1)) if n_shared else 0


def _declared_or_error(verifier: Any, delta: np.ndarray, rows: np.ndarray, hi: float, K: int, n_shared: int,
                       shared_rows: int) -> np.ndarray | str:
    try:
        at = delta[_shared_rows(rows, hi, n_shared, shared_rows)][::shared_rows] if hi > 0 else np.zeros(1)
        return _declared(verifier, at, K)
    except Exception as exc:  # noqa: BLE001 - a broken declaration is a defect, judged as such
        return f"acceptance() raised {type(exc).__name__}: {exc}"


def screen_of(raw: dict, K: int) -> Screen:
    """The screening rows of one K from its raw outputs (u = Phi(z), computed here)."""
    z = torch.from_numpy(np.ascontiguousarray(raw["z"], dtype=np.float64))
    return Screen(K, np.asarray(raw["delta"], dtype=np.float64), torch.special.ndtr(z).numpy(),
                  np.asarray(raw["accepted"], dtype=bool))


def judge_k(raw: dict, spec: ContinuousSpec, K: int, n: int, n_shared: int, alpha: float, power: float,
            has_acceptance: bool) -> list[TestResult]:
    """The statistics half of one K, from its raw outputs alone (no verifier, no user code): per
    stratum :func:`stratum_tests`, then the pooled PIT KS. Malformed raw outputs raise ValueError."""
    strata = spec.strata()
    screen = screen_of(raw, K)
    if not (screen.delta.shape == screen.u.shape == screen.accepted.shape == (len(strata) * n,)):
        raise ValueError(f"layer 5 raw outputs at K={K}: {screen.u.shape[0]} rows, expected {len(strata) * n}")
    if not (np.all(np.isfinite(screen.u)) and np.all(np.isfinite(screen.delta))):
        raise ValueError(f"layer 5 raw outputs at K={K} hold non-finite values")
    declared = raw.get("declared") if has_acceptance else None
    if has_acceptance and (not isinstance(declared, list) or len(declared) != len(strata)):
        raise ValueError(f"layer 5 raw outputs at K={K}: the declared acceptance is missing")
    shared_rows = _shared_count(n, n_shared, spec)
    results: list[TestResult] = []
    for j, (lo, hi) in enumerate(strata):
        rows = np.arange(j * n, (j + 1) * n)
        results += stratum_tests(screen, rows, lo, hi, K, alpha, power, n_shared if hi > 0 else 0, shared_rows,
                                 declared[j] if declared is not None else None)
    pooled = ks_dkw_test(screen.u, _identity, alpha, cell=f"all deltas,K={K}", test="pit-ks", power=power)
    pooled.layer = LAYER
    pooled.extra.update({"K": K, "pooled": True})  # names no delta window: not a localisation candidate
    results.append(pooled)
    return results


def run_k(verifier: Any, spec: ContinuousSpec, K: int, n: int, n_shared: int, alpha: float, power: float,
          device: torch.device, seed: int, has_acceptance: bool) -> tuple[list[TestResult], Screen | None]:
    """All strata of one K in this process: :func:`draw_k` then :func:`judge_k`."""
    contract, raw = draw_k(verifier, spec, K, n, n_shared, device, seed, has_acceptance)
    if raw is None:
        return contract, None
    return contract + judge_k(raw, spec, K, n, n_shared, alpha, power, has_acceptance), screen_of(raw, K)


def planned_tests(spec: ContinuousSpec, Ks: list[int], has_acceptance: bool) -> int:
    """Statistical tests the layer runs for ``Ks`` (list-bound tests at delta = 0 included)."""
    per_stratum = 2 + (1 if has_acceptance else 0)
    return len(Ks) * (len(spec.strata()) * per_stratum + 1)


__all__ = ["Screen", "draw_deltas", "draw_k", "judge_k", "planned_tests", "run_k", "scaled",
           "screen_of", "stratum_cell", "stratum_tests"]
