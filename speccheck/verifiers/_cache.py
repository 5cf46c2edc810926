"""The user cache of solved tables (RASS rank weights, MCRS policies): ~/.cache/speccheck, or
$SPECCHECK_CACHE_DIR (an empty string turns it off). Reads and writes never raise: a cache
that cannot be used only costs a re-solve.

A cached table is a file anyone could have written, so it is never trusted as it stands: each
file carries the SHA-256 of its table (a truncated, corrupted or foreign file is ignored), and
the callers check every row they read against a certificate before a kernel uses it (RASS: the
weights' certified gap to the optimum; MCRS: the exact acceptance of the policy against its
check level). A row that fails is solved again."""

from __future__ import annotations

import hashlib
import os
import zipfile
from pathlib import Path

import numpy as np

FORMAT = "speccheck-cache-v2"


#: the cache folder when set (a string; "" = off), before $SPECCHECK_CACHE_DIR: the battery's law
#: layer passes the user's setting this way, so the process under test has no SPECCHECK_* variable
ROOT: str | None = None


def cache_file(name: str) -> Path | None:
    """Path of ``name`` in the cache folder, or None when caching is off."""
    root = ROOT if ROOT is not None else os.environ.get("SPECCHECK_CACHE_DIR",
                                                        str(Path.home() / ".cache" / "speccheck"))
    return Path(root) / name if root else None


def checksum(arr: np.ndarray) -> str:
    """SHA-256 over the format tag, the shape and the float64 bytes of ``arr``."""
    table = np.ascontiguousarray(arr, dtype=np.float64)
    head = f"{FORMAT}:{table.shape}".encode()
    return hashlib.sha256(head + table.tobytes()).hexdigest()


def load(path: Path | None, shape: tuple) -> np.ndarray | None:
    """The table saved at ``path`` if the file exists, is readable, is in this format, has
    ``shape`` and its checksum matches; else None."""
    if path is None or not path.exists():
        return None
    try:
        data = np.load(path, allow_pickle=False)
        if not isinstance(data, np.lib.npyio.NpzFile):  # a bare array (the format before checksums)
            return None
        with data:
            if set(data.files) != {"table", "sha256"}:
                return None
            table = np.array(data["table"])
            stored = str(data["sha256"])
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
        return None
    if table.dtype != np.float64 or table.shape != tuple(shape) or stored != checksum(table):
        return None
    return table


def save(path: Path | None, arr: np.ndarray) -> None:
    """Atomic write (a temporary file renamed into place), so concurrent processes never read
    a half-written table."""
    if path is None:
        return
    table = np.ascontiguousarray(arr, dtype=np.float64)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        with open(tmp, "wb") as handle:
            np.savez(handle, table=table, sha256=np.array(checksum(table)))
        os.replace(tmp, path)
    except OSError:
        pass
