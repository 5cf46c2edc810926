"""Real Dask clusters on localhost: the docs example, identical results across executors, and faults
(the client killed mid-run, a worker killed mid-unit, two clients on one store, a damaged store).

Each fault must end with exactly the results of an uninterrupted run (nothing lost, nothing
duplicated) or with exit 2 and a message naming the file. The scheduler and its two worker
processes are started as docs/scale-out.md says, and stopped at the end of the module.
"""

import os
import re
import shlex
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from speccheck.cli import main

DOCS = Path(__file__).resolve().parents[2] / "docs" / "scale-out.md"
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "DASK_DISTRIBUTED__LOGGING__DISTRIBUTED": "error"}
# ten units of roughly 0.3 s each: long enough to be killed mid-run
SLOW_SWEEP = ["sweep", "--verifiers", "dgrs", "--K", "1", "2", "--L", "2..6", "--trajectories", "30", "--name", "slow",
              "--no-progress"]


def _speccheck_argv() -> list[str]:
    """How to run `speccheck SUBCOMMAND` in a subprocess (the CLI once it registers these commands)."""
    import argparse

    try:
        from speccheck.cli import build_parser

        sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
        if {"sweep", "calibrate", "results"} <= set(sub.choices) and "--store" in sub.choices["sweep"].format_help():
            return [sys.executable, "-m", "speccheck.cli"]
    except Exception:  # noqa: BLE001 - any CLI state: fall back to the module itself
        pass
    return [sys.executable, "-m", "speccheck.cli"]


def _docs_example() -> list[str]:
    text = DOCS.read_text()
    block = text.split("<!-- example:localhost -->", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    return [line.strip() for line in block.strip().splitlines()]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """The docs example's scheduler and two workers, on a free port; yields (address, folder)."""
    folder = tmp_path_factory.mktemp("cluster")
    port = _free_port()
    background = [line.rstrip("&").strip() for line in _docs_example() if line.endswith("&")]
    assert [cmd.split()[:2] for cmd in background] == [["dask", "scheduler"], ["dask", "worker"]]
    procs = []
    try:
        for cmd in background:
            argv = shlex.split(cmd.replace("8786", str(port)))
            procs.append(subprocess.Popen(argv, cwd=folder, env=ENV, stdout=subprocess.DEVNULL,
                                          stderr=open(folder / f"{argv[1]}.log", "w"), start_new_session=True))
        address = f"tcp://127.0.0.1:{port}"
        from distributed import Client

        with Client(address, timeout=60) as client:
            client.wait_for_workers(2, timeout=60)
        yield address, folder
    finally:
        for proc in reversed(procs):
            _stop(proc)


def _units(store) -> list[tuple]:
    with sqlite3.connect(store) as db:
        return db.execute("SELECT job, unit_key, seed, result FROM units ORDER BY job, unit_key").fetchall()


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The slow sweep run in one process, uninterrupted."""
    store = tmp_path_factory.mktemp("reference") / "ref.sqlite"
    assert main([*SLOW_SWEEP, "--store", str(store), "--workers", "1"]) == 0
    rows = _units(store)
    assert len(rows) == 10
    return rows


def test_docs_example_runs_for_real(cluster):
    address, folder = cluster
    port = address.rsplit(":", 1)[1]
    outputs = []
    for line in _docs_example():
        if line.endswith("&"):
            continue
        assert line.startswith("speccheck ")
        argv = _speccheck_argv() + shlex.split(line.replace("8786", port))[1:]
        done = subprocess.run(argv, cwd=folder, env=ENV, capture_output=True, text=True, timeout=180)
        assert done.returncode == 0, done.stderr[-3000:]
        outputs.append(done.stdout)
    assert "| dgrs | 2 | 2 | uniform(K=2,L=2) | 6 | 3 |" in outputs[-1]
    assert len(_units(folder / "example.sqlite")) == 4


def test_same_results_with_1_and_2_workers_and_a_scheduler(cluster, tmp_path, tiny_suite):
    """Done-when: same seeds give identical stored results whatever runs the units."""
    address, _ = cluster
    jobs = [["sweep", "--verifiers", "rmc", "dgrs", "--cells", "2x2", "1x3", "--trajectories", "4",
             "--steps", "8", "--name", "s", "--no-progress"],
            ["calibrate", "--suite", tiny_suite, "--verifier", "dgrs", "--seeds", "2", "--name", "c",
             "--no-progress"],
            ["battery", "--verifier", "dgrs", "--suite", tiny_suite, "--no-progress"]]  # its cells as units
    stores = {}
    for label, how in (("one", ["--workers", "1"]), ("two", ["--workers", "2"]), ("remote", ["--scheduler", address])):
        stores[label] = tmp_path / f"{label}.sqlite"
        for job in jobs:
            assert main([*job, *how, "--store", str(stores[label])]) == 0, (label, job)
    one = _units(stores["one"])
    assert len(one) == 4 + 2 + 4  # the battery: its plan, the contract, two grid cells
    assert _units(stores["two"]) == one
    assert _units(stores["remote"]) == one
    with sqlite3.connect(stores["two"]) as db:  # the units really ran in other processes
        workers = {w for (w,) in db.execute("SELECT DISTINCT worker FROM units")}
    assert f":{os.getpid()}" not in " ".join(workers)


def _start_client(address, store, log):
    argv = _speccheck_argv() + [*SLOW_SWEEP, "--scheduler", address, "--store", str(store)]
    return subprocess.Popen(argv, env=ENV, stdout=subprocess.DEVNULL, stderr=open(log, "w"))


def _wait_for_units(store, n, proc, timeout=120.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.path.exists(store):
            try:
                with sqlite3.connect(store, timeout=5) as db:
                    if db.execute("SELECT COUNT(*) FROM units").fetchone()[0] >= n:
                        return
            except sqlite3.OperationalError:
                pass  # the client is still creating the schema
        assert proc.poll() is None, f"client ended early with {proc.returncode}"
        time.sleep(0.05)
    raise AssertionError(f"{store}: fewer than {n} units after {timeout} s")


def test_client_killed_mid_run_then_rerun(cluster, reference, tmp_path):
    address, _ = cluster
    store = tmp_path / "s.sqlite"
    client = _start_client(address, store, tmp_path / "client.log")
    try:
        _wait_for_units(store, 2, client)
    finally:
        os.kill(client.pid, signal.SIGKILL)
        client.wait(timeout=30)
    partial = _units(store)  # readable, whole rows only
    assert 2 <= len(partial) < 10 and set(partial) <= set(reference)
    assert main([*SLOW_SWEEP, "--scheduler", address, "--store", str(store)]) == 0
    assert _units(store) == reference


def test_worker_killed_mid_unit(cluster, reference, tmp_path):
    address, _ = cluster
    from distributed import Client

    store = tmp_path / "s.sqlite"
    client_proc = _start_client(address, store, tmp_path / "client.log")
    try:
        _wait_for_units(store, 1, client_proc)
        with Client(address, timeout=30) as client:
            pids = client.run(os.getpid)
            busy = [w for w, tasks in client.processing().items() if tasks]
            assert busy, "no unit in flight"
            os.kill(pids[busy[0]], signal.SIGKILL)
            killed = True
        assert client_proc.wait(timeout=180) == 0, (tmp_path / "client.log").read_text()[-3000:]
    finally:
        if client_proc.poll() is None:
            os.kill(client_proc.pid, signal.SIGKILL)
            client_proc.wait(timeout=30)
    assert killed
    assert _units(store) == reference
    with Client(address, timeout=30) as client:  # the nanny restarted the worker: the cluster is whole again
        client.wait_for_workers(2, timeout=60)


def test_two_clients_on_one_store(cluster, reference, tmp_path):
    address, _ = cluster
    store = tmp_path / "s.sqlite"
    clients = [_start_client(address, store, tmp_path / f"client{i}.log") for i in range(2)]
    try:
        codes = [c.wait(timeout=240) for c in clients]
    finally:
        for c in clients:
            if c.poll() is None:
                os.kill(c.pid, signal.SIGKILL)
                c.wait(timeout=30)
    assert codes == [0, 0], [(tmp_path / f"client{i}.log").read_text()[-2000:] for i in range(2)]
    assert _units(store) == reference


def test_damaged_store_stops_with_its_name(reference, tmp_path, capsys):
    store = tmp_path / "s.sqlite"
    store.write_bytes(b"SQLite format 3\x00" + b"\x10\x00" + b"\x00" * 200)
    assert main([*SLOW_SWEEP, "--workers", "1", "--store", str(store)]) == 2
    err = capsys.readouterr().err
    assert re.search(r"results store .*s\.sqlite: .*mv .*s\.sqlite .*\.bad", err), err
