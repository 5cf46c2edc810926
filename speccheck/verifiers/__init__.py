"""Scalar verification kernels (SPEC section 4), the rank-1 projection and the registry.

    from speccheck.verifiers import get, verify_states
    v = get("dgrs")                       # or "rmc", "rass", "rass-icdf", "pkg.mod:attr"
    s_out, accepted, index = v.verify(delta, s, generator)          # delta [B], s [B, K]
    y, accepted, index = verify_states(v, mu_p, mu_q, sigma, children, generator)
"""

from speccheck.verifiers.base import ScalarVerifier, Verifier, check_verify_inputs, check_verify_outputs
from speccheck.verifiers.dgrs import DGRS
from speccheck.verifiers.projection import project, verify_states
from speccheck.verifiers.registry import BUILTIN, ENTRY_POINT_GROUP, available, get
from speccheck.verifiers.rmc import RMC


def __getattr__(name):
    if name in ("RASS", "RASSInverseCDF"):
        from speccheck.verifiers import rass

        return getattr(rass, name)
    raise AttributeError(f"module 'speccheck.verifiers' has no attribute {name!r}")


__all__ = [
    "BUILTIN", "DGRS", "ENTRY_POINT_GROUP", "RASS", "RASSInverseCDF", "RMC", "ScalarVerifier",
    "Verifier", "available", "check_verify_inputs", "check_verify_outputs", "get", "project",
    "verify_states",
]
