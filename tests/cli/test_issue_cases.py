"""The cases listed in issue 15, one test each: exit 1 or 2 with a message naming the option or
file (or the right answer). Verifier-isolation cases (sys.exit / os._exit / hang / NaN / wrong
outputs) are in test_hostile.py; e2e's verdict logic is in tests/validation/test_e2e.py."""

from __future__ import annotations

import contextlib
import io
import json
import os

import pytest

from speccheck import cli


def run(argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(argv)
    assert "Traceback" not in err.getvalue()
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("argv, option", [
    (["battery", "--verifier", "dgrs", "--seed", "-1"], "--seed"),
    (["battery", "--verifier", "dgrs", "--mutant", "foo"], "--mutant"),
    (["battery", "--verifier", "dgrs", "--timeout", "0"], "--timeout"),
    (["speedup", "--K", "0"], "--K must be"),
    (["speedup", "--eps", "0"], "--eps must be a finite number in (0, 1)"),
    (["speedup", "--K", "100000", "--L", "2"], "--K"),
    (["speedup", "--K", "128", "--L", "64"], "1000000 nodes"),
    (["e2e", "--model", "digits-edm", "--no-innovation", "--no-two-sample"], "--no-innovation"),
    (["e2e", "--model", "digits-edm", "--n-perm", "0"], "--n-perm"),
    (["e2e", "--model", "digits-edm", "--samples", "0"], "--samples"),
    (["e2e", "--model", "digits-edm", "--K", "0"], "--K"),
    (["e2e", "--model", "digits-edm", "--device", "tpu"], "--device"),
    (["e2e", "--model", "digits-edm", "--device", "cuda:99"], "--device cuda:99"),
    (["theory", "--delta", "nan"], "--delta"),
    (["theory", "--delta", "-1"], "--delta"),
    (["theory", "--K", "0"], "--K"),
    (["theory", "--K", "100000"], "--K"),
    (["train-digits", "--batch", "0"], "--batch"),
    (["train-digits", "--steps-edm", "-5"], "--steps-edm"),
    (["figures", "--only", "no-such-figure"], "--only"),
    (["verifiers", "--check", "dgrs", "--device", "tpu"], "--device"),
])
def test_bad_option_is_exit_2_naming_it(argv, option):
    code, out, err = run(argv)
    assert code == 2, (out, err)
    assert option in err, err


def test_suite_without_tests_is_exit_2(tmp_path):
    empty = tmp_path / "empty.toml"
    empty.write_text('name = "empty"\nseed = 1\nfamily_alpha = 1e-3\n')
    code, out, err = run(["battery", "--verifier", "dgrs", "--suite", str(empty), "--no-progress"])
    assert code == 2 and "RESULT: PASS" not in out, (out, err)


@pytest.mark.parametrize("where", ["folder", "no-such-root"])
def test_unwritable_json_is_refused_before_the_work(tmp_path, where):
    path = str(tmp_path) if where == "folder" else "/proc/speccheck-no-such/r.json"
    code, out, err = run(["battery", "--verifier", "dgrs", "--suite", "smoke", "--json", path])
    assert code == 2 and "--json" in err and out == "", (out, err)


def test_theory_extreme_delta_is_answered_not_allocated():
    code, out, err = run(["theory", "--delta", "1e10", "1e6", "--K", "64", "128", "--no-mcrs", "--json"])
    assert code == 0, err
    rows = json.loads(out)  # valid JSON: non-finite values are null
    assert len(rows) == 4 and all(r["dgrs"] == 0.0 and r["rmc"] == 0.0 for r in rows)
    assert all(r["mcrs"] is None for r in rows)


def test_figures_missing_or_corrupt_inputs(tmp_path):
    code, _, err = run(["figures", "--only", "frontier", "--sweep", str(tmp_path / "missing"), "--no-sweep-run",
                        "--out", str(tmp_path / "out")])
    assert code == 2 and "--sweep" in err
    (tmp_path / "notasweep").mkdir()
    code, _, err = run(["figures", "--only", "frontier", "--sweep", str(tmp_path / "notasweep"), "--no-sweep-run",
                        "--out", str(tmp_path / "out")])
    assert code == 2 and "holds no sweep" in err, err
    for text in ("{}", "not json", '{"x": {"results": []}}'):
        (tmp_path / "b.json").write_text(text)
        code, _, err = run(["figures", "--only", "battery", "--battery-json", str(tmp_path / "b.json"),
                            "--out", str(tmp_path / "out")])
        assert code == 2 and "b.json" in err, (text, err)
    assert not os.path.exists(tmp_path / "out" / "fig7_battery.png")


def test_sweep_hardening_if_registered(tmp_path):
    """`sweep --name ../../x` must not write outside --out."""
    code, _, err = run(["sweep", "--name", "../../x", "--out", str(tmp_path), "--trajectories", "2"])
    assert code == 2 and "--name" in err, err
    assert not os.path.exists(tmp_path.parent.parent / "x")
