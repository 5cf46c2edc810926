"""One verdict and one report per seed, whatever the path (issues 27 and 28), for every built-in
rule and every mutant: the command (its verifier in an isolated child), the pytest fixture and
Dask with two workers.

Small suites keep it to seconds per rule: the contract, a scalar grid of two deltas and two K,
a 200-call sequence layer and a 20,000-row law layer; the sampler mutants get a trajectory-only suite (they are run on
layers 0 and 4 alone on every path)."""

from __future__ import annotations

import json

import pytest

import speccheck
from speccheck.validation.mutants import mutant_factories
from speccheck.validation.results import BatteryReport
from speccheck.verifiers.registry import BUILTIN
from tests.cli_support import run_cli, tiny_suite_text, write_suite

TIMINGS = ("wall_s", "cpu_s")
SEQUENCE = "[sequence]\nK = [1, 2, 4]\ncalls = 200\nsmall_calls = 0\n"
LAW = "[law]\nrows = 20000\nK = [1, 2, 4]\npoints = 8\n"  # layer 7: its own unit kind, a clean child
TRAJECTORY = 'name = "paths-traj"\nseed = 3\n[trajectory]\nn_traj = 60\nK = 2\nL = 3\nd = 4\n'
SAMPLER = sorted(n for n in mutant_factories() if n.startswith("sampler-"))
SCALAR = sorted(n for n in mutant_factories() if not n.startswith("sampler-"))


def _plain(report: dict | BatteryReport) -> dict:
    """A report as JSON data without its timings (the only fields that may differ by path)."""
    data = report.to_dict() if isinstance(report, BatteryReport) else BatteryReport.from_dict(report).to_dict()
    return {k: v for k, v in data.items() if k not in TIMINGS}


@pytest.fixture(scope="module")
def suites(tmp_path_factory):
    folder = tmp_path_factory.mktemp("paths")
    (folder / "traj").mkdir()
    return {"scalar": write_suite(folder, tiny_suite_text("paths", extra=SEQUENCE + LAW)),
            "trajectory": write_suite(folder / "traj", TRAJECTORY)}


@pytest.fixture(scope="module")
def cluster():
    """One local Dask cluster of two single-threaded worker processes for the module (what
    --workers 2 starts), reached as --scheduler ADDRESS."""
    import logging

    from distributed import LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0",
                      silence_logs=logging.CRITICAL, env={"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}) as lc:
        yield lc.scheduler_address


@pytest.mark.parametrize("rule", sorted(BUILTIN))
def test_every_built_in_rule_gets_one_report_on_every_path(rule, suites, cluster, speccheck_battery, tmp_path, capsys):
    suite = suites["scalar"]
    fixture = speccheck_battery(rule, suite=suite)  # raises on a defect or no verdict
    dask = speccheck.battery(rule, suite, scheduler=cluster)
    code, _, err = run_cli(["battery", "--verifier", rule, "--suite", suite, "--json", str(tmp_path / "r.json"),
                            "--no-progress"], capsys)
    assert code == 0, err
    want = _plain(fixture.report)
    assert fixture.verdict == dask.verdict == "exact"
    assert _plain(dask.report) == want
    assert _plain(json.loads((tmp_path / "r.json").read_text())) == want


@pytest.mark.parametrize("kind", ["scalar", "trajectory"])
def test_every_mutant_gets_one_report_on_every_path(kind, suites, speccheck_battery, tmp_path, capsys):
    """The kill matrix through the command (one isolated child) and with --workers 2, and each
    mutant through the fixture (a verifier object runs in the test's process): the same report
    for every mutant, and the fixture fails exactly the mutants the kill matrix killed."""
    suite, names = suites[kind], (SCALAR if kind == "scalar" else SAMPLER)
    matrices = {}
    for workers in ("1", "2"):
        path = tmp_path / f"m{workers}.json"
        code, out, err = run_cli(["battery", "--mutants", "--suite", suite, "--workers", workers, "--json", str(path),
                                  "--no-progress", *[a for n in names for a in ("--mutant", n)]], capsys)
        assert code in (0, 1), err
        matrices[workers] = {name: _plain(rep) for name, rep in json.loads(path.read_text()).items()}
    assert list(matrices["1"]) == names
    assert matrices["2"] == matrices["1"]
    factories = mutant_factories()
    for name in names:
        here = speccheck.battery(factories[name](), suite, isolate=False)
        assert _plain(here.report) == matrices["1"][name], name
        killed = not matrices["1"][name]["passed"]
        assert (here.verdict == "defect") == killed, (name, here.verdict, here.reason)
        if killed:
            with pytest.raises(AssertionError, match="found a defect"):
                speccheck_battery(factories[name](), suite=suite)
