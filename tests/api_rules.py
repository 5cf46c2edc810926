"""Verifiers for the API tests: raising, out of memory, biased (the stateful one is
``speccheck.validation.zoo:StaleK``). Loaded by spec string
(``tests.api_rules:Name``) so that they also run in isolated and Dask worker processes."""

from __future__ import annotations

import torch

from speccheck.verifiers.dgrs import DGRS


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
