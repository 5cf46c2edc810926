"""``speccheck theory --K`` takes values and ranges with sweep's parser (issue 37.7)."""

from __future__ import annotations

import json

import pytest

from speccheck.cli import _options, sweep
from tests.cli.test_issue_cases import run  # in-process call: (exit code, stdout, stderr), no traceback


def test_theory_K_ranges_are_sweeps_syntax():
    code, out, _ = run(["theory", "--K", "1..3", "5", "2", "--delta", "0.5", "--no-mcrs", "--json", "--quiet"])
    assert code == 0
    assert [r["K"] for r in json.loads(out)] == [1, 2, 3, 5]  # sorted, unique: as sweep's --K
    assert sweep.parse_range is _options.parse_range  # one parser for both commands


@pytest.mark.parametrize("value", ["0..3", "1..129", "120..1000000000000", "1..x", "1..2..3", "3.5"])
def test_theory_bad_K_range_is_exit_2_naming_it(value):
    code, _, err = run(["theory", "--K", value, "--delta", "0.5", "--no-mcrs", "--quiet"])
    assert code == 2 and "--K" in err


def test_parse_range_checks_the_bound_before_expanding():
    assert _options.parse_range(["1..3", "7"], "K", 8) == [1, 2, 3, 7]
    with pytest.raises(_options.UsageError, match=r"--K must be integers in \[1, 128\]"):
        _options.parse_range(["1..10000000000000"], "K", 128)  # refused, never built
