"""Algorithm 1 of the D-GRS paper: speculative sampling over a draft tree, batched over many
trajectories that fall out of step (SPEC section 2).

One *round* at a stochastic step n (L_n = min(L, end_n - n), end_n = the next deterministic
step or N): (1) draft T|L_n level by level, the children of a node at depth l - 1 i.i.d.
N(m^p_{n+l-1}(Y_u), sigma_{n+l-1}^2 I); (2) ONE target call on the evaluated nodes of every
live trajectory (internal nodes, plus leaves if ``leaves``); (3) walk down from the root,
verifying the children of the current node against N(m^q_{n+l-1}(Y_u), sigma^2 I) with the
verifier, into the accepted child; the first rejection's residual sample is committed.

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
the walk needs it; the law and the NFE count are those of the eager mode.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np
import torch

from speccheck.sampler.tree import DraftTree
from speccheck.targets.schedules import Schedule

FREEZE_MODES = ("drift", "velocity", "denoised")
PREFETCH_MODES = ("nearest", "parent", "none")

_verify_states_override: Optional[Callable] = None


def _verify_states(*args):
    if _verify_states_override is not None:
        return _verify_states_override(*args)
    from speccheck.verifiers import verify_states

    return verify_states(*args)


def resolve_verifier(verifier):
    """A verifier object, or a name/spec for :func:`speccheck.verifiers.get`."""
    if isinstance(verifier, str):
        from speccheck.verifiers import get

        return get(verifier)
    if not hasattr(verifier, "verify"):
        raise ValueError(f"verifier must be a name or an object with .verify, got {verifier!r}")
    return verifier


def verifier_name(verifier) -> str:
    return str(getattr(verifier, "name", type(verifier).__name__))


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
    """Per trajectory (tensors of length n_traj): nfe (stochastic-part target calls, warm-up and
    root re-evaluations included), root_calls (the warm-up/prefetch-none part of nfe), det_calls,
    rounds, accepted/verified counts. x: final states; states: [n, N + 1, *shape] if recorded;
    commit_depth: [n, N] depth inside its round at which step n + 1 was committed (0 for a
    deterministic step). batch_calls: target calls the whole batch made (wall-clock proxy);
    lazy_eval_calls: extra unbilled evaluations of lazy mode."""

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
    def speedup(self) -> torch.Tensor:
        """Stochastic steps / target calls (warm-up included), per trajectory."""
        return self.n_stochastic / self.nfe.double()

    @property
    def speedup_no_warmup(self) -> torch.Tensor:
        """Stochastic steps / verification rounds (warm-up and root calls not counted)."""
        return self.n_stochastic / self.rounds.double()


class _Events:
    def __init__(self):
        self.cols = {k: [] for k in EventLog.__dataclass_fields__}

    def add(self, **kw):
        for k, v in kw.items():
            self.cols[k].append(v.detach().cpu())

    def finish(self) -> EventLog:
        out = {}
        for k, parts in self.cols.items():
            out[k] = torch.cat(parts).numpy() if parts else np.zeros(0)
        return EventLog(**out)


@dataclass
class _Run:
    x: torch.Tensor
    n: torch.Tensor
    cond: Optional[torch.Tensor]
    stale_x: torch.Tensor
    stale_t: torch.Tensor
    stale_v: torch.Tensor
    have: torch.Tensor
    nfe: torch.Tensor
    root_calls: torch.Tensor
    det_calls: torch.Tensor
    rounds: torch.Tensor
    n_acc: torch.Tensor
    n_ver: torch.Tensor
    commit_depth: torch.Tensor
    states: Optional[torch.Tensor]
    gen: torch.Generator
    depth_cap: torch.Tensor
    events: _Events = field(default_factory=_Events)
    batch_calls: int = 0
    lazy_calls: int = 0


def _bc(v: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """Reshape v ([W] or [W, M]) to broadcast against like ([W, ..., *shape])."""
    return v.reshape(*v.shape, *([1] * (like.dim() - v.dim())))


# ---------------------------------------------------------------------------- sampler
class SpeculativeSampler:
    """Algorithm 1 for a VelocityModel ``target``, a Schedule, a DraftTree and a verifier.

    Protocol switches: freeze in FREEZE_MODES, prefetch in PREFETCH_MODES, leaves (evaluate
    leaves too: |V| rows instead of |I|), lazy. Subclasses override the small ``_hook_*``
    methods (see :mod:`speccheck.validation.sampler_mutants`).
    """

    def __init__(self, target, schedule: Schedule, tree: DraftTree, verifier, *,
                 freeze: str = "velocity", prefetch: str = "nearest", leaves: bool = False,
                 lazy: bool = False):
        if freeze not in FREEZE_MODES:
            raise ValueError(f"freeze must be one of {FREEZE_MODES}, got {freeze!r}")
        if prefetch not in PREFETCH_MODES:
            raise ValueError(f"prefetch must be one of {PREFETCH_MODES}, got {prefetch!r}")
        if not isinstance(schedule, Schedule):
            raise ValueError(f"schedule must be a Schedule, got {type(schedule).__name__}")
        if not isinstance(tree, DraftTree):
            raise ValueError(f"tree must be a DraftTree, got {type(tree).__name__}")
        if tree.L < 1:
            raise ValueError("tree must have depth L >= 1")
        self.target = target
        self.schedule = schedule
        self.tree = tree
        self.verifier = resolve_verifier(verifier)
        supports = getattr(self.verifier, "supports_K", None)
        for K in tree.widths():
            if supports is not None and not supports(K):
                raise ValueError(f"verifier {verifier_name(self.verifier)!r} does not support K={K} "
                                 f"(tree {tree.name})")
        self.freeze, self.prefetch, self.leaves, self.lazy = freeze, prefetch, bool(leaves), bool(lazy)
        s = schedule
        f64 = torch.float64
        self._t = torch.tensor(s.t, dtype=f64)
        self._a = torch.tensor(s.a, dtype=f64)
        self._c = torch.tensor(s.c, dtype=f64)
        self._g = torch.tensor(s.gamma, dtype=f64)
        self._sig = torch.tensor(s.sigma, dtype=f64)
        self._stoch = torch.tensor(s.stochastic)
        self._end = torch.tensor(s.block_end())
        self._parent = torch.tensor(tree.parent)
        self._depth = torch.tensor(tree.depth)
        self._nch = torch.tensor(tree.n_children)
        self._first = torch.tensor(tree.first_child)

    # ------------------------------------------------------------------ description
    def protocol(self) -> dict:
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

    def _hook_target_mean(self, y_u, v_u, y_root, v_root, k, l) -> torch.Tensor:
        """m^q_k at the node being verified (correct: at the parent u itself)."""
        return self._mq(y_u, v_u, k)

    def _hook_extra_commit(self, full: torch.Tensor) -> torch.Tensor:
        """Extra steps committed after the walk (correct: none)."""
        return torch.zeros_like(full, dtype=torch.long)

    # ------------------------------------------------------------------ kernels
    def _velocity(self, run: _Run, x: torch.Tensor, k: torch.Tensor, traj: torch.Tensor) -> torch.Tensor:
        cond = None if run.cond is None else run.cond[traj]
        return self.target.velocity(x, self._t[k].to(x.dtype), cond)

    def _mq(self, y: torch.Tensor, v: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        return _bc(self._a[k].to(y.dtype), y) * y + _bc(self._c[k].to(y.dtype), y) * v

    def _mp(self, y, k, sx, st, sv) -> torch.Tensor:
        """Proposal mean at states y ([W, ...]) for steps k ([W] or matching y's leading dims),
        from the cached evaluation (sx, st, sv) of each row's trajectory."""
        dt = y.dtype
        if self.freeze == "velocity":
            return self._mq(y, sv, k)
        if self.freeze == "denoised":
            x0 = sx - _bc(st.to(dt), sx) * sv
            vhat = (y - x0) / _bc(self._t[k].to(dt), y)
            return self._mq(y, vhat, k)
        eps2 = self.schedule.eps ** 2
        b = -((1 + eps2) * sv + eps2 * sx / _bc((1 - st).to(dt), sx))
        return y + _bc(self._g[k].to(dt), y) * b

    # ------------------------------------------------------------------ driver
    def run(self, x0: torch.Tensor, generator: torch.Generator, cond: Optional[torch.Tensor] = None,
            record_states: bool = False, depth_cap: Optional[torch.Tensor] = None) -> SamplerResult:
        """Sample len(x0) trajectories from initial states x0: [n, *state_shape].

        cond: [n] per-trajectory conditioning passed to the target; depth_cap: [n] optional
        per-trajectory depth L_b <= tree.L (trajectory b uses T|L_b: one batch can hold several
        (K, L) cells of the same width)."""
        shape = tuple(getattr(self.target, "state_shape", x0.shape[1:]))
        if x0.dim() < 2 or tuple(x0.shape[1:]) != shape:
            raise ValueError(f"x0 must have shape [n, {', '.join(map(str, shape))}], got {tuple(x0.shape)}")
        if cond is not None and cond.shape[0] != x0.shape[0]:
            raise ValueError(f"cond must have {x0.shape[0]} rows, got {tuple(cond.shape)}")
        nb, N = x0.shape[0], self.schedule.N
        if depth_cap is None:
            depth_cap = torch.full((nb,), self.tree.L, dtype=torch.long)
        depth_cap = torch.as_tensor(depth_cap, dtype=torch.long)
        if depth_cap.shape != (nb,) or bool((depth_cap < 1).any()) or bool((depth_cap > self.tree.L).any()):
            raise ValueError(f"depth_cap must be [{nb}] integers in [1, {self.tree.L}]")
        z = lambda: torch.zeros(nb, dtype=torch.long)  # noqa: E731
        run = _Run(x=x0.clone(), n=z(), cond=cond, stale_x=torch.zeros_like(x0),
                   stale_t=torch.zeros(nb, dtype=torch.float64), stale_v=torch.zeros_like(x0),
                   have=torch.zeros(nb, dtype=torch.bool), nfe=z(), root_calls=z(), det_calls=z(),
                   rounds=z(), n_acc=z(), n_ver=z(), commit_depth=torch.zeros(nb, N, dtype=torch.long),
                   states=None, gen=generator, depth_cap=depth_cap)
        if record_states:
            run.states = x0.new_zeros(nb, N + 1, *shape)
            run.states[:, 0] = x0
        while True:
            alive = run.n < N
            if not bool(alive.any()):
                break
            nn = run.n.clamp(max=N - 1)
            det = (alive & ~self._stoch[nn]).nonzero().squeeze(1)
            sto = (alive & self._stoch[nn]).nonzero().squeeze(1)
            if det.numel():
                self._det_step(run, det)
            if sto.numel():
                self._round(run, sto)
        return SamplerResult(x=run.x, nfe=run.nfe, root_calls=run.root_calls, det_calls=run.det_calls,
                             rounds=run.rounds, n_accepted=run.n_acc, n_verified=run.n_ver,
                             commit_depth=run.commit_depth, events=run.events.finish(),
                             n_stochastic=self.schedule.n_stochastic, batch_calls=run.batch_calls,
                             lazy_eval_calls=run.lazy_calls, protocol=self.protocol(), states=run.states)

    def _det_step(self, run: _Run, idx: torch.Tensor) -> None:
        k = run.n[idx]
        v = self._velocity(run, run.x[idx], k, idx)
        y = run.x[idx] + _bc(-self._g[k].to(v.dtype), v) * v
        run.x[idx] = y
        if run.states is not None:
            run.states[idx, k + 1] = y
        run.n[idx] = k + 1
        run.det_calls[idx] += 1
        run.have[idx] = False
        run.batch_calls += 1

    # ------------------------------------------------------------------ one round
    def _round(self, run: _Run, S: torch.Tensor) -> None:
        nS = run.n[S]
        need = ~run.have[S] if self.prefetch != "none" else torch.ones_like(S, dtype=torch.bool)
        if bool(need.any()):
            R = S[need]
            v = self._velocity(run, run.x[R], run.n[R], R)
            run.stale_x[R], run.stale_t[R], run.stale_v[R] = run.x[R], self._t[run.n[R]], v
            run.have[R] = True
            run.nfe[R] += 1
            run.root_calls[R] += 1
            run.batch_calls += 1
        Ln = torch.minimum(run.depth_cap[S], self._end[nS] - nS)
        run.nfe[S] += 1
        run.rounds[S] += 1
        run.batch_calls += 1
        if self.lazy:
            src = _LazySource(self, run, S, nS, Ln)
        else:
            src = _EagerSource(self, run, S, nS, Ln)
        self._walk(run, S, nS, Ln, src)

    def _walk(self, run: _Run, S, nS, Ln, src) -> None:
        W0 = S.numel()
        x_root = run.x[S]
        u = torch.zeros(W0, dtype=torch.long)
        y_cur = x_root.clone()
        y_par = x_root.clone()
        v_root = None
        walking = torch.ones(W0, dtype=torch.bool)
        committed = torch.zeros(W0, dtype=torch.long)
        full = torch.zeros(W0, dtype=torch.bool)
        last_par_y = x_root.clone()
        last_par_v = torch.zeros_like(x_root)
        last_par_k = nS.clone()
        stop_sib = {}
        for l in range(1, int(Ln.max()) + 1):
            act = walking & (l <= Ln) & (self._nch[u] > 0)
            full |= walking & ~act  # reached the end of its truncated tree with all accepted
            walking &= act
            w = act.nonzero().squeeze(1)
            if w.numel() == 0:
                break
            k = nS[w] + l - 1
            v_u = src.velocity_at(w, u[w], y_cur[w], k, l)
            if l == 1:
                v_root = torch.zeros_like(x_root)
                v_root[w] = v_u
            Kw = self._nch[u[w]]
            for K in torch.unique(Kw).tolist():
                sel = (Kw == K).nonzero().squeeze(1)
                ws = w[sel]
                ks = k[sel]
                y_u = y_cur[ws]
                vs = v_u[sel]
                tr = S[ws]
                sx, st, sv = run.stale_x[tr], run.stale_t[tr], run.stale_v[tr]
                kn = self._hook_noise_step(ks, l, self._end[nS[ws]])
                sig = self._sig[kn]
                mu_p = self._mp(y_u, ks, sx, st, sv)
                children = src.children(ws, u[ws], K, y_u, y_par[ws], ks, kn, l, (sx, st, sv))
                mu_q = self._hook_target_mean(y_u, vs, x_root[ws], v_root[ws], ks, l)
                y, acc, idx = _verify_states(self.verifier, mu_p, mu_q, sig.to(y_u.dtype), children, run.gen)
                delta = (mu_q - mu_p).flatten(1).norm(dim=1) / sig.to(y_u.dtype)
                run.events.add(traj=tr, round=run.rounds[tr] - 1, step=ks, depth=torch.full_like(ks, l),
                               K=torch.full_like(ks, K), delta=delta.double(), accepted=acc,
                               index=idx)
                if run.states is not None:
                    run.states[tr, ks + 1] = y
                run.commit_depth[tr, ks] = l
                run.n_ver[tr] += 1
                run.n_acc[tr] += acc.long()
                committed[ws] = l
                last_par_y[ws], last_par_v[ws], last_par_k[ws] = y_u, vs, ks
                rej = ~acc
                if bool(rej.any()):
                    walking[ws[rej]] = False
                    if self.prefetch == "nearest":
                        stop_sib[l] = stop_sib.get(l, []) + [(ws[rej], children[rej], u[ws[rej]])]
                u_new = self._first[u[ws]] + idx.clamp(max=K - 1)
                u[ws] = torch.where(acc, u_new, u[ws])
                y_cur[ws] = y
                y_par[ws] = torch.where(_bc(acc, y), y_u, y_par[ws])
        full |= walking
        # ---- commit
        extra = self._hook_extra_commit(full)
        N = self.schedule.N
        new_n = torch.minimum(nS + committed + extra, torch.full_like(nS, N))
        if bool((extra > 0).any()) and run.states is not None:
            e = (extra > 0).nonzero().squeeze(1)
            ok = e[new_n[e] > nS[e] + committed[e]]
            run.states[S[ok], new_n[ok]] = y_cur[ok]
            run.commit_depth[S[ok], new_n[ok] - 1] = committed[ok] + 1
        run.x[S] = y_cur
        run.n[S] = new_n
        # ---- prefetch for the next round
        if self.prefetch == "none":
            run.have[S] = False
            return
        sx, st, sv = last_par_y, self._t[last_par_k], last_par_v   # 'parent'
        sx, st, sv = sx.clone(), st.clone(), sv.clone()
        if self.prefetch == "nearest":
            # full acceptance: the committed node itself, if evaluated
            f = full.nonzero().squeeze(1)
            if f.numel():
                ev = src.evaluated(f, u[f], committed[f])
                fe = f[ev]
                if fe.numel():
                    kc = nS[fe] + committed[fe]
                    sv[fe] = src.velocity_of_committed(fe, u[fe], y_cur[fe], kc)
                    sx[fe], st[fe] = y_cur[fe], self._t[kc]
            # rejection at depth l: nearest evaluated sibling
            for l, parts in stop_sib.items():
                for ws, ch, uu in parts:
                    K = ch.shape[1]
                    cids = self._first[uu].unsqueeze(1) + torch.arange(K)
                    ev = src.evaluated_children(ws, cids, l)               # [W, K] bool
                    has = ev.any(1)
                    if not bool(has.any()):
                        continue
                    ws, ch, cids, ev = ws[has], ch[has], cids[has], ev[has]
                    dist = (ch - y_cur[ws].unsqueeze(1)).flatten(2).norm(dim=2)
                    dist = torch.where(ev, dist, torch.full_like(dist, float("inf")))
                    j = dist.argmin(1)
                    rows = torch.arange(ws.numel())
                    kc = nS[ws] + l
                    sv[ws] = src.velocity_of_children(ws, cids[rows, j], ch[rows, j], kc)
                    sx[ws], st[ws] = ch[rows, j], self._t[kc]
        stale_ok = run.n[S] < N
        run.stale_x[S], run.stale_t[S], run.stale_v[S] = sx, st, sv
        run.have[S] = stale_ok & self._stoch[run.n[S].clamp(max=N - 1)]


# ---------------------------------------------------------------------------- node sources
class _EagerSource:
    """Drafts T|L_max for every trajectory of the round, then evaluates all nodes that Algorithm 1
    evaluates (depth <= L_n; internal in T|L_n, or any if leaves) in ONE target call (billed
    once; fed to the target in chunks of EVAL_CHUNK rows to bound memory)."""

    EVAL_CHUNK = 65536

    def __init__(self, sp: SpeculativeSampler, run: _Run, S, nS, Ln):
        self.sp = sp
        tree = sp.tree.truncate(int(Ln.max()))
        V = tree.n_nodes
        W = S.numel()
        x = run.x[S]
        X = x.new_empty(W, V, *x.shape[1:])
        X[:, 0] = x
        sx, st, sv = run.stale_x[S], run.stale_t[S], run.stale_v[S]
        N = sp.schedule.N
        end = sp._end[nS]
        par = sp._parent
        for l in range(1, tree.L + 1):
            nodes = torch.as_tensor(tree.layers[l])
            k = (nS + l - 1).clamp(max=N - 1)
            kn = sp._hook_noise_step(k, l, end)
            gp = par[par[nodes]].clamp(min=0)
            y_src = sp._hook_draft_state(X[:, par[nodes]], X[:, gp], l)
            M = nodes.numel()
            kk = k.unsqueeze(1).expand(W, M)
            mean = sp._mp(y_src.reshape(W * M, *x.shape[1:]), kk.reshape(-1),
                          sx.repeat_interleave(M, 0), st.repeat_interleave(M), sv.repeat_interleave(M, 0))
            noise = torch.randn(W * M, *x.shape[1:], generator=run.gen, dtype=x.dtype)
            noise.mul_(_bc(sp._sig[kn].to(x.dtype).repeat_interleave(M), noise)).add_(mean)
            X[:, nodes] = noise.reshape(W, M, *x.shape[1:])
            del noise, mean, y_src
        depth = torch.as_tensor(tree.depth)
        internal = torch.as_tensor(tree.n_children) > 0
        dl = depth.unsqueeze(0)
        L_b = Ln.unsqueeze(1)
        mask = (dl <= L_b) & (sp.leaves | (internal.unsqueeze(0) & (dl < L_b)))   # [W, V]
        self.mask = mask
        b, v = mask.nonzero(as_tuple=True)
        k_rows = (nS[b] + depth[v]).clamp(max=N)
        Vel = torch.zeros_like(X)
        # the round's ONE target call, fed in row chunks (bounded temporaries)
        for i in range(0, b.numel(), self.EVAL_CHUNK):
            bi, vi = b[i:i + self.EVAL_CHUNK], v[i:i + self.EVAL_CHUNK]
            Vel[bi, vi] = sp._velocity(run, X[bi, vi], k_rows[i:i + self.EVAL_CHUNK], S[bi])
        self.X, self.Vel = X, Vel

    def velocity_at(self, w, u, y, k, l):
        return self.Vel[w, u]

    def children(self, w, u, K, y_u, y_par, k, kn, l, stale):
        cid = self.sp._first[u].unsqueeze(1) + torch.arange(K)
        return self.X[w.unsqueeze(1), cid]

    def evaluated(self, w, u, depth):
        return self.mask[w, u]

    def evaluated_children(self, w, cids, l):
        return self.mask[w.unsqueeze(1), cids]

    def velocity_of_committed(self, w, u, y, k):
        return self.Vel[w, u]

    def velocity_of_children(self, w, cid, y, k):
        return self.Vel[w, cid]


class _LazySource:
    """Realises only the children of visited nodes; evaluates the target only where the walk
    (and the prefetch rule) reads it. Those evaluations are not billed: the round's one call is."""

    def __init__(self, sp: SpeculativeSampler, run: _Run, S, nS, Ln):
        self.sp, self.run, self.S, self.Ln = sp, run, S, Ln

    def velocity_at(self, w, u, y, k, l):
        self.run.lazy_calls += 1
        return self.sp._velocity(self.run, y, k, self.S[w])

    def children(self, w, u, K, y_u, y_par, k, kn, l, stale):
        sp = self.sp
        sx, st, sv = stale
        y_src = sp._hook_draft_state(y_u, y_par, l)
        mean = sp._mp(y_src, k, sx, st, sv)
        W = y_u.shape[0]
        noise = torch.randn(W, K, *y_u.shape[1:], generator=self.run.gen, dtype=y_u.dtype)
        return noise.mul_(_bc(sp._sig[kn].to(y_u.dtype), noise)).add_(mean.unsqueeze(1))

    def _is_eval(self, w, nodes, depth):
        """nodes: ids (any shape, leading dim matching w); depth: their depth."""
        sp = self.sp
        if sp.leaves:
            return torch.ones_like(nodes, dtype=torch.bool)
        Ln = self.Ln[w].reshape(-1, *([1] * (nodes.dim() - 1)))
        return (sp._nch[nodes] > 0) & (depth < Ln)

    def evaluated(self, w, u, depth):
        return self._is_eval(w, u, depth)

    def evaluated_children(self, w, cids, l):
        return self._is_eval(w, cids, torch.full_like(cids, l))

    def velocity_of_committed(self, w, u, y, k):
        self.run.lazy_calls += 1
        return self.sp._velocity(self.run, y, k, self.S[w])

    def velocity_of_children(self, w, cid, y, k):
        self.run.lazy_calls += 1
        return self.sp._velocity(self.run, y, k, self.S[w])
