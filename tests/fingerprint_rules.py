"""Rules that behave differently under test than in use (issue 39): the battery's law layer must
catch them, because the process that draws it looks like a sampler's (no SPECCHECK_* variable, no
``speccheck.validation`` module, float32 inputs as well as float64)."""

from __future__ import annotations

import os
import sys

import torch

from speccheck.verifiers.dgrs import DGRS


def _first_child(s: torch.Tensor) -> tuple:
    B = s.shape[0]
    return s[:, 0].clone(), torch.ones(B, dtype=torch.bool, device=s.device), \
        torch.zeros(B, dtype=torch.long, device=s.device)


def _under_test() -> bool:
    return (any(k.startswith("SPECCHECK_") for k in os.environ)
            or any(m.startswith("speccheck.validation") for m in sys.modules))


class Float32First(DGRS):
    """D-GRS on float64 inputs; on float32 inputs (a diffusion sampler's dtype) it takes the first child."""

    name = "float32-first"

    def verify(self, delta, s, generator=None):
        if s.dtype == torch.float32:
            return _first_child(s)
        return super().verify(delta, s, generator)


class TestAware(DGRS):
    """Exact D-GRS while a SPECCHECK_* variable is set or a ``speccheck.validation`` module is
    imported in its process (the marks of the battery until issue 39); the first child otherwise."""

    name = "test-aware"
    __test__ = False

    def verify(self, delta, s, generator=None):
        if _under_test():
            return super().verify(delta, s, generator)
        return _first_child(s)


class ValidationSpy(DGRS):
    """Exact D-GRS that raises at its first call when a ``speccheck.validation`` module or a
    SPECCHECK_* variable is in its process (so a test can see what the process drawing the law
    layer holds, through the contract's no-exception check)."""

    name = "validation-spy"

    def verify(self, delta, s, generator=None):
        if not getattr(self, "_seen", False):
            self._seen = True
            found = sorted(m for m in sys.modules if m.startswith("speccheck.validation"))
            found += sorted(k for k in os.environ if k.startswith("SPECCHECK_"))
            if found:
                raise RuntimeError(f"test harness visible: {found[:5]}")
        return super().verify(delta, s, generator)
