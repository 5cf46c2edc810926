"""What the commands write (issue 28.5): strict JSON everywhere, progress bars only on a
terminal's stderr (never on stdout, never changing the exit code)."""

from __future__ import annotations

import io
import json
import math

import numpy as np
import pytest

from speccheck.cli import _output
from speccheck.cli import main as cli_main


def _strict(text: str):
    def refuse(constant):
        raise ValueError(f"bare {constant} in JSON")

    return json.loads(text, parse_constant=refuse)


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_json_text_is_strict():
    value = {"nan": math.nan, "inf": math.inf, "f32": np.float32("-inf"), "list": [1.0, math.nan], "ok": 0.5}
    assert _strict(_output.json_text(value)) == {"nan": None, "inf": None, "f32": None, "list": [1.0, None],
                                                 "ok": 0.5}


def test_battery_json_on_the_smoke_suite_is_strict(tmp_path, capsys):
    path = tmp_path / "smoke.json"
    assert cli_main(["battery", "--verifier", "dgrs", "--suite", "smoke", "--json", str(path)]) == 0
    report = _strict(path.read_text())
    assert report["passed"] is True and report["results"]


def test_progress_wanted_rules(monkeypatch):
    monkeypatch.delenv(_output.NO_PROGRESS_ENV, raising=False)
    monkeypatch.setattr("sys.stderr", _Terminal())
    assert _output.progress_wanted() is True
    assert _output.progress_wanted(quiet=True) is False
    monkeypatch.setenv(_output.NO_PROGRESS_ENV, "1")
    assert _output.progress_wanted() is False
    monkeypatch.delenv(_output.NO_PROGRESS_ENV)
    monkeypatch.setattr("sys.stderr", io.StringIO())  # not a terminal
    assert _output.progress_wanted() is False


@pytest.mark.parametrize("json_flag", [[], ["--json"]])
def test_progress_bar_goes_to_stderr_only(json_flag, monkeypatch):
    """theory with its bar drawn at once (delay 0) on a terminal: stdout and the exit code are
    those of --quiet, and the bar is on stderr."""
    monkeypatch.delenv(_output.NO_PROGRESS_ENV, raising=False)
    monkeypatch.setattr(_output, "PROGRESS_DELAY_S", 0.0)
    argv = ["theory", "--delta", "0.5", "1", "--K", "2", "3", "--mcrs-G", "0", *json_flag]
    runs = {}
    for quiet in (False, True):
        out, err = io.StringIO(), _Terminal()
        monkeypatch.setattr("sys.stdout", out)
        monkeypatch.setattr("sys.stderr", err)
        code = cli_main(argv + (["--quiet"] if quiet else []))
        runs[quiet] = (code, out.getvalue(), err.getvalue())
    assert runs[False][:2] == runs[True][:2] and runs[False][0] == 0
    assert "theory rows" in runs[False][2] and runs[True][2] == ""
