"""speccheck.strict_json: the JSON every command writes has no bare NaN / Infinity."""

from __future__ import annotations

import json
import math

import numpy as np

from speccheck.strict_json import dumps, finite_json


def test_finite_json_replaces_non_finite_floats_recursively():
    assert finite_json({"a": [math.nan, (1.0, -math.inf)], "b": "NaN", "c": 2}) == {"a": [None, [1.0, None]],
                                                                                    "b": "NaN", "c": 2}


def test_dumps_is_strict_and_keeps_finite_values():
    text = dumps({"x": np.float32(1.5), "y": np.float64("nan"), "z": [math.inf]}, default=float, sort_keys=True)
    assert json.loads(text, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c))) == {
        "x": 1.5, "y": None, "z": [None]}
    assert dumps({"a": 0.1}) == json.dumps({"a": 0.1})
