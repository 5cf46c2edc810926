"""Slow rules for the budgeted battery (``--budget``): D-GRS at a third-party rule's speed.
Loaded by spec string (``tests.slow_rules:Name``) so that they also run in isolated and Dask
worker processes."""

from __future__ import annotations

import time

from speccheck.verifiers.dgrs import DGRS


class SlowDGRS(DGRS):
    """Exact D-GRS that costs ``PER_ROW_S`` seconds of wall time per row (a sleep: the machine's
    CPU is not taken), as a rule looping over rows in Python does."""

    name = "slow-dgrs"
    PER_ROW_S = 0.01

    def verify(self, delta, s, generator=None):
        time.sleep(self.PER_ROW_S * int(s.shape[0]))
        return super().verify(delta, s, generator)
