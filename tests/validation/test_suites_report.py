"""Suite TOML loading/validation and the report formats."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from speccheck.errors import LoadError
from speccheck.validation.battery import run_battery
from speccheck.validation.mutants import ReferenceRMC
from speccheck.validation.report import format_kill_matrix, format_report, junit_xml, report_dict
from speccheck.validation.results import BatteryReport, Localisation, TestResult
from speccheck.validation.suites import BUILTIN_SUITES, load_suite, parse_suite


def test_builtin_suites_load_and_are_sized():
    s = {name: load_suite(name) for name in BUILTIN_SUITES}
    assert s["full"].scalar.n >= 2 ** 24
    assert max(s["gate"].scalar.K) == 16 and set(s["gate"].wrapper.dims) == {1, 2, 64, 1024}
    assert min(s["gate"].scalar.deltas) <= 0.05 and max(s["gate"].scalar.deltas) >= 10
    assert all(x.family_alpha == 1e-3 for x in s.values())
    assert len({x.seed for x in s.values()}) == 3
    assert (1.0, 2, 2 ** 19) in s["gate"].scalar.extra
    assert s["gate"].continuous.K == list(range(1, 17)) + [32, 64]
    assert s["full"].continuous.K == list(range(1, 65))
    for x in s.values():  # every delta in [0, 40] is covered, from 1e-8 up
        assert x.continuous.zero_atom and x.continuous.edges[0] <= 1e-8 and x.continuous.edges[-1] == 40.0


def test_builtin_suites_replay_the_sequence_layer():
    """Every shipped suite replays the sequence layer's first calls on a fresh instance after the
    global RNGs moved (issue 39 item 8: not only a custom suite turns the replay on)."""
    for name in BUILTIN_SUITES:
        seq = load_suite(name).sequence
        assert seq is not None and 16 <= seq.replay <= seq.calls, name


def test_suites_ship_as_package_data(tmp_path, monkeypatch):
    """Found by name from any directory (no repository checkout needed); a user's file by path."""
    from importlib import resources

    from speccheck.validation.suites import find_suite, known_suites

    monkeypatch.chdir(tmp_path)
    assert set(known_suites()) >= set(BUILTIN_SUITES)
    assert find_suite("gate").parent == Path(str(resources.files("speccheck") / "data" / "suites"))
    own = tmp_path / "mine.toml"
    own.write_text('name = "mine"\nseed = 1\n[scalar]\ndeltas = [1.0]\nK = [1]\nn = 64\n')
    assert load_suite(str(own)).name == "mine" and load_suite("mine.toml").scalar.n == 64
    with pytest.raises(LoadError, match=r"unknown suite 'nope'.*gate"):
        load_suite("nope")
    with pytest.raises(LoadError, match="does not exist"):
        load_suite("missing.toml")


def test_continuous_section_is_validated():
    base = {"K": [1], "edges": [1e-3, 1.0], "n": 64}
    assert parse_suite({"continuous": {**base, "declared_deltas": 1, "declared_rows": 8}}).continuous.n == 64
    for bad, match in (({"edges": [1.0, 0.5]}, "edges"), ({"K": []}, "K"), ({"n": 0}, "n"),
                       ({"declared_deltas": 4, "declared_rows": 64}, "declared"), ({"zero_atom": 1}, "zero_atom")):
        with pytest.raises(LoadError, match=match):
            parse_suite({"continuous": {**base, **bad}})

@pytest.mark.parametrize("bad,match", [
    ({"family_alpha": 2.0}, "family_alpha"),
    ({"scalar": {"deltas": [-1.0], "K": [1], "n": 10}}, "deltas"),
    ({"scalar": {"deltas": [1.0], "K": [0], "n": 10}}, "K"),
    ({"scalar": {"deltas": [1.0], "K": [1], "n": 0}}, "n"),
    ({"wrapper": {"dims": [], "n": 10}}, "dims"),
    ({"seed": -3}, "seed"),
    ({"scalar": {"deltas": [1.0], "K": [1], "n": 10, "extra": [{"delta": -1, "K": 1, "n": 5}]}}, "extra"),
])
def test_bad_suites_are_rejected(bad, match):
    with pytest.raises(ValueError, match=match):
        parse_suite(bad)


def test_bad_toml_file(tmp_path):
    p = tmp_path / "x.toml"
    p.write_text("this is = = not toml")
    with pytest.raises(ValueError, match="TOML"):
        load_suite(str(p))


def test_report_formats(tiny):
    rep = run_battery(ReferenceRMC(), tiny(Ks=(1,)))
    txt = format_report(rep, verbose=True)
    for col in ("cell", "test", "statistic", "threshold", "min.det.dev", "verdict", "seed=11"):
        assert col in txt
    d = report_dict(rep)
    assert d["passed"] is True and d["per_test_alpha"] == pytest.approx(1e-3 / 4)
    assert "<testsuite" in junit_xml(rep)
    bad = run_battery(ReferenceRMC("reflect_delta"), tiny(Ks=(1,)))
    m = format_kill_matrix({"rmc-reflect_delta": bad, "ref-rmc": rep})
    assert "1/2 mutants killed" in m and "NO" in m


def test_report_round_trips_exactly_through_json(tiny):
    rep = run_battery(ReferenceRMC("reflect_delta"), tiny(Ks=(1,)))
    rep.results.append(TestResult("c", "x", math.inf, math.nan, 0.5, math.inf, 3, kind="n/a"))
    rep.localisations.append(Localisation(0.1, 0.2, 1, True, 100, 1e-9, 1e-3, 1.0, 0.9, "declared", 0.3, "L5 x"))
    back = BatteryReport.from_dict(json.loads(json.dumps(rep.to_dict())))
    assert back.to_dict() == rep.to_dict() and BatteryReport.from_dict(report_dict(rep)).to_dict() == rep.to_dict()
    assert back.results[-1].statistic == math.inf and math.isnan(back.results[-1].threshold)
    assert back.passed == rep.passed and len(back.failures) == len(rep.failures)


def test_default_report_is_short_with_verdict_and_failures(tiny):
    rep = run_battery(ReferenceRMC("reflect_delta"), tiny(deltas=(0.5, 1.0, 2.0), Ks=(1,)))
    txt = format_report(rep)
    lines = txt.splitlines()
    assert lines[0].startswith("speccheck battery: verifier=rmc-reflect_delta")
    assert any(x.startswith("L1 scalar") for x in lines) and "failures (" in txt
    assert "where (confirmed on fresh draws" in txt and "delta = " in txt
    assert lines[-1].startswith("RESULT: FAIL") and len(lines) < 60
    assert len(format_report(rep, verbose=True).splitlines()) > len(lines)
    xml = junit_xml(rep)
    assert "localisation" in xml and "<failure" in xml


def test_planned_tests_counts_the_layers(tiny):
    from speccheck.validation.battery import planned_tests

    st = tiny(deltas=(0.5, 1.0), Ks=(1, 2), dims=(2,))
    assert planned_tests(ReferenceRMC(), st) == 2 * 4 + 4  # RMC: K = 1 only; 4 tests per cell; wrapper 4
    assert planned_tests(ReferenceRMC(), st, layers=["scalar"]) == 8
    assert planned_tests(ReferenceRMC(), st, layers=["wrapper"]) == 4


def test_kill_matrix_names_where_a_mutant_was_confirmed(tiny):
    bad = run_battery(ReferenceRMC("reflect_delta"), tiny(deltas=(2.0,), Ks=(1,)))
    txt = format_kill_matrix({"rmc-reflect_delta": bad})
    assert "1/1 mutants killed" in txt and "at delta 2, K=1" in txt


def test_a_battery_run_parses_its_suite_once_and_callers_get_copies(monkeypatch):
    """Issue 28.1: the suite is parsed once per content (it was ~50 times per gate run); every
    load_suite returns its own copy, so a caller that changes one cannot change another's."""
    import speccheck
    from speccheck.validation import suites

    suites._parsed.cache_clear()
    calls = []
    real = suites.parse_suite
    monkeypatch.setattr(suites, "parse_suite", lambda *a, **k: calls.append(a[1:]) or real(*a, **k))
    assert speccheck.battery("rmc", "smoke", isolate=False, layers=["L0", "L1"]).verdict == "exact"
    assert len(calls) == 1
    first, second = suites.load_suite("smoke"), suites.load_suite("smoke")
    assert first == second and first is not second
    first.scalar.n = 7
    assert suites.load_suite("smoke").scalar.n == second.scalar.n != 7


def test_kill_matrix_groups_the_sequence_layer_into_short_columns():
    """The sequence layer's many named tests fold into six families with short column names, so
    a kill-matrix row stays one readable line."""
    from speccheck.validation.report import kill_matrix, test_family

    names = ["pit-ks all rows", "pit-ks calls of B <= 16", "acceptance=declared, K = 1 calls at delta = 0.005",
             "independent rows (adjacent pairs)", "mean(s_out - delta)", "shift proportional to delta (delta <= 0.1)",
             "s_out - delta on delta within mixed calls", "contract:finite"]
    results = [TestResult("one instance, mixed calls", n, 0.0, 1e-3, 0.5, math.nan, 10, layer="L6",
                          passed=n != "mean(s_out - delta)") for n in names]
    assert {test_family(r) for r in results} == {"L6 pit-ks", "L6 acceptance=declared", "L6 independent rows",
                                                 "L6 shift", "L6 slope on delta", "L6 contract"}
    rep = BatteryReport(verifier="m", suite="s", seed=1, device="cpu", family_alpha=1e-3, per_test_alpha=1e-4,
                        results=results)
    fams, mat = kill_matrix({"m": rep})
    assert mat["m"]["L6 shift"] and not mat["m"]["L6 pit-ks"]
    header = format_kill_matrix({"m": rep}).splitlines()[0]
    assert sorted(header.split()) == sorted(["mutant", "L6c", "sacc", "indep", "spit", "shift", "slope", "killed"])

