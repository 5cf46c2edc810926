"""The verdicts of the jobs other than one battery run: contract check, kill matrix, speed-up
calibration (the CLI only maps them to exit codes)."""

from __future__ import annotations

from speccheck.scale.jobs import judge_calibration
from speccheck.validation.results import BatteryReport, TestResult
from speccheck.validation.verdict import judge_contract, judge_kill_matrix


def _report(passed: bool, n: int = 1) -> BatteryReport:
    results = [TestResult(cell="c", test="t", statistic=0.1, threshold=1.0, p_value=0.5, mdd=0.01, n=100, layer="L1",
                          passed=passed)
               for _ in range(n)]
    return BatteryReport(verifier="v", suite="s", seed=0, family_alpha=1e-3, per_test_alpha=1e-3, device="cpu",
                         results=results)


def test_contract_verdicts():
    ok = {"cell": "c", "test": "t", "passed": True, "note": ""}
    bad = {"cell": "c", "test": "shape", "passed": False, "note": "wrong shape"}
    oom = {"cell": "c", "test": "t", "passed": False, "note": "raised MemoryError"}
    assert judge_contract("r", [ok, ok], "r").exit_code == 0
    defect = judge_contract("r", [ok, bad], "r")
    assert defect.exit_code == 1 and defect.lines == ["FAIL c shape: wrong shape"]
    assert defect.reason == "r: 1 of 2 contract checks FAILED"
    assert judge_contract("r", [], "r").exit_code == 2
    assert judge_contract("r", [ok, bad, oom], "r").exit_code == 2  # out of memory: no verdict


def test_kill_matrix_verdicts():
    assert judge_kill_matrix({"a": _report(False), "b": _report(False)}, "s").exit_code == 0
    survivor = judge_kill_matrix({"a": _report(False), "b": _report(True)}, "s")
    assert survivor.exit_code == 1 and survivor.data["survivors"] == ["b"]
    assert judge_kill_matrix({}, "s").exit_code == 2
    assert judge_kill_matrix({"a": _report(False, n=0)}, "s").exit_code == 2  # a mutant that ran no test


def test_calibration_verdict_is_holm_over_the_cells():
    cell = {"rule": "dgrs", "K": 2, "L": 3, "acceptance": 0.5}
    assert judge_calibration([{**cell, "calibration_z": 3.28}], 1e-3).exit_code == 0
    rejected = judge_calibration([{**cell, "calibration_z": -3.30}], 1e-3)
    assert rejected.exit_code == 1 and rejected.lines[0].startswith("THEORY CONTRADICTED: 1 of 1 cell(s)")
