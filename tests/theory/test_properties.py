"""Property-based checks (hypothesis, derandomized so CI never flakes)."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from speccheck.theory import (
    acceptance_dgrs,
    acceptance_rass,
    acceptance_rmc,
    list_bound_dependent,
    list_bound_iid,
)

FAST = settings(max_examples=200, deadline=None, derandomize=True)
SLOW = settings(max_examples=25, deadline=None, derandomize=True)
deltas = st.floats(min_value=0.0, max_value=40.0, allow_nan=False)
Ks = st.integers(min_value=1, max_value=64)
TOL = 1e-12


@FAST
@given(deltas, Ks)
def test_acceptances_are_probabilities_and_ordered(delta, K):
    rmc, dgrs = float(acceptance_rmc(delta)), float(acceptance_dgrs(delta, K))
    iid, dep = float(list_bound_iid(delta, K)), float(list_bound_dependent(delta, K))
    for v in (rmc, dgrs, iid, dep):
        assert np.isfinite(v) and 0.0 <= v <= 1.0
    assert rmc <= dgrs + TOL
    assert dgrs <= iid + TOL
    assert iid <= dep + TOL


@FAST
@given(deltas, st.integers(min_value=1, max_value=63))
def test_monotone_in_K(delta, K):
    assert acceptance_dgrs(delta, K) <= acceptance_dgrs(delta, K + 1) + TOL
    assert list_bound_iid(delta, K) <= list_bound_iid(delta, K + 1) + TOL
    assert list_bound_dependent(delta, K) <= list_bound_dependent(delta, K + 1) + TOL


@FAST
@given(deltas)
def test_K1_reductions(delta):
    r = float(acceptance_rmc(delta))
    assert abs(float(acceptance_dgrs(delta, 1)) - r) <= 1e-14
    assert abs(float(list_bound_iid(delta, 1)) - r) <= 1e-14
    assert abs(acceptance_rass(delta, 1) - r) <= 1e-14


@FAST
@given(Ks)
def test_delta_zero_gives_one(K):
    assert acceptance_dgrs(0.0, K) == 1.0
    assert list_bound_iid(0.0, K) == 1.0
    assert list_bound_dependent(0.0, K) == 1.0


@SLOW
@given(st.floats(min_value=0.005, max_value=6.0), st.integers(min_value=2, max_value=8))
def test_rass_between_dgrs_and_iid_bound(delta, K):
    rass = acceptance_rass(delta, K)
    assert acceptance_dgrs(delta, K) <= rass + 1e-9
    assert rass <= list_bound_iid(delta, K) + 1e-9


@SLOW
@given(st.floats(min_value=0.0, max_value=40.0), st.integers(min_value=2, max_value=16))
def test_uniform_omega_gives_rmc(delta, K):
    assert abs(acceptance_rass(delta, K, np.full(K, 1.0 / K)) - float(acceptance_rmc(delta))) < 1e-12


def test_finite_at_the_extremes():
    for f in (lambda: acceptance_dgrs(40.0, 64), lambda: list_bound_iid(40.0, 64),
              lambda: list_bound_dependent(40.0, 64), lambda: acceptance_rass(40.0, 64)):
        v = float(f())
        assert np.isfinite(v) and 0 < v < 1e-80
