"""Speed-up experiments on the Gaussian-mixture presets (issue 5): cells of one rule and width K
(the resumable sweeps over them live in :mod:`speccheck.scale`).

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

from speccheck.errors import InputError
from speccheck.sampler.analysis import (
    check_run,
    declared_acceptance,
    join_raw,
    run_from_raw,
    run_raw,
    summarize,
    summarize_declared,
)
from speccheck.sampler.core import (
    FREEZE_MODES,
    PREFETCH_MODES,
    EventLog,
    SamplerResult,
    SpeculativeSampler,
    resolve_verifier,
    verifier_name,
)
from speccheck.sampler.tree import DraftTree, chain, uniform_tree
from speccheck.seeding import generator, torch_threads
from speccheck.targets.gmm import GMM_PRESETS, gmm_preset
from speccheck.targets.schedules import Schedule, make_schedule

CHAIN_MATCHES = ("budget", "rows")
PROTOCOL_GRIDS = ("uniform", "flow", "edm")
MAX_STEPS = 100_000
"""Most sampler steps a protocol may ask for (bounded schedule arrays and run time)."""
MAX_TRAJECTORIES = 1_000_000
"""Most trajectories one ``run_cells`` call runs (n_traj times the number of depths)."""


def _check_choice(name: str, value: object, allowed: Sequence[str]) -> None:
    if value not in allowed:
        raise InputError(f"{name} must be one of {list(allowed)}, got {value!r}")


@dataclass(frozen=True)
class Protocol:
    """Every switch that moves a measured speed-up (validated on construction: each bad field
    raises :class:`speccheck.errors.InputError` naming it and what is allowed)."""

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

    def __post_init__(self) -> None:
        _check_choice("target", self.target, GMM_PRESETS)
        _check_choice("grid", self.grid, PROTOCOL_GRIDS)
        _check_choice("freeze", self.freeze, FREEZE_MODES)
        _check_choice("prefetch", self.prefetch, PREFETCH_MODES)
        _check_choice("chain_match", self.chain_match, CHAIN_MATCHES)
        if isinstance(self.steps, bool) or not isinstance(self.steps, (int, np.integer)) \
                or not 1 <= self.steps <= MAX_STEPS:
            raise InputError(f"steps must be an integer in [1, {MAX_STEPS}], got {self.steps!r}")
        if isinstance(self.eps, bool) or not isinstance(self.eps, (int, float, np.floating)) \
                or not 0.0 < float(self.eps) <= 1.0:
            raise InputError(f"eps must be a number in (0, 1] (eps = 0 has no stochastic step to speed up), "
                             f"got {self.eps!r}")
        for name in ("leaves", "lazy"):
            if not isinstance(getattr(self, name), (bool, np.bool_)):
                raise InputError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if self.d is not None and (isinstance(self.d, bool) or not isinstance(self.d, (int, np.integer))
                                   or self.d < 1):
            raise InputError(f"d must be None or an integer >= 1, got {self.d!r}")

    def schedule(self) -> Schedule:
        """The time grid with churn eps."""
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


def preset(name: str, **overrides: object) -> Protocol:
    """The preset protocol ``name`` with ``overrides`` (None values ignored) applied."""
    _check_choice("target preset", name, sorted(PRESETS))
    fields = Protocol.__dataclass_fields__
    unknown = sorted(set(overrides) - set(fields))
    if unknown:
        raise InputError(f"unknown protocol option(s) {unknown}; allowed: {sorted(fields)}")
    over = {k: v for k, v in overrides.items() if v is not None}
    return replace(PRESETS[name], **over)


def cell_tree(verifier: object, K: int, L: int, proto: Protocol, N_sto: int) -> DraftTree:
    """The tree run for cell (K, L): a (K, L) tree, or for a K = 1-only verifier (RMC) with
    K > 1 the chain matched to the (K, L) tree per ``proto.chain_match`` (capped at N_sto)."""
    supports = getattr(verifier, "supports_K", None)
    if K == 1 or supports is None or supports(K):
        return uniform_tree(K, L)
    if supports is not None and not supports(1):
        raise InputError(f"verifier {verifier_name(verifier)!r} supports neither K={K} nor chains")
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
    raise InputError(f"chain_match must be 'budget' or 'rows', got {proto.chain_match!r}")


def _check_cells(K: int, Ls: Sequence[int], n_traj: int, seed: int, max_nodes: int) -> None:
    def is_int(value: object) -> bool:
        return isinstance(value, (int, np.integer)) and not isinstance(value, bool)

    if not is_int(K) or K < 1:
        raise InputError(f"K must be an integer >= 1, got {K!r}")
    if len(Ls) < 1 or not all(is_int(L) and L >= 1 for L in Ls):
        raise InputError(f"Ls must be a non-empty list of integers >= 1, got {list(Ls)!r}")
    if not is_int(n_traj) or not 1 <= n_traj * len(Ls) <= MAX_TRAJECTORIES:
        raise InputError(f"n_traj must be an integer >= 1 with n_traj * len(Ls) <= {MAX_TRAJECTORIES}, "
                         f"got {n_traj!r}")
    if not is_int(seed) or not 0 <= seed < 2**63:
        raise InputError(f"seed must be an integer in [0, 2^63), got {seed!r}")
    if not is_int(max_nodes) or max_nodes < 1:
        raise InputError(f"max_nodes must be an integer >= 1, got {max_nodes!r}")


OUTPUTS = ("samples", "trajectories", "acceptance")
"""Arrays :func:`run_cells` adds to each cell's summary on request (``outputs``)."""


def _check_outputs(outputs: Sequence[str]) -> tuple[str, ...]:
    if isinstance(outputs, str) or not all(isinstance(o, str) and o in OUTPUTS for o in outputs):
        raise InputError(f"outputs must be a list drawn from {list(OUTPUTS)}, got {outputs!r}")
    return tuple(outputs)


def run_cells(proto: Protocol, verifier: object, K: int, Ls: Sequence[int], n_traj: int, seed: int,
              max_nodes: int = 400_000, device: str | torch.device = "cpu", *,
              outputs: Sequence[str] = (), threads: Optional[int] = 1) -> tuple[list[dict], list[dict]]:
    """Run cells (K, L) for L in Ls with one verifier; all L share one batched run (per-trajectory
    depth caps). Returns (per-trajectory rows, per-cell summaries).

    The starting states and every draw come from one generator seeded with ``seed`` on
    ``device`` (the same numbers on every CPU; a CUDA generator draws another stream).

    ``outputs`` (any of :data:`OUTPUTS`) adds numpy arrays to each cell's summary: "samples" ->
    ``samples`` [n_traj, d] final states; "trajectories" -> ``states`` [n_traj, N + 1, d], every
    state (the summary's ``trajectories`` stays the count; recorded only when asked: memory
    n_traj x len(Ls) x (N + 1) x d floats); "acceptance" -> ``accepted_per_step`` and
    ``verified_per_step`` [N] (verifications of step k -> k + 1 that accepted a child, and all).
    Counters and every other number are the same with or without.

    ``threads``: torch (and BLAS) CPU threads during the run, the caller's restored after (None:
    leave them as they are)."""
    _check_cells(K, Ls, n_traj, seed, max_nodes)
    outputs = _check_outputs(outputs)
    rule = resolve_verifier(verifier)
    with torch_threads(threads):
        schedule, trees, chunks = _run_batch(proto, rule, K, Ls, n_traj, seed, max_nodes, device,
                                             record="trajectories" in outputs)
    rows, summaries = [], []
    for index, (L, tree) in enumerate(zip(Ls, trees)):
        first = index * n_traj
        in_cell = np.zeros(n_traj * len(Ls), dtype=bool)
        in_cell[first:first + n_traj] = True
        cell = _cell_fields(rule, K, L, tree, proto, seed)
        summaries.append({**cell, **_summarize_chunks(chunks, rule, schedule, tree.L, in_cell),
                          **_cell_arrays(chunks, in_cell, outputs)})
        rows += _trajectory_rows(chunks, cell, in_cell, first)
    return rows, summaries


def _cell_fields(rule: object, K: int, L: int, tree: DraftTree, proto: Protocol, seed: int) -> dict:
    return {"rule": verifier_name(rule), "K": K, "L": L, "tree": tree.name, "B": tree.budget,
            "rows_per_round": tree.rows(proto.leaves), "seed": seed}


def _run_batch(proto: Protocol, rule: object, K: int, Ls: Sequence[int], n_traj: int, seed: int, max_nodes: int,
               device: str | torch.device, *, record: bool) -> tuple[Schedule, list[DraftTree], list]:
    """The batched run of :func:`run_cells`: (schedule, the cells' trees, [(trajectory span, result)])."""
    target = gmm_preset(proto.target)
    schedule = proto.schedule()
    trees = [cell_tree(rule, K, L, proto, schedule.n_stochastic) for L in Ls]
    batch_tree = uniform_tree(max(t.max_K for t in trees), max(t.L for t in trees))
    depth_caps = torch.tensor(np.repeat([t.L for t in trees], n_traj), device=device)
    sampler = SpeculativeSampler(target, schedule, batch_tree, rule, freeze=proto.freeze, prefetch=proto.prefetch,
                                 leaves=proto.leaves, lazy=proto.lazy)
    gen = generator(seed, device)
    x0 = torch.randn(depth_caps.numel(), target.d, generator=gen, dtype=torch.float64, device=device)
    if proto.lazy:
        chunks = [(slice(0, depth_caps.numel()), sampler.run(x0, gen, record_states=record, depth_cap=depth_caps,
                                                              threads=None))]
    else:  # eager: chunk trajectories so one round holds <= max_nodes tree nodes
        per_chunk = max(1, max_nodes // batch_tree.n_nodes)
        spans = [slice(i, i + per_chunk) for i in range(0, depth_caps.numel(), per_chunk)]
        chunks = [(span, sampler.run(x0[span], gen, record_states=record, depth_cap=depth_caps[span], threads=None))
                  for span in spans]
    return schedule, trees, chunks


def cell_raw(proto: Protocol, verifier: object, K: int, L: int, n_traj: int, seed: int,
             max_nodes: int = 400_000, device: str | torch.device = "cpu") -> dict:
    """The half of a one-cell :func:`run_cells` that runs the verifier: the same run, returned
    raw (:func:`speccheck.sampler.analysis.run_raw`: counters, events and the verifier's declared
    acceptance per event) with the rule's name and the tree's depth ``tree_L`` (the judge builds
    the tree itself). :func:`summarize_cell` computes the summary from it, in any process."""
    _check_cells(K, [L], n_traj, seed, max_nodes)
    rule = resolve_verifier(verifier)
    _, (tree,), chunks = _run_batch(proto, rule, K, [L], n_traj, seed, max_nodes, device, record=False)
    parts = [run_raw(result, declared_acceptance(result, rule)) for _, result in chunks]
    raw = parts[0] if len(parts) == 1 else join_raw(parts)
    return {**raw, "rule": verifier_name(rule), "tree_L": int(tree.L)}


def summarize_cell(proto: Protocol, raw: dict, K: int, L: int, n_traj: int, seed: int) -> tuple[dict, dict]:
    """The judging half of a one-cell :func:`run_cells`, from :func:`cell_raw`'s output alone (no
    verifier): (the cell's summary, its per-trajectory columns ``traj``, ``nfe``, ``root_calls``,
    ``det_calls``, ``rounds``, ``accepted``, ``verified``, ``speedup``). The run is checked first
    against what was asked (:func:`speccheck.sampler.analysis.check_run`: ``n_traj`` trajectories,
    ``proto``'s schedule, the (K, L) tree or, for a K = 1-only rule, its matched chain); the tree's
    description comes from here, only the rule's name from ``raw``. Malformed raw outputs raise
    ValueError."""
    result, declared = run_from_raw(raw)
    schedule = proto.schedule()
    name = raw.get("rule")
    if not isinstance(name, str) or not 0 < len(name) <= 200:
        raise ValueError(f"rule must be the verifier's name (1 to 200 characters), got {str(name)[:80]!r}")
    chained = K > 1 and len(result.events) > 0 and bool((result.events.K == 1).all())
    tree = chain(min(_matched_length(K, L, proto), schedule.n_stochastic)) if chained else uniform_tree(K, L)
    if raw.get("tree_L") != tree.L:
        raise ValueError(f"tree_L {raw.get('tree_L')!r} is not the depth {tree.L} of the cell's tree {tree.name}")
    check_run(result, declared, schedule.stochastic, n_traj=n_traj, tree_L=tree.L, width=tree.max_K,
              prefetch=proto.prefetch)
    cell = {"rule": name, "K": int(K), "L": int(L), "tree": tree.name, "B": int(tree.budget),
            "rows_per_round": int(tree.rows(proto.leaves)), "seed": int(seed)}
    summary = {**cell, **summarize_declared(result, declared, schedule.stochastic, tree.L)}
    columns = {"traj": list(range(result.nfe.numel())), "nfe": result.nfe.tolist(),
               "root_calls": result.root_calls.tolist(), "det_calls": result.det_calls.tolist(),
               "rounds": result.rounds.tolist(), "accepted": result.n_accepted.tolist(),
               "verified": result.n_verified.tolist(), "speedup": result.speedup.tolist()}
    return summary, columns


def _trajectory_rows(chunks: list, cell: dict, in_cell: np.ndarray, first: int) -> list[dict]:
    """One row per trajectory of the cell (``in_cell`` over the whole batch; ``first``: the
    cell's first trajectory), counters read from the device once per chunk."""
    rows = []
    for span, result in chunks:
        counts = {field: getattr(result, field).tolist() for field in
                  ("nfe", "root_calls", "det_calls", "rounds", "n_accepted", "n_verified")}
        speedups = result.speedup.tolist()
        for j in range(result.nfe.numel()):
            if not in_cell[span.start + j]:
                continue
            rows.append({**cell, "traj": span.start + j - first, "nfe": counts["nfe"][j],
                         "root_calls": counts["root_calls"][j], "det_calls": counts["det_calls"][j],
                         "rounds": counts["rounds"][j], "accepted": counts["n_accepted"][j],
                         "verified": counts["n_verified"][j], "stochastic_steps": result.n_stochastic,
                         "speedup": speedups[j]})
    return rows


def _cell_arrays(chunks: list, in_cell: np.ndarray, outputs: tuple[str, ...]) -> dict:
    """The arrays ``outputs`` asks for, over the cell's trajectories (``in_cell``), in order."""
    if not outputs:
        return {}
    parts = [(result, in_cell[span.start: span.start + result.nfe.numel()]) for span, result in chunks]
    parts = [(result, mask) for result, mask in parts if mask.any()]
    out: dict = {}
    if "samples" in outputs:
        out["samples"] = np.concatenate([result.x[torch.as_tensor(mask, device=result.x.device)].cpu().numpy()
                                         for result, mask in parts])
    if "trajectories" in outputs:
        out["states"] = np.concatenate([
            result.states[torch.as_tensor(mask, device=result.states.device)].cpu().numpy()
            for result, mask in parts])
    if "acceptance" in outputs:
        counts = [result.acceptance_per_step(mask) for result, mask in parts]
        out["accepted_per_step"] = np.sum([a for a, _ in counts], axis=0)
        out["verified_per_step"] = np.sum([v for _, v in counts], axis=0)
    return out


def _summarize_chunks(chunks: list, rule: object, schedule: Schedule, L: int, in_cell: np.ndarray) -> dict:
    """The summary of the cell's trajectories (``in_cell``) over the chunked runs."""
    parts = [(result, in_cell[span.start: span.start + result.nfe.numel()]) for span, result in chunks]
    parts = [(result, mask) for result, mask in parts if mask.any()]
    if len(parts) == 1:
        result, mask = parts[0]
        return summarize(result, rule, schedule.stochastic, L, mask)
    merged = _merge_results([result for result, _ in parts])
    return summarize(merged, rule, schedule.stochastic, L, np.concatenate([mask for _, mask in parts]))


def _merge_results(results: list[SamplerResult]) -> SamplerResult:
    """The results of consecutive trajectory chunks as one (event trajectory ids offset)."""
    offsets = np.cumsum([0] + [result.nfe.numel() for result in results[:-1]])

    def events(name: str) -> np.ndarray:
        return np.concatenate([getattr(result.events, name) + int(offset) if name == "traj"
                               else getattr(result.events, name) for result, offset in zip(results, offsets)])

    def joined(name: str) -> torch.Tensor:
        return torch.cat([getattr(result, name) for result in results])

    return SamplerResult(x=joined("x"), nfe=joined("nfe"), root_calls=joined("root_calls"),
                         det_calls=joined("det_calls"), rounds=joined("rounds"), n_accepted=joined("n_accepted"),
                         n_verified=joined("n_verified"), commit_depth=joined("commit_depth"),
                         events=EventLog(**{name: events(name) for name in EventLog.__dataclass_fields__}),
                         n_stochastic=results[0].n_stochastic, batch_calls=sum(r.batch_calls for r in results),
                         lazy_eval_calls=0, protocol=results[0].protocol)


def speedup_run(proto: Protocol, verifier: str, K: int, L: int, n_traj: int, seed: int, *,
                outputs: Sequence[str] = (), threads: Optional[int] = 1) -> dict:
    """One cell with the full record (the ``speccheck speedup`` JSON); ``outputs`` adds the
    arrays of :func:`run_cells` (not JSON: leave it empty for the record); ``threads`` as there."""
    _, summ = run_cells(proto, verifier, K, [L], n_traj, seed, outputs=outputs, threads=threads)
    return speedup_record(proto, summ[0])


def speedup_record(proto: Protocol, summary: dict) -> dict:
    """A cell's summary with the protocol, schedule, mixture seed and the speed-up's definition:
    the record :func:`speedup_run` returns (and :func:`summarize_cell`'s summary completes to)."""
    return {**summary, "protocol": asdict(proto), "schedule": proto.schedule().describe(),
            "mixture_seed": gmm_preset(proto.target).seed,
            "speedup_definition": ("mean over trajectories of stochastic steps / target calls on the stochastic "
                                   "part, warm-up call included; deterministic Euler steps are run separately "
                                   "and not credited")}
