"""``speccheck battery --workers/--scheduler/--store``: the battery's cells and the kill matrix's
mutants as units. ``--workers 1`` runs them in the isolated child process, ``--workers 2`` on a local
Dask cluster (whose worker processes isolate the code under test); the reports are the same, and the
code under test never chooses the exit code."""

from __future__ import annotations

import json

import pytest

from tests.cli_support import run_cli, tiny_suite_text, write_suite

CONTINUOUS = """[continuous]
K = [1, 2]
edges = [1e-3, 1.0, 40.0]
n = 512
declared_deltas = 1
declared_rows = 128
refine = 4
confirm_n = 2048
"""


@pytest.fixture(scope="module")
def tiny_suite(tmp_path_factory):
    return write_suite(tmp_path_factory.mktemp("suite"), tiny_suite_text("tiny-workers", extra=CONTINUOUS))


def _untimed(obj):
    if isinstance(obj, dict):
        return {k: _untimed(v) for k, v in obj.items() if k not in ("wall_s", "cpu_s")}
    return obj


def test_one_and_two_workers_give_one_report(tiny_suite, tmp_path, capsys):
    """Done-when of issue 14.1 for a battery: bit-identical reports with --workers 1 and 2, the failure localised."""
    reports = {}
    for workers in ("1", "2"):
        path = tmp_path / f"r{workers}.json"
        code, out, err = run_cli(["battery", "--verifier", "tests.cli.hostile:Biased", "--suite", tiny_suite,
                               "--workers", workers, "--json", str(path), "--no-progress"], capsys)
        assert code == 1 and "RESULT: FAIL" in out and "confirmed on" in out, (out[-2000:], err[-2000:])
        reports[workers] = json.loads(path.read_text())
    assert json.dumps(_untimed(reports["1"]), sort_keys=True) == json.dumps(_untimed(reports["2"]), sort_keys=True)
    assert reports["2"]["localisations"][0]["confirmed"]


def test_mutants_as_units_on_two_workers(tiny_suite, tmp_path, capsys):
    names = ["--mutant", "rmc-fresh", "--mutant", "claims-accept"]
    out_json = {}
    for workers in ("1", "2"):
        path = tmp_path / f"m{workers}.json"
        store = tmp_path / f"m{workers}.sqlite"
        code, out, err = run_cli(["battery", "--mutants", *names, "--suite", tiny_suite, "--workers", workers,
                               "--store", str(store), "--json", str(path), "--no-progress"], capsys)
        assert code == 0 and "2/2 mutants killed" in out, (out[-2000:], err[-2000:])
        out_json[workers] = json.loads(path.read_text())
        assert store.exists()
    assert list(out_json["1"]) == ["rmc-fresh", "claims-accept"]
    assert json.dumps(_untimed(out_json["1"]), sort_keys=True) == json.dumps(_untimed(out_json["2"]), sort_keys=True)
    assert all({"wall_s", "cpu_s", "results", "passed"} <= set(r) for r in out_json["2"].values())  # today's shape


def test_code_under_test_cannot_choose_the_exit_code_on_dask(tiny_suite, capsys):
    code, _, err = run_cli(["battery", "--verifier", "tests.cli.hostile:SysExitZero", "--suite", tiny_suite,
                         "--workers", "2", "--no-progress"], capsys)
    assert code == 2 and "sys.exit(0)" in err and "no verdict" in err, err


@pytest.mark.parametrize("extra, message", [
    (["--workers", "0"], "--workers must be >= 1"),
    (["--workers", "2", "--scheduler", "tcp://127.0.0.1:1"], "exclude each other"),
    (["--scheduler", "localhost"], "--scheduler takes an address"),
    (["--store", "."], "--store"),
])
def test_bad_executor_options(tiny_suite, capsys, extra, message):
    code, _, err = run_cli(["battery", "--verifier", "dgrs", "--suite", tiny_suite, *extra], capsys)
    assert code == 2 and message in err, err
