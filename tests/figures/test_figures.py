"""The data behind the figures, checked against speccheck.theory and the sampler's own records.

One ``speccheck figures --quick`` run (all seven figures, via the CLI) is shared by the module;
the tests read back the CSVs it wrote. No pixels are compared.

False-failure rates: every check here is deterministic (closed forms, fixed seeds, equality
with recorded numbers) except ``test_battery_kill_matrix``'s "references not killed" part,
whose battery runs at family-wise rate 1e-3 per reference with a fixed seed (<= 2e-3 in all,
and deterministic once the seed is fixed).
"""

from __future__ import annotations

import csv
import json
import math
import os

import numpy as np
import pytest

from speccheck import theory as T
from speccheck.cli import main
from speccheck.figures import resolve
from speccheck.figures.style import Table, concat
from speccheck.figures.theory_figs import (
    FRONTIER_N,
    FRONTIER_WARMUP,
    TOP_RANK_LEVEL,
    delta_grid,
    top_rank_delta,
    tree_budget,
)

STEMS = [s.stem for s in resolve(None)]


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("figures")
    sweep = str(out / "sweep")
    rc = main(["figures", "--quick", "--out", str(out), "--sweep", sweep])
    with open(out / "manifest.json") as f:
        manifest = json.load(f)
    return {"out": str(out), "sweep": sweep, "rc": rc, "manifest": manifest}


def _table(run, stem, key="main"):
    name = f"{stem}.csv" if key == "main" else f"{stem}-{key}.csv"
    return Table.from_csv(os.path.join(run["out"], name))


# ----------------------------------------------------------------------------- the run itself
def test_quick_run_writes_every_figure(quick_run):
    assert quick_run["rc"] == 0, quick_run["manifest"]
    figs = quick_run["manifest"]["figures"]
    assert list(figs) == STEMS
    for stem, entry in figs.items():
        assert "error" not in entry, (stem, entry.get("error"))
        for ext in ("png", "svg", "csv"):
            p = os.path.join(quick_run["out"], f"{stem}.{ext}")
            assert os.path.getsize(p) > 1000, p
        with open(os.path.join(quick_run["out"], f"{stem}.png"), "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_table_csv_roundtrip_is_exact(tmp_path):
    x = np.array([0.1, 1 / 3, 1e-300, np.pi * 1e7, np.nan])
    t = Table({"rule": np.array(["a", "b", "c", "d", "e"]), "K": np.arange(5), "x": x})
    back = Table.from_csv(t.to_csv(str(tmp_path / "t.csv")))
    assert back.names == ["rule", "K", "x"]
    assert back["rule"].tolist() == ["a", "b", "c", "d", "e"]
    assert back["K"].dtype.kind == "i" and back["K"].tolist() == [0, 1, 2, 3, 4]
    np.testing.assert_array_equal(back["x"][:4], x[:4])  # 17 significant digits: bit-exact
    assert math.isnan(back["x"][4])
    with pytest.raises(ValueError, match="column 'b'"):
        Table({"a": np.zeros(2), "b": np.zeros(3)})
    assert len(concat([t, t])) == 10


def test_unknown_figure_is_a_usage_error(capsys):
    assert main(["figures", "--only", "fig99"]) == 2
    assert "unknown figure 'fig99'" in capsys.readouterr().err


# ----------------------------------------------------------------------------- figure 1
def test_fig1_is_the_closed_form(quick_run):
    t = _table(quick_run, "fig1_acceptance")
    deltas = delta_grid(quick=True)
    for K in (1, 2, 4, 8):
        d = t.where(rule="dgrs", K=K)
        np.testing.assert_array_equal(d["delta"], deltas)
        np.testing.assert_allclose(d["acceptance"], T.acceptance_dgrs(deltas, K), rtol=1e-15, atol=0)
        r = t.where(rule="rass", K=K)
        np.testing.assert_allclose(r["acceptance"], T.acceptance_rass(deltas, K), rtol=1e-15, atol=0)
    np.testing.assert_allclose(t.where(rule="dgrs", K=1)["acceptance"], T.acceptance_rmc(deltas), rtol=1e-14)
    # more drafts never hurt D-GRS, and RASS (optimal weights) is at least D-GRS
    acc = np.array([t.where(rule="dgrs", K=K)["acceptance"] for K in (1, 2, 4, 8)])
    assert np.all(np.diff(acc, axis=0) >= -1e-12)
    for K in (2, 4, 8):
        assert np.all(t.where(rule="rass", K=K)["acceptance"] >= t.where(rule="dgrs", K=K)["acceptance"] - 1e-9)


# ----------------------------------------------------------------------------- figure 2
def test_fig2_bounds_order(quick_run):
    t = _table(quick_run, "fig2_bounds")
    for K in (2, 4, 8):
        s = t.where(K=K)
        d = s["delta"]
        np.testing.assert_allclose(s["bound_iid"], T.list_bound_iid(d, K), rtol=1e-15)
        np.testing.assert_allclose(s["bound_dependent"], T.list_bound_dependent(d, K), rtol=1e-15)
        np.testing.assert_allclose(s["dgrs"], T.acceptance_dgrs(d, K), rtol=1e-15)
        chain = [s["rmc"], s["dgrs"], s["rass"], s["bound_iid"], s["bound_dependent"]]
        for lo, hi in zip(chain, chain[1:]):
            assert np.all(lo <= hi + 1e-9), (K, lo - hi)
        # the gap to the i.i.d. bound the paper quotes (<= 3.7e-2 for RASS)
        assert np.max(s["bound_iid"] - s["rass"]) < 0.04
    assert np.all(t.where(delta=0.0)["bound_iid"] == 1.0)


def test_fig2_mcrs_points_if_any(quick_run):
    p = os.path.join(quick_run["out"], "fig2_bounds-mcrs.csv")
    notes = " ".join(quick_run["manifest"]["figures"]["fig2_bounds"]["notes"])
    if not os.path.exists(p):
        assert "MCRS" in notes  # skipping is allowed, silently skipping is not
        return
    m = Table.from_csv(p)
    for r in m.rows():
        bound = float(T.list_bound_iid(r["delta"], r["K"]))
        assert r["bound_iid"] == pytest.approx(bound, rel=1e-14)
        # an exact rule cannot beat the i.i.d.-list bound (1e-5: the policy LP's quadrature)
        assert r["mcrs"] <= bound + 1e-5, r
        assert r["mcrs"] >= r["rass"] - 1e-4, r


# ----------------------------------------------------------------------------- figure 3
def test_fig3_weights(quick_run):
    t = _table(quick_run, "fig3_rank_weights")
    meta = quick_run["manifest"]["figures"]["fig3_rank_weights"]["meta"]
    for K, paper in ((4, 2.0), (8, 2.5)):
        s = t.where(K=K)
        deltas = np.unique(s["delta"])
        W = np.array([s.where(delta=d)["omega"][np.argsort(s.where(delta=d)["rank"])] for d in deltas])
        assert W.shape == (deltas.size, K)
        np.testing.assert_allclose(W.sum(axis=1), 1.0, atol=1e-9)
        assert np.all(W >= -1e-12)
        for i, d in enumerate(deltas):
            np.testing.assert_allclose(W[i], T.rank_weights(float(d), K), atol=1e-12)
        np.testing.assert_allclose(W[deltas == 0.0][0], np.full(K, 1.0 / K))  # uniform at delta = 0
        thr = top_rank_delta(deltas, W[:, -1])
        assert meta[f"top_rank_delta_K{K}"] == thr
        assert np.all(W[deltas >= thr, -1] >= TOP_RANK_LEVEL)
        assert thr <= paper + 0.5  # the paper's "almost all on the top rank" thresholds (grid step 0.5)


def test_top_rank_delta():
    d = np.array([0.0, 1.0, 2.0, 3.0])
    assert top_rank_delta(d, np.array([0.2, 0.995, 0.5, 0.999])) == 3.0
    assert top_rank_delta(d, np.array([0.2, 0.995, 0.999, 1.0])) == 1.0
    assert math.isnan(top_rank_delta(d, np.array([0.2, 0.995, 0.999, 0.9])))


# ----------------------------------------------------------------------------- figure 4
def test_fig4_theory_is_the_dp(quick_run):
    t = _table(quick_run, "fig4_frontier")
    for r in t.rows()[::7]:
        K, L, delta = r["K"], r["L"], r["delta"]
        a = {"rmc": T.acceptance_rmc(delta), "dgrs": T.acceptance_dgrs(delta, K),
             "rass": T.acceptance_rass(delta, K)}[r["rule"]] if K > 1 else T.acceptance_rmc(delta)
        assert r["a"] == pytest.approx(float(a), rel=1e-14)
        assert r["B"] == tree_budget(K, L)
        assert r["speedup"] == pytest.approx(T.predicted_speedup(r["a"], FRONTIER_N, L, FRONTIER_WARMUP), rel=1e-14)
        assert r["steps_per_round"] <= r["ceiling"] + 1e-12
        # with every draft accepted a round commits L steps: the speed-up can't beat that
        assert r["speedup"] <= FRONTIER_N / (FRONTIER_WARMUP + math.ceil(FRONTIER_N / L)) + 1e-12
    for delta in set(t["delta"].tolist()):
        for rule in ("rmc", "dgrs", "rass"):
            f = t.where(delta=delta, rule=rule, frontier=1)
            o = np.argsort(f["B"], kind="stable")
            assert np.all(np.diff(f["speedup"][o]) > 0) and np.all(np.diff(f["B"][o]) > 0)
            # nothing off the frontier beats it at the same or smaller budget
            allr = t.where(delta=delta, rule=rule)
            for B, sp in zip(allr["B"], allr["speedup"]):
                assert sp <= np.max(f["speedup"][f["B"] <= B]) + 1e-12
        # trees beat the chain ceiling direction: the best D-GRS tree beats the best chain
        assert t.where(delta=delta, rule="dgrs")["speedup"].max() >= t.where(delta=delta, rule="rmc")["speedup"].max()


# ----------------------------------------------------------------------------- figures 4-6 (measured)
def _trajectories(sweep_dir):
    cells = {}
    with open(os.path.join(sweep_dir, "trajectories.csv")) as f:
        for r in csv.DictReader(f):
            cells.setdefault((r["rule"].lower(), int(r["K"]), int(r["L"])), {})[int(r["traj"])] = float(r["speedup"])
    return cells


def test_measured_points_are_the_samplers(quick_run):
    m = _table(quick_run, "fig4_frontier", "measured")
    h = _table(quick_run, "fig5_heatmaps")
    v = _table(quick_run, "fig6_speedup_vs_K")
    for col in ("speedup", "speedup_se", "B"):
        np.testing.assert_array_equal(m[col], h[col])
        np.testing.assert_array_equal(v[col], h[col])
    traj = _trajectories(quick_run["sweep"])
    assert len(h) == len(traj) == 3 * 2 * 2
    for r in h.rows():
        x = np.array(list(traj[(r["rule"], r["K"], r["L"])].values()))
        assert r["trajectories"] == x.size
        # the plotted point and its error bar are the per-trajectory mean and SE the sampler recorded
        assert r["speedup"] == pytest.approx(x.mean(), rel=1e-12)
        assert r["speedup_se"] == pytest.approx(x.std(ddof=1) / math.sqrt(x.size), rel=1e-9, abs=1e-15)
        # B of the tree that ran: (K, L) tree, or the RMC chain matched on budget (capped at N)
        B_tree = tree_budget(r["K"], r["L"])
        assert r["B"] == (min(B_tree, FRONTIER_N) if r["rule"] == "rmc" else B_tree)
        depth = max(r["B"] if r["rule"] == "rmc" else r["L"], 1)
        assert 1.0 <= r["speedup"] <= FRONTIER_N / (1 + math.ceil(FRONTIER_N / depth))


# ----------------------------------------------------------------------------- figure 7
def test_battery_kill_matrix(quick_run):
    t = _table(quick_run, "fig7_battery")
    names = list(dict.fromkeys(t["verifier"].tolist()))
    assert names
    for n in names:
        s = t.where(verifier=n)
        killed = bool(s["killed"].max())
        kind = s["kind"][0]
        assert killed == (kind == "mutant"), (n, kind)
        assert np.all(s["n_failed"] <= s["n_tests"])
        assert np.all((s["killed"] == 1) == (s["n_failed"] > 0))


def test_battery_power_curves(quick_run):
    from speccheck.validation.stats import dkw_threshold

    p = _table(quick_run, "fig7_battery", "power")
    for suite in ("gate", "full"):
        s = p.where(suite=suite)
        a, pw = float(s["alpha_test"][0]), float(s["power"][0])
        assert 0 < a < 1e-3
        np.testing.assert_allclose(s["ks_mdd"], [dkw_threshold(int(n), a) + dkw_threshold(int(n), 1 - pw)
                                                 for n in s["n"]], rtol=1e-14)
        g = s.where(is_suite_n=0)
        o = np.argsort(g["n"])
        assert np.all(np.diff(g["ks_mdd"][o]) < 0) and np.all(np.diff(g["acceptance_mdd"][o]) <= 0)
        # an exact binomial test at level a cannot detect a shift below its acceptance half-width
        n = g["n"][o][-1]
        assert g["acceptance_mdd"][o][-1] > 0.5 / math.sqrt(n)
        assert s["is_suite_n"].sum() == 1


def test_kill_matrix_from_battery_json(tmp_path):
    """figure 7 reads `speccheck battery --mutants --json` output (when the file exists) instead of running."""
    from speccheck.figures.base import FigureConfig
    from speccheck.figures.battery_fig import compute_kill_matrix
    from speccheck.validation.battery import BatteryReport
    from speccheck.validation.report import report_dict
    from speccheck.validation.results import TestResult

    def rep(name, failed_ks):
        r = BatteryReport(name, "gate", 1, 1e-3, 1e-5, "cpu")
        r.results = [TestResult("delta=1,K=2", "ks", 0.1, 0.01, 1e-9 if failed_ks else 0.5, 0.02, 100,
                                passed=not failed_ks, layer="L1"),
                     TestResult("delta=1,K=2", "contract:shape", 0.0, 0.0, 1.0, float("nan"), 100,
                                kind="contract", passed=True, layer="L1")]
        return r

    path = tmp_path / "mutants.json"
    path.write_text(json.dumps({"dgrs-x": report_dict(rep("dgrs-x", True)),
                                "ref-dgrs": report_dict(rep("ref-dgrs", False))}))
    t, notes = compute_kill_matrix(FigureConfig(quick=True, battery_json=str(path)))
    assert "mutants.json" in notes[0]
    got = {(r["verifier"], r["family"]): (r["kind"], r["killed"]) for r in t.rows()}
    assert got == {("dgrs-x", "L1 contract"): ("mutant", 0), ("dgrs-x", "L1 ks"): ("mutant", 1),
                   ("ref-dgrs", "L1 contract"): ("reference", 0), ("ref-dgrs", "L1 ks"): ("reference", 0)}


def test_inputs_that_would_drop_points_are_refused(tmp_path):
    """Issue 15: a read-only --sweep that is not a sweep folder, and a --battery-json with no
    reports, are refused before any work (exit 2), not drawn as empty figures."""
    from speccheck.errors import FileFormatError, InputError
    from speccheck.figures import check_inputs
    from speccheck.figures.battery_fig import load_reports

    measured, battery = resolve(["frontier"]), resolve(["battery"])
    with pytest.raises(InputError, match="does not exist"):
        check_inputs(measured, sweep_dir=str(tmp_path / "missing"), sweep_run=False)
    with pytest.raises(FileFormatError, match="holds no sweep"):
        check_inputs(measured, sweep_dir=str(tmp_path), sweep_run=False)
    (tmp_path / "sweep.sqlite").write_text("not a database")
    for run in (True, False):
        with pytest.raises(FileFormatError, match="not a results store"):
            check_inputs(measured, sweep_dir=str(tmp_path), sweep_run=run)
        with pytest.raises(FileFormatError, match="not a results store"):
            check_inputs(measured, sweep_dir=str(tmp_path / "sweep.sqlite"), sweep_run=run)
    check_inputs(measured, sweep_dir=str(tmp_path / "new"), sweep_run=True)  # a new folder to run into: fine
    check_inputs(battery, sweep_dir=str(tmp_path / "missing"), sweep_run=False)  # not used by figure 7
    for text, match in (("{}", "holds no reports"), ("nope", "unreadable"), ('{"m": {"results": []}}', "no test"),
                        ('{"m": {"results": [{"cell": 1, "bogus": 2}]}}', "malformed")):
        (tmp_path / "b.json").write_text(text)
        with pytest.raises(FileFormatError, match=match):
            load_reports(str(tmp_path / "b.json"))
        with pytest.raises(FileFormatError):
            check_inputs(battery, battery_json=str(tmp_path / "b.json"))
    with pytest.raises(InputError, match="is a folder"):
        check_inputs(battery, battery_json=str(tmp_path))
    check_inputs(battery, battery_json=str(tmp_path / "not-yet.json"))  # will be written: fine


def test_figure_failure_is_exit_2(tmp_path, monkeypatch, capsys):
    """A figure that cannot be drawn is 'could not run as asked' (exit 2), named on stderr."""
    import dataclasses

    from speccheck.figures import figures

    def broken(cfg):
        raise RuntimeError("no data")

    registry = figures()
    monkeypatch.setitem(registry, "fig1_acceptance", dataclasses.replace(registry["fig1_acceptance"], compute=broken))
    assert main(["figures", "--only", "acceptance", "--out", str(tmp_path)]) == 2
    assert "fig1_acceptance: RuntimeError: no data" in capsys.readouterr().err
