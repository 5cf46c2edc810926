"""Speed-up experiments on the Gaussian-mixture presets (issue 5): one cell, and resumable sweeps.

A *protocol* records every choice that moves measured speed-ups (SPEC section 2): target preset,
grid, eps, freeze, prefetch, leaves, chain matching, lazy/eager, seed. Speed-up is reported as
stochastic steps / target calls on the stochastic part (warm-up included); ``speedup_no_warmup``
drops the warm-up/root calls.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, replace
from typing import Optional, Sequence

import numpy as np
import torch

from speccheck.sampler.analysis import summarize
from speccheck.sampler.core import SpeculativeSampler, resolve_verifier, verifier_name
from speccheck.sampler.tree import DraftTree, chain, uniform_tree
from speccheck.targets.gmm import gmm_preset
from speccheck.targets.schedules import Schedule, make_schedule


@dataclass(frozen=True)
class Protocol:
    target: str = "gmm-paper"
    d: Optional[int] = None          # informational (the preset fixes d)
    grid: str = "uniform"
    steps: int = 30
    eps: float = 0.1
    freeze: str = "velocity"
    prefetch: str = "nearest"
    leaves: bool = True
    chain_match: str = "budget"
    lazy: bool = True

    def schedule(self) -> Schedule:
        return make_schedule(self.grid, self.steps, self.eps)

    def key(self) -> str:
        """Short stable id of the protocol (folder names)."""
        s = json.dumps(asdict(self), sort_keys=True)
        return hashlib.sha1(s.encode()).hexdigest()[:10]


PRESETS = {
    # the paper's section 5.1 setting (d = 500, eps = 0.1, leaves evaluated, chains matched on B)
    "gmm-paper": Protocol(target="gmm-paper", grid="uniform", steps=30, eps=0.1, freeze="velocity",
                          prefetch="nearest", leaves=True, chain_match="budget"),
    # the authors' public code defaults (d = 512, eps = 0.06, flow grid, rows-matched chains)
    "gmm-d512": Protocol(target="gmm-d512", grid="flow", steps=30, eps=0.06, freeze="velocity",
                         prefetch="nearest", leaves=False, chain_match="rows"),
}


def preset(name: str, **overrides) -> Protocol:
    if name not in PRESETS:
        raise ValueError(f"unknown target preset {name!r}; choose from {sorted(PRESETS)}")
    over = {k: v for k, v in overrides.items() if v is not None}
    return replace(PRESETS[name], **over)


def cell_tree(verifier, K: int, L: int, proto: Protocol, N_sto: int) -> DraftTree:
    """The tree run for cell (K, L): a (K, L) tree, or for a K = 1-only verifier (RMC) with
    K > 1 the chain matched to the (K, L) tree per ``proto.chain_match`` (capped at N_sto)."""
    supports = getattr(verifier, "supports_K", None)
    if K == 1 or supports is None or supports(K):
        return uniform_tree(K, L)
    if supports is not None and not supports(1):
        raise ValueError(f"verifier {verifier_name(verifier)!r} supports neither K={K} nor chains")
    Lc = min(_matched_length(K, L, proto), N_sto)
    return chain(Lc)


def _matched_length(K: int, L: int, proto: Protocol) -> int:
    # sizes of the (K, L) tree without building it: |V| = sum_{l<=L} K^l, |I| = sum_{l<L} K^l
    V = sum(K**l for l in range(L + 1))
    I = V - K**L
    if proto.chain_match == "budget":
        return V - 1
    if proto.chain_match == "rows":
        return (V - 1) if proto.leaves else I
    raise ValueError(f"chain_match must be 'budget' or 'rows', got {proto.chain_match!r}")


def run_cells(proto: Protocol, verifier, K: int, Ls: Sequence[int], n_traj: int, seed: int,
              max_nodes: int = 400_000) -> tuple[list[dict], list[dict]]:
    """Run cells (K, L) for L in Ls with one verifier; all L share one batched run (per-trajectory
    depth caps). Returns (per-trajectory rows, per-cell summaries)."""
    ver = resolve_verifier(verifier)
    target = gmm_preset(proto.target)
    sched = proto.schedule()
    N_sto = sched.n_stochastic
    trees = [cell_tree(ver, K, L, proto, N_sto) for L in Ls]
    Lmax = max(t.L for t in trees)
    big = uniform_tree(max(t.max_K for t in trees), Lmax)
    caps = torch.tensor(np.repeat([t.L for t in trees], n_traj))
    sp = SpeculativeSampler(target, sched, big, ver, freeze=proto.freeze, prefetch=proto.prefetch,
                            leaves=proto.leaves, lazy=proto.lazy)
    g = torch.Generator().manual_seed(seed)
    x0 = torch.randn(caps.numel(), target.d, generator=g, dtype=torch.float64)
    if proto.lazy:
        results = [(slice(0, caps.numel()), sp.run(x0, g, depth_cap=caps))]
    else:  # eager: chunk trajectories so one round holds <= max_nodes tree nodes
        per = max(1, max_nodes // big.n_nodes)
        results = [(slice(i, i + per), sp.run(x0[i:i + per], g, depth_cap=caps[i:i + per]))
                   for i in range(0, caps.numel(), per)]
    rows, summaries = [], []
    name = verifier_name(ver)
    for ci, (L, tree) in enumerate(zip(Ls, trees)):
        sel = np.zeros(caps.numel(), dtype=bool)
        sel[ci * n_traj:(ci + 1) * n_traj] = True
        summ = _summarize_chunks(results, ver, sched, tree.L, sel)
        cell = {"rule": name, "K": K, "L": L, "tree": tree.name, "B": tree.budget,
                "rows_per_round": tree.rows(proto.leaves), "seed": seed}
        summaries.append({**cell, **summ})
        for sl, res in results:
            for j in range(res.nfe.numel()):
                b = sl.start + j
                if not sel[b]:
                    continue
                rows.append({**cell, "traj": b - ci * n_traj, "nfe": int(res.nfe[j]),
                             "root_calls": int(res.root_calls[j]), "det_calls": int(res.det_calls[j]),
                             "rounds": int(res.rounds[j]), "accepted": int(res.n_accepted[j]),
                             "verified": int(res.n_verified[j]), "stochastic_steps": res.n_stochastic,
                             "speedup": float(res.speedup[j])})
    return rows, summaries


def _summarize_chunks(results, ver, sched, L, sel) -> dict:
    """Summaries over chunked results: merge per-chunk summaries by trajectory count."""
    parts = []
    for sl, res in results:
        m = sel[sl.start: sl.start + res.nfe.numel()]
        if m.any():
            parts.append((res, m))
    if len(parts) == 1:
        res, m = parts[0]
        return summarize(res, ver, sched.stochastic, L, m)
    from speccheck.sampler.core import EventLog, SamplerResult
    # concatenate results of the chunks (events' traj ids offset)
    off, evs = 0, []
    for res, m in parts:
        e = res.events
        evs.append(EventLog(**{k: (getattr(e, k) + off if k == "traj" else getattr(e, k))
                               for k in EventLog.__dataclass_fields__}))
        off += res.nfe.numel()
    cat = lambda name: torch.cat([getattr(r, name) for r, _ in parts])  # noqa: E731
    merged = SamplerResult(x=cat("x"), nfe=cat("nfe"), root_calls=cat("root_calls"), det_calls=cat("det_calls"),
                           rounds=cat("rounds"), n_accepted=cat("n_accepted"), n_verified=cat("n_verified"),
                           commit_depth=cat("commit_depth"),
                           events=EventLog(**{k: np.concatenate([getattr(e, k) for e in evs])
                                              for k in EventLog.__dataclass_fields__}),
                           n_stochastic=parts[0][0].n_stochastic, batch_calls=sum(r.batch_calls for r, _ in parts),
                           lazy_eval_calls=0, protocol=parts[0][0].protocol)
    return summarize(merged, ver, sched.stochastic, L, np.concatenate([m for _, m in parts]))


def speedup_run(proto: Protocol, verifier: str, K: int, L: int, n_traj: int, seed: int) -> dict:
    """One cell with the full record (the ``speccheck speedup`` JSON)."""
    _, summ = run_cells(proto, verifier, K, [L], n_traj, seed)
    out = dict(summ[0])
    out["protocol"] = asdict(proto)
    out["schedule"] = proto.schedule().describe()
    out["mixture_seed"] = gmm_preset(proto.target).seed
    out["speedup_definition"] = ("mean over trajectories of stochastic steps / target calls on the "
                                 "stochastic part, warm-up call included; deterministic Euler steps "
                                 "are run separately and not credited")
    return out
