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


@pytest.mark.skipif(not hasattr(os, "fork") or not os.path.isdir("/proc"), reason="needs fork and /proc")
def test_a_verifiers_forked_grandchild_neither_holds_the_pipe_nor_outlives_the_command(tmp_path, tiny_suite):
    import subprocess
    import sys

    pidfile = tmp_path / "pids"
    env = {**os.environ, "PYTHONPATH": ROOT, "SPECCHECK_TEST_PIDFILE": str(pidfile), "SPECCHECK_NO_PROGRESS": "1"}
    # stdout is a pipe (`speccheck battery | tee log`): communicate returns only once every holder closed it
    proc = subprocess.Popen([sys.executable, "-m", "speccheck.cli", "battery", "--verifier",
                             "tests.cli.hostile:ForksSleeper", "--suite", tiny_suite, "--timeout", "120"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
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
