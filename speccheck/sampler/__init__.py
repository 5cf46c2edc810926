"""The draft-tree speculative sampler (Algorithm 1 of the D-GRS paper; SPEC section 2).

    from speccheck.sampler import SpeculativeSampler, uniform_tree
    sp = SpeculativeSampler(target, schedule, uniform_tree(6, 6), "dgrs",
                            freeze="velocity", prefetch="nearest", leaves=False, lazy=True)
    res = sp.run(x0, generator)          # res.nfe, res.speedup, res.events, ...
"""

from speccheck.sampler.analysis import calibration, predicted_nfe, summarize, theoretical_acceptance
from speccheck.sampler.core import (
    FREEZE_MODES,
    PREFETCH_MODES,
    EventLog,
    SamplerResult,
    SpeculativeSampler,
)
from speccheck.sampler.tree import DraftTree, chain, chain_matched, pruned_tree, uniform_tree, widths_tree

__all__ = [
    "FREEZE_MODES", "PREFETCH_MODES", "DraftTree", "EventLog", "SamplerResult", "SpeculativeSampler",
    "calibration", "chain", "chain_matched", "predicted_nfe", "pruned_tree", "summarize",
    "theoretical_acceptance", "uniform_tree", "widths_tree",
]
