"""Jobs on the store: the mutant matrix as units, and the measured figures reading sweeps from a store."""

import json
import sqlite3

import pytest

from speccheck.errors import FileFormatError, InputError
from speccheck.scale.jobs import battery_runs, mutant_matrix


def test_mutant_matrix_units_match_the_library_run(tmp_path, tiny_suite):
    from speccheck.validation.mutants import run_mutants

    names = ["rmc-fresh", "rmc-float32", "claims-accept"]
    store = tmp_path / "m.sqlite"
    reports = mutant_matrix(tiny_suite, names=names, store=str(store))
    assert list(reports) == names and all(not r["passed"] for r in reports.values())  # all killed
    direct = run_mutants(tiny_suite, names=names)
    for name in names:
        got = [(r["cell"], r["test"], r["passed"], r["p_value"]) for r in reports[name]["results"]]
        want = [(r.cell, r.test, r.passed, r.p_value) for r in direct[name].results]
        assert json.dumps(got) == json.dumps(want)  # same tests, verdicts and p-values (NaN-safe)
    # resume: a second call runs nothing and returns the stored reports
    with sqlite3.connect(store) as db:
        before = db.execute("SELECT unit_key, stored_at FROM units ORDER BY unit_key").fetchall()
    again = mutant_matrix(tiny_suite, names=names, store=str(store))
    with sqlite3.connect(store) as db:
        assert db.execute("SELECT unit_key, stored_at FROM units ORDER BY unit_key").fetchall() == before
    assert json.dumps(again, sort_keys=True) == json.dumps(reports, sort_keys=True)
    from speccheck.scale.jobs import battery_reports
    from speccheck.scale.results import show_job

    assert all(not r.passed for r in battery_reports(reports).values())
    shown = show_job(str(store), "mutants-tiny")
    assert "3/3 mutants killed" in shown and "rmc-fresh" in shown
    with pytest.raises(InputError, match="unknown mutant"):
        mutant_matrix(tiny_suite, names=["nope"])


def test_battery_runs_as_units(tiny_suite):
    reports = battery_runs(["dgrs", "rmc"], tiny_suite, seed=3)
    assert set(reports) == {"dgrs", "rmc"} and all(r["passed"] for r in reports.values())
    assert all(r["seed"] == 3 and "wall_s" not in r for r in reports.values())


# ----------------------------------------------------------------------------- measured figures 4-6
def test_measured_figures_read_the_store(tmp_path):
    from speccheck.figures.base import FigureConfig
    from speccheck.figures.measured import compute_heatmaps, measured_cells

    folder = tmp_path / "sweep"
    table, info = measured_cells(FigureConfig(quick=True, sweep_dir=str(folder)))
    assert len(table) == 3 * 2 * 2 and (folder / "sweep.sqlite").exists()
    assert (folder / "trajectories.csv").read_text().count("\n") == 1 + 12 * 3  # the CSV behind the figures
    store = folder / "sweep.sqlite"
    with sqlite3.connect(store) as db:  # an incomplete sweep, read only: the gap is named, not run
        db.execute("DELETE FROM units WHERE unit_key='rass/2/3'")
    data = compute_heatmaps(FigureConfig(quick=True, sweep_dir=str(folder), sweep_run=False))
    assert len(data.main) == 3 * 2 * 2 - 1
    assert "1 cells missing" in data.notes[0] and "rass (2,3)" in data.notes[0]
    with sqlite3.connect(store) as db:  # a stored sweep of another protocol is refused
        spec = json.loads(db.execute("SELECT spec FROM jobs").fetchone()[0])
        spec["protocol"]["eps"] = 0.3
        db.execute("UPDATE jobs SET spec=?", (json.dumps(spec),))
    with pytest.raises(FileFormatError, match="another protocol"):
        compute_heatmaps(FigureConfig(quick=True, sweep_dir=str(folder), sweep_run=False))


def test_measured_figures_missing_or_damaged_sweep(tmp_path):
    from speccheck.figures.base import FigureConfig
    from speccheck.figures.measured import measured_cells

    with pytest.raises(FileFormatError, match=r"--sweep .*nowhere: no sweep there"):
        measured_cells(FigureConfig(quick=True, sweep_dir=str(tmp_path / "nowhere"), sweep_run=False))
    bad = tmp_path / "bad.sqlite"
    bad.write_text("not a database\n")
    with pytest.raises(FileFormatError, match=r"bad.sqlite: is not a SQLite file"):
        measured_cells(FigureConfig(quick=True, sweep_dir=str(bad)))


def test_folder_sweep_entry_point(tmp_path):
    """speccheck.scale.sweep.sweep keeps its folder interface, on a store inside the folder."""
    import csv

    from speccheck.sampler.experiments import preset
    from speccheck.scale.sweep import sweep, write_summary

    proto = preset("gmm-paper", steps=6)
    folder = tmp_path / "s"
    logged = []
    assert sweep(proto, ["dgrs"], [1, 2], [2], 3, 0, str(folder), log=logged.append) == str(folder)
    assert len(logged) == 2 and (folder / "sweep.sqlite").exists()
    rows = list(csv.DictReader(open(folder / "summary.csv")))
    assert [(r["rule"], r["K"], r["L"]) for r in rows] == [("dgrs", "1", "2"), ("dgrs", "2", "2")]
    assert [r["speedup"] for r in write_summary(str(folder))] == [float(r["speedup"]) for r in rows]
    # a CSV folder of an earlier speccheck: complete cells imported once, the missing one run
    from dataclasses import asdict

    from speccheck.scale.jobs import export_trajectories, load_sweep

    legacy = tmp_path / "legacy"
    legacy.mkdir()
    stored, spec = load_sweep(str(folder / "sweep.sqlite"))
    export_trajectories(str(folder / "sweep.sqlite"), stored_job(folder), str(legacy / "trajectories.csv"))
    lines = (legacy / "trajectories.csv").read_text().splitlines(True)
    (legacy / "trajectories.csv").write_text("".join(ln for ln in lines if not ln.startswith("dgrs,2,2,")))
    (legacy / "protocol.json").write_text(json.dumps({**asdict(proto), "seed": 0, "trajectories": 3}))
    with sqlite3.connect(folder / "sweep.sqlite") as db:
        (legacy / "cells.jsonl").write_text("".join(json.dumps(json.loads(r)["summary"]) + "\n"
                                                    for (r,) in db.execute("SELECT result FROM units")))
    logged.clear()
    sweep(proto, ["dgrs"], [1, 2], [2], 3, 0, str(legacy), log=logged.append)
    assert len(logged) == 1 and "dgrs K=2 L=2" in logged[0]
    assert load_sweep(str(legacy))[0] == stored
    (legacy / "sweep.sqlite").unlink()
    with pytest.raises(FileFormatError, match=r"another spec .*trajectories"):
        sweep(proto, ["dgrs"], [1, 2], [2], 4, 0, str(legacy))


def stored_job(folder) -> str:
    with sqlite3.connect(folder / "sweep.sqlite") as db:
        return db.execute("SELECT name FROM jobs").fetchone()[0]


def test_checked_in_legacy_sweeps_are_readable():
    from pathlib import Path

    from speccheck.scale.jobs import load_sweep

    root = Path(__file__).resolve().parents[2] / "validation" / "mcrs_speedups"
    folders = [f for f in sorted(root.glob("*"))
               if (f / "trajectories.csv").exists() and not (f / "sweep.sqlite").exists()]
    assert folders, "the checked-in CSV sweep folders are the legacy format under test"
    for folder in folders:
        rows, spec = load_sweep(str(folder))
        assert rows and all(r["trajectories"] == spec["trajectories"] for r in rows)
        assert all(1.0 <= r["speedup"] for r in rows)


def test_cells_without_a_calibration_z_are_no_evidence():
    """A cell with no verification events has z = NaN: no test. All cells so: no verdict, never exact."""
    from speccheck.scale.jobs import judge_calibration

    cell = {"rule": "r", "K": 2, "L": 2, "acceptance": 0.5}
    assert judge_calibration([{**cell, "calibration_z": float("nan")}] * 2, 1e-3).verdict == "no_verdict"
    assert judge_calibration([{**cell, "calibration_z": float("nan")}, {**cell, "calibration_z": 0.3}],
                             1e-3).verdict == "exact"
    assert judge_calibration([{**cell, "calibration_z": float("nan")}, {**cell, "calibration_z": 9.0}],
                             1e-3).verdict == "defect"
