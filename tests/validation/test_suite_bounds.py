"""Suite sizes are bounded (issue 37, item 13): wrong types and counts beyond the bounds of
``speccheck.validation.suites`` are a LoadError naming the section and field; the cost of a
suite is stated (calls, rows, memory) and a scale that would exceed the bounds is refused."""

from __future__ import annotations

import pytest

from speccheck.errors import InputError, LoadError
from speccheck.validation.suites import BOUNDS, MAX_SCALE, check_cost, load_suite, parse_suite, suite_cost

BASE = {"name": "b", "scalar": {"deltas": [1.0], "K": [1, 2], "n": 4096}, "contract": {"n": 64}}


def _with(section: str, **fields) -> dict:
    data = {k: dict(v) if isinstance(v, dict) else v for k, v in BASE.items()}
    data.setdefault(section, {}).update(fields)
    return data


@pytest.mark.parametrize("section, fields, words", [
    ("scalar", {"n": 10**15}, "[scalar] n = 1000000000000000 must be an integer in [1, 134,217,728]"),
    ("scalar", {"n": 1e15}, "[scalar] n must be an integer >= 1"),
    ("contract", {"n": 2 * 10**9}, "[contract] n = 2000000000 must be an integer in"),
    ("scalar", {"deltas": [i * 1e-4 for i in range(100_000)]}, "[scalar] deltas holds 100000 values"),
    ("trajectory", {"n_traj": -1}, "[trajectory] n_traj = -1 must be an integer in [20, 1,000,000]"),
    ("scalar", {"K": 2}, "[scalar] K must be a list of integers, got K = 2"),
    ("wrapper", {"dims": [10**9], "n": 64}, "[wrapper] dims = [1000000000] must be an integer in"),
    ("wrapper", {"dims": [1e9], "n": 64}, "[wrapper] dims must be a non-empty list of integers"),
    ("sequence", {"K": [1], "calls": "many"}, "[sequence] calls must be an integer"),
    ("continuous", {"K": [1], "edges": [0.1, 1.0], "n": 4096, "zero_atom": "yes"},
     "[continuous] zero_atom must be true or false"),
])
def test_a_suite_beyond_its_bounds_or_of_the_wrong_type_is_refused_naming_the_field(section, fields, words):
    with pytest.raises(LoadError) as info:
        parse_suite(_with(section, **fields))
    assert words in str(info.value)


@pytest.mark.parametrize("name", ["smoke", "gate", "full"])
def test_the_shipped_suites_sit_inside_the_bounds_and_state_their_cost(name):
    cost = check_cost(load_suite(name))
    assert cost.calls > 0 and cost.rows > 0 and cost.memory_bytes > 0
    text = cost.describe()
    assert "verify calls" in text and "rows" in text and "MiB" in text and "[scalar]" in text


def test_cost_grows_with_the_scale_and_a_scale_beyond_the_bounds_is_refused():
    gate = load_suite("gate")
    assert suite_cost(gate, 2.0).rows > suite_cost(gate).rows
    for scale in (1e308, float("inf"), float("nan"), 0.0, -1.0, MAX_SCALE * 10, True):
        with pytest.raises(InputError, match="scale"):
            check_cost(gate, scale)
    scale = 2.0 * BOUNDS[("scalar", "n")][1] / gate.scalar.n  # the grid's draws per cell beyond [scalar] n's bound
    with pytest.raises(InputError, match=rf"\[scalar\] n = {gate.scalar.n} times scale {scale:g}"):
        check_cost(gate, scale)
    assert BOUNDS[("scalar", "n")][1] >= load_suite("full").scalar.n * 4


def test_the_battery_refuses_a_huge_scale_before_blaming_the_verifier():
    from speccheck import battery

    with pytest.raises(InputError, match="scale"):
        battery("dgrs", "smoke", scale=1e308)
