"""The hostile cases of issue 37 (items 9-14), one test each, with the outcome each must get:
stored verdicts keyed by what the run depended on, outputs that would overwrite an input, no
verdict for the code under test's escapes and for resources, a verifier's forked grandchild,
bounded suites, and inputs reported as what they are. In-process calls of ``speccheck.cli.main``
unless a test needs a process of its own."""

from __future__ import annotations

import os

import pytest

from tests.cli_support import run_cli, tiny_suite_text, write_suite


@pytest.fixture(scope="module")
def tiny_suite(tmp_path_factory):
    return write_suite(tmp_path_factory.mktemp("suite"), tiny_suite_text("tiny-37"))


# ----------------------------------------------------------------------------- item 10: outputs on inputs
@pytest.mark.parametrize("option", ["--json", "--html", "--plot", "--junit"])
@pytest.mark.parametrize("how", ["same", "symlink", "hardlink", "dotted"])
def test_an_output_naming_the_suite_is_refused_and_the_suite_kept(option, how, tmp_path, capsys):
    suite = write_suite(tmp_path, tiny_suite_text("kept"))
    before = open(suite).read()
    target = suite
    if how == "symlink":
        target = str(tmp_path / "link.toml")
        os.symlink(suite, target)
    elif how == "hardlink":
        target = str(tmp_path / "hard.toml")
        os.link(suite, target)
    elif how == "dotted":
        os.mkdir(tmp_path / "sub")
        target = str(tmp_path / "sub" / ".." / "tiny.toml")
    code, out, err = run_cli(["battery", "--verifier", "dgrs", "--suite", suite, option, target, "--no-progress"],
                             capsys)
    assert code == 2, (out, err)
    assert option in err and "--suite" in err, err
    assert open(suite).read() == before


def test_an_output_naming_the_verifiers_source_is_refused(tmp_path, capsys, monkeypatch):
    (tmp_path / "myrule37.py").write_text("from speccheck.verifiers.dgrs import DGRS as Rule\n")
    monkeypatch.chdir(tmp_path)
    before = (tmp_path / "myrule37.py").read_text()
    code, out, err = run_cli(["battery", "--verifier", "myrule37:Rule", "--suite", "smoke", "--json",
                              str(tmp_path / "myrule37.py"), "--no-progress"], capsys)
    assert code == 2 and "--json" in err and "--verifier" in err, (out, err)
    assert (tmp_path / "myrule37.py").read_text() == before


def test_an_output_naming_the_store_is_refused(tmp_path, tiny_suite, capsys):
    store = str(tmp_path / "s.sqlite")
    code, out, err = run_cli(["battery", "--verifier", "dgrs", "--suite", tiny_suite, "--store", store,
                              "--html", store, "--no-progress"], capsys)
    assert code == 2 and "--store" in err and "--html" in err, (out, err)


# ----------------------------------------------------------------------------- item 9: stored verdicts
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RULE37 = '''import torch
import helper37


class Rule:
    name = "rule37"

    def verify(self, delta, s, generator=None):
        B, K = s.shape
        if helper37.bad():  # takes the first child: wrong
            return s[:, 0].clone(), torch.ones(B, dtype=torch.bool), torch.zeros(B, dtype=torch.long)
        out = delta + torch.randn(B, generator=generator, dtype=s.dtype, device=s.device)
        return out, torch.zeros(B, dtype=torch.bool), torch.full((B,), K, dtype=torch.long)
'''
HELPER37 = '''import os
from pathlib import Path


def bad():
    mode = (Path(__file__).parent / "mode.txt").read_text().strip()
    return mode == "bad" or os.environ.get("RULE37_MODE") == "bad"
'''


@pytest.fixture
def project(tmp_path):
    """A rule in its own module importing a helper package that reads a data file and a variable."""
    (tmp_path / "rule37.py").write_text(RULE37)
    (tmp_path / "helper37").mkdir()
    (tmp_path / "helper37" / "__init__.py").write_text(HELPER37)
    (tmp_path / "helper37" / "mode.txt").write_text("good\n")
    write_suite(tmp_path, tiny_suite_text("t37"))
    return tmp_path


def _speccheck(folder, *argv, env=None):
    import subprocess
    import sys

    full = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, str(folder)]), "SPECCHECK_NO_PROGRESS": "1",
            **(env or {})}
    if "SPECCHECK_DIGEST_ENV" not in (env or {}):
        full.pop("SPECCHECK_DIGEST_ENV", None)
    proc = subprocess.run([sys.executable, "-m", "speccheck.cli", *argv], cwd=folder, env=full, capture_output=True,
                          text=True, timeout=300)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, proc.stdout, proc.stderr


BATTERY37 = ("battery", "--verifier", "rule37:Rule", "--suite", "tiny.toml", "--store", "s.sqlite")


def test_battery_store_reruns_when_a_helper_its_data_or_a_declared_variable_changed(project):
    code, out, err = _speccheck(project, *BATTERY37)
    assert code == 0 and "reusing" not in err, (out, err)
    code, out, err = _speccheck(project, *BATTERY37)  # nothing changed: reused, and said so
    assert code == 0 and "reusing" in err and "s.sqlite" in err and "stored since" in err, (out, err)
    (project / "helper37" / "mode.txt").write_text("bad\n")  # a data file of the helper package
    code, out, err = _speccheck(project, *BATTERY37)
    assert code == 1 and "not reused" in err and "mode.txt" in err, (out, err)
    (project / "helper37" / "mode.txt").write_text("good\n")
    (project / "helper37" / "__init__.py").write_text(HELPER37.replace('== "bad" or', '!= "zzz" or'))  # the helper
    code, out, err = _speccheck(project, *BATTERY37)
    assert code == 1 and "not reused" in err and "__init__.py" in err, (out, err)
    (project / "helper37" / "__init__.py").write_text(HELPER37)
    assert _speccheck(project, *BATTERY37)[0] == 0
    declared = {"SPECCHECK_DIGEST_ENV": "RULE37_MODE", "RULE37_MODE": "bad"}  # a declared variable
    code, out, err = _speccheck(project, *BATTERY37, env=declared)
    assert code == 1 and "environment variable RULE37_MODE" in err, (out, err)


def test_calibrate_store_reruns_when_the_rules_file_changed(project):
    argv = ("calibrate", "--verifier", "rule37:Rule", "--suite", "tiny.toml", "--store", "c.sqlite", "--seeds", "1",
            "--workers", "1")
    code, out, err = _speccheck(project, *argv)
    assert code == 0 and "consistent" in out, (out, err)
    (project / "rule37.py").write_text(RULE37.replace("if helper37.bad():", "if True:"))
    code, out, err = _speccheck(project, *argv)
    assert code == 1 and "TOO MANY FAILURES" in out, (out, err)
    assert "not reused" in err and "rule37.py" in err, err


def test_battery_store_resumes_a_builtin_rule(tmp_path, tiny_suite):
    argv = ("battery", "--verifier", "dgrs", "--suite", tiny_suite, "--store", "s.sqlite")
    code, out, err = _speccheck(tmp_path, *argv)
    assert code == 0, (out, err)
    code, out, err = _speccheck(tmp_path, *argv)
    assert code == 0 and "reusing" in err, (out, err)
    from speccheck.scale.store import ResultsStore

    with ResultsStore(str(tmp_path / "s.sqlite"), readonly=True) as st:
        assert len([j for j in st.jobs() if j["name"].startswith("battery-tiny-dgrs")]) == 1


# ----------------------------------------------------------------------------- item 12: descendants
def _gone(pid: int) -> bool:
    """No such process, or a zombie awaiting its reaper (it holds no pipe and runs nothing)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def _battery_process(verifier: str, suite: str, pidfile, timeout: int):  # noqa: ANN001, ANN202 - a Popen
    """``speccheck battery`` in a process of its own, stdout and stderr pipes (`| tee log`)."""
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": ROOT, "SPECCHECK_TEST_PIDFILE": str(pidfile), "SPECCHECK_NO_PROGRESS": "1"}
    return subprocess.Popen([sys.executable, "-m", "speccheck.cli", "battery", "--verifier", verifier, "--suite",
                             suite, "--timeout", str(timeout)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=env, text=True)


@pytest.mark.skipif(not hasattr(os, "fork") or not os.path.isdir("/proc"), reason="needs fork and /proc")
def test_a_verifiers_forked_grandchild_neither_holds_the_pipe_nor_outlives_the_command(tmp_path, tiny_suite):
    pidfile = tmp_path / "pids"
    # stdout is a pipe (`speccheck battery | tee log`): communicate returns only once every holder closed it
    proc = _battery_process("tests.cli.hostile:ForksSleeper", tiny_suite, pidfile, 120)
    try:
        out, err = proc.communicate(timeout=240)
    finally:
        proc.kill()
    assert proc.returncode == 0 and "RESULT: PASS" in out, (out[-1000:], err[-1000:])
    pids = [int(x) for x in pidfile.read_text().split()]
    assert pids, "the verifier forked nothing"
    assert all(_gone(pid) for pid in pids), pids


# ----------------------------------------------------------------------------- item 13: bounded suites
@pytest.mark.parametrize("section, words", [
    ("[scalar]\ndeltas = [1.0]\nK = [1]\nn = 1000000000000000\n", "[scalar] n = 1000000000000000"),
    ("[scalar]\ndeltas = [1.0]\nK = [1]\nn = 1e15\n", "[scalar] n must be an integer"),
    ("[scalar]\ndeltas = [1.0]\nK = [1]\nn = 64\n[contract]\nn = 2000000000\n", "[contract] n = 2000000000"),
    ("[scalar]\ndeltas = [1.0]\nK = 2\nn = 64\n", "[scalar] K must be a list of integers"),
    ("[trajectory]\nn_traj = -1\n", "[trajectory] n_traj = -1"),
    ("[wrapper]\ndims = [1000000000]\nn = 64\n", "[wrapper] dims = [1000000000]"),
    ("[scalar]\nK = [1]\nn = 64\ndeltas = [" + ", ".join(f"{i * 1e-4:.4f}" for i in range(100_000)) + "]\n",
     "[scalar] deltas holds 100000 values"),
])
def test_a_suite_beyond_the_bounds_is_exit_2_naming_the_field(section, words, tmp_path, capsys):
    suite = write_suite(tmp_path, f'name = "big"\n{section}')
    code, out, err = run_cli(["battery", "--verifier", "dgrs", "--suite", suite, "--no-progress"], capsys)
    assert code == 2 and words in err and "internal error" not in err, err


def test_the_battery_states_the_cost_before_running_and_refuses_a_huge_scale(tiny_suite, capsys):
    code, out, err = run_cli(["battery", "--verifier", "dgrs", "--suite", tiny_suite, "--no-progress"], capsys)
    assert code == 0 and "verify calls" in err and "rows" in err and "MiB" in err, err
    code, out, err = run_cli(["battery", "--verifier", "dgrs", "--suite", "full", "--scale", "100", "--layers", "L1",
                              "--no-progress"], capsys)
    assert code == 2 and "[scalar] n = 16777216 times scale 100" in err, err


# ----------------------------------------------------------------------------- item 11: exceptions, memory
@pytest.fixture(scope="module")
def sequence_suite(tmp_path_factory):
    extra = "[sequence]\nK = [1, 2]\ncalls = 150\nsmall_calls = 0\n"
    return write_suite(tmp_path_factory.mktemp("seq"), tiny_suite_text("tiny-37-seq", extra=extra))


@pytest.mark.parametrize("name, words", [
    ("RaisesAfterContract", "verify raised RuntimeError: boom"),
    ("RaisesOnCall20", "verify raised ValueError on a repeated call: boom on call 20"),
    ("RaisesOnCall100", "verify raised ValueError: boom on call 100"),
    ("LazyGenerator", "verify returned a lazy generator"),
])
def test_an_exception_or_a_lazy_generator_from_verify_is_a_defect(name, words, sequence_suite, capsys):
    code, out, err = run_cli(["battery", "--verifier", f"tests.cli.hostile37:{name}", "--suite", sequence_suite,
                              "--no-progress", "--timeout", "60"], capsys)
    assert code == 1 and "RESULT: FAIL" in out and words in out, (out[-2000:], err[-2000:])
    from tests.cli import hostile37

    assert f"verifier={getattr(hostile37, name).name}" in out  # the report names the verifier


def test_torch_cpu_out_of_memory_is_no_verdict(tiny_suite, capsys):
    code, out, err = run_cli(["battery", "--verifier", "tests.cli.hostile37:CpuOutOfMemory", "--suite", tiny_suite,
                              "--no-progress", "--timeout", "60"], capsys)
    assert code == 2 and "out of memory" in err and "RESULT" not in out, (out, err)


def test_the_batterys_own_allocation_failing_is_no_verdict_not_blamed_on_the_rule():
    from speccheck.validation.battery import run_battery
    from speccheck.validation.verdict import judge
    from tests.cli.hostile import Exact

    report = run_battery(Exact(), write_suite_text_free())
    cell = next(r for r in report.results if r.layer == "L1")
    cell.passed, cell.note = False, ("verify raised RuntimeError: [enforce fail at alloc_cpu.cpp:117] data. "
                                     "DefaultCPUAllocator: not enough memory: you tried to allocate 9e12 bytes.")
    outcome = judge(report)
    assert outcome.verdict == "no_verdict" and "out of memory" in outcome.reason and outcome.exit_code == 2


def write_suite_text_free():
    """The tiny suite as a Suite object (no file)."""
    from speccheck.validation.suites import parse_suite

    return parse_suite({"name": "tiny-mem", "seed": 5, "scalar": {"deltas": [1.0], "K": [1], "n": 2048},
                        "contract": {"n": 64}})


# ----------------------------------------------------------------------------- item 14: escapes and inputs
PYTEST_FILE = '''
from tests.cli.hostile37 import OsExitInProcess


def test_mine(speccheck_battery):
    speccheck_battery(OsExitInProcess(), "{suite}")
'''


def test_a_pytest_session_whose_verifier_object_calls_os_exit_does_not_end_with_0(tmp_path, tiny_suite):
    import subprocess
    import sys

    (tmp_path / "test_osexit37.py").write_text(PYTEST_FILE.format(suite=tiny_suite))
    env = {**os.environ, "PYTHONPATH": ROOT}
    # the fixture comes from speccheck's pytest11 entry point, as in a verifier author's CI
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           str(tmp_path / "test_osexit37.py")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, (proc.stdout[-2000:], proc.stderr[-2000:])
    assert "os._exit(0)" in proc.stdout and "no verdict" in proc.stdout and "1 failed" in proc.stdout


@pytest.mark.parametrize("name, words", [("RaisesSystemExit", "called sys.exit(0)"),
                                         ("OsExitInProcess", "called os._exit(0)")])
def test_exits_from_an_in_process_verifier_are_no_verdict_not_the_process_end(name, words, tiny_suite):
    from speccheck import battery
    from tests.cli import hostile37

    outcome = battery(getattr(hostile37, name)(), tiny_suite, isolate=False)
    assert outcome.verdict == "no_verdict" and outcome.exit_code == 2 and words in outcome.reason
    assert os._exit.__module__ in ("posix", "nt", "os")  # restored


def test_keyboard_interrupt_from_an_in_process_verifier_is_re_raised(tiny_suite):
    from speccheck import battery
    from tests.cli.hostile37 import RaisesKeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        battery(RaisesKeyboardInterrupt(), tiny_suite, isolate=False)


def test_figures_on_a_corrupt_sweep_store_without_running_is_exit_2_naming_it(tmp_path, capsys):
    corrupt = tmp_path / "sweep.sqlite"
    corrupt.write_text("not a database\n")
    code, out, err = run_cli(["figures", "--sweep", str(corrupt), "--no-sweep-run", "--out", str(tmp_path / "f"),
                              "--only", "6"], capsys)
    assert code == 2 and "sweep.sqlite" in err, (out, err)


@pytest.mark.parametrize("shadow", ["random.py", "json.py", "numbers.py"])
def test_a_stdlib_shadowing_file_in_the_working_folder_is_a_clear_exit_2(shadow, tmp_path):
    import subprocess
    import sys

    (tmp_path / shadow).write_text("raise RuntimeError('not the standard library')\n")
    env = {**os.environ, "PYTHONPATH": ROOT}
    proc = subprocess.run([sys.executable, "-m", "speccheck.cli", "theory", "--K", "2", "--delta", "1"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=120)
    name = shadow[:-3]
    if name in sys.modules and proc.returncode == 0:  # loaded from the standard library before the folder mattered
        return
    assert proc.returncode == 2, (proc.stdout[-500:], proc.stderr[-1500:])
    assert f"standard library's module {name!r}" in proc.stderr and "Traceback" not in proc.stderr
    assert "internal error" not in proc.stderr


def test_the_isolated_worker_never_imports_a_shadowing_file_from_the_working_folder(tmp_path, tiny_suite):
    import subprocess

    (tmp_path / "numbers.py").write_text("raise RuntimeError('not the standard library')\n")
    speccheck = os.path.join(os.path.dirname(os.path.realpath(__import__("sys").executable)), "speccheck")
    if not os.path.exists(speccheck):
        pytest.skip("no speccheck console script beside this python")
    env = {**os.environ, "PYTHONPATH": ROOT, "SPECCHECK_NO_PROGRESS": "1"}
    proc = subprocess.run([speccheck, "battery", "--verifier", "dgrs", "--suite", tiny_suite], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "RESULT: PASS" in proc.stdout, (proc.stdout[-500:], proc.stderr[-1500:])


def test_a_fifo_or_a_device_as_suite_is_refused_without_blocking(tmp_path, capsys):
    fifo = tmp_path / "suite.toml"
    os.mkfifo(fifo)
    for path, kind in ((str(fifo), "a FIFO"), ("/dev/zero", "a character device"), (str(tmp_path), "a folder")):
        code, out, err = run_cli(["battery", "--verifier", "dgrs", "--suite", path, "--no-progress"], capsys)
        assert code == 2 and f"is {kind}, not a regular file" in err, err


def test_an_empty_store_is_reported_as_empty_and_used_as_a_new_one(tmp_path, tiny_suite, capsys):
    empty = tmp_path / "empty.sqlite"
    empty.write_bytes(b"")
    code, out, err = run_cli(["results", "list", "--store", str(empty)], capsys)
    assert code == 2 and "is empty (0 bytes)" in err, err
    code, out, err = run_cli(["battery", "--verifier", "dgrs", "--suite", tiny_suite, "--store", str(empty),
                              "--no-progress"], capsys)
    assert code == 0 and "RESULT: PASS" in out, (out, err)


def test_a_read_only_store_is_reported_as_read_only_naming_the_file(tmp_path, monkeypatch):
    from speccheck.errors import InputError
    from speccheck.scale.store import ResultsStore

    store = str(tmp_path / "s.sqlite")
    ResultsStore(store).close()
    real_access = os.access
    # read-only permissions, seen as a user without the power to override them (root writes anyway)
    monkeypatch.setattr(os, "access", lambda path, mode: False if mode == os.W_OK and str(path) == store
                        else real_access(path, mode))
    with pytest.raises(InputError, match=r"s.sqlite cannot be written .*read-only or immutable") as info:
        ResultsStore(store)
    assert "corrupt" not in str(info.value) and "Move it aside" not in str(info.value)
    ResultsStore(store, readonly=True).close()  # reading it stays possible


def test_an_immutable_store_is_reported_as_read_only(tmp_path, tiny_suite, capsys):
    import subprocess

    store = tmp_path / "s.sqlite"
    from speccheck.scale.store import ResultsStore

    ResultsStore(str(store)).close()
    if subprocess.run(["chattr", "+i", str(store)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not permitted here")
    try:
        code, out, err = run_cli(["calibrate", "--verifier", "dgrs", "--suite", tiny_suite, "--store", str(store),
                                  "--seeds", "1", "--workers", "1", "--no-progress"], capsys)
    finally:
        subprocess.run(["chattr", "-i", str(store)], capture_output=True)
    assert code == 2 and "s.sqlite cannot be written" in err and "corrupt" not in err, err


@pytest.mark.skipif(not hasattr(os, "fork") or not os.path.isdir("/proc"), reason="needs fork and /proc")
def test_sigterm_to_the_command_ends_the_verifiers_whole_process_group(tmp_path, tiny_suite):
    import signal
    import time

    pidfile = tmp_path / "pids"
    proc = _battery_process("tests.cli.hostile37:ForksThenHangs", tiny_suite, pidfile, 300)
    try:
        deadline = time.monotonic() + 180
        while not (pidfile.exists() and pidfile.read_text().strip()) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert pidfile.exists(), "the verifier never ran"
        proc.send_signal(signal.SIGTERM)  # a CI job cancelled: the parent only
        proc.communicate(timeout=60)  # the pipe closes: nothing the verifier started holds it
    finally:
        proc.kill()
    pids = [int(x) for x in pidfile.read_text().split()]
    time.sleep(1.0)
    assert all(_gone(pid) for pid in pids), pids


def test_os_exit_from_a_spec_run_in_this_process_is_no_verdict(tiny_suite):
    from speccheck import battery

    outcome = battery("tests.cli.hostile37:OsExitInProcess", tiny_suite, isolate=False)
    assert outcome.verdict == "no_verdict" and "os._exit(0)" in outcome.reason
