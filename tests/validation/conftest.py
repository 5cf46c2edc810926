"""Shared tiny suites for the battery tests (kept small: the whole folder runs in < 150 s)."""

from __future__ import annotations

import pytest

from speccheck.validation.suites import parse_suite


def tiny_suite(deltas=(1.0,), Ks=(1, 2), n=4096, dims=None, wrapper_n=1024, seed=11, alpha=1e-3, name="tiny"):
    data = {"name": name, "seed": seed, "family_alpha": alpha,
            "scalar": {"deltas": list(deltas), "K": list(Ks), "n": n}, "contract": {"n": 64}}
    if dims:
        data["wrapper"] = {"dims": list(dims), "n": wrapper_n, "K": 2, "chunk": 1024}
    return parse_suite(data, name)


@pytest.fixture
def tiny():
    return tiny_suite
