"""Local Dask workers forked from a template process that imported torch and the units' modules
once (``speccheck.scale.executors.launch_worker_template``), with the workers' allocator and
thread settings, and a template that ends with its client."""

from __future__ import annotations

import atexit
import importlib
import multiprocessing
import os
import subprocess
import sys
import time

import pytest

from speccheck.scale import worker_template
from speccheck.scale.executors import ALL_MODULES, BATTERY_MODULES, SWEEP_MODULES, DaskExecutor, make_executor
from speccheck.scale.units import Unit

needs_forkserver = pytest.mark.skipif("forkserver" not in multiprocessing.get_all_start_methods(),
                                      reason="no forkserver on this platform (workers are spawned)")


def _worker_state() -> dict:
    """Run on a worker before any unit: what it has imported and inherited."""
    return {"parent": os.getppid(), "torch": "torch" in sys.modules,
            "units": "speccheck.scale.units" in sys.modules,
            "template": "speccheck.scale.worker_template" in sys.modules,
            "malloc": (os.environ.get("MALLOC_TRIM_THRESHOLD_"), os.environ.get("MALLOC_MMAP_THRESHOLD_")),
            "omp": os.environ.get("OMP_NUM_THREADS")}


def test_module_lists_cover_every_unit_kind():
    assert set(SWEEP_MODULES) | set(BATTERY_MODULES) == set(ALL_MODULES)
    for name in ALL_MODULES:  # each one importable (the template ignores a failed import: workers would pay it)
        importlib.import_module(name)
    assert make_executor(workers=1).start().name == "in-process"  # nothing to start


@needs_forkserver
def test_local_workers_are_forked_from_the_template_with_the_units_modules():
    executor = DaskExecutor(workers=2, modules=SWEEP_MODULES)
    try:
        assert executor.start() is executor and executor._forked is True
        states = list(executor.client().run(_worker_state).values())
        assert len(states) == 2
        for state in states:
            assert state["parent"] != os.getpid()  # forked by the template, not spawned by this process
            assert state["torch"] and state["units"] and state["template"]  # imported before any unit
            assert state["malloc"] == (str(1 << 30), str(1 << 25)) and state["omp"] == "1"
        got = {}
        executor.run([Unit("echo", {}, (i,)) for i in range(4)], lambda u, o: got.update({u.key: o["result"]}))
        assert sorted(got) == ["0", "1", "2", "3"] and got["2"]["identity"] == [2]
    finally:
        executor.close()


def test_the_template_module_does_nothing_elsewhere():
    assert worker_template.in_template() is False
    before = atexit._ncallbacks()
    importlib.reload(worker_template)
    assert atexit._ncallbacks() == before  # this process still exits normally (flushing its output)


def test_the_template_leaves_a_failing_import_to_the_workers(tmp_path, monkeypatch):
    (tmp_path / "broken_for_template.py").write_text("raise RuntimeError('not importable')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    failed = worker_template.import_modules("json, broken_for_template, , no_such_module_for_template")
    assert failed == ["broken_for_template", "no_such_module_for_template"]
    assert "json" in sys.modules and "broken_for_template" not in sys.modules


CLIENT = """
import sys
from multiprocessing import forkserver
from speccheck.scale.executors import make_executor
from speccheck.scale.units import Unit

if __name__ == "__main__":
    executor = make_executor(workers=2).start()
    executor.run([Unit("echo", {}, (1,))], lambda u, o: None)
    print(forkserver._forkserver._forkserver_pid, flush=True)
    if sys.argv[1] == "close":
        executor.close()
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as fh:  # a zombie has ended
        return fh.read().rsplit(")", 1)[1].split()[0] != "Z"


@needs_forkserver
@pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs /proc")
@pytest.mark.parametrize("ending", ["close", "exit"])
def test_the_template_ends_with_its_client(tmp_path, ending):
    script = tmp_path / "client.py"
    script.write_text(CLIENT)
    env = {**os.environ, "DASK_DISTRIBUTED__LOGGING__DISTRIBUTED": "error"}
    done = subprocess.run([sys.executable, str(script), ending], capture_output=True, text=True, timeout=300, env=env,
                          cwd=tmp_path)  # returns once stdout and stderr are closed by every process holding them
    assert done.returncode == 0, done.stderr[-2000:]
    template = int(done.stdout.split()[-1])
    deadline = time.monotonic() + 30
    while _alive(template) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(template)


def test_executors_report_the_cpu_time_of_their_other_processes():
    """An isolated child reports its whole CPU time (start and imports included); units run in
    the caller's process add nothing (their CPU time is the caller's own)."""
    from speccheck.scale.executors import InProcessExecutor, IsolatedExecutor

    units = [Unit("echo", {}, (i,)) for i in range(3)]
    here = InProcessExecutor()
    seen: list = []
    here.run(units, lambda unit, outcome: seen.append(outcome))
    assert here.cpu_s == 0.0 and all(o["cpu_s"] >= 0.0 for o in seen) and len(seen) == 3
    child = IsolatedExecutor(timeout=120.0)
    child.run(units, lambda unit, outcome: seen.append(outcome))
    assert child.cpu_s > 0.01  # a Python process that imported torch did work
    first = child.cpu_s
    child.run(units[:1], lambda unit, outcome: None)
    assert child.cpu_s > first  # accumulated over the children


def test_a_battery_job_counts_the_cpu_time_of_its_isolated_child():
    """The report's CPU figure is the caller's CPU time plus the child's (the verifier runs there),
    never the units' wall times."""
    from speccheck.scale.executors import IsolatedExecutor
    from speccheck.scale.jobs import battery_job

    child = IsolatedExecutor(timeout=300.0)
    c0 = time.process_time()
    report = battery_job("dgrs", "smoke", options={"layers": ["L0", "L1"], "scale": 0.05}, executor=child)
    caller = time.process_time() - c0
    assert child.cpu_s > 0.0
    assert abs(report["cpu_s"] - (caller + child.cpu_s)) <= 0.05 + 0.05 * report["cpu_s"]
