"""Hostile verifiers of issue 29: well-formed on the surface, wrong by measurement or hanging.

``AlwaysFirst`` declares D-GRS's acceptance but always accepts the first child: the sampler runs,
and only the acceptance calibration z (observed accepts vs the declared law's) shows the defect.
"""

from __future__ import annotations

import torch

from speccheck.verifiers.dgrs import DGRS


class AlwaysFirst(DGRS):
    """Accepts draft 0 every time: acceptance 1 where D-GRS's law says acceptance(delta, K) < 1."""

    name = "dgrs-always-first"

    def verify(self, delta, s, generator=None):
        B = s.shape[0]
        return (s[:, 0].clone(), torch.ones(B, dtype=torch.bool, device=s.device),
                torch.zeros(B, dtype=torch.long, device=s.device))


class ControlCharName(DGRS):
    """An exact rule whose name holds characters XML 1.0 forbids (NUL, ESC, form feed)."""

    name = "dgrs\x00\x1b[31m-ctl\x0c"
