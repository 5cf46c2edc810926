"""Every hostile verifier of ``tests/cli/hostile.py`` gets its verdict from ``speccheck battery``
and from ``speccheck verifiers --check`` (exit 1: a defect shown; exit 2: no verdict, with what
the code did), and never exit 0 or a traceback. In-process calls of ``speccheck.cli.main``:
the verifier runs in the isolated worker, so even ``os._exit(0)`` cannot end the test process."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.cli import hostile
from tests.cli_support import run_cli, tiny_suite_text, write_suite

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# what the message must say for the no-verdict cases
REASONS = {
    "SysExitZero": "sys.exit(0)",
    "OsExitZero": "os._exit(0)",
    "Segfault": "SIGSEGV",
    "Hang": "ran longer than the timeout",
    "MemoryHog": "MemoryError",
}


@pytest.fixture(scope="module")
def tiny_suite(tmp_path_factory):
    return write_suite(tmp_path_factory.mktemp("suite"), tiny_suite_text("tiny-hostile"))


@pytest.mark.parametrize("name", sorted(hostile.VERDICTS) + sorted(hostile.STATISTICAL_ONLY))
def test_battery_verdict(name, tiny_suite, capsys):
    want = {**hostile.VERDICTS, **hostile.STATISTICAL_ONLY}[name]
    code, out, err = run_cli(["battery", "--verifier", f"tests.cli.hostile:{name}", "--suite", tiny_suite,
                           "--no-progress", "--timeout", "4"], capsys)
    assert code == want, (out[-2000:], err[-2000:])
    if want == 1:
        assert "RESULT: FAIL" in out
        assert "delta must be finite" not in out + err  # the verifier's output is blamed, not the input
    if want == 2:
        assert REASONS[name] in err, err
        assert name == "MemoryHog" or "no verdict" in err, err
    if want == 0:
        assert "RESULT: PASS" in out


# the isolation cases (crash, hang, memory) are the same worker as the battery's: covered above
CHECK_CASES = sorted(n for n in hostile.VERDICTS if n not in ("Segfault", "Hang", "MemoryHog"))


@pytest.mark.parametrize("name", CHECK_CASES)
def test_check_verdict(name, capsys):
    want = hostile.VERDICTS[name]
    code, out, err = run_cli(["verifiers", "--check", f"tests.cli.hostile:{name}", "--timeout", "4"], capsys)
    assert code == want, (out[-2000:], err[-2000:])
    if want == 1:
        assert "contract checks FAILED" in out and "FAIL " in out
    elif want == 2:
        assert REASONS[name] in err
    else:
        assert ": ok (" in out


def test_statistical_defect_passes_the_contract_check(capsys):
    """--check runs the contract layer only: a biased but well-formed rule passes it (the
    battery's statistical layers catch it, see test_battery_verdict)."""
    code, out, _ = run_cli(["verifiers", "--check", "tests.cli.hostile:Biased"], capsys)
    assert code == 0 and "ok" in out


def test_module_that_exits_on_import(tiny_suite, capsys):
    for argv in (["battery", "--verifier", "tests.cli.hostile_import_exit:Rule", "--suite", tiny_suite],
                 ["verifiers", "--check", "tests.cli.hostile_import_exit:Rule"]):
        code, out, err = run_cli(argv, capsys)
        assert code == 2 and "sys.exit(0)" in err, err


def test_installed_command_os_exit(tiny_suite):
    """The real command line, as CI runs it: exit 2, never 0, for a verifier calling os._exit(0)."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="1")
    r = subprocess.run([sys.executable, "-m", "speccheck.cli", "battery", "--verifier", "tests.cli.hostile:OsExitZero",
                        "--suite", tiny_suite, "--no-progress"], env=env, cwd=ROOT, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 2, (r.stdout[-1000:], r.stderr[-1000:])
    assert "os._exit(0)" in r.stderr and "Traceback" not in r.stderr
