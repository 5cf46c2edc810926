"""Sweep cells split into chunks of trajectories (``speccheck sweep --chunk N``): each chunk a unit
with its own seed, merged exactly into the cell (the summary of one run of all its trajectories),
the same stored results whatever runs the chunks, and resumable chunk by chunk."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import asdict

import pytest

from speccheck.sampler.experiments import preset, run_cells
from speccheck.scale.executors import DaskExecutor
from speccheck.scale.jobs import load_sweep, merge_chunks, run_sweep
from speccheck.scale.units import Unit, run_unit

PROTO = preset("gmm-paper", steps=8)


@pytest.mark.parametrize("rule, K, L", [("dgrs", 2, 3), ("rmc", 3, 2)])  # rmc at K = 3: a matched chain
def test_one_chunk_merges_to_the_run_of_its_trajectories(rule, K, L):
    """The chunk unit runs the cell as run_cells does, and the merge summarises as run_cells does."""
    spec = {"protocol": asdict(PROTO), "trajectories": 5, "seed": 0, "chunk": 5}
    unit = Unit("sweep-chunk", spec, (rule, K, L, 0), base_seed=0)
    merged = merge_chunks(PROTO, rule, K, L, [run_unit(unit)["result"]], seed=0, n_traj=5)
    rows, summaries = run_cells(PROTO, rule, K, [L], 5, unit.seed)
    want = {k: v for k, v in summaries[0].items() if k != "seed"}
    got = {k: v for k, v in merged["summary"].items() if k != "seed"}
    assert json.dumps(got, sort_keys=True) == json.dumps(want, sort_keys=True)
    assert merged["trajectories"]["speedup"] == [r["speedup"] for r in rows]


def _stored(store) -> list[tuple]:
    with sqlite3.connect(store) as db:
        return db.execute("SELECT job, unit_key, seed, result FROM units ORDER BY job, unit_key").fetchall()


def test_chunked_cells_same_on_two_workers_and_resume(tmp_path):
    cells, args = [(2, 2), (1, 3)], dict(chunk=2)
    one = tmp_path / "one.sqlite"
    rows = run_sweep(PROTO, ["dgrs", "rmc"], cells, 5, 0, store=str(one), **args)
    assert [r["trajectories"] for r in rows] == [5] * 4
    stored = _stored(one)
    chunks = [r for r in stored if r[0].endswith(".chunks")]
    assert len(chunks) == 4 * 3 and len(stored) == 4 * 3 + 4  # three chunks (2 + 2 + 1) per cell, four cells
    assert len({seed for _, _, seed, _ in chunks}) == 12  # each chunk its own seed
    cell = json.loads(next(r for r in stored if r[1] == "dgrs/2/2")[3])
    assert cell["trajectories"]["traj"] == [0, 1, 2, 3, 4]
    columns = cell["trajectories"]
    assert cell["summary"]["acceptance"] == sum(columns["accepted"]) / sum(columns["verified"])
    assert load_sweep(str(one))[0] == rows  # readers see cells, as for unchunked sweeps

    executor = DaskExecutor(workers=2)
    try:
        two = tmp_path / "two.sqlite"
        assert run_sweep(PROTO, ["dgrs", "rmc"], cells, 5, 0, store=str(two), executor=executor, **args) == rows
        assert _stored(two) == stored
    finally:
        executor.close()
    with sqlite3.connect(one) as db:  # a client killed after two chunks of a cell: its cell and a chunk lost
        db.execute("DELETE FROM units WHERE unit_key IN ('rmc/1/3', 'rmc/1/3/1')")
    logged = []
    assert run_sweep(PROTO, ["dgrs", "rmc"], cells, 5, 0, store=str(one), log=logged.append, **args) == rows
    assert _stored(one) == stored and len(logged) == 1 and "rmc K=1 L=3" in logged[0]


def test_sweep_command_chunk(tmp_path, capsys):
    from speccheck.cli import main

    store = tmp_path / "s.sqlite"
    argv = ["sweep", "--verifiers", "dgrs", "--cells", "2x2", "--trajectories", "4", "--steps", "8", "--workers",
            "1", "--store", str(store), "--no-progress"]
    assert main([*argv, "--chunk", "3"]) == 0
    assert "dgrs K=2 L=2: speedup" in capsys.readouterr().out
    with sqlite3.connect(store) as db:  # named apart from the unchunked sweep; its chunks in a job beside it
        jobs = sorted(kind + ":" + name.rsplit("-", 1)[-1] for name, kind in db.execute("SELECT name, kind FROM jobs"))
        assert jobs == ["sweep-chunks:chunk3.chunks", "sweep:chunk3"]
        assert db.execute("SELECT COUNT(*) FROM units").fetchone()[0] == 2 + 1
    assert main([*argv, "--chunk", "0"]) == 2
    assert "--chunk must be >= 1" in capsys.readouterr().err
