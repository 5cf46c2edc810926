"""Shared fixtures of the scale-out tests: a battery suite small enough to run as many units."""

from __future__ import annotations

import pytest

TINY_SUITE = """name = "tiny"
description = "tiny test suite"
seed = 7
family_alpha = 1e-3
power = 0.9

[scalar]
deltas = [1.0]
K = [1, 2]
n = 2048

[contract]
n = 64
"""


@pytest.fixture
def tiny_suite(tmp_path):
    path = tmp_path / "tiny.toml"
    path.write_text(TINY_SUITE)
    return str(path)
