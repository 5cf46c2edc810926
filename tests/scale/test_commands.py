"""`speccheck sweep`, `calibrate` and `results` (in-process, tiny sizes); legacy CSV sweep folders."""

import csv
import json
import os
import sqlite3

import numpy as np
import pytest

from speccheck.cli import main
from speccheck.errors import FileFormatError
from speccheck.scale.jobs import load_sweep


def _sweep_args(store, *extra):
    return ["sweep", "--target", "gmm-paper", "--verifiers", "rmc", "dgrs", "--cells", "2x2", "1x3",
            "--trajectories", "3", "--steps", "6", "--store", str(store), "--name", "s", "--workers", "1",
            "--no-progress", *extra]


def test_sweep_resumes_from_the_store(tmp_path, capsys):
    store = tmp_path / "r.sqlite"
    assert main(_sweep_args(store, "--out", str(tmp_path / "out"))) == 0
    rows, spec = load_sweep(str(store), "s")
    assert {(r["rule"], r["K"], r["L"]) for r in rows} == {("rmc", 2, 2), ("rmc", 1, 3), ("dgrs", 2, 2),
                                                          ("dgrs", 1, 3)}
    assert all(r["trajectories"] == 3 and r["speedup"] >= 1 for r in rows)
    assert {r["tree"] for r in rows if r["rule"] == "rmc" and r["K"] == 2} == {"chain(L=6)"}  # budget-matched
    assert spec["trajectories"] == 3 and spec["protocol"]["steps"] == 6
    summary = list(csv.DictReader(open(tmp_path / "out" / "s" / "summary.csv")))
    assert len(summary) == 4 and os.path.exists(tmp_path / "out" / "s" / "summary.md")
    before = sqlite3.connect(store).execute("SELECT unit_key, result FROM units ORDER BY unit_key").fetchall()
    # an interrupted sweep: one cell never stored; a rerun computes only that cell, with the same numbers
    db = sqlite3.connect(store)
    db.execute("DELETE FROM units WHERE unit_key='dgrs/2/2'")
    db.commit()
    db.close()
    capsys.readouterr()
    assert main(_sweep_args(store)) == 0
    log = capsys.readouterr().out
    assert "dgrs K=2 L=2" in log and "rmc K=2" not in log and "dgrs K=1" not in log
    after = sqlite3.connect(store).execute("SELECT unit_key, result FROM units ORDER BY unit_key").fetchall()
    assert after == before


@pytest.mark.parametrize("extra, message", [
    (["--K", "0..3"], "--K must be integers >= 1"),
    (["--cells", "6by6"], "--cells takes KxL pairs"),
    (["--cells", "6x6", "--K", "2"], "--cells cannot be combined with --K/--L"),
    (["--name", "../../x"], "--name must be"),
    (["--name", "a/b"], "--name must be"),
    (["--trajectories", "1"], "--trajectories must be >= 2"),
    (["--workers", "0"], "--workers must be >= 1"),
    (["--verifiers", "nope"], "cannot load 'nope'"),
])
def test_bad_options(tmp_path, capsys, extra, message):
    args = ["sweep", "--trajectories", "3", "--store", str(tmp_path / "r.sqlite"), "--no-progress", *extra]
    if "--workers" not in extra:
        args += ["--workers", "1"]
    assert main(args) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_sweep_refuses_another_spec_under_one_name(tmp_path, capsys):
    store = tmp_path / "r.sqlite"
    base = ["sweep", "--verifiers", "rmc", "--cells", "1x2", "--trajectories", "2", "--steps", "4",
            "--store", str(store), "--name", "s", "--workers", "1", "--no-progress"]
    assert main(base) == 0
    capsys.readouterr()
    assert main(base + ["--freeze", "drift"]) == 2
    assert "protocol.freeze" in capsys.readouterr().err
    assert main([*base[:6], "3", *base[7:]]) == 2  # another --trajectories: refused, never mixed
    assert "trajectories" in capsys.readouterr().err
    assert main(base + ["--name", "s2", "--freeze", "drift"]) == 0


def test_results_list_show_export(tmp_path, capsys):
    store = tmp_path / "r.sqlite"
    assert main(_sweep_args(store)) == 0
    capsys.readouterr()
    assert main(["results", "list", "--store", str(store)]) == 0
    out = capsys.readouterr().out
    assert "s " in out and "sweep" in out and " 4 " in out
    assert main(["results", "show", "s", "--store", str(store)]) == 0
    out = capsys.readouterr().out
    assert "| dgrs | 2 | 2 | uniform(K=2,L=2) | 6 | 3 |" in out
    assert main(["results", "export", "s", "--store", str(store), "--format", "csv"]) == 0
    rows = list(csv.DictReader(capsys.readouterr().out.splitlines()))
    assert len(rows) == 4 and {r["unit_key"] for r in rows} == {"rmc/2/2", "rmc/1/3", "dgrs/2/2", "dgrs/1/3"}
    assert json.loads(rows[0]["result"])["summary"]["trajectories"] == 3
    out_json = tmp_path / "e.json"
    assert main(["results", "export", "--store", str(store), "--format", "json", "--out", str(out_json)]) == 0
    exported = json.loads(out_json.read_text())
    assert [r["unit_key"] for r in exported] == sorted(r["unit_key"] for r in rows)
    assert exported[0]["seed"] == int(rows[0]["seed"])
    code = main(["results", "export", "--store", str(store), "--format", "parquet", "--out", str(tmp_path / "e.pq")])
    assert code == 0 and os.path.getsize(tmp_path / "e.pq") > 0  # pyarrow comes with [test]
    assert main(["results", "show", "nope", "--store", str(store)]) == 2
    assert "no job 'nope'" in capsys.readouterr().err
    assert main(["results", "list", "--store", str(tmp_path / "none.sqlite")]) == 2
    assert "none.sqlite does not exist" in capsys.readouterr().err


def test_results_export_tidy_rows_with_typed_columns(tmp_path, capsys, monkeypatch, tiny_suite):
    """One row per sweep cell or per trajectory, typed (ints, floats, strings), the same table in
    every format; without pyarrow the message names the extra to install."""
    import pandas as pd

    from speccheck.scale.results import export_table

    store = tmp_path / "r.sqlite"
    assert main(_sweep_args(store)) == 0
    capsys.readouterr()
    cells = export_table(str(store), "s", rows="cells")
    assert len(cells) == 4 and set(cells["rule"]) == {"rmc", "dgrs"}
    assert pd.api.types.is_integer_dtype(cells["K"]) and pd.api.types.is_float_dtype(cells["speedup"])
    assert pd.api.types.is_string_dtype(cells["rule"])
    traj = export_table(str(store), "s", rows="trajectories")
    assert len(traj) == 4 * 3 and pd.api.types.is_integer_dtype(traj["nfe"])
    assert sorted(traj.groupby(["rule", "K", "L"])["traj"].count()) == [3, 3, 3, 3]
    mean = traj.groupby(["rule", "K", "L"])["speedup"].mean().sort_index()
    np.testing.assert_allclose(mean.to_numpy(), cells.set_index(["rule", "K", "L"])["speedup"].sort_index().to_numpy())
    out = tmp_path / "t.parquet"
    assert main(["results", "export", "s", "--store", str(store), "--rows", "trajectories", "--format", "parquet",
                 "--out", str(out)]) == 0
    back = pd.read_parquet(out)
    assert len(back) == 12 and pd.api.types.is_integer_dtype(back["nfe"])
    assert main(["results", "export", "s", "--store", str(store), "--rows", "cells", "--format", "json"]) == 0
    assert [r["K"] for r in json.loads(capsys.readouterr().out)] == cells["K"].tolist()
    battery = tmp_path / "b.sqlite"  # a battery job: one row per test
    assert main(["battery", "--verifier", "dgrs", "--suite", tiny_suite, "--store", str(battery), "--no-progress"]) == 0
    tests = export_table(str(battery), rows="cells")
    assert set(tests["kind"]) == {"battery-cells"} and {"stat", "contract"} <= set(tests["test_kind"])
    assert pd.api.types.is_float_dtype(tests["p_value"]) and pd.api.types.is_bool_dtype(tests["passed"])
    assert tests["passed"].all() and set(tests["layer"]) >= {"L0", "L1", "L2"}
    assert main(["results", "export", "s", "--store", str(store), "--rows", "tests"]) == 2
    capsys.readouterr()

    def no_pyarrow(*args, **kwargs):
        raise ImportError("Unable to find a usable engine; tried using: 'pyarrow', 'fastparquet'.")

    monkeypatch.setattr(pd.DataFrame, "to_parquet", no_pyarrow)
    assert main(["results", "export", "s", "--store", str(store), "--format", "parquet", "--out", str(out)]) == 2
    assert "pip install 'speccheck[parquet]'" in capsys.readouterr().err


def test_calibrate_split_runs_equal_one_run(tmp_path, capsys, tiny_suite):
    """The old --merge use case: two runs over disjoint seeds into one store summarise like one run."""
    split, whole = tmp_path / "split.sqlite", tmp_path / "whole.sqlite"
    base = ["calibrate", "--suite", tiny_suite, "--verifier", "dgrs", "rmc", "--workers", "1", "--no-progress"]
    assert main(base + ["--seeds", "2", "--store", str(split)]) == 0
    assert main(base + ["--seeds", "2", "--first-seed", "3", "--store", str(split)]) == 0
    assert main(base + ["--seeds", "4", "--store", str(split), "--summarise-only", "--json",
                        str(tmp_path / "a.json")]) == 0
    assert main(base + ["--seeds", "4", "--store", str(whole), "--json", str(tmp_path / "b.json")]) == 0
    assert main(base + ["--seeds", "4", "--store", str(tmp_path / "cells.sqlite"), "--cells", "--json",
                        str(tmp_path / "c.json")]) == 0  # every run split into its cells: the same records
    out = capsys.readouterr().out
    assert "consistent" in out and "seeds 1..4 (4 distinct)" in out
    a, b = json.loads((tmp_path / "a.json").read_text()), json.loads((tmp_path / "b.json").read_text())
    assert a == b == json.loads((tmp_path / "c.json").read_text())
    assert a["rules"]["dgrs"]["runs"] == 4 and a["pooled"]["runs"] == 8 and a["consistent"]
    assert {(r["rule"], r["seed"]) for r in a["records"]} == {(r, s) for r in ("dgrs", "rmc") for s in range(1, 5)}
    with sqlite3.connect(whole) as db:  # the stored seed is the battery seed
        assert sorted(db.execute("SELECT unit_key, seed FROM units")) == sorted(
            (f"{r}/{s}", s) for r in ("dgrs", "rmc") for s in range(1, 5))
    # the record of seed s is `speccheck battery --seed s`: same verdict and same p-values
    from speccheck.validation.battery import run_battery

    rep = run_battery("dgrs", tiny_suite, seed=3)
    rec = next(r for r in a["records"] if r["rule"] == "dgrs" and r["seed"] == 3)
    stat = [r for r in rep.results if r.kind == "stat"]
    assert rec["passed"] == rep.passed and rec["n_stat"] == len(stat)
    assert rec["min_p"] == min(r.p_value for r in stat)


def test_calibrate_bad_options(tmp_path, capsys, tiny_suite):
    assert main(["calibrate", "--suite", "nope", "--verifier", "dgrs", "--seeds", "1", "--workers", "1",
                 "--store", str(tmp_path / "c.sqlite")]) == 2
    assert "unknown suite 'nope'" in capsys.readouterr().err
    assert main(["calibrate", "--suite", tiny_suite, "--seeds", "0", "--workers", "1"]) == 2
    assert main(["calibrate", "--suite", tiny_suite, "--summarise-only", "--store", str(tmp_path / "none.sqlite")]) == 2
    assert "does not exist" in capsys.readouterr().err


# ----------------------------------------------------------------------------- legacy CSV sweep folders
def _legacy_folder(tmp_path, store):
    """A CSV sweep folder as earlier versions wrote it, from a stored sweep."""
    from speccheck.scale.jobs import export_trajectories

    folder = tmp_path / "legacy"
    folder.mkdir()
    export_trajectories(str(store), "s", str(folder / "trajectories.csv"))
    with sqlite3.connect(store) as db:
        spec = json.loads(db.execute("SELECT spec FROM jobs WHERE name='s'").fetchone()[0])
        results = [json.loads(r[0]) for r in db.execute("SELECT result FROM units")]
    (folder / "protocol.json").write_text(json.dumps({**spec["protocol"], "seed": 0, "trajectories": 3}))
    with open(folder / "cells.jsonl", "w") as fh:
        for r in results:
            fh.write(json.dumps(r["summary"]) + "\n")
    return folder


def test_legacy_folder_is_read_and_converted(tmp_path, capsys):
    store = tmp_path / "r.sqlite"
    assert main(_sweep_args(store)) == 0
    folder = _legacy_folder(tmp_path, store)
    legacy_rows, _ = load_sweep(str(folder))
    stored_rows, _ = load_sweep(str(store), "s")
    assert legacy_rows == stored_rows
    assert main(["sweep", "--convert", str(folder), "--store", str(tmp_path / "c.sqlite"), "--name", "old"]) == 0
    assert load_sweep(str(tmp_path / "c.sqlite"), "old")[0] == stored_rows


@pytest.mark.parametrize("damage, message", [
    (lambda text: "", "not a sweep trajectories file"),                           # 0-byte file (kill at creation)
    (lambda text: text[:-3], "last line is incomplete"),                          # truncated last number
    (lambda text: text[:-30] + text.splitlines(True)[1], "fields expected"),      # a partial line glued to a row
])
def test_damaged_legacy_folder_is_refused(tmp_path, damage, message):
    store = tmp_path / "r.sqlite"
    assert main(_sweep_args(store)) == 0
    folder = _legacy_folder(tmp_path, store)
    path = folder / "trajectories.csv"
    path.write_text(damage(path.read_text()))
    with pytest.raises(FileFormatError, match=message) as info:
        load_sweep(str(folder))
    assert "trajectories.csv" in str(info.value)


def test_legacy_conflicting_duplicates_refused(tmp_path):
    store = tmp_path / "r.sqlite"
    assert main(_sweep_args(store)) == 0
    folder = _legacy_folder(tmp_path, store)
    lines = (folder / "trajectories.csv").read_text().splitlines(True)
    fields = lines[1].rstrip("\n").split(",")
    fields[-1] = "9.5"
    (folder / "trajectories.csv").write_text("".join(lines) + ",".join(fields) + "\n")
    with pytest.raises(FileFormatError, match="appears twice with different values"):
        load_sweep(str(folder))
