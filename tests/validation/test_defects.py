"""speccheck.validation.defects: the random defect generator, its exact controls and its stated effects.

Statistical checks here use fixed seeds and thresholds from a stated false-failure rate (1e-6
per check: z = 4.89 for a normal bound, the DKW band at 1e-6 for a sup-distance).
"""

from __future__ import annotations

import copy
import importlib.util
import math
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from speccheck import api
from speccheck.errors import InputError, LoadError
from speccheck.validation import defects as D
from speccheck.validation.stats import dkw_threshold
from speccheck.verifiers import get

ROOT = Path(__file__).resolve().parents[2]
Z_1E6 = 4.892  # two-sided normal quantile at a false-failure rate of 1e-6


def _defect(mechanism: str, eps: float, stratum: D.Stratum | None = None, *, family: str | None = None,
            base: str = "dgrs", sign: int = 1) -> D.Defect:
    family = family or mechanism
    return D.Defect(base=base, family=family, group=D.FAMILIES[family], mechanism=mechanism,
                    stratum=stratum or D.Stratum(), eps=eps, sign=sign)


def _call(rule, B: int, K: int, seed: int, *, lo: float = 0.5, hi: float = 2.0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    delta = torch.exp(math.log(lo) + (math.log(hi) - math.log(lo)) * torch.rand(B, generator=g, dtype=torch.float64))
    s = torch.randn(B, K, generator=g, dtype=torch.float64).to(dtype)
    return rule.verify(delta, s, torch.Generator().manual_seed(seed + 1)), delta, s


def _same(a, b) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a, b))


# ----------------------------------------------------------------------------- records and loading
def test_draw_is_deterministic_and_the_token_loads_by_spec():
    a = D.draw_defect("dgrs", np.random.default_rng(5), ratio=2.0, mdd_pit=0.1, mdd_acc=0.1, family="accept-extra",
                      n_effect=4096)
    b = D.draw_defect("dgrs", np.random.default_rng(5), ratio=2.0, mdd_pit=0.1, mdd_acc=0.1, family="accept-extra",
                      n_effect=4096)
    assert a == b and a.token == b.token
    assert a.effect is not None and a.effect.share >= 0.05 and 2.0 <= a.effect.ratio <= 2.4  # sized as asked
    rule = get(a.spec)  # the registry resolves "speccheck.validation.defects:defect_<token>"
    assert isinstance(rule, D.DefectiveRule) and rule.defect == a
    assert D.decode_token(a.token) == a
    for clone in (pickle.loads(pickle.dumps(rule)), copy.deepcopy(rule)):
        assert clone.defect == a and _same(_call(clone, 64, 3, 1)[0], _call(rule, 64, 3, 1)[0])
    assert "accepts its first child" in a.describe() and "share" in a.describe()
    with pytest.raises(LoadError, match="corrupt"):
        D.decode_token("not-a-token")


def test_bad_requests_are_refused_with_the_option_named():
    rng = np.random.default_rng(0)
    with pytest.raises(InputError, match="ratio"):
        D.draw_defect("dgrs", rng, ratio=0.0, mdd_pit=0.1, mdd_acc=0.1)
    with pytest.raises(InputError, match="mdd_pit"):
        D.draw_defect("dgrs", rng, ratio=1.0, mdd_pit=-1.0, mdd_acc=0.1)
    with pytest.raises(InputError, match="unknown family"):
        D.draw_defect("dgrs", rng, ratio=1.0, mdd_pit=0.1, mdd_acc=0.1, family="nope")
    from speccheck.validation.mutants import AlwaysRejectRule

    class NoDeclaration:
        name = "no-declaration"

        def verify(self, delta, s, generator=None):
            return AlwaysRejectRule().verify(delta, s, generator)

    with pytest.raises(InputError, match="declares no acceptance"):
        D.draw_defect(NoDeclaration(), rng, ratio=1.0, mdd_pit=0.1, mdd_acc=0.1, family="declared")
    for fam in ("index-off", "stale-K"):  # rmc has one K: no K to get wrong, no K change
        with pytest.raises(InputError, match=fam):
            D.draw_defect("rmc", rng, ratio=1.0, mdd_pit=0.1, mdd_acc=0.1, family=fam)
    assert all(D.draw_defect("rmc", np.random.default_rng(i), ratio=1.0, mdd_pit=0.1, mdd_acc=0.1, group="state",
                             n_effect=2048).family == "stale-calls" for i in range(2))
    d = D.draw_defect("dgrs", rng, ratio=1.0, mdd_pit=0.1, mdd_acc=0.1, family="index-off")
    assert d.stratum.Ks is not None and 1 not in d.stratum.Ks
    with pytest.raises(InputError, match="unknown control"):
        D.draw_control("dgrs", rng, "sideways")


def test_every_family_draws_on_every_group():
    rng = np.random.default_rng(11)
    for fam in ("flag", "levels-selection", "stale-calls", "batch-tail", "shared-randomness", "global-rng"):
        d = D.draw_defect("rmc", rng, ratio=1.0, mdd_pit=0.15, mdd_acc=0.1, family=fam, n_effect=2048, tries=1)
        assert d.family == fam and d.group == D.FAMILIES[fam] and d.effect is not None
        assert d.stratum.Ks in (None, (1,))  # rmc supports K = 1 only
    assert set(D.STATISTICAL_GROUPS) | {"contract"} == set(D.GROUPS)


# ------------------------------------------------------------------------------- where it acts
def test_the_rule_equals_its_base_outside_the_stratum_bit_for_bit():
    base = get("dgrs")
    rule = D.wrap(_defect("residual-shift", 1.0, D.Stratum(delta_lo=3.0, delta_hi=5.0)))
    out, _, _ = _call(rule, 300, 3, 7, lo=0.1, hi=2.0)
    assert _same(out, _call(base, 300, 3, 7, lo=0.1, hi=2.0)[0])
    out, delta, _ = _call(rule, 300, 3, 7, lo=3.0, hi=4.9)
    ref = _call(base, 300, 3, 7, lo=3.0, hi=4.9)[0]
    moved = ~ref[1]
    assert torch.allclose(out[0][moved], ref[0][moved] + 1.0) and torch.equal(out[0][~moved], ref[0][~moved])


def test_call_level_triggers():
    base = get("dgrs")
    f32 = D.wrap(_defect("accept-extra", 1.0, D.Stratum(dtype="float32"), family="dtype"))
    assert _same(_call(f32, 200, 4, 3)[0], _call(base, 200, 4, 3)[0])
    o32 = _call(f32, 200, 4, 3, dtype=torch.float32)[0]
    assert bool(o32[1].all()) and o32[0].dtype == torch.float32  # every row accepts its first child
    stale = D.wrap(_defect("accept-extra", 1.0, D.Stratum(call_lo=3), family="stale-calls"))
    for call in range(1, 5):
        acc = _call(stale, 100, 4, 9)[0][1]
        assert bool(acc.all()) == (call >= 3)
    tail = D.wrap(_defect("accept-extra", 1.0, D.Stratum(chunk=4), family="batch-tail"))
    for B, rows in ((8, []), (10, [8, 9]), (3, [])):
        out = _call(tail, B, 4, 2)[0]
        ref = _call(base, B, 4, 2)[0]
        changed = torch.nonzero(out[1] != ref[1]).flatten().tolist()
        assert set(changed) <= set(rows) and all(bool(out[1][r]) for r in rows)
    kchange = D.wrap(_defect("accept-extra", 1.0, D.Stratum(after_K_change=True), family="stale-K"))
    assert not bool(_call(kchange, 100, 2, 5)[0][1].all())
    assert not bool(_call(kchange, 100, 2, 5)[0][1].all())
    assert bool(_call(kchange, 100, 3, 5)[0][1].all()) and bool(_call(kchange, 100, 2, 5)[0][1].all())


def test_shared_randomness_reuses_one_stream_per_pair():
    rule = D.wrap(_defect("shared-randomness", 1.0))
    delta = torch.full((64,), 1.0, dtype=torch.float64)
    s = torch.randn(64, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    s[1::2] = s[0::2]  # pairs with equal children and equal deltas: a shared stream gives equal outputs
    out = rule.verify(delta, s, torch.Generator().manual_seed(1))
    assert torch.equal(out[0][0::2], out[0][1::2])
    ref = get("dgrs").verify(delta, s, torch.Generator().manual_seed(1))
    assert not torch.equal(ref[0][0::2], ref[0][1::2])


def test_call_share_of_simple_strata():
    law = D.CallSpace()
    assert D.call_share(D.Stratum(), law) == pytest.approx(1.0)
    assert D.call_share(D.Stratum(delta_lo=1.0, delta_hi=10.0), law) == pytest.approx(law.delta_mass(1.0, 10.0))
    assert law.delta_mass(0.0, math.inf) == pytest.approx(1.0)
    assert abs(D.call_share(D.Stratum(dtype="float32"), law) - law.float32) < 0.1
    assert D.call_share(D.Stratum(chunk=law.B_max), law) == 0.0  # no call has B > B_max


# ------------------------------------------------------------------------- the stated effects
def test_stated_acceptance_shift_is_the_closed_form_and_what_the_rule_does():
    """accept-extra at eps shifts the acceptance by eps (1 - a(delta, K)) exactly: the generator's
    Monte Carlo agrees within its stated error, and so does a direct run of the wrapped rule."""
    law = D.CallSpace()
    st = D.Stratum(delta_lo=0.5, delta_hi=3.0, Ks=(2, 3))
    base = get("dgrs")
    eps = 0.4
    nodes, w = law.delta_nodes(st.delta_lo, st.delta_hi, 24)
    exact = float(np.mean([np.sum(w * eps * (1 - base.acceptance(nodes, K))) for K in st.Ks]))
    pit, pit_err, acc, acc_err, n = D.measure_effect(base, "accept-extra", eps, 1, st, law, n=1 << 15, seed=3)
    assert abs(acc - exact) <= acc_err + 2e-3  # 2e-3: the rows per node are rounded
    assert pit > 0 and pit_err > 0 and n >= 1 << 14
    rule = D.wrap(_defect("accept-extra", eps, st))
    shifts = []
    for K in st.Ks:
        out, delta, _ = _call(rule, 1 << 15, K, 100 + K, lo=0.5, hi=3.0)
        shifts.append(float(out[1].double().mean()) - float(np.mean(base.acceptance(delta.numpy(), K))))
    se = 0.5 / math.sqrt(2 * (1 << 15))
    assert abs(float(np.mean(shifts)) - exact) <= Z_1E6 * se + 2e-3  # 2e-3: quadrature vs continuous deltas


def test_stated_pit_distance_is_what_the_rule_does():
    """A residual shift on rmc: the one-sample KS distance of the wrapped rule's PIT values in the
    stratum matches the stated effect within the DKW band at 1e-6 plus the stated error."""
    law = D.CallSpace(Ks=(1,))
    d = D.draw_defect("rmc", np.random.default_rng(2), ratio=2.0, mdd_pit=0.1, mdd_acc=0.1, family="residual-shift",
                      law=law, n_effect=1 << 15)
    st, eff = d.stratum, d.effect
    assert eff.pit > 0.1
    lo, hi = max(st.delta_lo, law.delta_lo), min(st.delta_hi, law.delta_hi)
    rule = D.wrap(d)
    n = 1 << 16
    out, delta, _ = _call(rule, n, 1, 21, lo=lo, hi=hi)
    u = np.sort(torch.special.ndtr(out[0] - delta).numpy())
    grid = np.arange(1, n + 1) / n
    ks = float(max(np.max(grid - u), np.max(u - (grid - 1 / n))))
    assert abs(ks - eff.pit) <= dkw_threshold(n, 1e-6) + eff.pit_error + 0.01  # 0.01: the atom at 0 and quadrature


def test_declared_family_changes_only_the_declaration():
    st = D.Stratum(delta_lo=1.0, delta_hi=2.0, Ks=(4,))
    rule = D.wrap(_defect("declared", 0.2, st, sign=-1))
    base = get("dgrs")
    d = np.array([0.5, 1.5, 3.0])
    assert np.allclose(rule.acceptance(d, 4), base.acceptance(d, 4) - np.array([0, 0.2, 0]))
    assert np.allclose(rule.acceptance(d, 2), base.acceptance(d, 2))
    assert _same(_call(rule, 100, 4, 1)[0], _call(base, 100, 4, 1)[0])
    assert not hasattr(D.wrap(_defect("accept-extra", 0.1, base="rmc"), _NoAcceptance()), "acceptance")


class _NoAcceptance:
    name = "no-acceptance"

    def verify(self, delta, s, generator=None):
        return get("rmc").verify(delta, s, generator)


def test_states_defects_act_in_verify_states_only():
    st = D.Stratum(d_lo=2)
    rule = D.wrap(_defect("states-perp", 0.7, st))
    base = get("dgrs")
    g = torch.Generator().manual_seed(0)
    B, d, K = 256, 8, 3
    mu_p = torch.randn(B, d, generator=g, dtype=torch.float64)
    mu_q = mu_p + 0.3 * torch.randn(B, d, generator=g, dtype=torch.float64)
    kids = mu_p[:, None] + torch.randn(B, K, d, generator=g, dtype=torch.float64)
    from speccheck.verifiers import verify_states

    y, acc, idx = rule.verify_states(mu_p, mu_q, 1.0, kids, torch.Generator().manual_seed(1))
    y0, acc0, idx0 = verify_states(base, mu_p, mu_q, 1.0, kids, torch.Generator().manual_seed(1))
    assert torch.equal(acc, acc0) and torch.equal(y[acc], y0[acc]) and not torch.allclose(y[~acc], y0[~acc])
    assert _same(_call(rule, 100, 3, 1)[0], _call(base, 100, 3, 1)[0])


# --------------------------------------------------------------------------- against the battery
@pytest.mark.parametrize("kind", D.CONTROLS)
def test_exact_controls_pass_the_smoke_suite(kind):
    ctl = D.draw_control("dgrs", np.random.default_rng(0), kind)
    out = api.battery(ctl.spec, "smoke", seed=7, isolate=False)
    assert out.verdict == "exact", out.reason


def test_a_control_passes_through_the_isolated_path():
    ctl = D.draw_control("rmc", np.random.default_rng(0), "chunked")
    out = api.battery(ctl.spec, "smoke", seed=8, isolate=True)
    assert out.verdict == "exact", out.reason


@pytest.mark.parametrize("defect", [
    _defect("accept-extra", 1.0),
    _defect("residual-shift", 1.0),
    _defect("declared", 0.3, D.Stratum(delta_lo=0.5)),
    _defect("index-off", 1.0),
], ids=lambda d: d.family)
def test_gross_defects_fail_the_smoke_suite(defect):
    out = api.battery(defect.spec, "smoke", seed=7, isolate=False)
    assert out.verdict == "defect", out.reason


# ------------------------------------------------------------------------------ the benchmark
def _bench():
    spec = importlib.util.spec_from_file_location("bench_power", ROOT / "benchmarks" / "bench_power.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_power_benchmark_reads_the_promise_when_the_report_has_one():
    bp = _bench()
    from types import SimpleNamespace

    from speccheck.validation.results import TestResult

    cells = [TestResult(cell=f"c{i}", test=t, statistic=0, threshold=1, p_value=1, mdd=m, n=1, layer="L5")
             for i, (t, m) in enumerate([("pit-ks", 0.1), ("pit-ks", 0.3), ("acceptance=declared", 0.05)])]
    today = SimpleNamespace(results=cells, suite="smoke")
    assert bp.promised_mdds(today)[:2] == (0.2, 0.05) and bp.promised_share(today) is None
    v4 = SimpleNamespace(results=cells, suite="gate", promise={"pit": 0.02, "acceptance": 0.01, "share": 0.05})
    assert bp.promised_mdds(v4) == (0.02, 0.01, "the report's power promise") and bp.promised_share(v4) == 0.05
    assert bp.promised_mdds(v4, 0.03, 0.04)[:2] == (0.03, 0.04)


def test_power_benchmark_core_runs_and_writes(tmp_path):
    bp = _bench()
    assert bp.clopper_pearson(0, 10)[0] == 0.0 and bp.clopper_pearson(10, 10)[1] == 1.0
    assert bp.ratio_bin(1.1, (0.5, 1.0, 2.0)) == "1" and bp.ratio_bin(0.1, (0.5, 1.0)) == "below"
    res = bp.run_power(["rmc"], "smoke", groups=["residual"], per_group=1, ratios=(3.0, 4.0), controls=1,
                       n_effect=4096, progress=False)
    recs = {r["group"]: r for r in res["records"]}
    assert recs["control"]["verdict"] == "exact"
    assert recs["residual"]["caught"] and recs["residual"]["ratio"] > 2
    assert res["mdds"]["rmc"][2] == "the report's power promise"  # smoke has the law layer (L7) and its promise
    assert any(c["group"] == "residual" and c["met"] for c in res["criterion"])
    text = bp.format_report(res)
    assert "exact controls: 1/1 passed" in text
    bp.plot(res, tmp_path / "p.png")
    assert (tmp_path / "p.png").stat().st_size > 1000


def test_power_law_design_resumes_from_the_store_and_judges_at_the_suite_level(tmp_path):
    # the law design: L7 alone at the whole suite's per-test level, every unit in a SQLite store
    bp = _bench()
    store = str(tmp_path / "power.sqlite")
    kw = dict(groups=["residual", "contract"], per_group=1, ratios=(3.0, 4.0), seed=11, min_share=0.05,
              controls=1, n_effect=4096, workers=1, progress=False)
    job = bp.law_job(store, "rmc", "smoke", max_units=1, **kw)
    from speccheck.scale.store import ResultsStore

    with ResultsStore(store) as st:
        assert st.stored_keys(job) == {"baseline", "0000:residual"}  # stopped after one unit
        base = st.units(job, ["baseline"])[0].result
    level = base["level"]
    # the level is the suite's alpha / m (every planned test plus the trajectory layer's), not L7's own
    from speccheck.validation import law

    assert level["alpha_suite"] == pytest.approx(level["family_alpha"] / (level["n_stat"] + level["n_l4"]))
    assert level["n_stat"] > law.planned_tests(True)
    bp.law_job(store, "rmc", "smoke", **kw)  # resumes: the other units only
    res = bp.law_result(store, [job])
    recs = {r["group"]: r for r in res["records"]}
    assert set(recs) == {"residual", "contract", "control"}
    assert recs["control"]["verdict"] == "exact" and not recs["control"]["failed_tests"]
    assert recs["residual"]["caught"] and recs["residual"]["ratio"] > 2.5
    assert any(t.startswith("L7") for t in recs["residual"]["failed_tests"])
    assert res["mdds"]["rmc"][0] == pytest.approx(base["promise_pit"])
    text = bp.format_report(res)
    assert "exact controls: 1/1 passed" in text and "lower bound" in text


def test_law_share_counts_the_rows_the_battery_law_actually_draws():
    # the share of a stratum under the battery's own law of calls equals the share of the rows of
    # an actual draw of that law (same law, same seed) that fall in it
    from speccheck.sampler.calls import CallLaw, draw_law

    law = CallLaw(rows=40_000, Ks=(1, 2, 3, 5), max_batch=4097, points=8)
    raw = draw_law(D.wrap(D.draw_control("dgrs", np.random.default_rng(0), "none")), law, seed=5)
    on = raw["call_path"][raw["call"]] == 0
    f32 = raw["call_dtype"][raw["call"]] == 1
    K = raw["call_K"][raw["call"]]
    st = D.Stratum(delta_lo=0.1, delta_hi=3.0, dtype="float32", pos_lo=100, Ks=(2, 3))
    want = np.mean((raw["delta"] >= 0.1) & (raw["delta"] < 3.0) & f32 & (raw["position"] >= 100)
                   & np.isin(K, (2, 3)), where=on)
    assert D.law_share(st, law, seed=5) == pytest.approx(float(want) * on.mean(), abs=1e-12)
    # of all the rows: the verify rows and the verify_states rows make the whole
    assert D.law_share(D.Stratum(), law, seed=5) + D.law_share(D.Stratum(), law, seed=5, states=True) == \
        pytest.approx(1.0)
    assert 0 < D.law_share(D.Stratum(call_lo=50), law, seed=5) < 1


def test_effects_can_be_measured_over_the_battery_laws_own_rows():
    from speccheck.sampler.calls import CallLaw

    law = CallLaw(rows=60_000, Ks=(1, 2, 3, 5), max_batch=4097, points=8)
    bl = D.BatteryLaw.of(law.to_dict(), 5)
    st = D.Stratum(delta_lo=0.1, delta_hi=3.0)
    rows = bl.rows(st, 4096)
    assert {K for K, _ in rows} <= {1, 2, 3, 5} and sum(d.size for _, d in rows) == pytest.approx(4096, rel=0.05)
    assert all(np.all((d >= 0.1) & (d < 3.0)) for _, d in rows)
    declared = bl.rows(st, 4096, declared=True)  # only the constant / levels calls' deltas: the law's points
    assert 0 < len(np.unique(np.concatenate([d for _, d in declared]))) <= 8 * 4
    # a declaration off where the law reads none is no effect at all; inside, it is the shift itself
    assert D.measure_effect(get("dgrs"), "declared", 0.1, 1, D.Stratum(delta_lo=50.0), bl, n=0, seed=0)[2] == 0.0
    acc = D.measure_effect(get("dgrs"), "declared", 0.05, -1, st, bl, n=0, seed=0)[2]
    assert acc == pytest.approx(-0.05)  # no declared value there sits within 0.05 of 0
    pit, err, *_ = D.measure_effect(get("dgrs"), "residual-shift", 0.5, 1, st, bl, n=1 << 16, seed=3)
    assert pit > 2 * err  # beyond its 99% Monte Carlo bound
