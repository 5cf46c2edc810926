"""Layer 7 (the law of calls): the law covers the contract's space, its statistics are right on
known samples, exact rules pass, rules that behave only under test or only on float64 fail,
and the process that draws it holds nothing of the battery."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import special

from speccheck.sampler.calls import CHUNK_EDGES, DTYPES, PATHS, PATTERNS, CallLaw, draw_law, plan_calls
from speccheck.validation import law
from speccheck.validation.stats import ks_distance
from speccheck.verifiers.dgrs import DGRS

ALL_K = tuple(range(1, 17)) + (32, 64)


def test_the_law_covers_the_contracts_space():
    calls = plan_calls(CallLaw(rows=3_000_000, Ks=ALL_K), seed=1)
    B = np.array([c["B"] for c in calls])
    assert B.min() == 1 and B.max() >= 65536
    power_of_two = (B & (B - 1)) == 0
    assert B[power_of_two].sum() < 0.2 * B.sum()  # most rows in calls whose B is no power of two
    assert ({c - 1 for c in CHUNK_EDGES} | {c + 1 for c in CHUNK_EDGES}) & set(B.tolist())
    assert {c["K"] for c in calls} == set(ALL_K)
    assert {c["pattern"] for c in calls} == set(PATTERNS)
    assert {c["dtype"] for c in calls} == set(DTYPES) and {c["path"] for c in calls} == set(PATHS)
    assert any(c["fresh"] for c in calls) and max(c["age"] for c in calls) >= 1000
    states = [c for c in calls if c["path"] == "verify_states"]
    assert {len(c["shape"]) for c in states} >= {1, 2, 3} and {c["sigma"] for c in states} == {"float", "tensor"}
    windows = {tuple(c["window"]) for c in calls if not c["fresh"]}
    assert len(windows) >= 10  # the long-lived instance's delta range moves
    assert calls[0]["K"] == 1 and calls[1]["K"] == 64  # smallest K first, then the largest


def test_plan_is_a_function_of_the_seed():
    a, b = (plan_calls(CallLaw(rows=200_000, Ks=(1, 3)), seed=s) for s in (4, 4))
    assert a == b and a != plan_calls(CallLaw(rows=200_000, Ks=(1, 3)), seed=5)


def test_strata_hold_equal_shares_with_ties_together():
    x = np.repeat(np.arange(10.0), 100)
    labels, n = law.strata_of(x, 4)
    assert n <= 4
    for v in np.unique(x):  # a value never splits
        assert np.unique(labels[x == v]).size == 1
    y = np.random.default_rng(0).random(10_000)
    labels, n = law.strata_of(y, 16)
    assert n == 16 and np.all(np.abs(np.bincount(labels) - 625) <= 1)


def test_strata_ks_is_the_ks_distance_of_each_bin():
    rng = np.random.default_rng(1)
    u = rng.random(5000) ** 1.1
    labels = rng.integers(0, 5, size=u.size)
    order = np.argsort(u)
    got = law.strata_ks(u[order], labels[order], 5)
    for b in range(5):
        assert got.D[b] == pytest.approx(ks_distance(u[labels == b], lambda v: v), abs=1e-12)
        assert got.n[b] == np.sum(labels == b)


def test_bernstein_pvalue_is_valid_and_its_threshold_inverts_it():
    rng = np.random.default_rng(2)
    p = rng.random(2000)
    sums = (rng.random((4000, p.size)) < p).sum(axis=1) - p.sum()
    var = float(np.sum(p * (1 - p)))
    pv = law.bernstein_pvalue(sums, np.full(sums.size, var))
    assert np.mean(pv <= 0.05) <= 0.05  # valid (conservative)
    t = law.bernstein_threshold(np.array([var]), 1e-6)
    assert law.bernstein_pvalue(t, np.array([var]))[0] == pytest.approx(1e-6, rel=1e-9)


def _raw(rule, rows=60_000, seed=3, **kw):
    return draw_law(rule, CallLaw(rows=rows, Ks=(1, 2, 3, 7, 16), **kw), seed=seed)


def test_an_exact_rule_passes_and_a_shift_in_one_stratum_fails():
    raw = _raw(DGRS())
    contract, judged_raw = law.outcome(raw)
    assert all(r.passed for r in contract) and judged_raw is not None
    results = law.judge_layer(judged_raw, alpha=1e-3 / 80, power=0.99, seed=0)
    assert len([r for r in results if r.kind == "stat"]) <= law.planned_tests(True)
    assert all(r.passed for r in results if r.kind == "stat"), [r for r in results if not r.passed]
    bad = dict(judged_raw)
    B = np.asarray(raw["call_B"])[raw["call"]]
    bad["z"] = np.where(B >= 4096, raw["z"] + 0.15, raw["z"])  # a defect only in large calls
    failed = [r for r in law.judge_layer(bad, alpha=1e-3 / 80, power=0.99, seed=0) if not r.passed]
    assert any("B (" in r.cell for r in failed)


def test_the_raw_outputs_are_what_the_rule_returned():
    raw = _raw(DGRS(), rows=20_000)
    assert raw["z"].shape == raw["accepted"].shape == raw["call"].shape == raw["position"].shape
    assert np.all(raw["position"] < np.asarray(raw["call_B"])[raw["call"]])
    u = special.ndtr(raw["z"])
    assert 0 < u.min() and u.max() < 1
    declared = raw["declared"][np.isfinite(raw["declared"])]
    assert declared.size > 0.3 * raw["z"].size and np.all((declared >= 0) & (declared <= 1))
    assert 0 < raw["verify_s"] <= raw["total_s"]


class _GlobalRngOnRareBranch(DGRS):
    name = "global-rng-rare"

    def verify(self, delta, s, generator=None):
        if s.shape[0] == 3:
            torch.rand(1)  # the global torch generator (numpy's and random's are checked where no other thread runs)
        return super().verify(delta, s, generator)


class _DtypeRecorder(DGRS):
    name = "dtype-recorder"
    seen: set = set()

    def verify(self, delta, s, generator=None):
        _DtypeRecorder.seen.add((delta.dtype, s.dtype))
        return super().verify(delta, s, generator)


def test_global_rng_use_is_a_contract_failure_without_chance():
    raw = draw_law(_GlobalRngOnRareBranch(), CallLaw(rows=200_000, Ks=(1, 2), edge_share=0.0), seed=3)
    contract, _ = law.outcome(raw)
    rng = next(r for r in contract if r.test == "contract:global-rng")
    assert not rng.passed and "torch" in rng.note and rng.kind == "contract"


def test_float32_inputs_are_fed():
    _DtypeRecorder.seen = set()
    draw_law(_DtypeRecorder(), CallLaw(rows=20_000, Ks=(1, 2), states_share=0.0), seed=3)
    assert (torch.float32, torch.float32) in _DtypeRecorder.seen and (torch.float64, torch.float64) in \
        _DtypeRecorder.seen


def test_the_promise_is_printed_and_meets_the_issue_target():
    from speccheck.validation.battery import run_battery
    from speccheck.validation.report import format_report

    rep = run_battery("dgrs", "gate", layers=["law"], scale=0.02)
    promise = rep.promise
    assert promise is not None and promise.share == law.SHARE and promise.rows == max(r.n for r in rep.results)
    assert promise.line() in format_report(rep)
    assert all(math.isfinite(v) for v in (promise.pit, promise.acceptance))
    # the PIT MDD follows from the per-bin level and the bin sizes: a full-size run meets the target
    n_full = law.SHARE * promise.rows / 0.02
    worst_level = min(level for _, _, level, _, _ in promise.table)
    assert float(law._pit_mdd(np.array([n_full]), worst_level, 0.99)[0]) < 0.02


def test_the_law_cell_is_the_same_in_process_and_as_a_clean_unit():
    from speccheck.scale.units import Unit, battery_law
    from speccheck.validation.battery import draw_cell, plan_battery, resolve_layers
    from speccheck.validation.suites import load_suite

    st = load_suite("gate")
    plan = plan_battery(DGRS(), st, layers=resolve_layers(["law"]), Ks=[1, 2], scale=0.01)
    _, here = draw_cell(DGRS(), st, ("L7",), plan=plan, base=9, device=torch.device("cpu"), scale=0.01)
    unit = battery_law(Unit("battery-law", {"plan": plan}, ("dgrs", 9, "L7")))
    for key in ("z", "accepted", "declared", "call", "call_B", "call_K"):
        assert np.array_equal(np.asarray(here[key]), np.asarray(unit["raw"][key]), equal_nan=True), key


@pytest.fixture
def user_environment(monkeypatch):
    """The environment of a user who set no SPECCHECK_* variable (the suite sets its cache folder)."""
    import os

    for key in [k for k in os.environ if k.startswith("SPECCHECK_")]:
        monkeypatch.delenv(key)


def test_the_process_that_draws_the_law_holds_nothing_of_the_battery(user_environment):
    from speccheck import api

    out = api.battery("tests.fingerprint_rules:ValidationSpy", "gate", layers=["law"], scale=0.02)
    assert out.verdict == "exact", out.reason


@pytest.mark.parametrize("rule", ["TestAware", "Float32First"])
def test_rules_that_behave_only_under_test_or_on_float64_fail_the_gate(rule, user_environment, capsys):
    from tests.cli_support import run_cli

    code, out, _ = run_cli(["battery", "--verifier", f"tests.fingerprint_rules:{rule}", "--suite", "gate",
                            "--layers", "law", "--scale", "0.02"], capsys)
    assert code == 1 and "FAIL" in out and "L7" in out


def test_calibration_benchmark_judges_each_seed_alone_and_at_the_suite_level():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "calibrate_law.py"
    spec = importlib.util.spec_from_file_location("calibrate_law", path)
    cal = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cal)
    from scipy import stats

    for n in (15, 200):  # more failures than the bound happen with probability <= 1e-3, the bound's do not
        k = cal.binomial_bound(n, 1e-3)
        assert stats.binom.sf(k, n, 1e-3) <= 1e-3 < stats.binom.sf(k - 1, n, 1e-3)
    res = cal.calibrate("rmc", "smoke", [3, 4])
    assert [r["seed"] for r in res["runs"]] == [3, 4]
    for r in res["runs"]:
        assert r["passed"] and r["min_holm_p"] > 1e-3  # an exact rule at the family-wise rate
        # the promise at the whole suite's per-test level: smaller level, larger MDD than L7 alone
        assert 0 < r["suite_level"] < 1e-3 / law.planned_tests(True)
        assert 0 < r["promise_pit"] < 1 and 0 < r["promise_acc"] < 1 and r["declared_rows"] > r["rows"] / 2
    assert "0 false failures in 2 runs" in cal.summary(res)
