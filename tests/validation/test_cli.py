"""`speccheck battery` exit codes (0 pass, 1 defect, 2 cannot load / bad options), JSON and
JUnit output, and a rule defined outside the package (``--verifier module:attr``). The rule
runs in the isolated worker (speccheck.isolation), which inherits this process's sys.path.
Hostile rules (exit, crash, hang, bad outputs) are in tests/cli/."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET

import pytest

from speccheck import cli
from tests.cli_support import tiny_suite_text

TINY = tiny_suite_text("tiny-cli", n=4096)

RULES = '''
import torch


class Fresh:
    """Exact, useless: never accepts, returns fresh N(delta, 1)."""
    name = "outside-fresh"

    def verify(self, delta, s, generator=None):
        B, K = s.shape
        out = delta + torch.randn(B, generator=generator, dtype=s.dtype, device=s.device)
        return out, torch.zeros(B, dtype=torch.bool), torch.full((B,), K, dtype=torch.long)


class Shifted(Fresh):
    """Inexact: N(delta + 0.2, 1)."""
    name = "outside-shifted"

    def verify(self, delta, s, generator=None):
        out, a, i = super().verify(delta, s, generator)
        return out + 0.2, a, i


class RaisesValueError(Fresh):
    """A defect that surfaces as a ValueError inside the kernel: exit 1, not 2."""

    def verify(self, delta, s, generator=None):
        raise ValueError("kernel bug")
'''


@pytest.fixture
def outside(tmp_path, monkeypatch):
    (tmp_path / "outside_rules.py").write_text(textwrap.dedent(RULES))
    (tmp_path / "tiny.toml").write_text(TINY)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("outside_rules", None)
    return tmp_path


def test_exit_codes_in_process(outside, capsys):
    suite = str(outside / "tiny.toml")
    j, x = outside / "r.json", outside / "r.xml"
    assert cli.main(["battery", "--verifier", "outside_rules:Fresh", "--suite", suite, "--verbose",
                     "--json", str(j), "--junit", str(x)]) == 0
    out = capsys.readouterr().out
    assert "RESULT: PASS" in out and "seed=5" in out and "min.det.dev" in out
    rep = json.loads(j.read_text())
    assert rep["passed"] and rep["seed"] == 5 and all("mdd" in r for r in rep["results"])
    root = ET.fromstring(x.read_text().split("\n", 1)[1])
    assert root.tag == "testsuite" and root.get("failures") == "0" and len(root) > 5
    assert cli.main(["battery", "--verifier", "outside_rules:Shifted", "--suite", suite, "--junit", str(x)]) == 1
    assert ET.fromstring(x.read_text().split("\n", 1)[1]).get("failures") != "0"
    assert cli.main(["battery", "--verifier", "outside_rules:RaisesValueError", "--suite", suite]) == 1
    assert "kernel bug" in capsys.readouterr().out
    # cannot load / bad options: 2
    assert cli.main(["battery", "--verifier", "outside_rules:Missing", "--suite", suite]) == 2
    assert cli.main(["battery", "--verifier", "no_such_module_xyz:Rule", "--suite", suite]) == 2
    assert cli.main(["battery", "--verifier", "outside_rules:Fresh", "--suite", "no-such-suite"]) == 2
    assert cli.main(["battery", "--verifier", "outside_rules:Fresh", "--suite", suite, "--device", "tpu"]) == 2
    assert cli.main(["battery", "--suite", suite]) == 2
    assert cli.main(["battery", "--verifier", "outside_rules:Fresh", "--mutants", "--suite", suite]) == 2
    assert cli.main(["battery", "--verifier", "outside_rules:Fresh", "--suite", suite, "--layers", "nope"]) == 2
    if not __import__("torch").cuda.is_available():
        assert cli.main(["battery", "--verifier", "outside_rules:Fresh", "--suite", suite, "--device", "cuda"]) == 2
    assert "error" in capsys.readouterr().err


def test_exit_codes_subprocess(outside):
    """The installed command line, with the rule module found on PYTHONPATH."""
    env = dict(os.environ, PYTHONPATH=str(outside) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    base = [sys.executable, "-m", "speccheck.cli", "battery", "--suite", str(outside / "tiny.toml")]
    for attr, code in (("Shifted", 1),):  # 0 and 2 are covered in-process above
        r = subprocess.run(base + ["--verifier", f"outside_rules:{attr}"], env=env, capture_output=True, text=True,
                           timeout=300)
        assert r.returncode == code, (attr, r.stdout[-2000:], r.stderr[-2000:])


def test_mutants_kill_matrix_cli(outside, capsys):
    suite = str(outside / "tiny.toml")
    code = cli.main(["battery", "--mutants", "--mutant", "rmc-reflect_delta", "--mutant", "claims-accept",
                     "--suite", suite])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "2/2 mutants killed" in out and "rmc-reflect_delta" in out


def test_pytest_fixture_one_liner(speccheck_battery, outside):
    """What a verifier author writes: one line."""
    speccheck_battery("outside_rules:Fresh", suite=str(outside / "tiny.toml"))
    with pytest.raises(AssertionError, match="defect"):
        speccheck_battery("outside_rules:Shifted", suite=str(outside / "tiny.toml"))
