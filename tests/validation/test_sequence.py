"""Layer 6 (one instance through many mixed calls): exact rules pass it, every implementer mutant
of speccheck.validation.zoo is killed by the gate (each by the layer whose law it breaks), the
suites refuse what they cannot run, and the localisation names every failing K."""

from __future__ import annotations

import pytest

from speccheck.errors import LoadError
from speccheck.validation.battery import run_battery
from speccheck.validation.localise import candidates
from speccheck.validation.results import TestResult
from speccheck.validation.suites import parse_suite
from speccheck.validation.zoo import ZOO

#: the layer (and K) of the gate that kills each mutant; the rest of the zoo dies in L6
KILLED_ELSEWHERE = {"zoo-k7-window": (["L5"], [7]), "zoo-k11-residual": (["L5"], [11]),
                    "zoo-global-rng": (["L0"], None)}


@pytest.mark.parametrize("rule", ["dgrs", "rmc", "rass"])
def test_exact_rules_pass_the_sequence_layer(rule):
    rep = run_battery(rule, "smoke", layers=["L6"])
    assert rep.passed, [r.name for r in rep.failures]
    assert sum(r.kind == "stat" for r in rep.results) >= 10


@pytest.mark.parametrize("name", sorted(ZOO))
def test_every_zoo_mutant_dies_in_the_gate(name):
    layers, Ks = KILLED_ELSEWHERE.get(name, (["L6"], None))
    rep = run_battery(ZOO[name](), "gate", layers=layers, Ks=Ks)
    assert not rep.passed, name
    if name in ("zoo-k7-window", "zoo-k11-residual"):  # localised at the K and delta window of the defect
        assert any(loc.confirmed and loc.K == Ks[0] for loc in rep.localisations), rep.localisations


def _suite(**sections) -> dict:
    base = {"name": "t", "seed": 1, "scalar": {"deltas": [1.0], "K": [1], "n": 64}}
    base.update(sections)
    return base


@pytest.mark.parametrize("bad, message", [
    ({"scaler": {"deltas": [1.0], "K": [1], "n": 64}}, "unknown key(s) ['scaler']"),
    ({"scalar": {"deltas": [1.0], "K": [1], "n": 64, "tailq": 0.1}}, "unknown key(s) ['tailq']"),
    ({"scalar": {"deltas": [1.0], "K": [100000], "n": 64}}, "K must be <= 128"),
    ({"scalar": {"deltas": [1e308], "K": [1], "n": 64}}, "deltas must lie in [0, 40]"),
    ({"continuous": {"K": [1], "edges": [1e-3, 1e308], "n": 64, "declared_deltas": 1, "declared_rows": 8}},
     "deltas must lie in [0, 40]"),
    ({"sequence": {"K": [1, 200]}}, "K must be a non-empty list of integers in [1, 128]"),
    ({"sequence": {"K": [1], "calls": 0}}, "calls must be an integer >= 1"),
    ({"sequence": {"K": [1], "anchors": [-1.0]}}, "anchors must be values in (0, 40]"),
    ({"sequence": {"K": [1], "replays": 3}}, "unknown key(s) ['replays']"),
])
def test_suites_refuse_unknown_keys_and_values_outside_the_contract(bad, message):
    with pytest.raises(LoadError) as err:
        parse_suite(_suite(**bad))
    assert message in str(err.value)


def test_localisation_names_every_failing_k():
    failures = [TestResult(f"delta in [{lo:g}, {hi:g}),K={K}", "pit-ks", 0.5, 0.1, p, 0.1, 100, passed=False,
                           layer="L5", extra={"lo": lo, "hi": hi, "K": K})
                for K, p0 in ((3, 1e-30), (5, 1e-8), (9, 1e-7), (12, 1e-6))
                for (lo, hi), p in (((0.1, 0.3), p0), ((0.3, 0.6), p0 * 2), ((0.6, 1.0), p0 * 3))]
    chosen = candidates(failures, max_candidates=3)
    assert sorted({K for _, _, K, _ in chosen}) == [3, 5, 9, 12]  # none left out by the cap
    assert chosen[0][:3] == (0.1, 0.3, 3)  # the most significant region first


def test_the_replay_catches_the_global_rng_when_a_suite_asks_for_it():
    from dataclasses import replace

    from speccheck.validation.suites import load_suite

    st = load_suite("gate")
    st = replace(st, sequence=replace(st.sequence, replay=128))
    rep = run_battery(ZOO["zoo-global-rng"](), st, layers=["L6"])
    assert any(r.test == "contract:replay-identical" and not r.passed for r in rep.results)
