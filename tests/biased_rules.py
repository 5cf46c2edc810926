"""A biased verifier without tricks: the twin of :mod:`tests.patching_rules` (same outputs, same
name), so the two modules' battery reports must be identical whatever the patching does."""

from __future__ import annotations

from speccheck.verifiers.dgrs import DGRS


class Biased(DGRS):
    """D-GRS whose residual (rejected rows) is shifted by 0.3 where delta > 0.5: not exact, contract kept."""

    name = "patched-biased"

    def verify(self, delta, s, generator=None):
        s_out, acc, idx = super().verify(delta, s, generator)
        return s_out + 0.3 * (~acc) * (delta > 0.5), acc, idx


class Overclaiming(DGRS):
    """D-GRS (exact draws) declaring 0.6 times its own acceptance: a wrong law, which the
    acceptance calibration z of a speed-up run or sweep rejects."""

    name = "overclaiming"

    def acceptance(self, delta, K):
        return 0.6 * super().acceptance(delta, K)


class Loud(DGRS):
    """D-GRS whose residual (rejected rows) is shifted by 3: not exact, and loud enough for the
    e2e innovation test on the digits model."""

    name = "loud-biased"

    def verify(self, delta, s, generator=None):
        s_out, acc, idx = super().verify(delta, s, generator)
        return s_out + 3.0 * (~acc), acc, idx


class KilledAtK1(DGRS):
    """D-GRS whose process is killed (SIGKILL) when it is called with one child: a sweep's second
    cell of [(2, 2), (1, 3)] dies mid-run."""

    name = "killed-at-k1"

    def verify(self, delta, s, generator=None):
        if s.shape[-1] == 1:
            import os
            import signal

            os.kill(os.getpid(), signal.SIGKILL)
        return super().verify(delta, s, generator)


class Impossible(DGRS):
    """D-GRS declaring acceptance 1 everywhere: a law no exact rule has (above the i.i.d.-list
    bound for every delta > 0)."""

    name = "impossible-law"

    def acceptance(self, delta, K):
        import numpy as np

        return np.ones_like(np.asarray(delta, dtype=float))


class WrongAtK3(DGRS):
    """D-GRS whose residual (rejected rows) is shifted by 0.3 where delta > 0.3, only when it is
    called with K = 3 children: exact at every other K (the failure figure must show K = 3)."""

    name = "wrong-at-k3"

    def verify(self, delta, s, generator=None):
        s_out, acc, idx = super().verify(delta, s, generator)
        if s.shape[-1] == 3:
            s_out = s_out + 0.3 * (~acc) * (delta > 0.3)
        return s_out, acc, idx


class WrongInSmallCalls(DGRS):
    """D-GRS whose residual is shifted by 0.5 in calls of at most 16 rows: exact in the battery's
    big batches, wrong in the small calls a sampler makes (the sequence layer, L6)."""

    name = "wrong-in-small-calls"

    def verify(self, delta, s, generator=None):
        s_out, acc, idx = super().verify(delta, s, generator)
        if s.shape[0] <= 16:
            s_out = s_out + 0.5 * (~acc)
        return s_out, acc, idx
