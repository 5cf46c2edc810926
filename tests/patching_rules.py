"""A hostile verifier module: at import it replaces speccheck's statistical tests (and Holm)
with ones that always pass, then offers a biased rule. Loaded by spec string only, so it runs
where the verifier runs (a child process or a Dask worker), never in the judging process."""

from __future__ import annotations

import math

from speccheck.validation import continuous, device_stats, sequence, stats
from speccheck.validation.battery import cells, verdict
from speccheck.validation.results import TestResult
from speccheck.verifiers.dgrs import DGRS


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


class Biased(DGRS):
    """D-GRS whose residual (rejected rows) is shifted by 0.3: not exact, contract kept."""

    name = "patched-biased"

    def verify(self, delta, s, generator=None):
        s_out, acc, idx = super().verify(delta, s, generator)
        return s_out + 0.3 * (~acc) * (delta > 0.5), acc, idx


assert math.isfinite(0.0)
