"""The user cache of solved tables (RASS rank weights, MCRS policies): ~/.cache/speccheck, or
$SPECCHECK_CACHE_DIR (an empty string turns it off). Reads and writes never raise: a cache
that cannot be used only costs a re-solve."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np


def cache_file(name: str) -> Path | None:
    """Path of ``name`` in the cache folder, or None when caching is off."""
    root = os.environ.get("SPECCHECK_CACHE_DIR", str(Path.home() / ".cache" / "speccheck"))
    return Path(root) / name if root else None


def load(path: Path | None, shape: tuple) -> np.ndarray | None:
    """The array saved at ``path`` if it exists, is readable and has ``shape``; else None."""
    if path is None or not path.exists():
        return None
    try:
        arr = np.load(path)
    except (OSError, ValueError):
        return None
    return arr if arr.shape == tuple(shape) else None


def save(path: Path | None, arr: np.ndarray) -> None:
    """Atomic write (a temporary file renamed into place), so concurrent processes never read
    a half-written table."""
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp.npy")
        np.save(tmp, arr)
        os.replace(tmp, path)
    except OSError:
        pass
