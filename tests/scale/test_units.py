"""Units of work: identity-derived seeds, order-free results, the executor choice."""

import sys

import numpy as np
import pytest

from speccheck.errors import InputError
from speccheck.sampler.experiments import Protocol
from speccheck.scale.executors import DaskExecutor, InProcessExecutor, make_executor
from speccheck.scale.jobs import merge_chunks, run_units
from speccheck.scale.store import canonical_json
from speccheck.scale.units import Unit, plain, run_unit
from speccheck.seeding import unit_seed

SWEEP_SPEC = {"protocol": {"target": "gmm-paper", "d": None, "grid": "uniform", "steps": 6, "eps": 0.1,
                           "freeze": "velocity", "prefetch": "nearest", "leaves": True, "chain_match": "budget",
                           "lazy": True},
              "trajectories": 3, "seed": 0}


def _cells(rules=("rmc", "dgrs"), cells=((2, 2), (1, 3))):
    return [Unit("sweep-cell", SWEEP_SPEC, (r, K, L)) for r in rules for K, L in cells]


def test_seed_is_a_function_of_identity_only():
    a = Unit("sweep-cell", SWEEP_SPEC, ("dgrs", 2, 3), base_seed=5)
    b = Unit("sweep-cell", {"other": 1}, ("dgrs", 2, 3), base_seed=5)
    assert a.seed == b.seed == unit_seed(5, "sweep-cell", "dgrs", 2, 3)
    assert a.key == "dgrs/2/3"
    assert len({Unit("sweep-cell", SWEEP_SPEC, (r, K, 2)).seed for r in ("rmc", "dgrs") for K in range(1, 8)}) == 14
    assert Unit("x", {}, ("a",), base_seed=1).seed != Unit("x", {}, ("a",), base_seed=2).seed
    assert Unit("calibration-seed", {}, ("dgrs", 17), fixed_seed=17).seed == 17  # the battery seed, named outright
    assert Unit("x", {}, ("a",), device="cuda:0").needs_gpu and not Unit("x", {}, ("a",)).needs_gpu


def test_results_do_not_depend_on_order_or_company():
    units = _cells()
    forward = run_units(units, job="j", kind="sweep", spec=SWEEP_SPEC)
    backward = run_units(units[::-1], job="j", kind="sweep", spec=SWEEP_SPEC)
    alone = run_units([units[2]], job="j", kind="sweep", spec=SWEEP_SPEC)
    assert canonical_json(forward) == canonical_json(backward)  # JSON: NaN fields compare equal
    assert canonical_json(alone[units[2].key]) == canonical_json(forward[units[2].key])
    raw = forward["dgrs/2/2"]  # a sweep cell's unit returns its raw run; the judging process summarises it
    assert len(raw["counters"]["nfe"]) == 3 and len(raw["declared"]) == len(raw["events"]["delta"])
    result = merge_chunks(Protocol(**SWEEP_SPEC["protocol"]), "dgrs", 2, 2, [raw], units[2].seed, 3)
    assert result["summary"]["seed"] == units[2].seed and len(result["trajectories"]["speedup"]) == 3


def test_run_unit_reports_timing_outside_the_result():
    out = run_unit(_cells(("dgrs",), ((1, 2),))[0])
    assert set(out) == {"result", "wall_s", "cpu_s", "worker", "code", "deps"} and out["wall_s"] > 0
    assert 0 < out["cpu_s"] < out["wall_s"] * 4  # this process's CPU time in the unit (one torch thread)
    assert set(out["deps"]) == {"code", "env", "dists", "files"} and "torch" in out["deps"]["dists"]
    assert out["code"].startswith("0.") or "+" in out["code"]
    assert "wall_s" not in out["result"]
    with pytest.raises(InputError, match="unknown unit kind"):
        run_unit(Unit("nope", {}, ("a",)))


def test_duplicate_units_refused():
    with pytest.raises(InputError, match="duplicate units"):
        run_units(_cells()[:1] * 2, job="j", kind="sweep", spec=SWEEP_SPEC)


def test_plain_json_types():
    got = plain({"a": np.float64(1.5), "b": np.arange(3), "c": (np.int64(2), np.bool_(True)), 3: None})
    assert got == {"a": 1.5, "b": [0, 1, 2], "c": [2, True], "3": None}
    assert type(got["b"][0]) is int and type(got["c"][1]) is bool


def test_executor_choice(monkeypatch):
    monkeypatch.delenv("DASK_SCHEDULER_ADDRESS", raising=False)
    assert isinstance(make_executor(workers=1), InProcessExecutor)
    assert isinstance(make_executor(workers=2), DaskExecutor) and make_executor(workers=2).workers == 2
    remote = make_executor(scheduler="tcp://127.0.0.1:8786")
    assert isinstance(remote, DaskExecutor) and remote.scheduler == "tcp://127.0.0.1:8786"
    monkeypatch.setenv("DASK_SCHEDULER_ADDRESS", "tcp://10.0.0.1:8786")
    assert make_executor().scheduler == "tcp://10.0.0.1:8786"
    assert isinstance(make_executor(workers=1), InProcessExecutor)  # an explicit --workers wins over the variable
    with pytest.raises(InputError, match="--workers must be >= 1"):
        make_executor(workers=0)
    with pytest.raises(InputError, match="exclude each other"):
        make_executor(workers=2, scheduler="tcp://127.0.0.1:8786")
    with pytest.raises(InputError, match="tcp://HOST:8786"):
        make_executor(scheduler="127.0.0.1:8786")


def test_in_process_path_does_not_import_dask():
    import subprocess

    code = ("import sys; from speccheck.cli import main; "
            "rc = main(['sweep', '--verifiers', 'dgrs', '--cells', '1x2', '--trajectories', '2', '--steps', '4', "
            "'--store', sys.argv[1], '--workers', '1', '--no-progress']); "
            "assert rc == 0, rc; assert 'dask' not in sys.modules and 'distributed' not in sys.modules, 'dask'")
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        done = subprocess.run([sys.executable, "-c", code, f"{tmp}/s.sqlite"], capture_output=True, text=True,
                              timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_unreachable_scheduler_is_exit_2(tmp_path, monkeypatch, capsys):
    from speccheck.cli import main
    from speccheck.scale import executors

    monkeypatch.setattr(executors, "_CONNECT_TIMEOUT_S", 2)
    args = ["sweep", "--verifiers", "dgrs", "--cells", "1x2", "--trajectories", "2", "--steps", "4", "--no-progress",
            "--scheduler", "tcp://127.0.0.1:9", "--store", str(tmp_path / "s.sqlite")]
    assert main(args) == 2
    assert "--scheduler tcp://127.0.0.1:9: cannot reach a Dask scheduler there" in capsys.readouterr().err


def test_progress_counts_units_done(capsys, monkeypatch):
    from speccheck.scale import executors
    from speccheck.scale.executors import Progress

    monkeypatch.setattr(executors, "PROGRESS_LINE_S", 0.0)  # a line per unit (else at most one per 10 s)
    bar = Progress(20, "dask local x2")
    for _ in range(20):
        bar.step()
    lines = capsys.readouterr().err.splitlines()  # not a terminal: plain lines, the last one complete
    assert len(lines) == 20 and lines[-1].startswith("[dask local x2] units 20/20 done")
    Progress(5, "off", enabled=False).step()
    assert capsys.readouterr().err == ""
