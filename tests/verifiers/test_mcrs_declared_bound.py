"""No built-in rule declares an acceptance above the i.i.d.-list bound (issue 38.4).

Every built-in rule feeds K i.i.d. drafts, so its true acceptance is at most
1 - max_s [Phi(s)^K - Phi(s - delta)]; a declaration above it is a defect of the declaration (MCRS
and MCRS-2 once declared 0.5 at delta >= ~1e155, where delta^2 overflowed, and MCRS-2 at K = 8
declared 2.2e-39 for delta >= 30, above a bound of <= 2e-50). Property test over delta in
[0, 1e308] (log-uniform, uniform on [0, 100], and the edges) and K in 1..128, derandomized.
Tolerance: 1e-12 relative, the rounding of the bound and of the acceptances (they agree to
~1e-14 relative where they meet, at large delta where the top rank is optimal).
"""

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from speccheck.theory import list_bound_iid
from speccheck.verifiers import get
from speccheck.verifiers.registry import BUILTIN

RTOL = 1e-12
EDGES = [0.0, 5e-324, 1e-300, 1e-14, 12.0, 30.0, 38.0, 80.0, 80.5, 1.3e154, 1.4e154, 1e155, 1e160, 1e308,
         1.7976931348623157e308]
deltas = st.one_of(
    st.sampled_from(EDGES),
    st.floats(min_value=-323.0, max_value=308.0).map(lambda e: min(10.0 ** e, 1e308)),
    st.floats(min_value=0.0, max_value=100.0),
)
# K <= 16 (the shipped MCRS / MCRS-2 policies) drawn as often as 17..128 (RASS's weights)
Ks = st.one_of(st.integers(min_value=1, max_value=16), st.integers(min_value=17, max_value=128))
RULES = {name: get(name) for name in BUILTIN}


def _declared(name: str, delta: float, K: int) -> float:
    return float(np.asarray(RULES[name].acceptance(np.array([delta]), K)).ravel()[0])


@settings(max_examples=60, deadline=None, derandomize=True)
@given(deltas, Ks)
@example(1e160, 2)
@example(1e155, 8)
@example(30.0, 8)
@example(100.0, 8)
@example(5e-324, 128)
def test_no_declared_acceptance_above_the_iid_bound(delta, K):
    bound = float(list_bound_iid(delta, K))
    for name in RULES:
        if name == "rmc" and K != 1:
            continue
        a = _declared(name, delta, K)
        assert np.isfinite(a) and 0.0 <= a <= 1.0, (name, delta, K, a)
        assert a <= bound * (1.0 + RTOL) + 1e-300, (name, delta, K, a, bound)


@pytest.mark.parametrize("K", [2, 3, 4, 8, 16])
def test_huge_delta_declares_zero(K):
    """Past delta = 80 every acceptance is < 1e-340: 0 in double, never delta^2's overflow."""
    d = np.array([81.0, 1e154, 1e160, 1e308])
    for name in ("mcrs", "mcrs2", "dgrs", "rass"):
        assert np.all(RULES[name].acceptance(d, K) == 0.0), name
