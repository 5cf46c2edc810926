"""Implementer mutants: the defects real verifier authors make, which only show when a sampler
drives one instance (issue 27 of the battery's history). Each wraps the exact D-GRS kernel,
keeps the contract's structure (accepted rows return their child, rejected rows index K) and
is wrong only where its ``defect`` says: in law, in acceptance, in its randomness or in the
dependence between rows. ``witness`` names the independent check (outside the battery) that
shows it is not exact; ``tests/validation/test_zoo.py`` runs it.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from speccheck.verifiers.dgrs import DGRS


class _ZooRule(DGRS):
    """D-GRS with one implementer's defect (``_defect`` changes the exact output)."""

    defect = ""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def verify(self, delta: torch.Tensor, s: torch.Tensor, generator: Any = None) -> tuple:
        self.calls += 1
        return self._defect(delta, s, generator)

    def _defect(self, delta: torch.Tensor, s: torch.Tensor, generator: Any) -> tuple:
        return super().verify(delta, s, generator)

    def _exact(self, delta: torch.Tensor, s: torch.Tensor, generator: Any) -> tuple:
        return DGRS.verify(self, delta, s, generator)


def _accept_first(s: torch.Tensor, rows: torch.Tensor, out: tuple) -> tuple:
    """``out`` with ``rows`` accepting child 0 (a shortcut: exact only at delta = 0)."""
    s_out, acc, idx = (t.clone() for t in out)
    s_out[rows], acc[rows], idx[rows] = s[rows, 0], True, 0
    return s_out, acc, idx


def _shift_rejected(out: tuple, rows: torch.Tensor, shift: float) -> tuple:
    """``out`` with the residual of rejected ``rows`` moved by ``shift`` (a wrong residual law)."""
    s_out, acc, idx = (t.clone() for t in out)
    s_out[rows & ~acc] += shift
    return s_out, acc, idx


class StaleK(_ZooRule):
    defect = "keeps the level table of the first call's K: later calls with more drafts use only that many"
    name = "zoo-stale-k"

    def __init__(self) -> None:
        super().__init__()
        self.first_K = None

    def _defect(self, delta, s, generator):
        self.first_K = self.first_K or s.shape[1]
        K = s.shape[1]
        if K <= self.first_K:
            return self._exact(delta, s, generator)
        s_out, acc, idx = self._exact(delta, s[:, : self.first_K].contiguous(), generator)
        return s_out, acc, torch.where(acc, idx, torch.full_like(idx, K))


class LateDrift(_ZooRule):
    defect = "after 100 calls on one instance the residual of rejected rows is shifted by 0.5 (a state leak)"
    name = "zoo-late-drift"

    def _defect(self, delta, s, generator):
        out = self._exact(delta, s, generator)
        return _shift_rejected(out, torch.ones_like(out[1]), 0.5) if self.calls > 100 else out


class SmallBatch(_ZooRule):
    defect = "batches of fewer than 256 rows take a 'fast path' whose residual is shifted by 0.3"
    name = "zoo-small-batch"

    def _defect(self, delta, s, generator):
        out = self._exact(delta, s, generator)
        return _shift_rejected(out, torch.ones_like(out[1]), 0.3) if s.shape[0] < 256 else out


class BlockFirstDelta(_ZooRule):
    defect = "a batch whose deltas agree within 5% is verified with its first delta for every row"
    name = "zoo-block-first-delta"

    def _defect(self, delta, s, generator):
        lo, hi = float(delta.min()), float(delta.max())
        if lo > 0 and hi <= 1.05 * lo:
            delta = torch.full_like(delta, float(delta[0]))
        return self._exact(delta, s, generator)


class GlobalRNG(_ZooRule):
    defect = "rejected rows at delta > 2 redraw their residual with the global torch RNG (law exact, not reproducible)"
    name = "zoo-global-rng"

    def _defect(self, delta, s, generator):
        s_out, acc, idx = self._exact(delta, s, generator)
        rows = torch.nonzero(~acc & (delta > 2.0), as_tuple=True)[0]
        if rows.numel():
            again = DGRS.verify(self, delta[rows], torch.randn(rows.numel(), s.shape[1], dtype=s.dtype), None)
            keep = ~again[1]  # only rows rejected again: their residual draw is exact N(delta, 1) given rejection
            s_out = s_out.clone()
            s_out[rows[keep]] = again[0][keep]
        return s_out, acc, idx


class SharedUniforms(_ZooRule):
    defect = "rows 2j and 2j+1 of a call are verified with the same random stream (each row exact, pairs dependent)"
    name = "zoo-shared-uniforms"

    def _defect(self, delta, s, generator):
        B = s.shape[0]
        if generator is None or B < 2:
            return self._exact(delta, s, generator)
        state = generator.get_state()
        even = self._exact(delta[0::2], s[0::2].contiguous(), generator)
        after = generator.get_state()
        generator.set_state(state)
        odd = self._exact(delta[1::2], s[1::2].contiguous(), generator)
        generator.set_state(after)
        s_out = torch.empty(B, dtype=s.dtype, device=s.device)
        acc = torch.empty(B, dtype=torch.bool, device=s.device)
        idx = torch.empty(B, dtype=torch.long, device=s.device)
        for rows, part in ((slice(0, None, 2), even), (slice(1, None, 2), odd)):
            s_out[rows], acc[rows], idx[rows] = part
        return s_out, acc, idx


class SmallDeltaZero(_ZooRule):
    defect = "treats delta < 0.05 as 0: accepts the first child there (effect O(delta))"
    name = "zoo-small-delta-zero"

    def _defect(self, delta, s, generator):
        return _accept_first(s, delta < 0.05, self._exact(delta, s, generator))


class SmallDeltaZeroTiny(_ZooRule):
    defect = "treats delta < 0.01 as 0: accepts the first child there (effect O(delta))"
    name = "zoo-small-delta-zero-0.01"

    def _defect(self, delta, s, generator):
        return _accept_first(s, delta < 0.01, self._exact(delta, s, generator))


class K7Window(_ZooRule):
    defect = "at K = 7 and delta in (0.6, 0.7) accepts the first child"
    name = "zoo-k7-window"

    def _defect(self, delta, s, generator):
        out = self._exact(delta, s, generator)
        if s.shape[1] != 7:
            return out
        return _accept_first(s, (delta > 0.6) & (delta < 0.7), out)


class OddKResidual(_ZooRule):
    defect = "at K = 11 the residual of rejected rows is shifted by 0.5 (a table row off by one)"
    name = "zoo-k11-residual"

    def _defect(self, delta, s, generator):
        out = self._exact(delta, s, generator)
        return _shift_rejected(out, torch.ones_like(out[1]), 0.5) if s.shape[1] == 11 else out


class SortedBlocks(_ZooRule):
    defect = "a batch sorted by delta is verified in blocks of 32 rows with each block's first delta"
    name = "zoo-sorted-blocks"

    def _defect(self, delta, s, generator):
        B = delta.shape[0]
        if B > 1 and bool((delta[1:] >= delta[:-1]).all()):
            delta = delta[(torch.arange(B, device=delta.device) // 32) * 32]
        return self._exact(delta, s, generator)


#: name -> zero-argument factory of each implementer mutant
ZOO: dict[str, Callable[[], object]] = {cls.name: cls for cls in (
    StaleK, LateDrift, SmallBatch, BlockFirstDelta, GlobalRNG, SharedUniforms, SmallDeltaZero, SmallDeltaZeroTiny,
    K7Window, OddKResidual, SortedBlocks)}

__all__ = ["ZOO"]
