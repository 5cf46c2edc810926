"""A battery run as units (one per cell, merged into one report with Holm over the whole family)
and the kill matrix as units (one per mutant): the same reports as the library's in-process run,
whatever runs the units, and the same after a resume from the store."""

from __future__ import annotations

import json
import sqlite3
import time

import pytest

from speccheck.scale.executors import DaskExecutor, InProcessExecutor
from speccheck.scale.jobs import battery_job, mutant_matrix
from speccheck.scale.units import _one_torch_thread
from speccheck.validation.battery import run_battery

# every layer, small: the continuous layer (per-K cells), the wrapper (per-dim cells), L4
CELL_SUITE = """name = "cells"
seed = 11
family_alpha = 1e-3
power = 0.9

[scalar]
deltas = [0.5, 2.0]
K = [1, 2]
n = 2048

[contract]
n = 64

[continuous]
K = [1, 2, 3]
edges = [1e-3, 1.0, 40.0]
zero_atom = true
n = 512
declared_deltas = 1
declared_rows = 128
refine = 4
confirm_n = 2048

[wrapper]
dims = [2, 8]
n = 256
K = 2
deltas = [0.0, 1.0]

[trajectory]
enabled = true
n_traj = 40
K = 2
L = 2
d = 2
"""
EXACT, BIASED = "dgrs", "tests.cli.hostile:Biased"  # Biased: N(delta + 0.3, 1), caught and localised


@pytest.fixture(scope="module")
def cell_suite(tmp_path_factory):
    path = tmp_path_factory.mktemp("suite") / "cells.toml"
    path.write_text(CELL_SUITE)
    return str(path)


def _untimed(report: dict) -> str:
    return json.dumps({k: v for k, v in report.items() if k not in ("wall_s", "cpu_s")}, sort_keys=True)


@pytest.fixture(scope="module")
def in_process(cell_suite):
    """battery_job on the in-process executor, for the exact and the biased rule."""
    return {v: battery_job(v, cell_suite, executor=InProcessExecutor()) for v in (EXACT, BIASED)}


@pytest.mark.parametrize("verifier", [EXACT, BIASED])
def test_cells_merge_into_the_library_report(cell_suite, in_process, verifier):
    """Merged cells = run_battery (same torch thread count): every test, p-value, Holm verdict,
    note and localisation; the per-test level comes from the whole family, not a cell's share."""
    with _one_torch_thread():
        direct = run_battery(verifier, cell_suite).to_dict()
    merged = in_process[verifier]
    assert _untimed(merged) == _untimed(direct)
    family = sum(r["kind"] in ("stat", "n/a") for r in merged["results"])  # planned: n/a tests included
    assert family > 30 and merged["per_test_alpha"] == pytest.approx(1e-3 / family, rel=1e-12)
    layers = {r["layer"] for r in merged["results"]}
    assert {"L0", "L1", "L2", "L3", "L5"} <= layers
    if verifier == EXACT:
        assert merged["passed"] and "L4" in layers
    else:
        assert not merged["passed"]
        assert merged["localisations"] and merged["localisations"][0]["confirmed"]  # localised in the merged run


def test_a_cell_is_seeded_by_its_identity(cell_suite, in_process):
    """The cells of K = 2 give the same draws (statistics, p-values) whether the run has every K or only K = 2."""
    only_k2 = battery_job(EXACT, cell_suite, options={"Ks": [2]})

    def stats(report: dict) -> dict:
        return {(r["layer"], r["cell"], r["test"]): (r["statistic"], r["p_value"]) for r in report["results"]
                if r["kind"] == "stat" and r["layer"] in ("L1", "L2", "L5") and r["extra"].get("K") == 2}

    full, part = stats(in_process[EXACT]), stats(only_k2)
    assert len(part) >= 8 and part == {k: full[k] for k in part}
    assert only_k2["per_test_alpha"] > in_process[EXACT]["per_test_alpha"]  # a smaller family, a larger level


@pytest.fixture(scope="module")
def two_workers():
    executor = DaskExecutor(workers=2)
    try:
        yield executor
    finally:
        executor.close()


def test_two_workers_give_the_same_report_and_resume(cell_suite, in_process, two_workers, tmp_path):
    store = tmp_path / "b.sqlite"
    on_dask = battery_job(BIASED, cell_suite, executor=two_workers, store=str(store))
    assert _untimed(on_dask) == _untimed(in_process[BIASED])
    with sqlite3.connect(store) as db:
        rows = db.execute("SELECT unit_key, worker, stored_at FROM units ORDER BY unit_key").fetchall()
    keys = [k for k, _, _ in rows]
    assert {f"{BIASED}/11/plan", f"{BIASED}/11/localise", f"{BIASED}/11/L5/3"} <= set(keys)  # suite seed 11
    assert len({w for _, w, _ in rows}) == 2  # the cells really ran on both workers
    c0 = time.process_time()
    again = battery_job(BIASED, cell_suite, executor=two_workers, store=str(store))  # resume: nothing runs
    here = time.process_time() - c0
    with sqlite3.connect(store) as db:
        assert db.execute("SELECT unit_key, worker, stored_at FROM units ORDER BY unit_key").fetchall() == rows
    # the CPU figure is this process's (merging the stored units) and no worker's: none ran
    assert _untimed(again) == _untimed(on_dask) and 0.0 < again["cpu_s"] <= here < on_dask["cpu_s"]


def test_mutant_matrix_with_options_on_two_workers(cell_suite, two_workers):
    from speccheck.validation.mutants import run_mutants

    names, options = ["rmc-fresh", "claims-accept", "narrow-window"], {"Ks": [1, 2], "scale": 0.5}
    here = mutant_matrix(cell_suite, names=names, options=options)
    there = mutant_matrix(cell_suite, names=names, options=options, executor=two_workers)
    assert json.dumps(here, sort_keys=True) == json.dumps(there, sort_keys=True)
    with _one_torch_thread():
        direct = run_mutants(cell_suite, names=names, Ks=[1, 2], scale=0.5)
    for name in names:
        assert [(r["test"], r["passed"], r["p_value"]) for r in here[name]["results"]] == \
            [(r.test, r.passed, r.p_value) for r in direct[name].results]
        assert here[name]["passed"] == direct[name].passed and here[name]["scale"] == 0.5
    assert not here["rmc-fresh"]["passed"] and not here["claims-accept"]["passed"]  # killed


def test_calibration_in_cells_gives_the_same_records(cell_suite, two_workers, tmp_path):
    """Calibration runs split into battery cells: the records of one unit per run, and a resume."""
    from speccheck.scale.jobs import calibrate

    whole = calibrate(cell_suite, [EXACT, BIASED], seeds=[1, 2])
    store = tmp_path / "c.sqlite"
    in_cells = calibrate(cell_suite, [EXACT, BIASED], seeds=[1, 2], cells=True, executor=two_workers,
                         store=str(store))
    assert json.dumps(in_cells, sort_keys=True) == json.dumps(whole, sort_keys=True)
    assert whole["rules"][BIASED]["failures"] == 2 and whole["rules"][EXACT]["failures"] == 0
    with sqlite3.connect(store) as db:
        jobs = dict(db.execute("SELECT name, kind FROM jobs").fetchall())
        assert jobs == {"calibrate-cells": "calibration", "calibrate-cells.cells": "battery-cells"}
        assert db.execute("SELECT COUNT(*) FROM units WHERE job='calibrate-cells'").fetchone()[0] == 4
    again = calibrate(cell_suite, [EXACT, BIASED], seeds=[1, 2], cells=True, store=str(store), run=False)
    assert json.dumps(again, sort_keys=True) == json.dumps(whole, sort_keys=True)


def test_in_process_heartbeat_reaches_the_cells_inside_a_unit(cell_suite):
    """The isolated child's --timeout bounds a battery cell, also inside a mutant's unit."""
    beats = []
    mutant_matrix(cell_suite, names=["rmc-fresh"], options={"Ks": [1], "layers": ["L1"]},
                  executor=InProcessExecutor(heartbeat=beats.append))
    assert beats[0] == "mutant rmc-fresh" and "rmc-fresh: L1 delta=0.5,K=1" in beats[1:]
