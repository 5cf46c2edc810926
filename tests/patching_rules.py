"""A hostile verifier module: at import it replaces speccheck's statistical tests, Holm, the
battery's judges, the speed-up summaries' calibration z and the e2e tests with ones that always pass, then
offers a biased rule and a rule declaring a wrong acceptance law. Loaded by spec string only, so it runs
where the verifier runs (a child process or a Dask worker), never in the judging process."""

from __future__ import annotations

from speccheck.sampler import analysis
from speccheck.scale import jobs
from speccheck.validation import continuous, device_stats, e2e, sequence, stats, trajectory
from speccheck.validation.battery import cells, verdict
from speccheck.validation.results import TestResult
from tests.biased_rules import Biased as BiasedTwin
from tests.biased_rules import Loud as LoudTwin
from tests.biased_rules import Overclaiming as OverclaimingTwin


def _always_pass(*args, **kwargs):
    return TestResult(kwargs.get("cell", ""), kwargs.get("test", "patched"), 0.0, 1.0, 1.0, 0.01, 100)


def _no_rejection(results, alpha):
    for r in results:
        if r.kind == "stat":
            r.passed = True


for module in (stats, continuous, device_stats, sequence, cells, verdict):
    for name in ("ks_dkw_test", "tail_test", "binom_test", "bernoulli_sum_test", "mmd_linear_test"):
        if hasattr(module, name):
            setattr(module, name, _always_pass)
    if hasattr(module, "holm_adjust"):
        module.holm_adjust = _no_rejection
sequence._normal_test = lambda *a, **k: TestResult("", a[3] if len(a) > 3 else "patched", 0.0, 1.0, 1.0, 0.01, 100)
# and every judge: where this module is imported, a cell's statistics come out empty
cells.judge_cell = lambda suite, cell, contract, raw, **kw: list(contract)
cells._judge = lambda *a, **k: []
continuous.judge_k = lambda *a, **k: []
sequence.judge_layer = lambda *a, **k: []
trajectory.judge_trajectories = lambda *a, **k: []
# and the speed-up summaries' statistics: z = 0, no contradiction
analysis.calibration = lambda *a, **k: {"n_events": 1, "observed_accepts": 0.0, "expected_accepts": 0.0,
                                        "calibration_z": 0.0}
jobs.calibration_contradictions = lambda rows, alpha: []
# and the e2e tests: innovations, energy distance, calibration and the verdict all pass
trajectory.innovation_tests = lambda *a, **k: []
e2e.energy_distance_test = lambda *a, **k: {"energy_distance": 0.0, "p_value": 1.0, "n": 0, "n_perm": 0,
                                            "paired": True}
e2e.calibration_check = lambda *a, **k: {"ran": True, "passed": True, "z": 0.0}
e2e.judge_e2e = lambda cfg, report, raw: {**report, "exactness": {}, "exact": True}
e2e.verdict = lambda checks: True


class Biased(BiasedTwin):
    """The biased rule of :mod:`tests.biased_rules`, loaded after the patches above."""


class Overclaiming(OverclaimingTwin):
    """The wrong-law rule of :mod:`tests.biased_rules`, loaded after the patches above."""


class Loud(LoudTwin):
    """The loud biased rule of :mod:`tests.biased_rules`, loaded after the patches above."""
