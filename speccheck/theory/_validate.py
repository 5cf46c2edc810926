"""Input validation shared by the theory functions (scipy.stats style: fail early, name the argument)."""

from __future__ import annotations

import numbers

import numpy as np


def check_delta(delta, name: str = "delta") -> np.ndarray:
    """Return ``delta`` as a float64 array; raise ValueError on negative, NaN or infinite values."""
    arr = np.asarray(delta, dtype=np.float64)
    bad = ~np.isfinite(arr) | (arr < 0)
    if np.any(bad):
        value = arr[bad].ravel()[0] if arr.ndim else arr
        raise ValueError(f"{name} must be finite and >= 0, got {name}={float(value)!r}")
    return arr


def check_K(K, name: str = "K", max_K: int | None = None) -> int:
    """Return ``K`` as a Python int >= 1; raise ValueError for non-integers and K < 1."""
    if isinstance(K, bool) or not isinstance(K, numbers.Integral):
        if isinstance(K, numbers.Real) and float(K).is_integer():
            K = int(K)
        else:
            raise ValueError(f"{name} must be an integer >= 1, got {name}={K!r}")
    K = int(K)
    if K < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {name}={K}")
    if max_K is not None and K > max_K:
        raise ValueError(f"{name} must be <= {max_K}, got {name}={K}")
    return K


def check_omega(omega, K: int, name: str = "omega", atol: float = 1e-9) -> np.ndarray:
    """Return ``omega`` as a float64 vector on the simplex W_K (renormalised within ``atol``)."""
    w = np.asarray(omega, dtype=np.float64)
    if w.shape != (K,):
        raise ValueError(f"{name} must have shape ({K},) for K={K}, got shape {w.shape}")
    if not np.all(np.isfinite(w)):
        raise ValueError(f"{name} must be finite, got {name}={w.tolist()}")
    if np.any(w < -atol) or abs(w.sum() - 1.0) > atol:
        raise ValueError(
            f"{name} must lie on the probability simplex (>= 0, summing to 1), "
            f"got {name}={w.tolist()} (sum {w.sum():.12g})"
        )
    w = np.clip(w, 0.0, None)
    return w / w.sum()
