"""Layer 5 (rows with their own delta), the narrow-region mutants and localisation (tiny suites;
each 'passes' assertion fails by chance w.p. <= the suite's family-wise rate 1e-3)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from speccheck.validation.battery import run_battery
from speccheck.validation.continuous import draw_deltas
from speccheck.validation.mutants import MUTANTS, NARROW_KINDS, AlwaysRejectRule, ReferenceDGRS
from speccheck.validation.report import format_report
from speccheck.validation.suites import parse_suite


def cont_suite(Ks=(1, 2), edges=(1e-8, 1e-3, 0.1, 1.0, 1.5, 2.0, 15.0, 40.0), n=2048, seed=5, **extra):
    data = {"name": "tiny-cont", "seed": seed, "family_alpha": 1e-3,
            "continuous": {"K": list(Ks), "edges": list(edges), "n": n, "declared_deltas": 2, "declared_rows": 256,
                           "refine": 8, "confirm_n": 8192, **extra}}
    return parse_suite(data, "tiny-cont")


def test_draw_deltas_follow_the_stratum_law():
    g = torch.Generator().manual_seed(0)
    d = draw_deltas(0.1, 1.0, 20000, 2, 100, g, torch.device("cpu")).numpy()
    assert d.min() >= 0.1 and d.max() < 1.0
    assert np.unique(d[:200]).size == 2 and np.unique(d[200:]).size == d.size - 200
    # log-uniform: log10(d) ~ U(-1, 0); KS distance well inside the DKW band at level 1e-6
    x = np.sort(np.log10(d[200:])) + 1.0
    dist = np.max(np.abs(np.arange(1, x.size + 1) / x.size - x))
    assert dist < np.sqrt(np.log(2e6) / (2 * x.size))
    assert torch.equal(draw_deltas(0.0, 0.0, 5, 0, 0, g, torch.device("cpu")), torch.zeros(5, dtype=torch.float64))


def test_exact_rules_pass_the_continuous_layer():
    for rule in (ReferenceDGRS(), AlwaysRejectRule(), "dgrs"):
        rep = run_battery(rule, cont_suite(Ks=(1, 3)))
        assert rep.passed, format_report(rep, verbose=True)
        l5 = [r for r in rep.results if r.layer == "L5" and r.kind == "stat"]
        assert len(l5) >= 2 * 8 * 2 and not rep.localisations
        tests = {r.test for r in l5}
        assert {"pit-ks", "acceptance<=list-bound", "acceptance=declared"} <= tests


def test_vacuous_list_bound_is_na():
    rep = run_battery("dgrs", cont_suite(Ks=(2,)))
    na = [r for r in rep.results if r.kind == "n/a"]
    assert na and all(r.test == "acceptance<=list-bound" for r in na)
    assert all(r.passed for r in na) and "n/a" in format_report(rep, verbose=True)


@pytest.mark.parametrize("kind", list(NARROW_KINDS))
def test_narrow_mutants_are_killed_and_localised(kind):
    """Each narrow-region mutant fails a small continuous suite, and the confirmed window lies
    where the bug is (delta window overlapping its region, K among its Ks)."""
    Ks = (1, 5) if kind == "single-K" else (1, 2)
    rep = run_battery(MUTANTS[f"narrow-{kind}"](), cont_suite(Ks=Ks, chunk=8192))
    assert not rep.passed, f"narrow-{kind} survived"
    assert any(r.layer == "L5" for r in rep.failures)
    confirmed = [loc for loc in rep.localisations if loc.confirmed]
    assert confirmed, format_report(rep)
    lo, hi, region_Ks = NARROW_KINDS[kind][1]
    best = confirmed[0]
    assert best.delta_lo < hi and best.delta_hi > lo - 1e-12, best.describe()
    assert region_Ks is None or best.K in region_Ks
    assert "fresh draws" in best.describe() and "K = " in best.describe()


def test_window_mutant_localised_to_a_narrow_window():
    rep = run_battery(MUTANTS["narrow-window"](), cont_suite(Ks=(2,), n=4096))
    best = [loc for loc in rep.localisations if loc.confirmed][0]
    assert 1.0 <= best.delta_lo and best.delta_hi <= 1.5 and best.delta_hi - best.delta_lo <= 0.1
    assert best.acceptance > best.declared + 0.1  # always accepting in the window


def test_layers_Ks_scale_select_part_of_a_suite():
    st = cont_suite(Ks=(1, 2, 3))
    rep = run_battery("dgrs", st, layers=["continuous"], Ks=[2], scale=0.5)
    assert {r.layer for r in rep.results} == {"L5"}
    assert all(r.extra.get("K") == 2 for r in rep.results if r.kind == "stat")
    assert rep.scale == 0.5 and "scale=0.5" in format_report(rep)
    full = run_battery("dgrs", st, layers=["L5"], Ks=[2])
    mdd = lambda rp: max(r.mdd for r in rp.results if r.test == "pit-ks")  # noqa: E731
    assert mdd(rep) > mdd(full)  # fewer draws: a larger minimum detectable deviation, printed
