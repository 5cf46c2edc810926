"""Deliberately wrong samplers: each must be killed by the trajectory checks
(:func:`speccheck.validation.trajectory.run_trajectory_checks`).

SAMPLER_MUTANTS maps a name to a factory with the signature of SpeculativeSampler's
constructor, ``factory(target, schedule, tree, verifier, **protocol) -> sampler``; pass it as
``sampler_factory=``. Every mutant changes exactly one hook of the correct sampler:

- ``wrong-noise-index``: at depth l >= 2 drafting and verification use sigma_{n+l} instead of
  sigma_{n+l-1} (an off-by-one in the noise-scale index).
- ``root-target-mean``: at depth l >= 2 the children are verified against the target mean
  computed at the round's root (root state, root velocity, step coefficients of n+l-1)
  instead of at their parent.
- ``extra-commit``: after a fully accepted round, one more step is committed (time advances,
  the state does not move).
- ``wrong-draft-parent``: the children at depth l >= 2 are drafted around their grandparent's
  state (while still verified as if drafted from their parent).
"""

from __future__ import annotations

from typing import Callable

import torch

from speccheck.sampler.core import SpeculativeSampler


class WrongNoiseIndex(SpeculativeSampler):
    def _hook_noise_step(self, k, l, end):
        if l < 2:
            return k
        return torch.where(k + 1 < end, k + 1, k)


class RootTargetMean(SpeculativeSampler):
    def _hook_target_mean(self, y_u, v_u, y_root, v_root, k, l):
        if l < 2:
            return self._mq(y_u, v_u, k)
        return self._mq(y_root, v_root, k)


class ExtraCommit(SpeculativeSampler):
    def _hook_extra_commit(self, full):
        return full.long()


class WrongDraftParent(SpeculativeSampler):
    def _hook_draft_state(self, y_parent, y_grandparent, l):
        return y_grandparent if l >= 2 else y_parent


SAMPLER_MUTANTS: dict[str, Callable[..., SpeculativeSampler]] = {
    "wrong-noise-index": WrongNoiseIndex,
    "root-target-mean": RootTargetMean,
    "extra-commit": ExtraCommit,
    "wrong-draft-parent": WrongDraftParent,
}
