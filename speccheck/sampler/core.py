"""Algorithm 1 of the D-GRS paper: speculative sampling over a draft tree, batched over many
trajectories that fall out of step (SPEC section 2).

One *round* at a stochastic step n (L_n = min(L, end_n - n), end_n = the next deterministic
step or N) runs the paper's steps, each a method of :class:`SpeculativeSampler`:

1. **draft** (``NodeSource.children``): T|L_n level by level, the children of a node at depth
   l - 1 i.i.d. N(m^p_{n+l-1}(Y_u), sigma_{n+l-1}^2 I);
2. ONE target call on the evaluated nodes of every live trajectory (internal nodes, plus leaves
   if ``leaves``);
3. **verify a level** (:meth:`SpeculativeSampler._verify_level`): walk down from the root,
   verifying the children of the current node against N(m^q_{n+l-1}(Y_u), sigma^2 I) with the
   verifier, into the accepted child; the first rejection's residual sample is committed;
4. **commit** (:meth:`SpeculativeSampler._commit`): the walked steps advance each trajectory;
5. **prefetch** (:meth:`SpeculativeSampler._prefetch`): choose the cached evaluation the next
   round's proposal uses.

Proposal (delayed drift) from a cached ("stale") evaluation (x_s, t_s, v_s):
  freeze='drift'    : m^p_k(y) = y + gamma_k b_s, b_s = -[(1 + eps^2) v_s + eps^2 x_s / (1 - t_s)]
  freeze='velocity' : m^p_k(y) = a_k y + c_k v_s
  freeze='denoised' : m^p_k(y) = a_k y + c_k (y - x0_s) / t_k,  x0_s = x_s - t_s v_s
Prefetch (which cached evaluation the next round uses): 'nearest' (the committed node's own if
it was evaluated, else the evaluated sibling nearest to the committed state, else the last
verified parent), 'parent' (the last verified parent), 'none' (evaluate the new root: +1 call
per round). A round with no cached drift (the first round of a stochastic block) spends one
warm-up call on its root; both are counted in ``nfe``.

Deterministic steps (sigma_n = 0) are plain Euler steps, one call each, counted in
``det_calls`` (not in ``nfe``). Speed-up = stochastic steps / nfe (warm-up included).

Lazy mode realises only the children of visited nodes and evaluates the target only where
the walk needs it; the law and the NFE count are those of the eager mode. Both modes are
:class:`NodeSource` implementations.

Device: every tensor a run creates (trees' index tensors, noise, counters, events) lives on
the device of the starting states ``x0``; the generator must be on that device too
(:class:`speccheck.errors.DeviceError` otherwise). Events are returned as numpy arrays.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Protocol

import numpy as np
import torch

from speccheck.errors import DeviceError, InputError
from speccheck.sampler.tree import DraftTree
from speccheck.seeding import torch_threads
from speccheck.targets.base import denoised_from_velocity
from speccheck.targets.schedules import Schedule

FREEZE_MODES = ("drift", "velocity", "denoised")
PREFETCH_MODES = ("nearest", "parent", "none")
MAX_EAGER_ELEMENTS = 2**28
"""Eager mode holds every trajectory's whole tree (states and velocities): trajectories x |V| x
state size may not exceed this (2 GiB per float64 array); run fewer trajectories per call or
use lazy mode."""


def resolve_verifier(verifier: object) -> object:
    """A verifier object, or a name/spec for :func:`speccheck.verifiers.get`."""
    if isinstance(verifier, str):
        from speccheck.verifiers import get

        return get(verifier)
    if not hasattr(verifier, "verify"):
        raise InputError(f"verifier must be a name or an object with .verify, got {verifier!r}")
    return verifier


def verifier_name(verifier: object) -> str:
    """The verifier's ``name`` attribute, else its class name."""
    return str(getattr(verifier, "name", type(verifier).__name__))


def _verify_states(verifier: object, mu_p: torch.Tensor, mu_q: torch.Tensor, sigma: torch.Tensor,
                   children: torch.Tensor, generator: torch.Generator
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    from speccheck.verifiers import verify_states

    return verify_states(verifier, mu_p, mu_q, sigma, children, generator)


# ---------------------------------------------------------------------------- results
@dataclass
class EventLog:
    """One entry per verification (numpy arrays of equal length): traj, round (per-trajectory
    round counter), step k (the transition k -> k + 1 verified), depth l (1-based), K (number
    of children), delta, accepted, index (K on rejection)."""

    traj: np.ndarray
    round: np.ndarray
    step: np.ndarray
    depth: np.ndarray
    K: np.ndarray
    delta: np.ndarray
    accepted: np.ndarray
    index: np.ndarray

    def __len__(self) -> int:
        return int(self.delta.size)


@dataclass
class SamplerResult:
    """Per trajectory (tensors of length n_traj, on the device of x0): nfe (stochastic-part
    target calls, warm-up and root re-evaluations included), root_calls (the warm-up/prefetch-none
    part of nfe), det_calls, rounds, accepted/verified counts. x: final states; states:
    [n, N + 1, *shape] if recorded; commit_depth: [n, N] depth inside its round at which step
    n + 1 was committed (0 for a deterministic step). batch_calls: target calls the whole batch
    made (wall-clock proxy); lazy_eval_calls: extra unbilled evaluations of lazy mode."""

    x: torch.Tensor
    nfe: torch.Tensor
    root_calls: torch.Tensor
    det_calls: torch.Tensor
    rounds: torch.Tensor
    n_accepted: torch.Tensor
    n_verified: torch.Tensor
    commit_depth: torch.Tensor
    events: EventLog
    n_stochastic: int
    batch_calls: int
    lazy_eval_calls: int
    protocol: dict
    states: Optional[torch.Tensor] = None

    @property
    def samples(self) -> torch.Tensor:
        """The final states [n, *shape] (``x``; the name :class:`~speccheck.sampler.plain.PlainResult` uses)."""
        return self.x

    @property
    def trajectories(self) -> Optional[torch.Tensor]:
        """Every state [n, N + 1, *shape] (``states``) if the run recorded them, else None."""
        return self.states

    def acceptance_per_step(self, mask: Optional[np.ndarray] = None) -> tuple[np.ndarray, np.ndarray]:
        """(accepted, verified): int64 arrays [N], the verifications of transition k -> k + 1
        that accepted a child, and all of them, over the trajectories where the boolean ``mask``
        [n] is True (all if None). verified[k] + deterministic steps = trajectories per step."""
        n_steps = int(self.commit_depth.shape[1])
        traj = self.events.traj.astype(np.int64)
        keep = np.ones(traj.size, dtype=bool) if mask is None else np.asarray(mask, dtype=bool)[traj]
        step = self.events.step.astype(np.int64)[keep]
        accepted = np.bincount(step, weights=self.events.accepted[keep].astype(np.int64), minlength=n_steps)
        return accepted.astype(np.int64), np.bincount(step, minlength=n_steps).astype(np.int64)

    @property
    def speedup(self) -> torch.Tensor:
        """Stochastic steps / target calls (warm-up included), per trajectory."""
        return self.n_stochastic / self.nfe.double()

    @property
    def speedup_no_warmup(self) -> torch.Tensor:
        """Stochastic steps / verification rounds (warm-up and root calls not counted)."""
        return self.n_stochastic / self.rounds.double()


class _Events:
    """Event columns collected on the device, moved to the host once at the end."""

    def __init__(self) -> None:
        self.columns: dict[str, list[torch.Tensor]] = {name: [] for name in EventLog.__dataclass_fields__}

    def add(self, **columns: torch.Tensor) -> None:
        for name, values in columns.items():
            self.columns[name].append(values.detach())

    def finish(self) -> EventLog:
        arrays = {name: torch.cat(parts).cpu().numpy() if parts else np.zeros(0)
                  for name, parts in self.columns.items()}
        return EventLog(**arrays)


@dataclass
class _Run:
    """Per-trajectory state of a batched run (all tensors on the run's device)."""

    x: torch.Tensor                 # current state Y_n
    n: torch.Tensor                 # current step n
    cond: Optional[torch.Tensor]
    stale_x: torch.Tensor           # cached evaluation (x_s, t_s, v_s) the proposal uses
    stale_t: torch.Tensor
    stale_v: torch.Tensor
    have_stale: torch.Tensor        # the cached evaluation is valid for the next round
    nfe: torch.Tensor
    root_calls: torch.Tensor
    det_calls: torch.Tensor
    rounds: torch.Tensor
    n_accepted: torch.Tensor
    n_verified: torch.Tensor
    commit_depth: torch.Tensor
    states: Optional[torch.Tensor]
    generator: torch.Generator
    depth_cap: torch.Tensor
    events: _Events = field(default_factory=_Events)
    batch_calls: int = 0
    lazy_calls: int = 0


@dataclass
class _Round:
    """One round for the trajectories ``traj`` (rows w = 0..W-1 index into it)."""

    traj: torch.Tensor              # [W] trajectory ids
    root_step: torch.Tensor         # [W] n, the round's root step
    depth_limit: torch.Tensor       # [W] L_n = min(depth cap, end_n - n)


@dataclass
class _Walk:
    """The walk down the tree for the rows of one round."""

    root_state: torch.Tensor
    node: torch.Tensor              # current node u (the last accepted child)
    state: torch.Tensor             # Y_u, the last committed state
    parent_state: torch.Tensor      # state of u's parent (the draft hook's grandparent)
    walking: torch.Tensor
    depth: torch.Tensor             # committed depth inside the round
    fully_accepted: torch.Tensor    # reached the end of its truncated tree with every level accepted
    last_parent_state: torch.Tensor  # last verified parent (state, velocity, step): 'parent' prefetch
    last_parent_velocity: torch.Tensor
    last_parent_step: torch.Tensor
    root_velocity: Optional[torch.Tensor] = None
    # per rejection: (depth, rows, children [W, K, ...], parent node) for 'nearest' prefetch
    rejections: list = field(default_factory=list)


def _bc(v: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """Reshape v ([W] or [W, M]) to broadcast against like ([W, ..., *shape])."""
    return v.reshape(*v.shape, *([1] * (like.dim() - v.dim())))


def _check_generator(generator: torch.Generator, device: torch.device) -> None:
    if not isinstance(generator, torch.Generator):
        raise InputError(f"generator must be a torch.Generator, got {type(generator).__name__}")
    gen_device = torch.device(generator.device)
    other_index = None not in (gen_device.index, device.index) and gen_device.index != device.index
    if gen_device.type != device.type or other_index:
        raise DeviceError(f"generator is on {gen_device} but x0 is on {device}: pass "
                          f"torch.Generator(device={str(device)!r}) (random draws must happen on the "
                          "device of the states)")


# ---------------------------------------------------------------------------- node sources
class NodeSource(Protocol):
    """Where one round's tree nodes and their target evaluations come from.

    ``rows`` index the round's trajectories; ``nodes`` are node ids of the sampler's tree.
    Eager mode (:class:`_EagerSource`) drafts and evaluates the whole truncated tree up front;
    lazy mode (:class:`_LazySource`) drafts the children of visited nodes and evaluates on
    demand. Both give the same law and the same billed NFE."""

    def children(self, rows: torch.Tensor, nodes: torch.Tensor, width: int, states: torch.Tensor,
                 parent_states: torch.Tensor, steps: torch.Tensor, noise_steps: torch.Tensor, depth: int,
                 ) -> torch.Tensor:
        """The ``width`` drafted children [W, width, *shape] of ``nodes`` (at ``states``)."""
        ...

    def velocity(self, rows: torch.Tensor, nodes: torch.Tensor, states: torch.Tensor,
                 steps: torch.Tensor) -> torch.Tensor:
        """v_{t_k}(Y_u) of evaluated ``nodes`` at ``states`` and steps k."""
        ...

    def is_evaluated(self, rows: torch.Tensor, nodes: torch.Tensor, depths: torch.Tensor) -> torch.Tensor:
        """Whether Algorithm 1 evaluates ``nodes`` ([W] or [W, K]) of depths ``depths`` this round."""
        ...


class _EagerSource:
    """Drafts T|L_max for every trajectory of the round, then evaluates all nodes that Algorithm 1
    evaluates (depth <= L_n; internal in T|L_n, or any if leaves) in ONE target call (billed
    once; fed to the target in chunks of EVAL_CHUNK rows to bound memory)."""

    EVAL_CHUNK = 65536

    def __init__(self, sampler: SpeculativeSampler, run: _Run, round_: _Round) -> None:
        self.sampler = sampler
        self.nodes_drafted = self._draft(sampler, run, round_)
        self.evaluated, self.velocities = self._evaluate(sampler, run, round_, self.nodes_drafted)

    @staticmethod
    def _draft(sampler: SpeculativeSampler, run: _Run, round_: _Round) -> torch.Tensor:
        tree = sampler.tree.truncate(int(round_.depth_limit.max()))
        device = run.x.device
        rows = round_.traj.numel()
        root_states = run.x[round_.traj]
        state_shape = root_states.shape[1:]
        drafted = root_states.new_empty(rows, tree.n_nodes, *state_shape)
        drafted[:, 0] = root_states
        stale_x, stale_t, stale_v = run.stale_x[round_.traj], run.stale_t[round_.traj], run.stale_v[round_.traj]
        block_end = sampler._block_end[round_.root_step]
        parent = sampler._parent_of
        for depth in range(1, tree.L + 1):
            nodes = torch.as_tensor(tree.layers[depth], device=device)
            steps = (round_.root_step + depth - 1).clamp(max=sampler.schedule.N - 1)
            noise_steps = sampler._hook_noise_step(steps, depth, block_end)
            grandparents = parent[parent[nodes]].clamp(min=0)
            centre = sampler._hook_draft_state(drafted[:, parent[nodes]], drafted[:, grandparents], depth)
            width = nodes.numel()
            mean = sampler._proposal_mean(centre.reshape(rows * width, *state_shape),
                                          steps.unsqueeze(1).expand(rows, width).reshape(-1),
                                          stale_x.repeat_interleave(width, 0), stale_t.repeat_interleave(width),
                                          stale_v.repeat_interleave(width, 0))
            noise = torch.randn(rows * width, *state_shape, generator=run.generator, dtype=root_states.dtype,
                                device=device)
            sigma = sampler._sigma[noise_steps].to(root_states.dtype).repeat_interleave(width)
            noise.mul_(_bc(sigma, noise)).add_(mean)
            drafted[:, nodes] = noise.reshape(rows, width, *state_shape)
            del noise, mean, centre
        return drafted

    @classmethod
    def _evaluate(cls, sampler: SpeculativeSampler, run: _Run, round_: _Round,
                  drafted: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        tree = sampler.tree.truncate(int(round_.depth_limit.max()))
        device = drafted.device
        node_depth = torch.as_tensor(tree.depth, device=device).unsqueeze(0)
        internal = (torch.as_tensor(tree.n_children, device=device) > 0).unsqueeze(0)
        depth_limit = round_.depth_limit.unsqueeze(1)
        evaluated = (node_depth <= depth_limit) & (sampler.leaves | (internal & (node_depth < depth_limit)))  # [W, V]
        rows, nodes = evaluated.nonzero(as_tuple=True)
        steps = (round_.root_step[rows] + node_depth[0, nodes]).clamp(max=sampler.schedule.N)
        velocities = torch.zeros_like(drafted)
        # the round's ONE target call, fed in row chunks (bounded temporaries)
        for start in range(0, rows.numel(), cls.EVAL_CHUNK):
            chunk = slice(start, start + cls.EVAL_CHUNK)
            velocities[rows[chunk], nodes[chunk]] = sampler._velocity(
                run, drafted[rows[chunk], nodes[chunk]], steps[chunk], round_.traj[rows[chunk]])
        return evaluated, velocities

    def children(self, rows: torch.Tensor, nodes: torch.Tensor, width: int, states: torch.Tensor,
                 parent_states: torch.Tensor, steps: torch.Tensor, noise_steps: torch.Tensor, depth: int,
                 ) -> torch.Tensor:
        child_ids = self.sampler._first_child[nodes].unsqueeze(1) + torch.arange(width, device=nodes.device)
        return self.nodes_drafted[rows.unsqueeze(1), child_ids]

    def velocity(self, rows: torch.Tensor, nodes: torch.Tensor, states: torch.Tensor,
                 steps: torch.Tensor) -> torch.Tensor:
        return self.velocities[rows, nodes]

    def is_evaluated(self, rows: torch.Tensor, nodes: torch.Tensor, depths: torch.Tensor) -> torch.Tensor:
        return self.evaluated[_bc(rows, nodes), nodes]


class _LazySource:
    """Realises only the children of visited nodes; evaluates the target only where the walk
    (and the prefetch rule) reads it. Those evaluations are not billed: the round's one call is."""

    def __init__(self, sampler: SpeculativeSampler, run: _Run, round_: _Round) -> None:
        self.sampler, self.run, self.round = sampler, run, round_

    def children(self, rows: torch.Tensor, nodes: torch.Tensor, width: int, states: torch.Tensor,
                 parent_states: torch.Tensor, steps: torch.Tensor, noise_steps: torch.Tensor, depth: int,
                 ) -> torch.Tensor:
        sampler, run = self.sampler, self.run
        traj = self.round.traj[rows]
        centre = sampler._hook_draft_state(states, parent_states, depth)
        mean = sampler._proposal_mean(centre, steps, run.stale_x[traj], run.stale_t[traj], run.stale_v[traj])
        noise = torch.randn(rows.numel(), width, *states.shape[1:], generator=run.generator, dtype=states.dtype,
                            device=states.device)
        return noise.mul_(_bc(sampler._sigma[noise_steps].to(states.dtype), noise)).add_(mean.unsqueeze(1))

    def velocity(self, rows: torch.Tensor, nodes: torch.Tensor, states: torch.Tensor,
                 steps: torch.Tensor) -> torch.Tensor:
        self.run.lazy_calls += 1
        return self.sampler._velocity(self.run, states, steps, self.round.traj[rows])

    def is_evaluated(self, rows: torch.Tensor, nodes: torch.Tensor, depths: torch.Tensor) -> torch.Tensor:
        if self.sampler.leaves:
            return torch.ones_like(nodes, dtype=torch.bool)
        depth_limit = _bc(self.round.depth_limit[rows], nodes)
        return (self.sampler._n_children[nodes] > 0) & (depths < depth_limit)


# ---------------------------------------------------------------------------- sampler
class SpeculativeSampler:
    """Algorithm 1 for a VelocityModel ``target``, a Schedule, a DraftTree and a verifier.

    Protocol switches: freeze in FREEZE_MODES, prefetch in PREFETCH_MODES, leaves (evaluate
    leaves too: |V| rows instead of |I|), lazy. The defaults are the documented preset's
    (``speccheck.sampler.experiments.PRESETS["gmm-paper"]``: velocity, nearest, leaves, lazy).
    Subclasses override the small ``_hook_*`` methods (see :mod:`speccheck.validation.sampler_mutants`).
    """

    def __init__(self, target: object, schedule: Schedule, tree: DraftTree, verifier: object, *,
                 freeze: str = "velocity", prefetch: str = "nearest", leaves: bool = True,
                 lazy: bool = True) -> None:
        if freeze not in FREEZE_MODES:
            raise InputError(f"freeze must be one of {FREEZE_MODES}, got {freeze!r}")
        if prefetch not in PREFETCH_MODES:
            raise InputError(f"prefetch must be one of {PREFETCH_MODES}, got {prefetch!r}")
        if not isinstance(schedule, Schedule):
            raise InputError(f"schedule must be a Schedule, got {type(schedule).__name__}")
        if not isinstance(tree, DraftTree):
            raise InputError(f"tree must be a DraftTree, got {type(tree).__name__}")
        if tree.L < 1:
            raise InputError("tree must have depth L >= 1")
        if not callable(getattr(target, "velocity", None)):
            raise InputError(f"target must have a velocity(x, t, cond) method, got {type(target).__name__}")
        self.target = target
        self.schedule = schedule
        self.tree = tree
        self.verifier = resolve_verifier(verifier)
        supports = getattr(self.verifier, "supports_K", None)
        for K in tree.widths():
            if supports is not None and not supports(K):
                raise InputError(f"verifier {verifier_name(self.verifier)!r} does not support K={K} "
                                 f"(tree {tree.name})")
        self.freeze, self.prefetch, self.leaves, self.lazy = freeze, prefetch, bool(leaves), bool(lazy)
        self._place_tables(torch.device("cpu"))

    def _place_tables(self, device: torch.device) -> None:
        """Schedule coefficients and tree index arrays as tensors on ``device``."""
        schedule, tree, f64 = self.schedule, self.tree, torch.float64
        self._device = device
        self._time = torch.tensor(schedule.t, dtype=f64, device=device)
        self._coef_state = torch.tensor(schedule.a, dtype=f64, device=device)
        self._coef_velocity = torch.tensor(schedule.c, dtype=f64, device=device)
        self._gamma = torch.tensor(schedule.gamma, dtype=f64, device=device)
        self._sigma = torch.tensor(schedule.sigma, dtype=f64, device=device)
        self._is_stochastic = torch.tensor(schedule.stochastic, device=device)
        self._block_end = torch.tensor(schedule.block_end(), device=device)
        self._parent_of = torch.tensor(tree.parent, device=device)
        self._n_children = torch.tensor(tree.n_children, device=device)
        self._first_child = torch.tensor(tree.first_child, device=device)

    # ------------------------------------------------------------------ description
    def protocol(self) -> dict:
        """Every switch that moves the measured speed-up (recorded with results)."""
        return {"verifier": verifier_name(self.verifier), "tree": self.tree.describe(),
                "freeze": self.freeze, "prefetch": self.prefetch, "leaves": self.leaves,
                "lazy": self.lazy, "schedule": self.schedule.describe(),
                "speedup_definition": "stochastic steps / target calls on the stochastic part, "
                                      "warm-up call included; deterministic Euler steps counted "
                                      "separately (det_calls)",
                "residual_orthogonal": "first child's (verify_states)"}

    # ------------------------------------------------------------------ hooks (mutants)
    def _hook_noise_step(self, k: torch.Tensor, l: int, end: torch.Tensor) -> torch.Tensor:
        """Step index whose sigma is used at depth l (correct: k = n + l - 1)."""
        return k

    def _hook_draft_state(self, y_parent: torch.Tensor, y_grandparent: torch.Tensor, l: int) -> torch.Tensor:
        """State the depth-l children are drafted around (correct: their parent's)."""
        return y_parent

    def _hook_target_mean(self, y_u: torch.Tensor, v_u: torch.Tensor, y_root: torch.Tensor,
                          v_root: torch.Tensor, k: torch.Tensor, l: int) -> torch.Tensor:
        """m^q_k at the node being verified (correct: at the parent u itself)."""
        return self._mq(y_u, v_u, k)

    def _hook_extra_commit(self, full: torch.Tensor) -> torch.Tensor:
        """Extra steps committed after the walk (correct: none)."""
        return torch.zeros_like(full, dtype=torch.long)

    # ------------------------------------------------------------------ transition kernels
    def _velocity(self, run: _Run, x: torch.Tensor, k: torch.Tensor, traj: torch.Tensor) -> torch.Tensor:
        cond = None if run.cond is None else run.cond[traj]
        return self.target.velocity(x, self._time[k].to(x.dtype), cond)

    def _mq(self, y: torch.Tensor, v: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        """Target mean m^q_k(y) = a_k y + c_k v."""
        return _bc(self._coef_state[k].to(y.dtype), y) * y + _bc(self._coef_velocity[k].to(y.dtype), y) * v

    def _proposal_mean(self, y: torch.Tensor, k: torch.Tensor, stale_x: torch.Tensor, stale_t: torch.Tensor,
                       stale_v: torch.Tensor) -> torch.Tensor:
        """Proposal mean m^p_k(y) at states y ([W, ...]) for steps k ([W]), from the cached
        evaluation (x_s, t_s, v_s) of each row's trajectory (the freeze rule, module docstring)."""
        dtype = y.dtype
        if self.freeze == "velocity":
            return self._mq(y, stale_v, k)
        if self.freeze == "denoised":
            x0_stale = denoised_from_velocity(stale_x, stale_t.to(dtype), stale_v)
            v_hat = (y - x0_stale) / _bc(self._time[k].to(dtype), y)
            return self._mq(y, v_hat, k)
        eps2 = self.schedule.eps ** 2
        drift = -((1 + eps2) * stale_v + eps2 * stale_x / _bc((1 - stale_t).to(dtype), stale_x))
        return y + _bc(self._gamma[k].to(dtype), y) * drift

    # ------------------------------------------------------------------ driver
    def run(self, x0: torch.Tensor, generator: torch.Generator, cond: Optional[torch.Tensor] = None,
            record_states: bool = False, depth_cap: Optional[torch.Tensor] = None, *,
            threads: Optional[int] = 1) -> SamplerResult:
        """Sample len(x0) trajectories from initial states x0: [n, *state_shape].

        cond: [n] per-trajectory conditioning passed to the target; depth_cap: [n] optional
        per-trajectory depth L_b <= tree.L (trajectory b uses T|L_b: one batch can hold several
        (K, L) cells of the same width). All work happens on x0's device; ``generator`` must be
        on it. ``threads``: torch (and BLAS) CPU threads during the run, the caller's restored
        after (:func:`speccheck.seeding.torch_threads`; None: leave them as they are)."""
        with torch_threads(threads):
            return self._run(x0, generator, cond, record_states, depth_cap)

    def _run(self, x0: torch.Tensor, generator: torch.Generator, cond: Optional[torch.Tensor],
             record_states: bool, depth_cap: Optional[torch.Tensor]) -> SamplerResult:
        run = self._start(x0, generator, cond, record_states, depth_cap)
        last_step = self.schedule.N - 1
        while True:
            alive = run.n < self.schedule.N
            if not bool(alive.any()):
                break
            stochastic_now = self._is_stochastic[run.n.clamp(max=last_step)]
            deterministic = (alive & ~stochastic_now).nonzero().squeeze(1)
            stochastic = (alive & stochastic_now).nonzero().squeeze(1)
            if deterministic.numel():
                self._euler_step(run, deterministic)
            if stochastic.numel():
                self._round(run, stochastic)
        return SamplerResult(x=run.x, nfe=run.nfe, root_calls=run.root_calls, det_calls=run.det_calls,
                             rounds=run.rounds, n_accepted=run.n_accepted, n_verified=run.n_verified,
                             commit_depth=run.commit_depth, events=run.events.finish(),
                             n_stochastic=self.schedule.n_stochastic, batch_calls=run.batch_calls,
                             lazy_eval_calls=run.lazy_calls, protocol=self.protocol(), states=run.states)

    def _start(self, x0: torch.Tensor, generator: torch.Generator, cond: Optional[torch.Tensor],
               record_states: bool, depth_cap: Optional[torch.Tensor]) -> _Run:
        """Validate the inputs and set up the per-trajectory state on x0's device."""
        shape, device = self._check_run_inputs(x0, generator, cond)
        if self._device != device:
            self._place_tables(device)
        n_traj, n_steps = x0.shape[0], self.schedule.N
        if depth_cap is None:
            depth_cap = torch.full((n_traj,), self.tree.L, dtype=torch.long, device=device)
        depth_cap = torch.as_tensor(depth_cap, dtype=torch.long, device=device)
        if depth_cap.shape != (n_traj,) or bool((depth_cap < 1).any()) or bool((depth_cap > self.tree.L).any()):
            raise InputError(f"depth_cap must be [{n_traj}] integers in [1, {self.tree.L}]")

        def counter() -> torch.Tensor:
            return torch.zeros(n_traj, dtype=torch.long, device=device)

        run = _Run(x=x0.clone(), n=counter(), cond=cond, stale_x=torch.zeros_like(x0),
                   stale_t=torch.zeros(n_traj, dtype=torch.float64, device=device), stale_v=torch.zeros_like(x0),
                   have_stale=torch.zeros(n_traj, dtype=torch.bool, device=device), nfe=counter(),
                   root_calls=counter(), det_calls=counter(), rounds=counter(), n_accepted=counter(),
                   n_verified=counter(), commit_depth=torch.zeros(n_traj, n_steps, dtype=torch.long, device=device),
                   states=None, generator=generator, depth_cap=depth_cap)
        if record_states:
            run.states = x0.new_zeros(n_traj, n_steps + 1, *shape)
            run.states[:, 0] = x0
        return run

    def _check_run_inputs(self, x0: torch.Tensor, generator: torch.Generator, cond: Optional[torch.Tensor]
                          ) -> tuple[tuple[int, ...], torch.device]:
        """(state shape, device) of a run, after checking x0, the generator, cond and eager memory."""
        if not isinstance(x0, torch.Tensor):
            raise InputError(f"x0 must be a torch.Tensor, got {type(x0).__name__}")
        shape = tuple(getattr(self.target, "state_shape", x0.shape[1:]))
        if x0.dim() < 2 or tuple(x0.shape[1:]) != shape:
            raise InputError(f"x0 must have shape [n, {', '.join(map(str, shape))}], got {tuple(x0.shape)}")
        if x0.shape[0] < 1:
            raise InputError("x0 must hold at least one trajectory (n >= 1)")
        if not x0.is_floating_point():
            raise InputError(f"x0 must be a floating-point tensor, got {x0.dtype}")
        device = x0.device
        _check_generator(generator, device)
        if cond is not None and not isinstance(cond, torch.Tensor):
            raise InputError(f"cond must be None or a tensor of {x0.shape[0]} rows, got {type(cond).__name__}")
        if cond is not None and cond.shape[0] != x0.shape[0]:
            raise InputError(f"cond must have {x0.shape[0]} rows, got {tuple(cond.shape)}")
        if cond is not None and cond.device.type != device.type:
            raise DeviceError(f"cond is on {cond.device} but x0 is on {device}")
        eager_elements = x0.shape[0] * self.tree.n_nodes * x0[0].numel()
        if not self.lazy and eager_elements > MAX_EAGER_ELEMENTS:
            raise InputError(f"eager mode would hold {x0.shape[0]} trajectories x {self.tree.n_nodes} tree nodes x "
                             f"{x0[0].numel()} state entries > MAX_EAGER_ELEMENTS = {MAX_EAGER_ELEMENTS}; pass "
                             "fewer trajectories per run (x0) or lazy=True")
        return shape, device

    def _euler_step(self, run: _Run, traj: torch.Tensor) -> None:
        """A deterministic step (sigma_n = 0): Y_{n+1} = Y_n - gamma_n v_{t_n}(Y_n), one call."""
        step = run.n[traj]
        velocity = self._velocity(run, run.x[traj], step, traj)
        y = run.x[traj] + _bc(-self._gamma[step].to(velocity.dtype), velocity) * velocity
        run.x[traj] = y
        if run.states is not None:
            run.states[traj, step + 1] = y
        run.n[traj] = step + 1
        run.det_calls[traj] += 1
        run.have_stale[traj] = False
        run.batch_calls += 1

    # ------------------------------------------------------------------ one round
    def _round(self, run: _Run, traj: torch.Tensor) -> None:
        """One round of Algorithm 1 for the trajectories ``traj`` (all at a stochastic step)."""
        root_step = run.n[traj]
        self._warm_up(run, traj)
        depth_limit = torch.minimum(run.depth_cap[traj], self._block_end[root_step] - root_step)
        run.nfe[traj] += 1
        run.rounds[traj] += 1
        run.batch_calls += 1
        round_ = _Round(traj=traj, root_step=root_step, depth_limit=depth_limit)
        source = (_LazySource if self.lazy else _EagerSource)(self, run, round_)
        walk = self._walk(run, round_, source)
        self._commit(run, round_, walk)
        self._prefetch(run, round_, walk, source)

    def _warm_up(self, run: _Run, traj: torch.Tensor) -> None:
        """Evaluate the root where no cached evaluation is valid (every round if prefetch='none')."""
        if self.prefetch == "none":
            need = torch.ones_like(traj, dtype=torch.bool)
        else:
            need = ~run.have_stale[traj]
        if not bool(need.any()):
            return
        cold = traj[need]
        velocity = self._velocity(run, run.x[cold], run.n[cold], cold)
        run.stale_x[cold], run.stale_t[cold], run.stale_v[cold] = run.x[cold], self._time[run.n[cold]], velocity
        run.have_stale[cold] = True
        run.nfe[cold] += 1
        run.root_calls[cold] += 1
        run.batch_calls += 1

    def _walk(self, run: _Run, round_: _Round, source: NodeSource) -> _Walk:
        """Walk every row down its tree level by level until its first rejection or its L_n."""
        rows = round_.traj.numel()
        device = run.x.device
        root_state = run.x[round_.traj]
        walk = _Walk(root_state=root_state, node=torch.zeros(rows, dtype=torch.long, device=device),
                     state=root_state.clone(), parent_state=root_state.clone(),
                     walking=torch.ones(rows, dtype=torch.bool, device=device),
                     depth=torch.zeros(rows, dtype=torch.long, device=device),
                     fully_accepted=torch.zeros(rows, dtype=torch.bool, device=device),
                     last_parent_state=root_state.clone(), last_parent_velocity=torch.zeros_like(root_state),
                     last_parent_step=round_.root_step.clone())
        for depth in range(1, int(round_.depth_limit.max()) + 1):
            active = walk.walking & (depth <= round_.depth_limit) & (self._n_children[walk.node] > 0)
            walk.fully_accepted |= walk.walking & ~active
            walk.walking &= active
            walkers = active.nonzero().squeeze(1)
            if walkers.numel() == 0:
                break
            steps = round_.root_step[walkers] + depth - 1
            velocity = source.velocity(walkers, walk.node[walkers], walk.state[walkers], steps)
            if depth == 1:
                walk.root_velocity = torch.zeros_like(root_state)
                walk.root_velocity[walkers] = velocity
            widths = self._n_children[walk.node[walkers]]
            for width in torch.unique(widths).tolist():
                group = (widths == width).nonzero().squeeze(1)
                self._verify_level(run, round_, walk, source, walkers[group], steps[group], velocity[group],
                                   width, depth)
        walk.fully_accepted |= walk.walking
        return walk

    def _verify_level(self, run: _Run, round_: _Round, walk: _Walk, source: NodeSource, rows: torch.Tensor,
                      steps: torch.Tensor, velocity: torch.Tensor, width: int, depth: int) -> None:
        """Draft the ``width`` children of each row's node, verify them against the target
        transition, and move each row to its accepted child (or its residual sample)."""
        traj = round_.traj[rows]
        state = walk.state[rows]
        noise_steps = self._hook_noise_step(steps, depth, self._block_end[round_.root_step[rows]])
        sigma = self._sigma[noise_steps]
        mu_p = self._proposal_mean(state, steps, run.stale_x[traj], run.stale_t[traj], run.stale_v[traj])
        children = source.children(rows, walk.node[rows], width, state, walk.parent_state[rows], steps,
                                   noise_steps, depth)
        mu_q = self._hook_target_mean(state, velocity, walk.root_state[rows], walk.root_velocity[rows], steps, depth)
        y, accepted, index = _verify_states(self.verifier, mu_p, mu_q, sigma.to(state.dtype), children,
                                            run.generator)
        delta = (mu_q - mu_p).flatten(1).norm(dim=1) / sigma.to(state.dtype)
        run.events.add(traj=traj, round=run.rounds[traj] - 1, step=steps, depth=torch.full_like(steps, depth),
                       K=torch.full_like(steps, width), delta=delta.double(), accepted=accepted, index=index)
        if run.states is not None:
            run.states[traj, steps + 1] = y
        run.commit_depth[traj, steps] = depth
        run.n_verified[traj] += 1
        run.n_accepted[traj] += accepted.long()
        walk.depth[rows] = depth
        walk.last_parent_state[rows], walk.last_parent_velocity[rows], walk.last_parent_step[rows] = (
            state, velocity, steps)
        rejected = ~accepted
        if bool(rejected.any()):
            walk.walking[rows[rejected]] = False
            if self.prefetch == "nearest":
                walk.rejections.append((depth, rows[rejected], children[rejected], walk.node[rows[rejected]]))
        accepted_child = self._first_child[walk.node[rows]] + index.clamp(max=width - 1)
        walk.node[rows] = torch.where(accepted, accepted_child, walk.node[rows])
        walk.state[rows] = y
        walk.parent_state[rows] = torch.where(_bc(accepted, y), state, walk.parent_state[rows])

    def _commit(self, run: _Run, round_: _Round, walk: _Walk) -> None:
        """Advance each trajectory by the depth it committed (plus any hooked extra steps)."""
        extra = self._hook_extra_commit(walk.fully_accepted)
        root_step, n_steps = round_.root_step, self.schedule.N
        new_step = torch.minimum(root_step + walk.depth + extra, torch.full_like(root_step, n_steps))
        if bool((extra > 0).any()) and run.states is not None:
            with_extra = (extra > 0).nonzero().squeeze(1)
            moved = with_extra[new_step[with_extra] > root_step[with_extra] + walk.depth[with_extra]]
            run.states[round_.traj[moved], new_step[moved]] = walk.state[moved]
            run.commit_depth[round_.traj[moved], new_step[moved] - 1] = walk.depth[moved] + 1
        run.x[round_.traj] = walk.state
        run.n[round_.traj] = new_step

    # ------------------------------------------------------------------ prefetch
    def _prefetch(self, run: _Run, round_: _Round, walk: _Walk, source: NodeSource) -> None:
        """Cache the evaluation the next round's proposal uses (the prefetch rule)."""
        traj = round_.traj
        if self.prefetch == "none":
            run.have_stale[traj] = False
            return
        stale_x = walk.last_parent_state.clone()
        stale_t = self._time[walk.last_parent_step].clone()
        stale_v = walk.last_parent_velocity.clone()
        if self.prefetch == "nearest":
            self._prefetch_committed(round_, walk, source, stale_x, stale_t, stale_v)
            self._prefetch_nearest_sibling(round_, walk, source, stale_x, stale_t, stale_v)
        n_steps = self.schedule.N
        still_running = run.n[traj] < n_steps
        run.stale_x[traj], run.stale_t[traj], run.stale_v[traj] = stale_x, stale_t, stale_v
        run.have_stale[traj] = still_running & self._is_stochastic[run.n[traj].clamp(max=n_steps - 1)]

    def _prefetch_committed(self, round_: _Round, walk: _Walk, source: NodeSource, stale_x: torch.Tensor,
                            stale_t: torch.Tensor, stale_v: torch.Tensor) -> None:
        """Fully accepted rows: the committed node itself, if it was evaluated."""
        full = walk.fully_accepted.nonzero().squeeze(1)
        if not full.numel():
            return
        full = full[source.is_evaluated(full, walk.node[full], walk.depth[full])]
        if not full.numel():
            return
        committed_step = round_.root_step[full] + walk.depth[full]
        stale_v[full] = source.velocity(full, walk.node[full], walk.state[full], committed_step)
        stale_x[full], stale_t[full] = walk.state[full], self._time[committed_step]

    def _prefetch_nearest_sibling(self, round_: _Round, walk: _Walk, source: NodeSource, stale_x: torch.Tensor,
                                  stale_t: torch.Tensor, stale_v: torch.Tensor) -> None:
        """Rows rejected at depth l: the evaluated sibling nearest to the committed residual state."""
        for depth, rows, children, parent in walk.rejections:
            width = children.shape[1]
            child_ids = self._first_child[parent].unsqueeze(1) + torch.arange(width, device=parent.device)
            evaluated = source.is_evaluated(rows, child_ids, torch.full_like(child_ids, depth))  # [W, K]
            has_evaluated = evaluated.any(1)
            if not bool(has_evaluated.any()):
                continue
            rows, children = rows[has_evaluated], children[has_evaluated]
            child_ids, evaluated = child_ids[has_evaluated], evaluated[has_evaluated]
            distance = (children - walk.state[rows].unsqueeze(1)).flatten(2).norm(dim=2)
            distance = torch.where(evaluated, distance, torch.full_like(distance, float("inf")))
            nearest = distance.argmin(1)
            pick = torch.arange(rows.numel(), device=rows.device)
            step = round_.root_step[rows] + depth
            stale_v[rows] = source.velocity(rows, child_ids[pick, nearest], children[pick, nearest], step)
            stale_x[rows], stale_t[rows] = children[pick, nearest], self._time[step]
