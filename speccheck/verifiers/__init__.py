"""Scalar verification kernels (SPEC section 4), the rank-1 projection and the registry.

    from speccheck.verifiers import get, verify_states
    v = get("dgrs")                       # or "rmc", "rass", "rass-icdf", "mcrs", "pkg.mod:attr"
    s_out, accepted, index = v.verify(delta, s, generator)          # delta [B], s [B, K]
    y, accepted, index = verify_states(v, mu_p, mu_q, sigma, children, generator)
"""

from speccheck.verifiers.base import ScalarVerifier, Verifier, check_verify_inputs, check_verify_outputs
from speccheck.verifiers.dgrs import DGRS
from speccheck.verifiers.projection import project, verify_states
from speccheck.verifiers.registry import BUILTIN, ENTRY_POINT_GROUP, available, get
from speccheck.verifiers.rmc import RMC

_LAZY = {"RASS": "rass", "RASSInverseCDF": "rass", "MCRS": "mcrs"}  # heavier modules, imported on first use


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is not None:
        import importlib

        return getattr(importlib.import_module(f"speccheck.verifiers.{module}"), name)
    raise AttributeError(f"module 'speccheck.verifiers' has no attribute {name!r}")


__all__ = [
    "BUILTIN", "DGRS", "ENTRY_POINT_GROUP", "MCRS", "RASS", "RASSInverseCDF", "RMC", "ScalarVerifier",
    "Verifier", "available", "check_verify_inputs", "check_verify_outputs", "get", "project",
    "verify_states",
]
