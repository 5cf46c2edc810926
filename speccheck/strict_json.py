"""Strict JSON for every file and printout speccheck writes: RFC 8259 has no spelling for NaN
or the infinities (Python's ``json`` writes bare ``NaN`` / ``Infinity``, which other readers
reject), so non-finite floats are written as ``null``."""

from __future__ import annotations

import json
import math
from typing import Any, Callable, Optional

__all__ = ["dumps", "finite_json"]


def finite_json(value: Any) -> Any:
    """``value`` with every non-finite float replaced by None (dicts, lists and tuples recursively)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_json(v) for v in value]
    return value


def dumps(value: Any, *, default: Optional[Callable[[Any], Any]] = None, **kwargs: Any) -> str:
    """``json.dumps(value, **kwargs)`` as strict JSON: objects JSON lacks go through ``default``
    first (e.g. ``float`` for numpy scalars), then every non-finite float becomes null."""
    plain = json.loads(json.dumps(value, default=default)) if default is not None else value
    return json.dumps(finite_json(plain), allow_nan=False, **kwargs)
