"""Verifiers for the API tests: stateful, raising, out of memory. Loaded by spec string
(``tests.api_rules:Name``) so that they also run in isolated and Dask worker processes."""

from __future__ import annotations

import torch

from speccheck.verifiers.dgrs import DGRS


class StaleK(DGRS):
    """Keeps the first call's K: later calls with more drafts see only that many (a stale table).
    Not exact once a call has a larger K than the first one of its instance."""

    name = "stale-k"

    def __init__(self) -> None:
        super().__init__()
        self.first_K = None

    def verify(self, delta, s, generator=None):
        if self.first_K is None:
            self.first_K = s.shape[1]
        K = s.shape[1]
        if K > self.first_K:  # the stale table: drafts past the first K are rejected, residual kept
            s_out, acc, idx = super().verify(delta, s[:, : self.first_K].contiguous(), generator)
            idx = torch.where(acc, idx, torch.full_like(idx, K))
            return s_out, acc, idx
        return super().verify(delta, s, generator)


class RaisesOnSmallBatches(DGRS):
    """Raises (a defect of the rule) on batches of fewer than 300 rows."""

    name = "raises-small"

    def verify(self, delta, s, generator=None):
        if s.shape[0] < 300:
            raise RuntimeError("index out of range in my table")
        return super().verify(delta, s, generator)


class OutOfMemoryInWrapper(DGRS):
    """Runs out of (device) memory on the d-dimensional wrapper's calls only: no verdict."""

    name = "oom-wrapper"

    def verify(self, delta, s, generator=None):
        return super().verify(delta, s, generator)

    def verify_states(self, mu_p, mu_q, sigma, children, generator=None):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")


class Biased(DGRS):
    """Shifts every output by 0.05: clearly not exact."""

    name = "biased"

    def verify(self, delta, s, generator=None):
        s_out, acc, idx = super().verify(delta, s, generator)
        return s_out + 0.05, acc, idx
