"""The exactness battery: run a suite of statistical and contract tests on one verifier.

Layers (sizes in the suite's TOML, ``speccheck/data/suites/*.toml``; ``layers=`` picks some):

- L0 contract (:func:`speccheck.validation.contract.contract_checks`): shapes, dtypes, device,
  index == K iff rejected, accepted => s_out == s[index], same seed => same output, another
  seed changes it, ``generator=None`` works, inputs unchanged. Deterministic (rate 0).
- L1 scalar grid: KS of s_out against N(delta, 1) (DKW-Massart) and the lower/upper
  ``tail_q`` tails (exact binomial) on a delta x K grid, plus the contract on every batch
  (:mod:`speccheck.validation.device_stats` reduces them);
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

Who computes what: each cell is drawn (:func:`draw_cell`: the verifier's code runs, the contract
is checked, the raw outputs come back as arrays) and judged (:func:`judge_cell`: every statistic,
threshold and pass/fail from those arrays alone, never calling the verifier). A run through
``speccheck.api.battery`` (the command, the pytest fixture, Dask) draws in another process (an
isolated child or a Dask worker) and judges in the calling process, which never imports the
verifier's module: code that patches speccheck's statistics where the verifier runs changes
nothing in the verdict.

A time budget instead of a size (``speccheck battery --budget SECONDS``):
:mod:`speccheck.validation.battery.budget` measures the rule's cost in a pilot and sizes the
suite's draws to the budget (never below what each layer's tests need; exit 2 naming
``--budget`` otherwise).

Error control: every statistical test has a valid p-value; the suite's family-wise
false-failure rate ``family_alpha`` is split by Holm over all of them; thresholds are quoted
at the binding level family_alpha / m; each test carries its minimum detectable deviation at
the suite's power. When the run fails, :mod:`speccheck.validation.localise` confirms the
failing delta window and K on fresh draws, with an error budget of its own.
"""

from speccheck.validation.battery.cells import STAT_LAYERS, draw_cell, judge_cell, run_cell
from speccheck.validation.battery.plan import _check_alpha as _check_alpha  # private, used by speccheck.api and
from speccheck.validation.battery.plan import _check_Ks as _check_Ks  # speccheck.scale through this package
from speccheck.validation.battery.plan import _check_scale as _check_scale
from speccheck.validation.battery.plan import _check_seed as _check_seed
from speccheck.validation.battery.plan import (
    battery_cells,
    check_evidence,
    first_cells,
    fresh_verifier,
    load_verifier,
    per_test_alpha,
    plan_battery,
    planned_tests,
    resolve_device,
    resolve_layers,
)
from speccheck.validation.battery.run import assert_battery_passes, run_battery
from speccheck.validation.battery.verdict import (
    assemble_report,
    failures_to_localise,
    localise_report,
)
from speccheck.validation.contract import contract_checks
from speccheck.validation.results import BatteryReport, TestResult

__all__ = ["STAT_LAYERS", "BatteryReport", "TestResult", "assemble_report", "assert_battery_passes", "battery_cells",
           "check_evidence", "contract_checks", "draw_cell", "failures_to_localise", "first_cells", "fresh_verifier",
           "judge_cell", "load_verifier", "localise_report", "per_test_alpha", "plan_battery", "planned_tests",
           "resolve_device", "resolve_layers", "run_battery", "run_cell"]

