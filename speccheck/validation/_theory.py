"""The theory functions the battery uses, from ``speccheck.theory`` (falls back to its
submodules while the package's ``__init__`` is being written)."""

from __future__ import annotations

try:
    from speccheck.theory import (  # noqa: F401
        acceptance_dgrs,
        acceptance_rass,
        acceptance_rmc,
        dgrs_levels,
        list_bound_iid,
        rank_weights,
        residual_intervals,
    )
except ImportError:  # pragma: no cover - only while speccheck/theory/__init__.py is missing
    from speccheck.theory.acceptance import acceptance_dgrs, acceptance_rmc, dgrs_levels  # noqa: F401
    from speccheck.theory.bounds import list_bound_iid  # noqa: F401
    from speccheck.theory.rass import acceptance_rass, rank_weights, residual_intervals  # noqa: F401
