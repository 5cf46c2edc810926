"""RMC: the reflection maximal coupling for K = 1 (SPEC section 1).

Accept S ~ N(0, 1) with probability min(1, rho(S)), rho(s) = exp(delta s - delta^2 / 2);
otherwise return delta - S (the reflection maps the rejected part of N(0, 1) onto the
residual (q - p)_+ exactly). P(accept) = 2 Phibar(delta / 2).
"""

from __future__ import annotations

import numpy as np
import torch
from numpy.typing import ArrayLike

from speccheck.verifiers.base import ScalarVerifier, VerifyResult, positive_uniform


class RMC(ScalarVerifier):
    """Reflection maximal coupling; K must be 1."""

    name = "rmc"
    description = "reflection maximal coupling (K = 1): accept w.p. min(1, rho), else reflect S -> delta - S"

    def supports_K(self, K: int) -> bool:
        return K == 1

    def acceptance(self, delta: ArrayLike, K: int = 1) -> np.ndarray:
        from speccheck.theory.acceptance import acceptance_rmc

        if K != 1:
            raise ValueError(f"rmc supports only K=1, got K={K}")
        return acceptance_rmc(delta)

    def _kernel(self, delta: torch.Tensor, s: torch.Tensor, generator) -> VerifyResult:
        s1 = s[:, 0]
        log_rho = delta * s1 - 0.5 * delta * delta
        accepted = torch.log(positive_uniform(s1.shape, s1, generator)) <= log_rho
        s_out = torch.where(accepted, s1, delta - s1)
        index = torch.where(accepted, 0, 1).long()
        return s_out, accepted, index
