"""Hostile verifiers of issue 37 (items 11, 14), each exact except for one escape: see
``tests/cli/test_issue37_hostile.py`` for the outcome each must get."""

from __future__ import annotations

import os
import sys

import torch

from tests.cli.hostile import Exact


class RaisesAfterContract(Exact):
    """Passes the contract layer (batches of at most 256 rows), then raises: a defect (exit 1)."""

    name = "hostile-raises-later"

    def verify(self, delta, s, generator=None):
        if s.shape[0] > 256:
            raise RuntimeError("boom: the rule breaks on big batches")
        return super().verify(delta, s, generator)


class LazyGenerator(Exact):
    """``verify`` is a generator function: it returns a lazy generator, not the outputs (exit 1)."""

    name = "hostile-lazy-generator"

    def verify(self, delta, s, generator=None):
        yield from super().verify(delta, s, generator)


class CpuOutOfMemory(Exact):
    """Raises torch's CPU allocator error on big batches: no verdict ("out of memory", exit 2)."""

    name = "hostile-cpu-oom"

    def verify(self, delta, s, generator=None):
        if s.shape[0] > 256:
            raise RuntimeError("[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: not enough memory: "
                               "you tried to allocate 8000000000000 bytes.")
        return super().verify(delta, s, generator)


class RaisesSystemExit(Exact):
    """``sys.exit(0)`` from ``verify``, run in-process (``battery(obj, isolate=False)``)."""

    name = "hostile-system-exit-in-process"

    def verify(self, delta, s, generator=None):
        sys.exit(0)


class RaisesKeyboardInterrupt(Exact):
    name = "hostile-keyboard-interrupt"

    def verify(self, delta, s, generator=None):
        raise KeyboardInterrupt


class OsExitInProcess(Exact):
    """``os._exit(0)`` from ``verify``: in a pytest session it would end the session with 0."""

    name = "hostile-os-exit-in-process"

    def verify(self, delta, s, generator=None):
        sys.stdout.flush()
        os._exit(0)


__all__ = ["RaisesAfterContract", "LazyGenerator", "CpuOutOfMemory", "RaisesSystemExit", "RaisesKeyboardInterrupt",
           "OsExitInProcess", "torch"]


class RaisesOnCall20(Exact):
    """Raises on its 20th call of an instance (past the contract layer's calls): a defect (exit 1)."""

    name = "hostile-raises-on-call-20"

    def __init__(self):
        self.calls = 0

    def verify(self, delta, s, generator=None):
        self.calls += 1
        if self.calls == 20:
            raise ValueError("boom on call 20")
        return Exact.verify(self, delta, s, generator)


class RaisesOnCall100(RaisesOnCall20):
    """Raises on its 100th call of an instance: only the sequence layer calls one instance so often."""

    name = "hostile-raises-on-call-100"

    def verify(self, delta, s, generator=None):
        self.calls += 1
        if self.calls >= 100:
            raise ValueError("boom on call 100")
        return Exact.verify(self, delta, s, generator)


class ForksThenHangs(Exact):
    """Forks a sleeping grandchild (its pid to ``$SPECCHECK_TEST_PIDFILE``), then hangs in verify."""

    name = "hostile-forks-then-hangs"

    def verify(self, delta, s, generator=None):
        import time

        from tests.cli.hostile import fork_sleeper

        fork_sleeper()
        time.sleep(600)
