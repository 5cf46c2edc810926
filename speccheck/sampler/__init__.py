"""The draft-tree speculative sampler (Algorithm 1 of the D-GRS paper; SPEC section 2).

    from speccheck.sampler import SpeculativeSampler, uniform_tree
    sp = SpeculativeSampler(target, schedule, uniform_tree(6, 6), "dgrs",
                            freeze="velocity", prefetch="nearest", leaves=False, lazy=True)
    res = sp.run(x0, generator)          # res.nfe, res.speedup, res.events, ...
    plain = sample(target, schedule, 1000, generator=0)   # no speculation: plain.samples, plain.nfe

A run's summary needs the verifier only for its declared acceptance per event: ``run_raw(res,
declared_acceptance(res, verifier))`` is plain arrays, and ``summarize_declared(*run_from_raw(raw),
stochastic, L)`` computes the summary from them in another process (checked first).
"""

from speccheck.sampler.analysis import (
    calibration,
    declared_acceptance,
    join_raw,
    predicted_nfe,
    run_from_raw,
    run_raw,
    summarize,
    summarize_declared,
    theoretical_acceptance,
)
from speccheck.sampler.core import (
    FREEZE_MODES,
    MAX_EAGER_ELEMENTS,
    PREFETCH_MODES,
    EventLog,
    NodeSource,
    SamplerResult,
    SpeculativeSampler,
)
from speccheck.sampler.plain import PlainResult, sample
from speccheck.sampler.tree import (
    MAX_TREE_NODES,
    DraftTree,
    chain,
    chain_matched,
    pruned_tree,
    tree_size,
    uniform_tree,
    widths_tree,
)

__all__ = [
    "FREEZE_MODES", "MAX_EAGER_ELEMENTS", "MAX_TREE_NODES", "PREFETCH_MODES", "DraftTree", "EventLog", "NodeSource",
    "PlainResult", "SamplerResult", "SpeculativeSampler", "calibration", "chain", "chain_matched",
    "declared_acceptance", "join_raw", "predicted_nfe", "pruned_tree", "run_from_raw", "run_raw", "sample",
    "summarize", "summarize_declared", "theoretical_acceptance", "tree_size", "uniform_tree", "widths_tree",
]
