"""Property-based checks (hypothesis, derandomized so CI never flakes).

Domain: delta in [0, 40] (with 0, the smallest subnormal and 1e-12 always tried) and K in 1..128
for the closed forms and for RASS at fixed weights; the certified RASS optimum (gap <= 1e-12) is
drawn for K in 1..16 (its cost grows with K); above K = 16, where the solver stops after a few
iterations and certifies a looser gap, K in 17..128 is checked for the bounds and the certificate.
"""

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from speccheck.theory import (
    acceptance_dgrs,
    acceptance_rass,
    acceptance_rmc,
    list_bound_dependent,
    list_bound_iid,
    rank_weight_solution,
    rejection_rass,
)

FAST = settings(max_examples=200, deadline=None, derandomize=True)
SLOW = settings(max_examples=25, deadline=None, derandomize=True)
deltas = st.one_of(st.sampled_from([0.0, 5e-324, 1e-12, 1e-9, 40.0]), st.floats(min_value=0.0, max_value=40.0))
Ks = st.integers(min_value=1, max_value=128)
TOL = 1e-12


def _le(a: float, b: float) -> bool:
    """a <= b up to 1e-12 relative (values span 1 down to 1e-88)."""
    return a <= b * (1 + TOL) + 1e-300


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
@given(deltas, st.integers(min_value=1, max_value=127))
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
    assert acceptance_rass(0.0, K) == 1.0


@SLOW
@given(deltas, st.integers(min_value=1, max_value=16))
@example(1e-12, 8)
@example(20.0, 8)
def test_rass_optimum_between_dgrs_and_iid_bound(delta, K):
    sol = rank_weight_solution(delta, K)
    assert np.isfinite(sol.acceptance) and np.isfinite(sol.rejection)
    assert 0.0 <= sol.gap <= 1e-12
    if sol.acceptance < 0.5:
        assert _le(float(acceptance_dgrs(delta, K)), sol.acceptance)
        assert _le(sol.acceptance, float(list_bound_iid(delta, K)))
    else:  # compare the rejections (D-GRS and the bound give A only: 1 - A to within 2e-16)
        assert sol.rejection <= (1.0 - float(acceptance_dgrs(delta, K))) * (1 + TOL) + 2.3e-16
        assert 1.0 - float(list_bound_iid(delta, K)) <= sol.rejection * (1 + TOL) + 2.3e-16


@settings(max_examples=12, deadline=None, derandomize=True)
@given(deltas, st.integers(min_value=17, max_value=128))
@example(1e-12, 128)
@example(1.0, 64)
@example(40.0, 128)
def test_large_K_solution_is_finite_certified_and_between_dgrs_and_iid_bound(delta, K):
    sol = rank_weight_solution(delta, K)
    assert np.isfinite(sol.acceptance) and np.isfinite(sol.rejection) and np.isfinite(sol.gap)
    assert abs(sol.omega.sum() - 1.0) <= 1e-12 and np.all(sol.omega >= 0)
    assert 0.0 <= sol.gap <= sol.rejection + 1e-300  # never looser than the trivial bound A* <= 1
    assert sol.acceptance <= sol.upper_bound
    # the reported A is that of the returned weights
    assert abs(float(rejection_rass(delta, K, sol.omega)) - sol.rejection) <= 1e-9 * sol.rejection + 1e-15
    if sol.acceptance < 0.5:
        assert _le(float(acceptance_dgrs(delta, K)), sol.acceptance)
        assert _le(sol.acceptance, float(list_bound_iid(delta, K)))
    else:
        assert sol.rejection <= (1.0 - float(acceptance_dgrs(delta, K))) * (1 + TOL) + 2.3e-16
        assert 1.0 - float(list_bound_iid(delta, K)) <= sol.rejection * (1 + TOL) + 2.3e-16


@settings(max_examples=10, deadline=None, derandomize=True)
@given(st.floats(min_value=0.0, max_value=39.0), st.floats(min_value=1e-3, max_value=1.0), st.integers(2, 8))
def test_rass_optimum_non_increasing_in_delta(delta, step, K):
    lo, hi = rank_weight_solution(delta, K), rank_weight_solution(delta + step, K)
    assert hi.acceptance <= lo.upper_bound * (1 + TOL)


@FAST
@given(deltas, Ks, st.integers(min_value=0, max_value=2**31))
def test_fixed_omega_is_a_probability_below_the_bounds(delta, K, seed):
    w = np.random.default_rng(seed).dirichlet(np.full(K, 0.7))
    acc, rej = acceptance_rass(delta, K, w), rejection_rass(delta, K, w)
    assert np.isfinite(acc) and np.isfinite(rej) and 0.0 <= acc <= 1.0 and 0.0 <= rej <= 1.0
    assert abs(acc + rej - 1.0) <= 1e-13
    assert _le(acc, float(list_bound_iid(delta, K)))


@SLOW
@given(st.floats(min_value=0.0, max_value=40.0), st.integers(min_value=2, max_value=16))
def test_uniform_omega_gives_rmc(delta, K):
    assert abs(acceptance_rass(delta, K, np.full(K, 1.0 / K)) - float(acceptance_rmc(delta))) < 1e-12


def test_finite_at_the_extremes():
    for f in (lambda: acceptance_dgrs(40.0, 64), lambda: list_bound_iid(40.0, 64),
              lambda: list_bound_dependent(40.0, 64), lambda: acceptance_rass(40.0, 16)):
        v = float(f())
        assert np.isfinite(v) and 0 < v < 1e-80
