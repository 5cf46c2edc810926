"""A time budget instead of a size: measure the rule's cost, size the suite to the budget.

A budgeted run (``speccheck battery --budget SECONDS``, ``speccheck.battery(..., budget=...)``)
first runs a short pilot where the rule runs (:func:`measure_cost`: calls of 1 row and of growing
batches, every row with its own delta, at a few K), fits wall seconds = per call + per row x rows,
then sizes the suite (:func:`plan_budget`): every section's draws times one factor, never below what
the section's tests need to say anything (:func:`minimum_factors`: a KS test at the run's per-test
level that detects a sup-distance of the verdict's floor, :data:`speccheck.validation.verdict.MDD_FLOOR`,
with the suite's power), never above the suite itself. When even the minimum does not fit, the run
is refused before it starts (InputError naming ``--budget``: exit 2). The report then carries a note
with the measured cost, the sizes and the predicted and actual wall time, and the law layer's promise
is what the budget afforded (a budgeted run without a promise has no verdict).
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch

from speccheck.errors import InputError
from speccheck.seeding import generator as make_generator
from speccheck.validation.suites import SIZED_SECTIONS, Suite, sized_suite, suite_cost

__all__ = ["MAX_BUDGET_S", "BudgetPlan", "RuleCost", "check_budget", "measure_cost", "minimum_factors",
           "plan_budget"]

#: the largest budget a run accepts (a week): beyond it a number is a typo, not a plan
MAX_BUDGET_S = 7 * 24 * 3600.0
#: the share of the remaining budget a run is planned to fill (the model's error and the load of a
#: shared machine take the rest)
FILL = 0.7
#: the battery's own wall time per row and per call (drawing inputs, checking the contract, judging),
#: measured in the dgrs gate (benchmarks/bench_battery.py: about 3 us per row, 1 ms per call of the
#: sampler-like layers) with a margin
OWN_ROW_S = 5e-6
OWN_CALL_S = 1.5e-3
#: process starts, the plan, imports, the report: per round of units (4 rounds: pilot, plan and
#: contract, cells, the law layer's own process) when no round was measured
ROUND_S = 3.0
ROUNDS = 4
#: the wrapper layer's verdict is on the median MDD of its KS, chi^2 and MMD tests, larger than a
#: KS test's alone at the same rows (at the KS test's rows its median sat at the floor, 0.251)
WRAPPER_MARGIN = 1.6
_SECTION_LAYER = {"contract": "L0", "scalar": "L1", "wrapper": "L3", "trajectory": "L4", "continuous": "L5",
                  "sequence": "L6", "law": "L7"}


def check_budget(budget: Any, option: str = "budget") -> float | None:
    """``budget`` as seconds (None: no budget). InputError naming ``option`` unless a finite
    number in (0, :data:`MAX_BUDGET_S`]."""
    if budget is None:
        return None
    if isinstance(budget, bool) or not isinstance(budget, (int, float, np.integer, np.floating)):
        raise InputError(f"{option} must be a number of seconds, got {option}={budget!r}")
    value = float(budget)
    if not math.isfinite(value) or not 0.0 < value <= MAX_BUDGET_S:
        raise InputError(f"{option} must be a finite number of seconds in (0, {MAX_BUDGET_S:g}] (a week), "
                         f"got {option}={budget!r}")
    return value


@dataclass(frozen=True)
class RuleCost:
    """The rule's measured wall time: ``per_call_s`` (a call of one row), ``per_row_s`` (each
    further row), ``setup_s`` (the first call at a K beyond the per-call cost: caches the rule
    fills once), from ``calls`` calls and ``rows`` rows in ``pilot_s`` seconds at ``Ks``."""

    per_call_s: float
    per_row_s: float
    setup_s: float
    calls: int
    rows: int
    pilot_s: float
    Ks: tuple[int, ...]
    error: str = ""  # the rule raised in the pilot: the run is sized at its minimum, the battery reports it

    def as_dict(self) -> dict:
        return {**asdict(self), "Ks": list(self.Ks)}

    @classmethod
    def from_dict(cls, d: dict) -> RuleCost:
        values = {k: float(d[k]) for k in ("per_call_s", "per_row_s", "setup_s", "pilot_s")}
        if not all(math.isfinite(v) and v >= 0 for v in values.values()):
            raise ValueError(f"pilot timings must be finite and >= 0, got {values}")
        return cls(calls=int(d["calls"]), rows=int(d["rows"]), Ks=tuple(int(K) for K in d["Ks"]),
                   error=str(d.get("error", "")), **values)


def _pilot_Ks(verifier: Any, suite: Suite) -> list[int]:
    """The smallest, a middle and the largest K of the suite the rule supports."""
    from speccheck.validation.contract import supports

    Ks = sorted({int(K) for part in (suite.scalar, suite.continuous, suite.sequence) if part is not None
                 for K in part.K} | set(suite.law["Ks"] if suite.law else []))
    Ks = [K for K in Ks if supports(verifier, K)] or [1]
    return sorted({Ks[0], Ks[len(Ks) // 2], Ks[-1]})


def measure_cost(verifier: Any, suite: Suite, *, device: torch.device, seed: int, limit_s: float) -> RuleCost:
    """Time ``verifier.verify`` where it runs: at each pilot K a first call (the setup), four calls
    of one row, then batches of 16, 64, ... rows, each size once with one delta for the whole call
    and once with each row its own (log-uniform on [1e-4, 40], as a sampler's constant and mixed
    calls), until a call takes >= 50 ms, 4096 rows, or the pilot has used ``limit_s``. Per row:
    the slope between the one-row calls and the largest batch; over the K, the mean (the suite
    spreads its rows over its K). A rule that raises stops the pilot (``error``)."""
    g = make_generator(seed, device)
    t_start = time.perf_counter()
    per_call, per_row, setup, calls, rows = [], [], [], 0, 0

    def call(B: int, K: int, mixed: bool) -> float:
        nonlocal calls, rows
        delta = torch.exp(torch.empty(B if mixed else 1, dtype=torch.float64, device=device).uniform_(
            math.log(1e-4), math.log(40.0), generator=g)).expand(B).contiguous()
        s = torch.randn(B, K, generator=g, dtype=torch.float64, device=device)
        t0 = time.perf_counter()
        verifier.verify(delta, s, g)
        calls, rows = calls + 1, rows + B
        return time.perf_counter() - t0

    Ks = _pilot_Ks(verifier, suite)
    share = limit_s / len(Ks)
    error = ""
    try:
        for K in Ks:
            k_start = time.perf_counter()
            first = call(1, K, True)
            one = float(np.median([call(1, K, i % 2 == 0) for i in range(4)]))
            setup.append(max(0.0, first - one))
            B, big = 16, None
            while time.perf_counter() - k_start < share:
                t = 0.5 * (call(B, K, True) + call(B, K, False))
                big = (B, t)
                if t >= 0.05 or B >= 4096:
                    break
                B *= 4
            per_call.append(one)
            per_row.append(max(0.0, (big[1] - one) / (big[0] - 1)) if big else one)
    except Exception as exc:  # noqa: BLE001 - the battery's own cells report a rule that raises
        error = f"verify raised {type(exc).__name__}: {exc}"
    return RuleCost(per_call_s=float(np.mean(per_call)) if per_call else 0.0,
                    per_row_s=float(np.mean(per_row)) if per_row else 0.0, setup_s=float(np.sum(setup)),
                    calls=calls, rows=rows, pilot_s=time.perf_counter() - t_start, Ks=tuple(Ks), error=error)


def _n_min(alpha_t: float, power: float) -> int:
    """Rows a DKW-Massart KS test at level ``alpha_t`` needs for its minimum detectable deviation
    (:func:`speccheck.validation.stats.ks_dkw_test`: t_alpha + t_(1-power), both ~ 1 / sqrt(n)) to
    reach the verdict's floor."""
    from speccheck.validation.stats import dkw_threshold
    from speccheck.validation.verdict import MDD_FLOOR

    return int(math.ceil(((dkw_threshold(1, alpha_t) + dkw_threshold(1, 1.0 - power)) / MDD_FLOOR) ** 2))


def _tests_estimate(suite: Suite) -> int:
    """About how many statistical tests the suite runs (for the per-test level: it enters a log)."""
    m = 64
    if suite.scalar is not None:
        m += 4 * (len(suite.scalar.K) * len(suite.scalar.deltas) + len(suite.scalar.extra))
    if suite.continuous is not None:
        m += 3 * len(suite.continuous.strata()) * len(suite.continuous.K)
    if suite.wrapper is not None:
        m += 4 * len(suite.wrapper.dims)
    return m


def minimum_factors(suite: Suite) -> dict[str, float]:
    """The least factor on each section's draws at which its tests still see something: every grid
    cell, wrapper dimension and continuous stratum keeps the rows a KS test needs to detect the
    verdict's floor (:func:`_n_min`; a wrapper dimension :data:`WRAPPER_MARGIN` times that); the
    sequence layer keeps 64 calls; the law and trajectory layers keep their floors
    (:data:`speccheck.validation.suites.SIZED_SECTIONS`)."""
    n_min = _n_min(suite.family_alpha / _tests_estimate(suite), suite.power)
    out = {}
    for section, n, need in (("scalar", suite.scalar.n if suite.scalar else 0, n_min),
                             ("wrapper", suite.wrapper.n if suite.wrapper else 0, math.ceil(WRAPPER_MARGIN * n_min)),
                             ("continuous", suite.continuous.n if suite.continuous else 0, n_min),
                             ("sequence", suite.sequence.calls if suite.sequence else 0, 64)):
        if n:
            out[section] = min(1.0, need / n)
    if suite.law is not None:
        out["law"] = min(1.0, SIZED_SECTIONS["law"] / int(suite.law["rows"]))
    if suite.trajectory is not None:
        out["trajectory"] = min(1.0, SIZED_SECTIONS["trajectory"] / int(suite.trajectory.get("n_traj", 300)))
    return out


@dataclass(frozen=True)
class BudgetPlan:
    """A budgeted run's sizing: ``factors`` per section (the suite's draws times these), the
    predicted wall seconds of the run at that size and at the minimum, the budget, the seconds
    already spent (the pilot) and the rule's measured cost."""

    budget_s: float
    spent_s: float
    factors: dict
    predicted_s: float
    minimum_s: float
    cost: RuleCost

    def note(self, wall_s: float | None = None) -> str:
        sizes = ", ".join(f"{k} x{v:.3g}" for k, v in sorted(self.factors.items()))
        took = "" if wall_s is None else (f"; took {wall_s:.1f} s" + (" (OVER the budget)" if wall_s > self.budget_s
                                                                        else ""))
        return (f"budget {self.budget_s:g} s: the rule measured at {self.cost.per_call_s * 1e3:.3g} ms per call + "
                f"{self.cost.per_row_s * 1e6:.3g} us per row (pilot {self.cost.pilot_s:.1f} s, {self.cost.rows:,} rows "
                f"at K = {list(self.cost.Ks)}); the suite's draws sized to {sizes}; predicted "
                f"{self.spent_s + self.predicted_s:.1f} s{took}")


def _law_work(suite: Suite, base: int) -> tuple[int, int]:
    """(rows, calls) of the law layer's plan: drawn from the run's own seed, so exact (its batch
    sizes are heavy-tailed: a small layer's rows are far from its ``rows``)."""
    from speccheck.sampler.calls import CallLaw, plan_calls
    from speccheck.seeding import unit_seed

    calls = plan_calls(CallLaw.from_dict(dict(suite.law)), unit_seed(base, 7))
    return int(sum(int(c["B"]) for c in calls)), len(calls)


def _predict(suite: Suite, cost: RuleCost, layers: list[str], parallel: int, law: tuple[int, int] | None) -> float:
    """Predicted wall seconds of ``suite`` (already sized) at the measured cost, ``parallel``
    workers; ``law``: the law layer's (rows, calls) (:func:`_law_work`)."""
    c = suite_cost(suite)
    counted = [(section, n) for section, n in c.layers if _SECTION_LAYER.get(section, "L0") in layers]
    rows = sum(n for section, n in counted if section != "law")
    calls = c.calls * rows / max(c.rows, 1)
    if law is not None and "L7" in layers:
        rows, calls = rows + law[0], calls + law[1]
    work = rows * (cost.per_row_s + OWN_ROW_S) + calls * (cost.per_call_s + OWN_CALL_S) + cost.setup_s
    return work / (1.0 + 0.7 * (max(1, parallel) - 1))


def plan_budget(suite: Suite, cost: RuleCost, budget_s: float, *, spent_s: float, layers: list[str],
                parallel: int = 1, round_s: float = ROUND_S, option: str = "--budget",
                base: int | None = None) -> BudgetPlan:
    """The largest factor f <= 1 such that the suite with each section at max(f, its minimum)
    (:func:`minimum_factors`) is predicted to fill at most :data:`FILL` of what is left of the
    budget after ``spent_s`` and the rounds' fixed cost; InputError naming ``option`` when even
    the minimum does not fit (with the seconds the minimum needs). ``base``: the run's seed (the
    suite's by default), which fixes the law layer's calls."""
    floor = minimum_factors(suite)
    fixed = ROUNDS * max(round_s, 0.0)
    if cost.error:  # nothing to size on: the least run, whose contract layer reports the error
        return BudgetPlan(budget_s=budget_s, spent_s=spent_s + fixed, factors=dict(floor), predicted_s=math.nan,
                          minimum_s=math.nan, cost=cost)
    room = FILL * (budget_s - spent_s - fixed)

    def factors(f: float) -> dict:
        return {k: min(1.0, max(f, lo)) for k, lo in floor.items()}

    law_work: dict = {}  # the law layer's plan per row count (it takes a second at 3 M rows)

    def predicted(f: float) -> float:
        sized = sized_suite(suite, factors(f))
        if sized.law is not None and sized.law["rows"] not in law_work:
            law_work[sized.law["rows"]] = _law_work(sized, suite.seed if base is None else base)
        return _predict(sized, cost, layers, parallel, law_work.get(sized.law["rows"]) if sized.law else None)

    least = predicted(0.0)
    if least > room:
        need = spent_s + fixed + least / FILL
        raise InputError(f"{option} {budget_s:g}: too small for suite {suite.name!r} on this rule: it measured "
                         f"{cost.per_call_s * 1e3:.3g} ms per call + {cost.per_row_s * 1e6:.3g} us per row, and the "
                         f"least run whose tests can still see something needs about {need:.0f} s; give "
                         f"{option} >= {math.ceil(need)} (or a smaller suite, fewer layers)")
    if predicted(1.0) <= room:
        f = 1.0
    else:
        lo, hi = 0.0, 1.0  # predicted(lo) fits, predicted(hi) does not
        for _ in range(40):
            mid = math.sqrt(lo * hi) if lo > 0 else hi / 1024.0
            lo, hi = (mid, hi) if predicted(mid) <= room else (lo, mid)
            if lo > 0 and hi / lo < 1.01:
                break
        f = lo
    chosen = factors(f)
    return BudgetPlan(budget_s=budget_s, spent_s=spent_s + fixed, factors=chosen, predicted_s=predicted(f),
                      minimum_s=least, cost=cost)
