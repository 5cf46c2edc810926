"""Input validation for every public theory function (scipy.stats style: fail early, name the argument).

Domain: ``delta`` finite and >= 0 (any size; values past the point where an acceptance
underflows are answered analytically), ``K`` an integer in 1..``MAX_K`` (= 128), ``omega`` a
probability vector of length K. Violations raise :class:`speccheck.errors.InputError`
(a ``ValueError``, exit code 2) whose message names the argument and what is allowed.
"""

from __future__ import annotations

import numbers

import numpy as np
from numpy.typing import ArrayLike

from speccheck.errors import InputError

MAX_K = 128


def check_delta(delta: ArrayLike, name: str = "delta") -> np.ndarray:
    """Return ``delta`` as a float64 array; raise InputError on negative, NaN or infinite values."""
    try:
        arr = np.asarray(delta, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InputError(f"{name} must be a finite number >= 0 (or an array of them), got {name}={delta!r}") from exc
    bad = ~np.isfinite(arr) | (arr < 0)
    if np.any(bad):
        value = arr[bad].ravel()[0] if arr.ndim else arr
        raise InputError(f"{name} must be finite and >= 0, got {name}={float(value)!r}")
    return arr


def check_K(K: object, name: str = "K", max_K: int | None = MAX_K) -> int:
    """Return ``K`` as a Python int in 1..max_K (default 128); raise InputError otherwise."""
    if isinstance(K, bool) or not isinstance(K, numbers.Integral):
        if isinstance(K, numbers.Real) and not isinstance(K, bool) and float(K).is_integer():
            K = int(K)
        else:
            raise InputError(f"{name} must be an integer in 1..{max_K or 'inf'}, got {name}={K!r}")
    K = int(K)
    if K < 1:
        raise InputError(f"{name} must be an integer >= 1, got {name}={K}")
    if max_K is not None and K > max_K:
        raise InputError(f"{name} must be <= {max_K} (the supported range is 1..{max_K}), got {name}={K}")
    return K


def check_omega(omega: ArrayLike, K: int, name: str = "omega", atol: float = 1e-9) -> np.ndarray:
    """Return ``omega`` as a float64 vector on the simplex W_K (renormalised within ``atol``)."""
    try:
        w = np.asarray(omega, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InputError(f"{name} must be a probability vector of length {K}, got {name}={omega!r}") from exc
    if w.shape != (K,):
        raise InputError(f"{name} must have shape ({K},) for K={K}, got shape {w.shape}")
    if not np.all(np.isfinite(w)):
        raise InputError(f"{name} must be finite, got {name}={w.tolist()}")
    if np.any(w < -atol) or abs(w.sum() - 1.0) > atol:
        raise InputError(
            f"{name} must lie on the probability simplex (>= 0, summing to 1), "
            f"got {name}={w.tolist()} (sum {w.sum():.12g})"
        )
    w = np.clip(w, 0.0, None)
    return w / w.sum()
