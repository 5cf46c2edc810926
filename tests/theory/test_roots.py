"""brentq_many: scipy's brentq, step for step, on many brackets at once."""

import numpy as np
import pytest
from scipy import optimize

from speccheck.theory.roots import brentq_many


def _brackets(f, lo, hi, n):
    """Adjacent scan points of f on [lo, hi] with a sign change (or a zero) between them."""
    x = np.linspace(lo, hi, n)
    fx = f(x)
    i = np.flatnonzero(np.signbit(fx[:-1]) != np.signbit(fx[1:]))
    return x[i], x[i + 1]


@pytest.mark.parametrize("f", [
    lambda x: np.sin(x) + 0.3 * np.sin(3.1 * x),
    lambda x: np.expm1(np.sin(2.0 * x)) - 0.2 * np.cos(7.0 * x) + 0.05 * x,
    lambda x: (np.sin(x) - 0.2) * (np.cos(0.5 * x) ** 2 + 1e-4),  # near-flat stretches: bisection steps
    lambda x: np.where(np.sin(x) > 0, 1.0, -1.0) * (1e-3 + np.abs(np.sin(x))),  # jumps: no root, a change
])
@pytest.mark.parametrize("xtol", [1e-14, 1e-6])
def test_same_roots_as_brentq_bit_for_bit(f, xtol):
    a, b = _brackets(f, -40.0, 40.0, 997)
    assert a.size > 10
    want = np.array([optimize.brentq(lambda t: float(f(np.float64(t))), ai, bi, xtol=xtol) for ai, bi in zip(a, b)])
    assert np.array_equal(brentq_many(f, a, b, xtol), want)


def test_roots_at_the_ends_and_empty():
    f = np.sin
    assert np.array_equal(brentq_many(f, np.array([0.0, -1.0]), np.array([1.0, 0.0]), 1e-14), [0.0, 0.0])
    assert brentq_many(f, np.array([]), np.array([]), 1e-14).shape == (0,)


def test_errors_as_brentq():
    with pytest.raises(ValueError, match="different signs"):
        brentq_many(np.sin, np.array([0.5]), np.array([1.0]), 1e-14)
    with pytest.raises(ValueError, match="NaN"):
        brentq_many(lambda x: np.where(x > 0.1, np.nan, x - 0.05), np.array([0.0]), np.array([1.0]), 1e-14)
    with pytest.raises(RuntimeError, match="did not converge"):
        brentq_many(np.sin, np.array([-1.0]), np.array([1.5]), 1e-300, rtol=0.0, maxiter=3)
