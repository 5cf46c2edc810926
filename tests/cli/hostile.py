"""Hostile third-party verifiers, each with the verdict ``speccheck battery`` must give it.

Every class honours the verifier interface (``name``, ``verify(delta[B], s[B, K], generator)``)
on the surface and breaks it in one way. ``VERDICTS`` maps the class name to the exit code of
``speccheck battery`` (and of ``speccheck verifiers --check``, which must agree): 1 when the
verifier returns something and that something is wrong (a defect the battery must report),
2 when the verifier takes the process away (exit, crash, hang, memory) so there is no verdict.
"""

from __future__ import annotations

import ctypes
import os
import sys
import time

import numpy as np
import torch


class Exact:
    """The exact reference: never accepts, returns a fresh N(delta, 1) draw (index K)."""

    name = "hostile-exact"

    def verify(self, delta, s, generator=None):
        B, K = s.shape
        out = delta + torch.randn(B, generator=generator, dtype=s.dtype, device=s.device)
        return out, torch.zeros(B, dtype=torch.bool, device=s.device), torch.full((B,), K, dtype=torch.long,
                                                                                   device=s.device)


class SysExitZero(Exact):
    name = "hostile-sys-exit-0"

    def verify(self, delta, s, generator=None):
        sys.exit(0)


class OsExitZero(Exact):
    name = "hostile-os-exit-0"

    def verify(self, delta, s, generator=None):
        sys.stdout.flush()
        os._exit(0)


class Segfault(Exact):
    name = "hostile-segfault"

    def verify(self, delta, s, generator=None):
        ctypes.string_at(0)  # reads address 0: SIGSEGV


class Hang(Exact):
    name = "hostile-hang"

    def verify(self, delta, s, generator=None):
        time.sleep(3600)


class MemoryHog(Exact):
    """Reserves 1 GiB blocks without touching them (no real RAM used) until the worker's
    address-space cap answers MemoryError."""

    name = "hostile-memory-hog"

    def verify(self, delta, s, generator=None):
        blocks = []
        while True:
            blocks.append(np.empty(1 << 30, dtype=np.uint8))


class NaNOutput(Exact):
    name = "hostile-nan"

    def verify(self, delta, s, generator=None):
        out, acc, idx = super().verify(delta, s, generator)
        return torch.full_like(out, float("nan")), acc, idx


class WrongShape(Exact):
    name = "hostile-wrong-shape"

    def verify(self, delta, s, generator=None):
        out, acc, idx = super().verify(delta, s, generator)
        return out[:, None], acc, idx


class WrongDtype(Exact):
    name = "hostile-wrong-dtype"

    def verify(self, delta, s, generator=None):
        out, acc, idx = super().verify(delta, s, generator)
        return out.float(), acc.long(), idx.int()


class WrongDevice(Exact):
    """Outputs on the 'meta' device (no data): the device check must catch it on any machine."""

    name = "hostile-wrong-device"

    def verify(self, delta, s, generator=None):
        B = s.shape[0]
        return (torch.empty(B, dtype=s.dtype, device="meta"), torch.empty(B, dtype=torch.bool, device="meta"),
                torch.empty(B, dtype=torch.long, device="meta"))


class NumpyOutputs(Exact):
    name = "hostile-numpy"

    def verify(self, delta, s, generator=None):
        out, acc, idx = super().verify(delta, s, generator)
        return out.numpy(), acc.numpy(), idx.numpy()


class AcceptedIndexK(Exact):
    """accepted = True with index == K (the contract says index == K iff rejected)."""

    name = "hostile-accepted-index-K"

    def verify(self, delta, s, generator=None):
        out, acc, idx = super().verify(delta, s, generator)
        return out, torch.ones_like(acc), idx


class IgnoresGenerator(Exact):
    """Draws from the global RNG: same generator seed, different outputs."""

    name = "hostile-ignores-generator"

    def verify(self, delta, s, generator=None):
        return super().verify(delta, s, None)


class MutatesInputs(Exact):
    """Exact output, but overwrites the caller's drafts in place."""

    name = "hostile-mutates-inputs"

    def verify(self, delta, s, generator=None):
        result = super().verify(delta, s, generator)
        s.mul_(-1.0).add_(3.0)
        return result


class ReturnsNone(Exact):
    name = "hostile-returns-none"

    def verify(self, delta, s, generator=None):
        return None


class Biased(Exact):
    """Not exact: N(delta + 0.3, 1)."""

    name = "hostile-biased"

    def verify(self, delta, s, generator=None):
        out, acc, idx = super().verify(delta, s, generator)
        return out + 0.3, acc, idx



# exit code of `speccheck battery` / `speccheck verifiers --check` for each fixture
VERDICTS = {
    "Exact": 0,
    "SysExitZero": 2,
    "OsExitZero": 2,
    "Segfault": 2,
    "Hang": 2,
    "MemoryHog": 2,
    "NaNOutput": 1,
    "WrongShape": 1,
    "WrongDtype": 1,
    "WrongDevice": 1,
    "NumpyOutputs": 1,
    "AcceptedIndexK": 1,
    "IgnoresGenerator": 1,
    "MutatesInputs": 1,
    "ReturnsNone": 1,
}
# only the statistical layers can see this one; --check (contract only) passes it
STATISTICAL_ONLY = {"Biased": 1}


class ForksSleeper(Exact):
    """Forks a grandchild that sleeps for ten minutes holding the process's stdout, once, writing
    its pid to ``$SPECCHECK_TEST_PIDFILE``; otherwise exact (issue 37, item 12)."""

    name = "hostile-forks-sleeper"
    forked = False

    def verify(self, delta, s, generator=None):
        if not ForksSleeper.forked:
            ForksSleeper.forked = True
            fork_sleeper()
        return super().verify(delta, s, generator)


def fork_sleeper() -> int:
    """Fork a child that sleeps ten minutes (holding this process's pipes); its pid is appended
    to ``$SPECCHECK_TEST_PIDFILE`` and returned."""
    pid = os.fork()
    if pid == 0:
        try:
            time.sleep(600)
        finally:
            os._exit(0)
    with open(os.environ["SPECCHECK_TEST_PIDFILE"], "a") as fh:
        fh.write(f"{pid}\n")
    return pid
