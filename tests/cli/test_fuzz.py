"""Hypothesis fuzz of every command's options (issue 15.6).

Each example corrupts exactly one option of one command (the others stay valid and cheap), so
no example starts real work; the command must answer exit 2, with no traceback, with a message
that names the corrupted option, in bounded time. A second family throws arbitrary tokens at
the cheap commands and asserts only the contract (exit code in {0, 1, 2}, no traceback).
Seeded (``derandomize=True``) and bounded (``max_examples`` per test), so CI sees the same
examples every run.
"""

from __future__ import annotations

import contextlib
import io
import math
import resource
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from speccheck import cli

SETTINGS = settings(derandomize=True, max_examples=25, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow])
CALL_LIMIT_S = 30.0  # one rejected call: parsing and validation only (generous for a loaded CI box)
RSS_LIMIT_BYTES = 4 * 2**30


def run(argv):
    """(exit code, stdout, stderr, seconds) of an in-process call."""
    out, err = io.StringIO(), io.StringIO()
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(argv)
    return code, out.getvalue(), err.getvalue(), time.perf_counter() - t0


def bad_int(low, high=None):
    """Integers outside [low, high], edges first."""
    edges = [low - 1, -(2**63), -1] + ([high + 1, 2**63] if high is not None else [])
    outside = st.integers(max_value=low - 1)
    if high is not None:
        outside = outside | st.integers(min_value=high + 1)
    return st.sampled_from(sorted({e for e in edges if e < low or (high is not None and e > high)})) | outside


def bad_float(low, high, low_open=False, high_open=False):
    """Non-finite values and finite values outside the interval, edges first."""
    edges = ["nan", "inf", "-inf"] + ([str(low)] if low_open else []) + ([str(high)] if high_open else [])
    below = st.floats(max_value=low, exclude_max=not low_open, allow_nan=False, allow_infinity=False)
    above = st.floats(min_value=high, exclude_min=not high_open, allow_nan=False, allow_infinity=False) \
        if math.isfinite(high) else st.nothing()
    return st.sampled_from(edges) | below.map(repr) | above.map(repr)


NOT_A_NUMBER = st.sampled_from(["", "x", "1..3", "0x10", "1e3.5", "--"])

# command -> (valid, cheap base argv; {option: strategy of bad values})
CASES = {
    "theory": (["--no-mcrs"], {
        "--delta": bad_float(0.0, math.inf),
        "--K": bad_int(1, 128),
        "--mcrs-G": st.integers(min_value=-(2**40), max_value=2**40).filter(lambda g: g != 0 and not 2 <= g <= 1024),
    }),
    "speedup": ([], {
        "--K": bad_int(1, 128), "--L": bad_int(1, 64), "--trajectories": bad_int(2, 100_000),
        "--steps": bad_int(2, 10_000), "--eps": bad_float(0.0, 1.0, True, True), "--threads": bad_int(1, 256),
        "--seed": bad_int(0, 2**63 - 1), "--timeout": bad_float(0.0, 7 * 24 * 3600.0, low_open=True),
    }),
    "battery": (["--verifier", "dgrs", "--suite", "smoke"], {
        "--seed": bad_int(0, 2**63 - 1), "--timeout": bad_float(0.0, 7 * 24 * 3600.0, low_open=True),
        "--K": bad_int(1, 128), "--scale": bad_float(0.0, 100.0, low_open=True),
        "--device": st.text(max_size=12).filter(lambda d: d not in ("cpu",)),
    }),
    "e2e": (["--model", "digits-edm"], {
        "--K": bad_int(1, 128), "--L": bad_int(1, 64), "--eps": bad_float(0.0, 1.0, low_open=True),
        "--samples": bad_int(2, 1_000_000), "--steps": bad_int(2, 10_000),
        "--alpha": bad_float(0.0, 1.0, True, True), "--n-perm": bad_int(300, 100_000),
        "--max-rows": bad_int(1, 2**20), "--seed": bad_int(0, 2**63 - 1), "--threads": bad_int(1, 256),
        "--timeout": bad_float(0.0, 7 * 24 * 3600.0, low_open=True),
    }),
    "train-digits": ([], {
        "--batch": bad_int(1, 4096), "--steps-edm": bad_int(1, 1_000_000), "--steps-flow": bad_int(1, 1_000_000),
        "--check-per-class": bad_int(0, 1000), "--threads": bad_int(1, 256), "--seed": bad_int(0, 2**63 - 1),
    }),
    "figures": ([], {
        "--seed": bad_int(0, 2**63 - 1), "--threads": bad_int(1, 256),
        "--only": st.text(min_size=1, max_size=10).map(lambda t: "zz" + t),
    }),
    "verifiers": (["--check", "dgrs"], {
        "--seed": bad_int(0, 2**63 - 1), "--timeout": bad_float(0.0, 7 * 24 * 3600.0, low_open=True),
    }),
}


def _one_bad(command):
    base, options = CASES[command]
    return st.sampled_from(sorted(options)).flatmap(
        lambda opt: st.tuples(st.just(opt), options[opt] | (
            # theory's --K takes ranges like sweep's (1..3 is valid there)
            NOT_A_NUMBER.filter(lambda v: not (command == "theory" and opt == "--K" and ".." in v))
            if opt not in ("--device", "--only") else st.nothing())))


def _check_rejected(command, option, value):
    base = CASES[command][0]
    code, out, err, seconds = run([command, *base, f"{option}={value}"])
    assert code == 2, (command, option, value, out[-500:], err[-500:])
    assert "Traceback" not in err and "internal error" not in err, err
    assert option in err, (option, err)
    assert seconds < CALL_LIMIT_S, (command, option, value, seconds)


@pytest.mark.parametrize("command", sorted(CASES))
def test_one_bad_option_is_exit_2_naming_it(command):
    @SETTINGS
    @given(_one_bad(command))
    def check(case):
        _check_rejected(command, *case)

    check()
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 < RSS_LIMIT_BYTES


TOKENS = st.sampled_from(["--delta", "--K", "--json", "--mcrs", "--no-mcrs", "--mcrs-G", "0", "1", "2", "-1", "0.5",
                          "nan", "inf", "1e308", "1e-320", "x", "", "--", "--help-me", "-K"])


@SETTINGS
@given(st.lists(TOKENS, max_size=6))
def test_arbitrary_theory_argv_keeps_the_contract(tokens):
    argv = ["theory", "--no-mcrs", "--K", "1", "--delta", "0.5", *tokens]  # valid runs stay cheap
    if "--mcrs" in tokens:  # keep every example cheap: MCRS's cold LP is seconds per cell
        return
    code, out, err, seconds = run(argv)
    assert code in (0, 2), (argv, err[-500:])
    assert "Traceback" not in err and "internal error" not in err, (argv, err)
    assert code == 0 or "error" in err
    assert seconds < CALL_LIMIT_S


@SETTINGS
@given(st.lists(st.text(max_size=8), max_size=4))
def test_arbitrary_top_level_argv(tokens):
    if tokens[:1] and tokens[0] in ("theory", "speedup", "battery", "e2e", "train-digits", "figures", "verifiers",
                                    "sweep", "calibrate", "results", "reproduce"):
        tokens = ["--no-such-option", *tokens]
    code, out, err, _ = run(tokens)
    asked_help = any(t.startswith(("-h", "--h")) for t in tokens)
    assert code == 2 or (code == 0 and asked_help), (tokens, err)
    assert "Traceback" not in err


def test_help_is_exit_0():
    code, out, _, _ = run(["--help"])
    assert code == 0 and "exit codes" in out
