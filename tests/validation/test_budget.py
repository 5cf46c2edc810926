"""The budgeted battery (issue 39 item 8): --budget / budget= sizes the run to a time budget
after a pilot; never below what the tests need (exit 2 naming --budget), a promise printed."""

from __future__ import annotations

import math
import time

import pytest
import torch

from speccheck.errors import InputError
from speccheck.validation.battery.budget import (
    FILL,
    MAX_BUDGET_S,
    WRAPPER_MARGIN,
    RuleCost,
    _n_min,
    _tests_estimate,
    check_budget,
    measure_cost,
    minimum_factors,
    plan_budget,
)
from speccheck.validation.suites import SIZED_SECTIONS, load_suite, parse_suite, sized_suite
from tests.cli_support import run_cli

ALL = ["L0", "L1", "L2", "L3", "L4", "L5", "L6", "L7"]
SLOW = "tests.slow_rules:SlowDGRS"  # exact D-GRS at 10 ms of wall time per row


def _cost(per_row: float, per_call: float = 1e-3) -> RuleCost:
    return RuleCost(per_call_s=per_call, per_row_s=per_row, setup_s=0.0, calls=10, rows=1000, pilot_s=0.5, Ks=(1,))


@pytest.mark.parametrize("bad", [0, -1, -0.0, math.nan, math.inf, -math.inf, MAX_BUDGET_S * 2, 1e300, "60", True,
                                 None.__class__, [60]])
def test_check_budget_refuses_what_is_not_a_duration(bad):
    with pytest.raises(InputError, match="budget"):
        check_budget(bad)


def test_check_budget_keeps_a_duration():
    assert check_budget(None) is None
    assert check_budget(90) == 90.0 and check_budget(0.5) == 0.5 and check_budget(MAX_BUDGET_S) == MAX_BUDGET_S


@pytest.mark.parametrize("bad", ["0", "-5", "nan", "inf", "-inf", "1e12", "sixty", ""])
def test_cli_bad_budget_exits_2_naming_it(bad, capsys):
    code, out, err = run_cli(["battery", "--verifier", "dgrs", "--suite", "smoke", "--budget", bad], capsys)
    assert code == 2 and "--budget" in err, err


@pytest.mark.parametrize("extra", [["--scale", "0.5"], ["--mutants"]])
def test_cli_budget_excludes_scale_and_mutants(extra, capsys):
    argv = ["battery", "--suite", "smoke", "--budget", "60"] + (extra if extra == ["--mutants"]
                                                                 else ["--verifier", "dgrs"] + extra)
    code, out, err = run_cli(argv, capsys)
    assert code == 2 and "--budget" in err, err


def test_sized_suite_scales_each_section_and_keeps_the_floors():
    gate = load_suite("gate")
    half = sized_suite(gate, {"scalar": 0.5, "continuous": 0.25, "law": 0.1})
    assert half.scalar.n == gate.scalar.n // 2 and [n for *_, n in half.scalar.extra] == [
        n // 2 for *_, n in gate.scalar.extra]
    assert half.continuous.n == gate.continuous.n // 4 and half.law["rows"] == gate.law["rows"] // 10
    assert half.wrapper.n == gate.wrapper.n and half.sequence.calls == gate.sequence.calls  # not named: kept
    tiny = sized_suite(gate, dict.fromkeys(SIZED_SECTIONS, 1e-9))
    assert tiny.scalar.n == SIZED_SECTIONS["scalar"] and tiny.law["rows"] == SIZED_SECTIONS["law"]
    assert tiny.trajectory["n_traj"] == SIZED_SECTIONS["trajectory"]
    assert tiny.sequence.calls == SIZED_SECTIONS["sequence"]
    assert gate.scalar.n == load_suite("gate").scalar.n  # the suite given is not changed
    for bad in ({"scalar": 0}, {"scalar": 1.5}, {"scalar": math.nan}, {"nope": 0.5}, {"law": True}, [0.5]):
        with pytest.raises(InputError, match="sizes"):
            sized_suite(gate, bad)


def test_minimum_factors_keep_what_each_test_needs():
    """At the minimum every grid cell, wrapper dimension and continuous stratum keeps the rows a
    KS test needs for its minimum detectable deviation to reach the verdict's floor."""
    from speccheck.validation.stats import ks_dkw_test
    from speccheck.validation.verdict import MDD_FLOOR

    for name in ("smoke", "gate", "full"):
        st = load_suite(name)
        low = sized_suite(st, minimum_factors(st))
        alpha_t = st.family_alpha / _tests_estimate(st)
        n = _n_min(alpha_t, st.power)
        # its median MDD includes its chi^2 and MMD tests (a suite smaller than that keeps its own size)
        assert low.wrapper.n >= min(st.wrapper.n, math.ceil(WRAPPER_MARGIN * n))
        for rows in (low.scalar.n, low.wrapper.n, low.continuous.n):
            assert rows >= n
            x = torch.rand(rows, dtype=torch.float64).numpy()
            assert ks_dkw_test(x, lambda v: v, alpha_t, power=st.power).mdd <= MDD_FLOOR
        assert ks_dkw_test(torch.rand(n - 2, dtype=torch.float64).numpy(), lambda v: v, alpha_t,
                           power=st.power).mdd > MDD_FLOOR  # and not more than it needs


def test_plan_fills_the_budget_monotonically_and_refuses_what_cannot_fit():
    gate = load_suite("gate")
    floor = minimum_factors(gate)
    plans = [plan_budget(gate, _cost(1e-5), b, spent_s=1.0, layers=ALL, round_s=1.0) for b in (100, 300, 1000, 1e5)]
    for plan in plans:
        assert all(floor[k] <= f <= 1.0 for k, f in plan.factors.items())
        assert plan.predicted_s <= FILL * (plan.budget_s - plan.spent_s) + 1e-9
    assert [p.factors["law"] for p in plans] == sorted(p.factors["law"] for p in plans)
    assert plans[-1].factors == dict.fromkeys(floor, 1.0)  # a generous budget runs the whole suite, never more
    with pytest.raises(InputError, match=r"--budget 60: too small .* give --budget >= \d+"):
        plan_budget(gate, _cost(0.01), 60, spent_s=1.0, layers=ALL, round_s=1.0)
    slow = plan_budget(gate, _cost(0.01), 5000, spent_s=1.0, layers=ALL, round_s=1.0)
    assert slow.factors["continuous"] == floor["continuous"] and slow.factors["law"] > floor["law"]
    assert "budget 5000 s" in slow.note() and "took 12.0 s" in slow.note(12.0) and "OVER" in slow.note(6000.0)


def test_measure_cost_sees_a_rule_that_costs_10_ms_per_row():
    from tests.slow_rules import SlowDGRS

    cost = measure_cost(SlowDGRS(), load_suite("smoke"), device=torch.device("cpu"), seed=3, limit_s=1.0)
    assert not cost.error and cost.rows > 16
    assert 0.009 <= cost.per_row_s <= 0.02  # the sleep, plus the D-GRS kernel and the load of a shared machine


def test_measure_cost_of_a_rule_that_raises_sizes_nothing():
    from tests.api_rules import RaisesOnSmallBatches

    cost = measure_cost(RaisesOnSmallBatches(), load_suite("smoke"), device=torch.device("cpu"), seed=3, limit_s=1.0)
    assert "verify raised RuntimeError" in cost.error
    plan = plan_budget(load_suite("smoke"), cost, 60, spent_s=1.0, layers=ALL)
    assert plan.factors == minimum_factors(load_suite("smoke"))


TINY = """
name = "tiny-budget"
seed = 5
family_alpha = 1e-3
[contract]
n = 16
[scalar]
deltas = [1.0]
K = [2]
n = 4096
[law]
rows = 8192
K = [1, 2, 3]
max_batch = 512
"""


@pytest.mark.slow
def test_a_10_ms_per_row_rule_finishes_within_its_budget_with_a_promise(tmp_path, capsys):
    """The rule sleeps 10 ms per row: the budgeted run measures that, sizes the suite (the grid
    and law rows scaled down), finishes within the budget and prints the promise it afforded."""
    suite = tmp_path / "tiny.toml"
    suite.write_text(TINY)
    budget = 75.0
    t0 = time.perf_counter()
    code, out, err = run_cli(["battery", "--verifier", SLOW, "--suite", str(suite), "--budget", str(budget),
                              "--quiet"], capsys)
    took = time.perf_counter() - t0
    assert code == 0, out + err
    assert took <= budget, f"took {took:.1f} s for a budget of {budget:g} s"
    assert "promise (L7" in out and "note: budget 75 s: the rule measured at" in out
    assert "sized to" in out and "OVER" not in out


def test_a_budgeted_run_without_the_law_layer_has_no_verdict(tmp_path):
    from speccheck.api import battery

    suite = tmp_path / "tiny.toml"
    suite.write_text(TINY)
    outcome = battery("dgrs", str(suite), budget=60, layers=["L0", "L1"])
    assert outcome.verdict == "no_verdict" and outcome.exit_code == 2 and "promise" in outcome.reason


def test_a_budgeted_defect_exits_1(tmp_path):
    from speccheck.api import battery

    suite = tmp_path / "tiny.toml"
    suite.write_text(TINY)
    outcome = battery("tests.api_rules:Biased", str(suite), budget=30)
    assert outcome.verdict == "defect" and outcome.exit_code == 1
    assert any(n.startswith("budget 30 s") for n in outcome.report.notes)


def test_budget_too_small_for_the_gate_on_a_10_ms_rule_exits_2_naming_it(capsys):
    code, out, err = run_cli(["battery", "--verifier", SLOW, "--suite", "gate", "--budget", "120", "--quiet"], capsys)
    assert code == 2 and "--budget 120: too small for suite 'gate'" in err and "give --budget >=" in err


def test_an_object_rule_is_budgeted_in_this_process(tmp_path):
    from speccheck.api import battery
    from tests.slow_rules import SlowDGRS

    suite = tmp_path / "tiny.toml"
    suite.write_text(TINY)
    rule = SlowDGRS()
    rule.PER_ROW_S = 0.002
    outcome = battery(rule, str(suite), isolate=False, budget=20)
    assert outcome.verdict == "exact" and outcome.report.promise is not None
    assert any(n.startswith("budget 20 s") for n in outcome.report.notes)


def test_parse_suite_of_the_tiny_budget_suite():
    import tomllib

    assert parse_suite(tomllib.loads(TINY)).law["rows"] == 8192


def test_a_budgeted_run_on_two_dask_workers(tmp_path):
    """The pilot runs as a unit on the workers; the report's CPU is this process's plus the
    workers' units' (never more than the processes could have spent in its wall time)."""
    from speccheck.api import battery

    suite = tmp_path / "tiny.toml"
    suite.write_text(TINY)
    outcome = battery("dgrs", str(suite), budget=60, workers=2)
    report = outcome.report
    assert outcome.verdict == "exact" and report.promise is not None
    assert any(n.startswith("budget 60 s: the rule measured at") for n in report.notes)
    assert 0.0 < report.cpu_s <= 3 * report.wall_s
