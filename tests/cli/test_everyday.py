"""Issue 37, everyday use without surprises: the battery's JSON is strict with numeric columns,
typed exports read the store without torch, a --K the rule never ran at is no verdict, and the
files the commands write honour the umask."""

from __future__ import annotations

import json
import math
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from speccheck.cli import _output
from tests.cli_support import run_cli, tiny_suite_text, write_suite

#: a tiny suite whose scalar grid has the delta = 0 atom: its list bound is 1 there, an n/a test with
#: an infinite threshold and MDD
ATOM = tiny_suite_text("tiny-atom").replace("deltas = [1.0]", "deltas = [0.0, 1.0]")


@pytest.fixture(scope="module")
def atom_suite(tmp_path_factory):
    return write_suite(tmp_path_factory.mktemp("suite"), ATOM)


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def _strict(text: str):
    def refuse(constant):
        raise ValueError(f"bare {constant} in JSON")

    return json.loads(text, parse_constant=refuse)


# ----------------------------------------------------------------------------- item 6: strict JSON
def test_battery_json_writes_null_for_infinities_and_reads_back_exactly(atom_suite, tmp_path, capsys):
    import pandas as pd

    from speccheck.validation.results import BatteryReport

    path = tmp_path / "r.json"
    code, out, err = run_cli(["battery", "--verifier", "dgrs", "--suite", atom_suite, "--json", str(path),
                              "--no-progress"], capsys)
    assert code == 0, err
    report = _strict(path.read_text())
    assert "inf" not in set(_strings(report)) and "-inf" not in set(_strings(report))
    table = pd.DataFrame(report["results"])
    for column in ("statistic", "threshold", "p_value", "mdd"):
        assert pd.api.types.is_float_dtype(table[column]), column  # numbers or NaN, never an object column
    infinite = [r for r in report["results"] if r.get("infinite")]
    assert infinite and all(r["threshold"] is None and r["infinite"]["threshold"] == 1 for r in infinite)
    back = BatteryReport.from_dict(report)
    assert back.to_dict() == report
    assert any(r.threshold == math.inf and r.mdd == math.inf for r in back.results)


def test_battery_outcome_to_dict_is_strict_json(atom_suite):
    import speccheck
    from speccheck.validation.results import BatteryReport, TestResult
    from speccheck.validation.verdict import BatteryOutcome, no_verdict

    outcome = speccheck.battery("dgrs", atom_suite, isolate=False)
    assert outcome.verdict == "exact"
    text = json.dumps(outcome.to_dict(), allow_nan=False)  # raises on NaN / Infinity
    assert '"inf"' not in text
    report = BatteryReport("v", "s", 1, 1e-3, 1e-4, "cpu",
                           results=[TestResult("c", "t", -math.inf, math.nan, 0.5, math.inf, 3, extra={"x": math.nan})])
    made = BatteryOutcome("defect", "r", report, {"L1": math.inf})
    data = json.loads(json.dumps(made.to_dict(), allow_nan=False))
    assert data["layer_mdd"] == {"L1": None} and data["report"]["results"][0]["extra"] == {"x": None}
    back = TestResult.from_dict(data["report"]["results"][0])
    assert back.statistic == -math.inf and back.mdd == math.inf and math.isnan(back.threshold)
    assert json.loads(json.dumps(no_verdict("why").to_dict(), allow_nan=False))["report"] is None


def test_reports_written_with_inf_strings_still_read():
    from speccheck.validation.results import TestResult

    old = {"cell": "c", "test": "t", "statistic": 1.0, "threshold": "inf", "p_value": 1.0, "mdd": "-inf", "n": 2}
    r = TestResult.from_dict(old)
    assert r.threshold == math.inf and r.mdd == -math.inf


_NO_TORCH = """
import sys
from speccheck.cli import main
from speccheck.scale.results import export_table
for rows in ("cells", "trajectories", "units"):
    frame = export_table(sys.argv[1], rows=rows)
    assert len(frame) > 0, rows
for rows in ("cells", "trajectories"):
    assert main(["results", "export", "--store", sys.argv[1], "--rows", rows, "--format", "json",
                 "--out", sys.argv[2]]) == 0
assert "torch" not in sys.modules, "reading the store imported torch"
"""


def test_typed_exports_read_the_store_without_torch(atom_suite, tmp_path, capsys):
    store = tmp_path / "r.sqlite"
    code, _, err = run_cli(["battery", "--verifier", "dgrs", "--suite", atom_suite, "--store", str(store),
                            "--no-progress"], capsys)
    assert code == 0, err
    code, _, err = run_cli(["sweep", "--target", "gmm-paper", "--verifiers", "dgrs", "--cells", "2x2",
                            "--trajectories", "3", "--steps", "6", "--store", str(store), "--name", "s",
                            "--workers", "1", "--no-progress"], capsys)
    assert code == 0, err
    done = subprocess.run([sys.executable, "-c", _NO_TORCH, str(store), str(tmp_path / "out.json")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    from speccheck.scale.results import export_table

    tests = export_table(str(store), rows="cells")
    mdd = tests.loc[tests["test"] == "acceptance<=list-bound", "mdd"]
    assert (mdd == math.inf).any()  # the stored null restored as the infinity it was


def test_rows_option_is_documented():
    root = Path(__file__).resolve().parents[2]
    text = (root / "README.md").read_text() + (root / "docs" / "scale-out.md").read_text()
    assert "--rows" in text and "trajectories" in text


# ----------------------------------------------------------------------------- item 8: --K that never ran
def test_K_the_rule_does_not_support_is_no_verdict(capsys):
    """The smoke suite's wrapper, trajectory layers run whatever --K says: without the check, RMC
    (K = 1 only) at --K 4 was "PASS (132 tests)" with nothing run at K = 4."""
    code, out, err = run_cli(["battery", "--verifier", "rmc", "--K", "4", "--suite", "smoke", "--no-progress"],
                             capsys)
    assert code == 2 and "RESULT: PASS" not in out, (out, err)
    assert "--K" in err and "supports K = 1" in err, err


def test_K_the_suite_does_not_have_is_no_verdict(capsys):
    code, out, err = run_cli(["battery", "--verifier", "dgrs", "--K", "100", "--suite", "smoke", "--no-progress"],
                             capsys)
    assert code == 2 and "--K" in err and "suite 'smoke' has K = 1..5, 8" in err, err
    code, out, err = run_cli(["battery", "--verifier", "dgrs", "--K", "2", "--layers", "L0", "L3",
                              "--suite", "smoke", "--no-progress"], capsys)
    assert code == 2 and "take no K" in err, err


def test_K_the_rule_supports_runs(atom_suite, capsys):
    code, out, err = run_cli(["battery", "--verifier", "rmc", "--K", "1", "--suite", atom_suite, "--no-progress"],
                             capsys)
    assert code == 0 and "RESULT: PASS" in out, err


# ----------------------------------------------------------------------------- item 8: file modes
@pytest.mark.parametrize("mask", [0o022, 0o027, 0o002])
def test_written_files_honour_the_umask(tmp_path, mask):
    old = os.umask(mask)
    try:
        path = tmp_path / "out.txt"
        _output.write_text(str(path), "x", "--json")
        assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~mask
        os.chmod(path, 0o600)  # an existing file keeps its mode
        _output.write_text(str(path), b"y", "--json")
        assert stat.S_IMODE(path.stat().st_mode) == 0o600 and path.read_bytes() == b"y"
    finally:
        os.umask(old)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".speccheck-")]


def test_battery_outputs_are_not_private(atom_suite, tmp_path, capsys):
    old = os.umask(0o022)
    try:
        paths = {opt: tmp_path / f"r.{opt}" for opt in ("json", "junit", "html")}
        argv = ["battery", "--verifier", "dgrs", "--suite", atom_suite, "--no-progress"]
        for opt, path in paths.items():
            argv += [f"--{opt}", str(path)]
        code, _, err = run_cli(argv, capsys)
    finally:
        os.umask(old)
    assert code == 0, err
    assert {opt: stat.S_IMODE(p.stat().st_mode) for opt, p in paths.items()} == dict.fromkeys(paths, 0o644)


# ----------------------------------------------------------------------------- item 5: one speed-up, one answer
def test_speedup_command_and_api_give_the_same_numbers_for_a_seed(tmp_path, capsys):
    """The command's default protocol is the API's (the lazy preset): same seed, same record."""
    import speccheck

    path = tmp_path / "s.json"
    code, out, err = run_cli(["speedup", "--K", "2", "--L", "2", "--trajectories", "4", "--steps", "8", "--seed", "7",
                              "--json", str(path)], capsys)
    assert code == 0, err
    assert "speed-up" in out  # with a path, the table is still printed
    record = _strict(path.read_text())
    outcome = speccheck.speedup("dgrs", 2, 2, trajectories=4, seed=7, overrides={"steps": 8})
    api_record = json.loads(_output.json_text(outcome.data["result"]))
    assert record["protocol"]["lazy"] is True and record == api_record
    code, out, err = run_cli(["speedup", "--K", "2", "--L", "2", "--trajectories", "4", "--steps", "8", "--seed", "7",
                              "--json", "-"], capsys)
    assert code == 0 and _strict(out) == record, err  # '-': the record on stdout, nothing else


def test_speedup_json_path_is_checked_before_the_run(tmp_path, capsys):
    code, out, err = run_cli(["speedup", "--K", "2", "--L", "2", "--json", str(tmp_path)], capsys)
    assert code == 2 and "--json" in err and out == "", (out, err)


# ----------------------------------------------------------------------------- item 7: progress without a terminal
def test_battery_reports_progress_in_plain_lines_without_a_terminal(atom_suite, capsys, monkeypatch):
    """stderr captured (not a terminal, as in CI or a notebook): a line per unit when the interval is
    0; none with --no-progress; stdout and the exit code unchanged."""
    from speccheck.scale import executors

    monkeypatch.delenv(_output.NO_PROGRESS_ENV, raising=False)
    monkeypatch.setattr(executors, "PROGRESS_LINE_S", 0.0)
    code, out, err = run_cli(["battery", "--verifier", "dgrs", "--suite", atom_suite], capsys)
    assert code == 0, err
    lines = [line for line in err.splitlines() if "units" in line and "done" in line]
    assert lines and lines[-1].split("units ")[1].split(" ")[0].split("/")[0] == \
        lines[-1].split("units ")[1].split(" ")[0].split("/")[1]  # the last line: all units done
    assert "\r" not in err  # lines, not a bar redrawn in place
    quiet_code, quiet_out, quiet_err = run_cli(["battery", "--verifier", "dgrs", "--suite", atom_suite,
                                                "--no-progress"], capsys)
    assert quiet_code == 0 and "done (" not in quiet_err
    assert quiet_out.splitlines()[:-1] == out.splitlines()[:-1]  # the report is the same (but its timing)


def test_progress_lines_are_at_most_one_per_interval(monkeypatch, capsys):
    from speccheck.scale import executors

    clock = iter([0.0] + [1.0 * i for i in range(1, 60)])  # one unit done per second
    monkeypatch.setattr(executors.time, "perf_counter", lambda: next(clock))
    monkeypatch.setattr(executors, "PROGRESS_LINE_S", 10.0)
    bar = executors.Progress(50, "test")
    for _ in range(50):
        bar.step()
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 5 and lines[-1] == "[test] units 50/50 done (50 s)", lines
    monkeypatch.setattr(executors.time, "perf_counter", lambda: 0.0)
    quick = executors.Progress(5, "quick")  # a job shorter than the interval prints nothing
    for _ in range(5):
        quick.step()
    assert capsys.readouterr().err == ""
