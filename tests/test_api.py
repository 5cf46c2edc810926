"""speccheck.battery: one verdict and one report whatever the path (in this process, an isolated
child, Dask workers, the command, the pytest fixture), stored verdicts never reused for changed
code, and the run-time failures mapped to the exit-code contract."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest

import speccheck
from speccheck import api
from speccheck.cli._output import json_text as _json_text
from speccheck.errors import InputError
from speccheck.validation.report import report_dict
from tests.cli_support import run_cli, tiny_suite_text, write_suite

TIMINGS = ("wall_s", "cpu_s")


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    """delta = 1, K = 1, 2 (2048 draws), the contract, the wrapper at d = 1, 2, one continuous K and a
    300-call sequence layer."""
    extra = ("[wrapper]\ndims = [1, 2]\nn = 512\nK = 2\ndeltas = [0.5]\n"
             "[continuous]\nK = [3]\nedges = [1e-3, 1.0, 4.0]\nn = 512\ndeclared_deltas = 1\ndeclared_rows = 128\n"
             "[sequence]\nK = [1, 2, 4]\ncalls = 300\nsmall_calls = 0\n")
    return write_suite(tmp_path_factory.mktemp("api"), tiny_suite_text("api", extra=extra))


def _plain(report: dict) -> dict:
    return {k: v for k, v in report.items() if k not in TIMINGS}


@pytest.mark.parametrize("rule", ["dgrs", "speccheck.validation.zoo:StaleK"])
def test_every_path_gives_the_same_verdict_and_report(suite, rule, tmp_path, capsys):
    isolated = speccheck.battery(rule, suite)
    here = speccheck.battery(rule, suite, isolate=False)
    dask = speccheck.battery(rule, suite, workers=2)
    code, _, err = run_cli(["battery", "--verifier", rule, "--suite", suite, "--json", str(tmp_path / "r.json"),
                            "--no-progress"], capsys)
    command = json.loads((tmp_path / "r.json").read_text())
    assert isolated.verdict == here.verdict == dask.verdict
    assert code == isolated.exit_code, err
    want = _plain(isolated.report.to_dict())
    assert _plain(here.report.to_dict()) == want
    assert _plain(dask.report.to_dict()) == want
    assert _plain(command) == _plain(json.loads(_json_text(report_dict(isolated.report))))
    if rule == "dgrs":
        assert isolated.verdict == "exact" and code == 0
    else:  # the sequence layer drives one instance from K = 1 to larger K: the stale table shows, on every path
        assert isolated.verdict == "defect" and code == 1


def test_the_fixture_judges_like_the_command(suite, speccheck_battery):
    outcome = speccheck_battery("dgrs", suite=suite)
    assert outcome.verdict == "exact"
    with pytest.raises(AssertionError, match="found a defect"):
        speccheck_battery("tests.api_rules:Biased", suite=suite)
    with pytest.raises(AssertionError, match="no verdict: no power"):
        speccheck_battery("dgrs", suite=suite, scale=1e-6)


def test_an_exception_in_verify_is_a_defect_and_out_of_memory_no_verdict(suite, capsys):
    for path in ({}, {"isolate": False}, {"workers": 2}):
        raised = speccheck.battery("tests.api_rules:RaisesOnSmallBatches", suite, **path)
        assert raised.verdict == "defect" and raised.exit_code == 1, (path, raised.reason)
        oom = speccheck.battery("tests.api_rules:OutOfMemoryInWrapper", suite, **path)
        assert oom.verdict == "no_verdict" and oom.exit_code == 2 and "out of memory" in oom.reason, path
    code, _, err = run_cli(["battery", "--verifier", "tests.api_rules:OutOfMemoryInWrapper", "--suite", suite,
                            "--no-progress"], capsys)
    assert code == 2 and "out of memory" in err
    code, out, _ = run_cli(["battery", "--verifier", "tests.api_rules:RaisesOnSmallBatches", "--suite", suite,
                            "--no-progress"], capsys)
    assert code == 1 and "contract:no-exception" in out


def test_a_run_without_power_has_no_verdict(suite, capsys):
    weak = speccheck.battery("dgrs", suite, scale=1e-6)
    assert weak.verdict == "no_verdict" and "no power" in weak.reason and weak.report is not None
    assert max(weak.layer_mdd.values()) > 0.25
    code, _, err = run_cli(["battery", "--verifier", "dgrs", "--suite", suite, "--scale", "1e-6", "--no-progress"],
                           capsys)
    assert code == 2 and "no power" in err and "raise --scale" in err


def test_a_changed_verifier_never_reuses_a_stored_verdict(suite, tmp_path, monkeypatch, capsys):
    rule = tmp_path / "myrule_api.py"
    source = textwrap.dedent("""
        from speccheck.verifiers.dgrs import DGRS

        class Rule(DGRS):
            name = "mine"
            SHIFT = 0.0

            def verify(self, delta, s, generator=None):
                s_out, acc, idx = super().verify(delta, s, generator)
                return s_out + self.SHIFT * (~acc), acc, idx
    """)
    rule.write_text(source)
    monkeypatch.chdir(tmp_path)
    store = str(tmp_path / "store.sqlite")
    argv = ["battery", "--verifier", "myrule_api:Rule", "--suite", suite, "--store", store, "--no-progress"]
    assert run_cli(argv, capsys)[0] == 0
    rule.write_text(source.replace("SHIFT = 0.0", "SHIFT = 0.5"))  # the residual is now biased
    code, out, _ = run_cli(argv, capsys)
    assert code == 1 and "FAIL" in out


def test_bad_options_raise_before_anything_runs(suite):
    for bad in ({"scale": 0}, {"seed": -1}, {"timeout": float("nan")}, {"workers": 0}, {"layers": ["L9"]},
                {"Ks": [0]}, {"workers": 2, "scheduler": "tcp://127.0.0.1:1"}):
        with pytest.raises(InputError):
            speccheck.battery("dgrs", suite, **bad)
    from speccheck.verifiers.dgrs import DGRS

    with pytest.raises(InputError, match="isolate=False"):
        speccheck.battery(DGRS(), suite)
    assert speccheck.battery(DGRS(), suite, isolate=False).verdict == "exact"


def test_measure_acceptance_is_a_tidy_table_with_standard_errors():
    table = speccheck.measure_acceptance("dgrs", [0.05, 1.0], [1, 3], n=20000, seed=4)
    assert list(table.columns) == ["rule", "delta", "K", "n", "accepted", "acceptance", "se", "declared", "z",
                                   "list_bound"]
    assert len(table) == 4 and (table["se"] > 0).all()
    assert (table["z"].abs() < 5).all()  # exact rule: |z| > 5 has probability < 6e-7 per cell
    assert (table["acceptance"] <= table["list_bound"] + 5 * table["se"]).all()
    first = speccheck.measure_acceptance("tests.cli.hostile29:AlwaysFirst", [1.0], 2, n=20000)
    assert float(first["acceptance"].iloc[0]) == 1.0 and float(first["z"].iloc[0]) > 20
    for bad in ({"deltas": [-1.0]}, {"deltas": [float("nan")]}, {"deltas": [1e308]}, {"K": [0]}, {"n": 0}):
        kw = {"deltas": [1.0], "K": [1], "n": 10, **bad}
        with pytest.raises(InputError):
            speccheck.measure_acceptance("dgrs", kw["deltas"], kw["K"], n=kw["n"])


def test_patched_statistics_in_the_verifier_process_cannot_pass_a_biased_rule(capsys):
    """tests.patching_rules replaces speccheck's tests, Holm and the battery's judges with
    always-pass versions where it is imported (the verifier's process); every cell is judged in
    this process from its raw outputs, so its report equals its unpatched twin's, test for test."""
    twin = speccheck.battery("tests.biased_rules:Biased", "smoke")
    assert twin.verdict == "defect"
    assert {"L1", "L5", "L6"} <= {r.layer for r in twin.report.failures}
    assert twin.report.localisations and not any("not possible" in n for n in twin.report.notes)
    for path in ({}, {"workers": 2}):
        outcome = speccheck.battery("tests.patching_rules:Biased", "smoke", **path)
        assert outcome.verdict == "defect", (path, outcome.reason)
        assert _plain(outcome.report.to_dict()) == _plain(twin.report.to_dict()), path
    code, out, _ = run_cli(["battery", "--verifier", "tests.patching_rules:Biased", "--suite", "smoke",
                            "--no-progress"], capsys)
    assert code == 1 and "FAIL" in out
    assert "tests.patching_rules" not in sys.modules  # this (judging) process never imported it


class _Tampering:
    """An executor that runs units here, then alters each battery cell's outcome with ``tamper``."""

    def __init__(self, tamper):
        from speccheck.scale.executors import InProcessExecutor

        self.inner, self.tamper = InProcessExecutor(), tamper

    def run(self, units, on_result):
        self.inner.run(units, lambda unit, outcome: on_result(unit, self.tamper(unit, outcome)))


def _tampered_run(tamper):
    from speccheck.scale import jobs

    return jobs.battery_job("dgrs", "smoke", executor=_Tampering(tamper), options={"layers": ["L0", "L1", "L6"]})


def test_a_cell_is_judged_from_its_raw_outputs_and_nothing_else():
    import numpy as np

    from speccheck.errors import FileFormatError

    clean = _tampered_run(lambda unit, outcome: outcome)
    assert clean["passed"]

    def shift(unit, outcome):  # raw outputs moved by 0.2: the judge here sees it, whatever else was sent
        raw = outcome["result"].get("raw")
        if isinstance(raw, dict) and "x" in raw:
            raw["x"] = np.asarray(raw["x"]) + 0.2
        return outcome
    shifted = _tampered_run(shift)
    assert not shifted["passed"] and any(r["layer"] == "L1" and not r["passed"] for r in shifted["results"])

    def claim_pass(unit, outcome):  # a worker that sends a statistic of its own
        if "raw" in outcome["result"]:
            outcome["result"]["results"].append({**outcome["result"]["results"][0], "kind": "stat"})
        return outcome

    def drop_raw(unit, outcome):  # outputs withheld, no contract failure to say why
        if outcome["result"].get("raw") is not None:
            outcome["result"]["raw"] = None
        return outcome

    def truncate(unit, outcome):
        raw = outcome["result"].get("raw")
        if isinstance(raw, dict) and "z" in raw:
            raw["z"] = raw["z"][:-1]
        return outcome
    for tamper, pattern in ((claim_pass, "sent statistical results"), (drop_raw, "no raw outputs"),
                            (truncate, "malformed raw outputs")):
        with pytest.raises(FileFormatError, match=pattern):
            _tampered_run(tamper)


def test_a_rule_outside_speccheck_is_calibrated_where_the_run_is_judged(suite):
    """calibrate on a module that patches the statistics where it runs: its runs are drawn in
    isolated children and judged here, so its records equal its unpatched twin's (every run fails)."""
    def records(spec):
        summary = api.calibrate(suite, [spec], seeds=range(1, 3))
        assert summary["rules"][spec]["failures"] == 2 and not summary["consistent"]
        return [{k: v for k, v in r.items() if k not in ("rule", "wall_s", "cpu_s")} for r in summary["records"]]

    assert records("tests.patching_rules:Biased") == records("tests.biased_rules:Biased")
    assert "tests.patching_rules" not in sys.modules


def test_patched_statistics_cannot_hide_a_wrong_acceptance_law_from_speedup_or_sweep(tmp_path, capsys):
    """tests.patching_rules also replaces the speed-up summaries' calibration z and the sweep's
    Holm where it runs; speed-up runs and sweep cells send their raw runs and are summarised and
    judged here, so the patched rule's numbers equal its twin's and its wrong law is a defect on
    every path (isolated child, Dask with 2 workers, the command)."""
    options = dict(trajectories=30, overrides={"steps": 10})
    twin = api.speedup("tests.biased_rules:Overclaiming", 2, 2, **options)
    assert twin.verdict == "defect" and twin.data["result"]["calibration_z"] > 5
    patched = api.speedup("tests.patching_rules:Overclaiming", 2, 2, **options)
    assert patched.verdict == "defect"
    assert json.dumps(patched.data, sort_keys=True, default=str) == json.dumps(twin.data, sort_keys=True, default=str)

    from speccheck.sampler.experiments import preset, run_cells
    from speccheck.scale.jobs import sweep_units

    spec, cells = "tests.patching_rules:Overclaiming", [(2, 2), (1, 3)]
    _, units = sweep_units(preset("gmm-paper", steps=10), [spec], cells, 20, 0)
    want = {unit.key: run_cells(preset("gmm-paper", steps=10), "tests.biased_rules:Overclaiming", unit.identity[1],
                                [unit.identity[2]], 20, unit.seed)[1][0] for unit in units}  # the twin, same seeds
    for path in ({"workers": 1}, {"workers": 2, "store": str(tmp_path / "s.sqlite")}):
        outcome = api.sweep([spec], cells, 20, overrides={"steps": 10}, **path)
        assert outcome.verdict == "defect", (path, outcome.reason)
        for row in outcome.data["rows"]:
            twin_row = want[f"{spec}/{row['K']}/{row['L']}"]
            assert [row[k] for k in ("calibration_z", "nfe_z", "acceptance")] == \
                [twin_row[k] for k in ("calibration_z", "nfe_z", "acceptance")], path
    code, out, _ = run_cli(["speedup", "--verifier", "tests.patching_rules:Overclaiming", "--K", "2", "--L", "2",
                            "--trajectories", "30", "--steps", "10"], capsys)
    assert code == 1, out
    assert "tests.patching_rules" not in sys.modules  # this (judging) process never imported it


def test_a_sweep_cell_is_summarised_from_its_raw_run_and_refused_when_malformed():
    from speccheck.errors import DefectError, FileFormatError
    from speccheck.sampler.experiments import preset
    from speccheck.scale import jobs

    proto = preset("gmm-paper", steps=6)

    def run(tamper):
        return jobs.run_sweep(proto, ["dgrs"], [(2, 2)], 6, 0, executor=_Tampering(tamper))

    clean = run(lambda unit, outcome: outcome)
    assert clean[0]["trajectories"] == 6 and abs(clean[0]["calibration_z"]) < 4

    def change(**fields):  # a worker sending its run with these fields replaced
        def tamper(unit, outcome):
            outcome["result"].update(fields)
            return outcome
        return tamper

    def claim(unit, outcome):  # a worker claiming every event was certain to accept
        outcome["result"]["declared"] = [1.0] * len(outcome["result"]["declared"])
        return outcome

    def no_events(unit, outcome):  # a run with no verifications: no evidence, not a pass
        raw = outcome["result"]
        raw["events"] = {name: [] for name in raw["events"]}
        raw["declared"] = []
        raw["counters"]["n_verified"] = raw["counters"]["n_accepted"] = [0] * len(raw["counters"]["nfe"])
        return outcome

    def inflate(unit, outcome):  # nfe that are not rounds + root calls
        outcome["result"]["counters"]["nfe"] = [n + 1 for n in outcome["result"]["counters"]["nfe"]]
        return outcome

    def fewer_rounds(unit, outcome):  # counters claiming one round per trajectory: a 30x speed-up
        counters = outcome["result"]["counters"]
        counters["rounds"] = [1] * len(counters["nfe"])
        counters["root_calls"] = [0] * len(counters["nfe"])
        counters["nfe"] = [1] * len(counters["nfe"])
        return outcome

    def renumber(unit, outcome):  # round numbers that are not 0, 1, ...
        outcome["result"]["events"]["round"] = [10**15 + r for r in outcome["result"]["events"]["round"]]
        return outcome

    def recount(unit, outcome):  # counters that disagree with the events
        outcome["result"]["counters"]["n_accepted"][0] += 1
        return outcome

    def nan_delta(unit, outcome):
        outcome["result"]["events"]["delta"][0] = float("nan")
        return outcome

    def short(unit, outcome):
        outcome["result"]["declared"] = outcome["result"]["declared"][:-1]
        return outcome

    def summary(unit, outcome):  # a worker sending a summary instead of its run
        outcome["result"] = {"summary": {"calibration_z": 0.0}, "trajectories": {}}
        return outcome

    cases = ((recount, "n_accepted disagrees"), (nan_delta, "events.delta: 1 non-finite"),
             (short, "declared: expected a 1-d column"), (summary, "malformed raw outputs"),
             (claim, "exceeds the i.i.d.-list bound"),  # a defect: no exact rule has that law
             (no_events, "did not verify each of the"), (inflate, "target calls. are not those its verifications"),
             (change(n_stochastic=10**9), "is not the schedule's"), (change(tree_L=10**13), "tree_L 10000000000000"),
             (change(rule="x" * 1000), "rule must be the verifier's name"), (change(B=float("inf")), None),
             (fewer_rounds, "counters .rounds, root calls, target calls. are not"), (renumber, "are not those"),
             (change(prefetch="none"), "prefetch 'none', the cell asked for 'nearest'"))
    for tamper, pattern in cases:
        if pattern is None:  # fields the judge computes itself are ignored
            assert run(tamper) == clean
            continue
        broken = tamper in (claim, no_events, inflate, fewer_rounds, renumber)  # never in a run of Algorithm 1
        with pytest.raises(DefectError if broken else FileFormatError, match=pattern):
            run(tamper)


def test_patched_statistics_in_the_model_process_cannot_pass_a_biased_rule_end_to_end():
    """tests.patching_rules also replaces the e2e tests and verdict where it runs; the e2e child
    sends each cell's raw outputs and this process judges them, so the patched rule's reports
    equal its twin's (not exact: the innovation test rejects it)."""
    base = dict(model="digits-edm", samples=200, steps=16, eps=0.3, n_perm=3000, seed=2)

    def reports(spec):
        outcome = api.e2e({**base, "verifier": spec}, [spec], [2], [3], [0.3])
        assert outcome.verdict == "defect", outcome.reason
        (report,) = outcome.data["reports"]
        assert report["exact"] is False and not report["exactness"]["innovation"]["passed"]
        report = {k: v for k, v in report.items() if not k.startswith("wall_s")}
        report["config"] = {k: v for k, v in report["config"].items() if k != "verifier"}
        return json.dumps(report, sort_keys=True, default=str)

    assert reports("tests.patching_rules:Loud") == reports("tests.biased_rules:Loud")
    assert "tests.patching_rules" not in sys.modules


def test_a_sweep_whose_child_is_killed_has_no_verdict_and_keeps_the_cells_judged(tmp_path, capsys):
    """kill -9 of the sweep's isolated child mid-run: exit 2 naming the kill; the cell judged
    before it stays in the store, and a rerun of that cell finds it there (no run)."""
    import sqlite3

    store = str(tmp_path / "s.sqlite")
    argv = ["sweep", "--verifiers", "tests.biased_rules:KilledAtK1", "--trajectories", "4", "--steps", "6",
            "--workers", "1", "--store", store, "--no-progress", "--name", "k"]
    code, out, err = run_cli([*argv, "--cells", "2x2", "1x3"], capsys)
    assert code == 2 and "SIGKILL" in err and "no verdict" in err, (out, err)
    with sqlite3.connect(store) as db:
        assert db.execute("SELECT unit_key FROM units WHERE job = 'k'").fetchall() == \
            [("tests.biased_rules:KilledAtK1/2/2",)]
    code, out, err = run_cli([*argv, "--cells", "2x2"], capsys)
    assert code == 0 and "1 cells run or found" in out and "K=2 L=2: speedup" not in out, (out, err)


def test_a_declared_law_no_exact_rule_has_is_a_defect(capsys):
    """A rule declaring acceptance above the i.i.d.-list bound: the judge refuses the law as a
    defect (exit 1, naming it) on the speed-up, the sweep and the command."""
    spec = "tests.biased_rules:Impossible"
    outcome = api.speedup(spec, 2, 2, trajectories=6, overrides={"steps": 6})
    assert outcome.verdict == "defect" and "exceeds the i.i.d.-list bound" in outcome.reason
    swept = api.sweep([spec], [(2, 2)], 4, overrides={"steps": 6}, workers=1)
    assert swept.verdict == "defect" and "exceeds the i.i.d.-list bound" in swept.reason
    code, out, err = run_cli(["speedup", "--verifier", spec, "--K", "2", "--L", "2", "--trajectories", "6",
                              "--steps", "6"], capsys)
    assert code == 1 and "DEFECT: declared acceptance" in out, (out, err)
