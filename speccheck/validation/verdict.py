"""One verdict rule for every way a battery runs (API, CLI, pytest fixture, Dask units).

:func:`judge` turns a :class:`~speccheck.validation.results.BatteryReport` into a
:class:`BatteryOutcome` whose ``verdict`` is

- ``"exact"``: every test passed, there was evidence (at least one statistical test) and the
  run had power: in each layer the median minimum detectable deviation (MDD, at the suite's
  power, on the probability scale of its statistic: a KS/PIT distance, an acceptance rate, a
  tail share) is at most :data:`MDD_FLOOR`;
- ``"defect"``: a test failed (after Holm over the whole family) that is not a resource
  failure: the verifier is not exact, or it broke the contract (an exception raised by
  ``verify`` is a contract failure, hence a defect);
- ``"no_verdict"``: the run could not decide: no statistical test, a layer without power
  (``--scale`` too small), the verifier ran out of memory, or the run itself could not
  finish (a timeout, a crash, a bad option found late); ``reason`` says which.

The exit code follows the README's contract: exact 0, defect 1, no verdict 2.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from speccheck.errors import EXIT_CANNOT_RUN, EXIT_DEFECT, EXIT_OK
from speccheck.validation.results import LAYERS, BatteryReport, TestResult

__all__ = ["MDD_FLOOR", "VERDICTS", "BatteryOutcome", "judge", "no_verdict", "resource_failures",
           "CheckOutcome", "judge_contract", "judge_kill_matrix"]

#: verdicts and their exit codes
VERDICTS = {"exact": EXIT_OK, "defect": EXIT_DEFECT, "no_verdict": EXIT_CANNOT_RUN}

#: largest median MDD a layer may have for its passing tests to count as evidence (a KS
#: distance, acceptance rate or tail share of 0.25: a run that cannot see that sees nothing)
MDD_FLOOR = 0.25

_RESOURCE_MARKS = ("raised MemoryError", "raised OutOfMemoryError", "out of memory", "not enough memory",
                   "DefaultCPUAllocator", "can't allocate memory", "Cannot allocate memory")


@dataclass
class BatteryOutcome:
    """The outcome of one battery run: ``verdict`` (exact / defect / no_verdict), the
    ``report`` (None when the run did not finish), the ``reason`` in one line, and the
    per-layer median MDDs the power rule looked at."""

    verdict: str
    reason: str
    report: BatteryReport | None = None
    layer_mdd: dict[str, float] = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        return VERDICTS[self.verdict]

    @property
    def exact(self) -> bool:
        return self.verdict == "exact"

    def to_frame(self, failures_only: bool = False) -> object:
        """The report's tests as a pandas DataFrame (:meth:`BatteryReport.to_frame`); when the run
        did not finish (no report), an empty one with the same columns: a script may always call it."""
        report = self.report if self.report is not None else BatteryReport("", "", 0, 0.0, 0.0, "")
        return report.to_frame(failures_only=failures_only)

    def to_dict(self) -> dict:
        """Strict JSON (non-finite floats null): the verdict, exit code, reason, layer MDDs, report."""
        from speccheck.strict_json import finite_json

        return finite_json({"verdict": self.verdict, "exit_code": self.exit_code, "reason": self.reason,
                            "layer_mdd": dict(self.layer_mdd),
                            "report": None if self.report is None else self.report.to_dict()})


def no_verdict(reason: str, report: BatteryReport | None = None) -> BatteryOutcome:
    """A run that could not decide (exit code 2)."""
    return BatteryOutcome("no_verdict", reason, report)


def resource_failures(report: BatteryReport) -> list[TestResult]:
    """Failed tests whose note says the verifier ran out of memory: no verdict on the rule."""
    return [r for r in report.results if not r.passed and any(m in (r.note or "") for m in _RESOURCE_MARKS)]


def layer_mdds(report: BatteryReport) -> dict[str, float]:
    """Median finite MDD of each layer's statistical tests."""
    by_layer: dict[str, list[float]] = {}
    for r in report.results:
        if r.kind == "stat" and isinstance(r.mdd, float) and math.isfinite(r.mdd):
            by_layer.setdefault(r.layer or "?", []).append(r.mdd)
    return {layer: float(statistics.median(v)) for layer, v in sorted(by_layer.items())}


def judge(report: BatteryReport, *, mdd_floor: float = MDD_FLOOR) -> BatteryOutcome:
    """The verdict of ``report`` (see the module docstring for the rules, in the order applied)."""
    oom = resource_failures(report)
    if oom:
        return no_verdict(f"the run of {report.verifier!r} ran out of memory in cell {oom[0].cell} ({oom[0].note}); "
                          "no verdict on the rule (use a smaller --scale or another --device)", report)
    mdds = layer_mdds(report)
    n_stat = sum(r.kind == "stat" for r in report.results)
    if not report.passed:
        failed = report.failures
        return BatteryOutcome("defect", f"{len(failed)} of {len(report.results)} tests failed "
                                        f"(first: {failed[0].cell} {failed[0].test})", report, mdds)
    if not report.results or n_stat == 0:
        return no_verdict(f"suite {report.suite!r} ran {len(report.results)} tests ({n_stat} statistical) on "
                          f"{report.verifier!r}: no verdict from no evidence; select a suite, layers or K with "
                          "statistical tests", report)
    weak = {layer: m for layer, m in mdds.items() if m > mdd_floor}
    if weak:
        names = ", ".join(f"{layer} ({LAYERS.get(layer, layer)}) {m:.3g}" for layer, m in weak.items())
        return BatteryOutcome("no_verdict", f"no power: median minimum detectable deviation {names} exceeds the "
                                            f"floor {mdd_floor:g} (scale {report.scale:g}); a pass here would "
                                            "prove nothing: raise --scale", report, mdds)
    return BatteryOutcome("exact", f"{len(report.results)} tests passed ({n_stat} statistical)", report, mdds)


# ----------------------------------------------------------------------------- other jobs' verdicts
@dataclass
class CheckOutcome:
    """The verdict of a job other than one battery run (a contract check, a kill matrix, a
    speed-up run or sweep: :func:`speccheck.scale.jobs.judge_calibration`): ``verdict`` (exact /
    defect / no_verdict, exit codes as for a battery), ``reason`` in one line, ``lines`` to print
    after the job's own output (the failures), and ``data``: what the job returned."""

    verdict: str
    reason: str
    data: dict = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return VERDICTS[self.verdict]


def judge_contract(name: str, checks: list[dict], spec: str) -> CheckOutcome:
    """A contract check's verdict from its rows (``cell``, ``test``, ``passed``, ``note``): no
    verdict when none ran or a failure is an out-of-memory; else defect when any failed."""
    if not checks:
        return CheckOutcome("no_verdict", f"no contract check could be run on {spec!r} (does supports_K accept "
                                          "any K?)")
    failed = [c for c in checks if not c.get("passed")]
    oom = next((c for c in failed if any(m in c.get("note", "") for m in ("MemoryError",) + _RESOURCE_MARKS)), None)
    if oom is not None:
        return CheckOutcome("no_verdict", f"verifier {spec!r} ran out of memory ({oom['note']}); no verdict")
    data = {"name": name, "checks": checks}
    if failed:
        lines = [f"FAIL {c['cell']} {c['test']}: {c['note']}" for c in failed]
        return CheckOutcome("defect", f"{name}: {len(failed)} of {len(checks)} contract checks FAILED", data, lines)
    return CheckOutcome("exact", f"{name}: ok ({len(checks)} contract checks passed)", data)


def judge_kill_matrix(reports: dict[str, BatteryReport], suite: str) -> CheckOutcome:
    """A kill matrix's verdict: exact (the suite has power) when every mutant is killed (fails the
    suite); defect when one survives; no verdict when no mutant ran or one ran no test."""
    if not reports:
        return CheckOutcome("no_verdict", "no mutant was run (the suite has no layer the selected mutants can be "
                                          "tested on)")
    empty = [k for k, rep in reports.items() if not rep.results]
    if empty:
        return CheckOutcome("no_verdict", f"suite {suite!r} ran no test on mutant(s) {empty}; no verdict")
    survivors = [k for k, rep in reports.items() if rep.passed]
    data = {"reports": reports, "survivors": survivors}
    if survivors:
        return CheckOutcome("defect", f"{len(survivors)} of {len(reports)} mutant(s) survived: {survivors}", data)
    return CheckOutcome("exact", f"all {len(reports)} mutants killed", data)
