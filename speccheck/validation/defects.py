"""Random verifier defects: wrap any exact rule and inject ONE defect drawn at random, confined to a
random stratum of the call space, with an effect stated in the battery's units.

The fixed mutant zoo (:mod:`speccheck.validation.mutants`, :mod:`speccheck.validation.zoo`) asks
"does the battery kill these 35 bugs?". This module asks the question a power promise answers:
"of the defects of size x times the promised minimum detectable deviation (MDD), in a stratum
holding a stated share of the rows, which share does the battery catch?".

A :class:`Defect` is a frozen record: its family (what goes wrong), its :class:`Stratum` (where:
a predicate on what a verifier sees in one call), its size ``eps`` and its :class:`Effect` (what
it does within the stratum: the PIT sup-distance of s_out's law and the acceptance shift, by a
Monte Carlo at a fixed seed with its error stated, or exactly where the law is closed-form, and
the stratum's share of rows under a :class:`CallSpace`). :func:`draw_defect` draws one from a numpy
Generator and sizes ``eps`` so that its effect is ``ratio`` times the given MDDs;
:class:`DefectiveRule` is the wrapped rule (picklable; everything is deterministic given the
seed). Families (:data:`FAMILIES`, grouped by :data:`GROUPS`):

- acceptance: ``accept-extra`` (a rejected row accepts its first child with probability eps),
  ``accept-drop`` (an accepted row is reported rejected with a fresh target draw: law exact,
  acceptance low), ``flag`` (accepted flag wrong while s_out is right);
- levels: the base rule run at delta exp(+-eps) in the selection only, the residual only, or both;
- residual: residual shifted by +-eps, or scaled by exp(+-eps) around delta;
- state: the defect switches on after N calls of one instance, or after its K first changes;
- call-shape: the defect lives only in calls of some B, in the rows after the last full chunk of
  a chunk size, on float32 inputs, in near-constant-delta calls, or past a position in the batch;
- dependence: pairs of rows reuse one random stream;
- declared: ``acceptance()`` off by +-eps in a stratum of (delta, K) (the draws are exact);
- states: ``verify_states`` only: the perpendicular component scaled, or sigma misused;
- contract: index off by one when accepted, the global RNG on a rare branch (deterministic
  checks catch these; they have no law to size, so they stay off the power curve).

In a state or call-shape family the stratum's rows get one of the law-changing mechanisms
(accept-extra, residual shift, levels in both). :data:`CONTROLS` are exact wrappers (rows
shuffled, chunked, padded, delta round-tripped through log space, a variable number of draws
consumed first) that the battery must pass.

Loading by spec: :attr:`Defect.spec` is ``"speccheck.validation.defects:defect_<token>"``, which
``speccheck.api.battery(spec, isolate=True)`` (and Dask workers) resolve through this module's
``__getattr__``; :func:`from_token` does the same in code. The token holds the drawn defect, not
its seed, so loading it costs no Monte Carlo.
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import json
import math
import zlib
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
import torch

from speccheck.errors import InputError, LoadError
from speccheck.seeding import generator as make_generator
from speccheck.validation.stats import dkw_threshold
from speccheck.verifiers.base import check_verify_inputs
from speccheck.verifiers.projection import project
from speccheck.verifiers.projection import verify_states as shared_verify_states

Tensor = torch.Tensor
Triple = tuple[Tensor, Tensor, Tensor]

#: family -> its group (one curve of the power benchmark per group)
FAMILIES: dict[str, str] = {
    "accept-extra": "acceptance", "accept-drop": "acceptance", "flag": "acceptance",
    "levels-selection": "levels", "levels-residual": "levels", "levels-both": "levels",
    "residual-shift": "residual", "residual-scale": "residual",
    "stale-calls": "state", "stale-K": "state",
    "batch-size": "call-shape", "batch-tail": "call-shape", "dtype": "call-shape",
    "near-constant": "call-shape", "position": "call-shape",
    "shared-randomness": "dependence",
    "declared": "declared",
    "states-perp": "states", "states-sigma": "states",
    "index-off": "contract", "global-rng": "contract",
}
#: group -> its families
GROUPS: dict[str, tuple[str, ...]] = {}
for _fam, _grp in FAMILIES.items():
    GROUPS[_grp] = GROUPS.get(_grp, ()) + (_fam,)
#: groups whose defects have a law to size (the power curve); "contract" defects are caught or not
STATISTICAL_GROUPS = tuple(g for g in GROUPS if g != "contract")
#: exact wrappers: the battery must pass every one
CONTROLS = ("none", "shuffle", "chunked", "padded", "log-space", "variable-draws")

# mechanisms: what goes wrong on the stratum's rows, and the range of its size eps
_EPS_MAX = {"accept-extra": 1.0, "accept-drop": 1.0, "flag": 1.0, "levels-selection": 3.0, "levels-residual": 3.0,
            "levels-both": 3.0, "residual-shift": 3.0, "residual-scale": 1.5, "shared-randomness": 1.0,
            "declared": 1.0, "states-perp": 2.0, "states-sigma": 1.5}
_TRIGGERED = ("stale-calls", "stale-K", "batch-size", "batch-tail", "dtype", "near-constant", "position")
_INNER = ("accept-extra", "residual-shift", "levels-both")  # mechanisms of the triggered families
_SIGNED = ("levels-selection", "levels-residual", "levels-both", "residual-shift", "residual-scale", "declared",
           "states-perp", "states-sigma")


# ------------------------------------------------------------------------------- call law
@dataclass(frozen=True)
class CallSpace:
    """The model of the call space a stratum's share of rows is computed under: a closed-form
    stand-in for the battery's law of calls (:class:`speccheck.sampler.calls.CallLaw`, layer L7),
    whose defaults follow the contract's call space.

    delta: an atom at 0 with probability ``p_zero``, else log-uniform on [``delta_lo``,
    ``delta_hi``]; K uniform on ``Ks`` (redrawn at a call with probability ``k_redraw``, else the
    previous call's); B log-uniform on [1, ``B_max``]; float32 inputs with probability
    ``float32``; call patterns constant / near-constant / other with ``p_constant`` /
    ``p_near``; instances live log-uniform 1..``age_max`` calls; ``verify_states``: d uniform on
    ``dims``, sigma log-uniform on [``sigma_lo``, ``sigma_hi``]. Within a call, a row's delta
    is taken independent of its position (sorted calls make them dependent; ignored here).
    """

    p_zero: float = 0.02
    delta_lo: float = 1e-4
    delta_hi: float = 40.0
    Ks: tuple[int, ...] = tuple(range(1, 17))
    k_redraw: float = 0.3
    B_max: int = 65536
    float32: float = 0.5
    p_constant: float = 0.3
    p_near: float = 0.2
    age_max: int = 4096
    dims: tuple[int, ...] = (1, 2, 16, 64, 256, 1024)
    sigma_lo: float = 0.25
    sigma_hi: float = 4.0

    def delta_mass(self, lo: float, hi: float) -> float:
        """P(delta in [lo, hi)) (lo = 0 includes the atom)."""
        a, b = max(lo, self.delta_lo), min(hi, self.delta_hi)
        cont = 0.0 if b <= a else (math.log(b) - math.log(a)) / (math.log(self.delta_hi) - math.log(self.delta_lo))
        return (1 - self.p_zero) * cont + (self.p_zero if lo <= 0.0 < hi else 0.0)

    def delta_nodes(self, lo: float, hi: float, m: int) -> tuple[np.ndarray, np.ndarray]:
        """(deltas, weights): ``m`` stratified quantile midpoints of the law restricted to [lo, hi)
        (plus the atom at 0 with its weight when it lies in the range); weights sum to 1."""
        total = self.delta_mass(lo, hi)
        if total <= 0:
            raise InputError(f"the call law puts no mass on delta in [{lo}, {hi})")
        nodes, weights = [], []
        if lo <= 0.0 < hi and self.p_zero > 0:
            nodes.append(0.0)
            weights.append(self.p_zero / total)
        a, b = max(lo, self.delta_lo), min(hi, self.delta_hi)
        if b > a:
            q = (np.arange(m) + 0.5) / m
            nodes += list(np.exp(np.log(a) + q * (np.log(b) - np.log(a))))
            weights += [(1 - sum(weights)) / m] * m
        return np.asarray(nodes), np.asarray(weights)


# -------------------------------------------------------------------------------- stratum
@dataclass(frozen=True)
class Stratum:
    """Where a defect lives: a predicate on what a verifier sees in one call (all must hold).

    delta in [``delta_lo``, ``delta_hi``); K in ``Ks`` (None: any); B in [``B_lo``, ``B_hi``];
    ``chunk``: only the rows after the last full chunk of that size, in calls with B > chunk;
    ``dtype``: only inputs of that dtype; ``near``: only calls whose deltas are within that
    relative spread (constant calls included); positions in [``pos_lo``, ``pos_hi``); calls
    from the ``call_lo``-th of an instance on; ``after_K_change``: once the instance saw a K other
    than its first. For ``verify_states``: d >= ``d_lo``, sigma in [``sigma_lo``, ``sigma_hi``).
    """

    delta_lo: float = 0.0
    delta_hi: float = math.inf
    Ks: Optional[tuple[int, ...]] = None
    B_lo: int = 1
    B_hi: Optional[int] = None
    chunk: Optional[int] = None
    dtype: Optional[str] = None
    near: Optional[float] = None
    pos_lo: int = 0
    pos_hi: Optional[int] = None
    call_lo: int = 1
    after_K_change: bool = False
    d_lo: int = 1
    sigma_lo: float = 0.0
    sigma_hi: float = math.inf

    def call_matches(self, B: int, K: int, dtype: torch.dtype, delta: Tensor, call: int, k_changed: bool) -> bool:
        """Whether the call as a whole can hold stratum rows (B, K, dtype, pattern, age)."""
        if self.Ks is not None and K not in self.Ks:
            return False
        if B < self.B_lo or (self.B_hi is not None and B > self.B_hi):
            return False
        if self.chunk is not None and (B <= self.chunk or B % self.chunk == 0):
            return False
        if self.dtype is not None and str(dtype).removeprefix("torch.") != self.dtype:
            return False
        if call < self.call_lo or (self.after_K_change and not k_changed):
            return False
        if self.near is not None:
            lo, hi = float(delta.min()), float(delta.max())
            if not (lo > 0 and hi <= (1 + self.near) * lo):
                return False
        return True

    def rows(self, delta: Tensor, B: int) -> Tensor:
        """Rows of a matching call inside the stratum (delta window, positions, chunk tail)."""
        mask = (delta >= self.delta_lo) & (delta < self.delta_hi)
        pos = torch.arange(B, device=delta.device)
        lo = self.pos_lo if self.chunk is None else max(self.pos_lo, (B // self.chunk) * self.chunk)
        mask &= pos >= lo
        if self.pos_hi is not None:
            mask &= pos < self.pos_hi
        return mask

    def describe(self) -> str:
        parts = [f"delta in [{self.delta_lo:.3g}, {self.delta_hi:.3g})"]
        if self.Ks is not None:
            parts.append(f"K in {{{', '.join(map(str, self.Ks))}}}")
        if self.B_lo > 1 or self.B_hi is not None:
            parts.append(f"B in [{self.B_lo}, {self.B_hi if self.B_hi is not None else 'inf'}]")
        if self.chunk is not None:
            parts.append(f"rows after the last full chunk of {self.chunk}")
        if self.dtype is not None:
            parts.append(f"{self.dtype} inputs")
        if self.near is not None:
            parts.append(f"calls with deltas within {100 * self.near:.3g}%")
        if self.pos_lo > 0 or self.pos_hi is not None:
            parts.append(f"positions [{self.pos_lo}, {self.pos_hi if self.pos_hi is not None else 'B'})")
        if self.call_lo > 1:
            parts.append(f"from call {self.call_lo} of an instance")
        if self.after_K_change:
            parts.append("after the instance's K first changed")
        if self.d_lo > 1:
            parts.append(f"d >= {self.d_lo}")
        if self.sigma_lo > 0 or math.isfinite(self.sigma_hi):
            parts.append(f"sigma in [{self.sigma_lo:.3g}, {self.sigma_hi:.3g})")
        return ", ".join(parts)


def call_share(stratum: Stratum, law: CallSpace, *, seed: int = 0, instances: int = 64) -> float:
    """Share of the rows (of ``verify``) that the call law sends into ``stratum``, the delta and
    K windows included: a Monte Carlo over ``instances`` simulated instances (fixed seed),
    exact in the delta window (its law's mass)."""
    rng = np.random.default_rng(seed)
    ages = np.floor(np.exp(rng.uniform(0, math.log(law.age_max + 1), instances))).astype(np.int64)
    n = int(ages.sum())
    inst = np.repeat(np.arange(instances), ages)
    start = np.concatenate([[0], np.cumsum(ages)[:-1]])
    call = np.arange(n) - start[inst] + 1
    Ks = np.asarray(law.Ks)
    redraw = (rng.random(n) < law.k_redraw) | (call == 1)
    draws = Ks[rng.integers(0, Ks.size, n)]
    last = np.maximum.accumulate(np.where(redraw, np.arange(n), 0))
    K = draws[last]
    first_K = K[start[inst]]
    changed = np.maximum.accumulate(np.where(K != first_K, np.arange(n), -1))
    k_changed = changed >= start[inst]
    B = np.floor(np.exp(rng.uniform(0, math.log(law.B_max + 1), n))).astype(np.int64).clip(1, law.B_max)
    f32 = rng.random(n) < law.float32
    pattern = rng.random(n)
    ok = np.ones(n, dtype=bool)
    st = stratum
    if st.Ks is not None:
        ok &= np.isin(K, st.Ks)
    ok &= B >= st.B_lo
    if st.B_hi is not None:
        ok &= B <= st.B_hi
    if st.dtype is not None:
        ok &= f32 if st.dtype == "float32" else ~f32
    ok &= call >= st.call_lo
    if st.after_K_change:
        ok &= k_changed
    if st.near is not None:
        ok &= pattern < law.p_constant + law.p_near
    lo = np.full(n, st.pos_lo)
    if st.chunk is not None:
        ok &= (B > st.chunk) & (B % st.chunk != 0)
        lo = np.maximum(lo, (B // st.chunk) * st.chunk)
    hi = B if st.pos_hi is None else np.minimum(B, st.pos_hi)
    rows = np.where(ok, np.clip(hi - lo, 0, None), 0)
    share = float(rows.sum() / B.sum()) * law.delta_mass(st.delta_lo, st.delta_hi)
    if st.d_lo > 1:
        share *= float(np.mean(np.asarray(law.dims) >= st.d_lo))
    if st.sigma_lo > 0 or math.isfinite(st.sigma_hi):
        a, b = max(st.sigma_lo, law.sigma_lo), min(st.sigma_hi, law.sigma_hi)
        full = math.log(law.sigma_hi) - math.log(law.sigma_lo)
        share *= (math.log(b) - math.log(a)) / full if b > a else 0.0
    return share


def law_share(stratum: Stratum, law: Any, *, seed: int = 0, states: bool = False) -> float:
    """Share of the rows of the battery's own law of calls (:class:`speccheck.sampler.calls.CallLaw`
    or its plain-JSON form, as a suite's plan holds it, drawn with ``seed``) that ``stratum``
    holds: from the planned calls and their deltas as :func:`~speccheck.sampler.calls.draw_law`
    draws them (cast to the call's dtype) and the wrapper's own view of each call (its call count,
    whether its K changed), as a share of all the law's rows: its ``verify`` rows (``states``
    False) or its ``verify_states`` rows (d and sigma windows; sigma is log-uniform on [0.3, 3]
    per row there). The law's rows are computed once per (law, seed) and kept."""
    t, rows = _law_mask(stratum, law, seed, states)
    total = int(t["B"].sum())  # of all the layer's rows: the share the promise speaks of
    share = float(rows.sum()) / total if total else 0.0
    if states:
        a, b = max(stratum.sigma_lo, 0.3), min(stratum.sigma_hi, 3.0)
        share *= math.log(b / a) / math.log(10.0) if b > a else 0.0
    return share


def _law_mask(st: Stratum, law: Any, seed: int, states: bool) -> tuple[dict, np.ndarray]:
    """(the law's table, the mask of its rows inside the stratum on the path)."""
    from speccheck.sampler.calls import CallLaw

    law = law if isinstance(law, CallLaw) else CallLaw.from_dict(law)
    t = _law_rows(json.dumps(law.to_dict(), sort_keys=True), int(seed))
    on_path = t["states"] == states
    ok = on_path.copy()
    if states:
        ok &= t["d"] >= st.d_lo
    else:
        if st.Ks is not None:
            ok &= np.isin(t["K"], st.Ks)
        ok &= t["B"] >= st.B_lo
        if st.B_hi is not None:
            ok &= t["B"] <= st.B_hi
        if st.chunk is not None:
            ok &= (t["B"] > st.chunk) & (t["B"] % st.chunk != 0)
        if st.dtype is not None:
            ok &= t["f32"] == (st.dtype == "float32")
        ok &= t["count"] >= st.call_lo
        if st.after_K_change:
            ok &= t["k_changed"]
        if st.near is not None:
            ok &= (t["lo"] > 0) & (t["hi"] <= (1 + st.near) * t["lo"])
    return t, _rows_in(t, st, ok, states)


@dataclass(frozen=True)
class BatteryLaw:
    """The battery's own law of calls (a suite plan's ``law``, as JSON, and the unit seed) as the
    law a defect's effect is measured over: the stratum's (delta, K) rows as
    :func:`~speccheck.sampler.calls.draw_law` draws them (``verify`` path), and for the
    declaration only its rows where the declaration is read (constant and levels calls)."""

    law_json: str
    seed: int

    @classmethod
    def of(cls, law: Any, seed: int) -> BatteryLaw:
        from speccheck.sampler.calls import CallLaw

        law = law if isinstance(law, CallLaw) else CallLaw.from_dict(law)
        return cls(json.dumps(law.to_dict(), sort_keys=True), int(seed))

    def rows(self, stratum: Stratum, n: int, *, declared: bool = False, m_nodes: int = 24
             ) -> list[tuple[int, np.ndarray]]:
        """[(K, deltas)]: about ``n`` rows of the stratum, K in the law's proportions, each K's
        deltas at ``m_nodes`` quantiles of its rows' deltas (few distinct deltas keep a rule
        fast); [] when the stratum holds no such row."""
        t, mask = _law_mask(stratum, json.loads(self.law_json), self.seed, False)
        if declared:
            mask &= t["declared"][t["call"]]
        idx = np.flatnonzero(mask)
        if idx.size == 0:
            return []
        K = t["K"][t["call"][idx]]
        out = []
        for k in np.unique(K):
            d = t["delta"][idx[K == k]]
            count = max(int(round(n * d.size / idx.size)), 1)
            q = (np.arange(min(m_nodes, count)) + 0.5) / min(m_nodes, count)
            nodes = np.quantile(d, q, method="inverted_cdf")
            out.append((int(k), np.repeat(nodes, max(count // nodes.size, 1))))
        return out


def _rows_in(t: dict, st: Stratum, ok: np.ndarray, states: bool) -> np.ndarray:
    """The rows of the calls ``ok`` of :func:`_law_rows`' table inside the stratum (delta window,
    positions and chunk tail on the verify path)."""
    call, delta, pos = t["call"], t["delta"], t["position"]
    rows = ok[call] & (delta >= st.delta_lo) & (delta < st.delta_hi)
    if not states:
        lo = np.full(t["B"].size, st.pos_lo)
        if st.chunk is not None:
            lo = np.maximum(lo, (t["B"] // st.chunk) * st.chunk)
        rows &= pos >= lo[call]
        if st.pos_hi is not None:
            rows &= pos < st.pos_hi
    return rows


@functools.lru_cache(maxsize=2)
def _law_rows(law_json: str, seed: int) -> dict[str, np.ndarray]:
    """Per call (B, K, dtype, path, d, the wrapper's call count and K change, its deltas' range)
    and per row (delta as the rule sees it, call, position) of :func:`speccheck.sampler.calls.plan_calls`."""
    from speccheck.sampler.calls import PATHS, CallLaw, call_deltas, plan_calls

    law = CallLaw.from_dict(json.loads(law_json))
    calls = plan_calls(law, seed)
    n = len(calls)
    out = {k: np.zeros(n, dtype) for k, dtype in (("B", np.int64), ("K", np.int64), ("count", np.int64),
                                                   ("d", np.int64), ("lo", np.float64), ("hi", np.float64))}
    out.update({k: np.zeros(n, bool) for k in ("f32", "states", "k_changed", "declared")})
    deltas = []
    first_K, changed, served = None, False, 0
    for i, call in enumerate(calls):
        K, B = int(call["K"]), int(call["B"])
        if call["fresh"]:
            count, k_changed = 1, False
        else:
            served += 1
            first_K = K if first_K is None else first_K
            changed = changed or K != first_K
            count, k_changed = served, changed
        f32 = call["dtype"] == "float32"
        d = call_deltas(call, law)
        d = d.to(torch.float32).to(torch.float64) if f32 else d
        deltas.append(d.numpy())
        out["B"][i], out["K"][i], out["count"][i], out["k_changed"][i], out["f32"][i] = B, K, count, k_changed, f32
        out["states"][i] = call["path"] == PATHS[1]
        out["declared"][i] = call["pattern"] in ("constant", "levels")  # where draw_law reads the declaration
        out["d"][i] = math.prod(call.get("shape", [1]))
        out["lo"][i], out["hi"][i] = float(d.min()), float(d.max())
    out["delta"] = np.concatenate(deltas)
    out["call"] = np.repeat(np.arange(n), out["B"])
    out["position"] = np.arange(out["call"].size) - np.repeat(np.cumsum(out["B"]) - out["B"], out["B"])
    return out


# -------------------------------------------------------------------------- defect records
@dataclass(frozen=True)
class Effect:
    """What a defect does within its stratum, in the battery's units.

    ``pit``: sup_x |F(x) - x| of u = Phi(s_out - delta) over the stratum's rows (for
    ``shared-randomness``: of the pair statistic 1 - (1 - |u_a - u_b|)^2 of two rows that
    share; for ``states-*``: the larger of the PIT distances of a random-direction coordinate
    and of chi^2_d(|y - mu_q|^2 / sigma^2)); ``acc``: the acceptance shift (defect minus exact);
    ``pit_error`` / ``acc_error``: bounds on their Monte Carlo error at 99% (0 where exact);
    ``share``: the stratum's share of rows under the call law; ``ratio``: the larger of
    pit / ``mdd_pit`` and |acc| / ``mdd_acc`` (NaN for contract defects); ``method``: how.
    """

    pit: float
    pit_error: float
    acc: float
    acc_error: float
    share: float
    ratio: float
    mdd_pit: float
    mdd_acc: float
    n: int
    method: str


@dataclass(frozen=True)
class Defect:
    """One drawn defect (or exact control, ``group == "control"``) of the rule ``base``.

    ``family`` / ``group``: :data:`FAMILIES` (or ``control-<kind>``); ``mechanism``: what goes
    wrong on the stratum's rows (the family itself, or for a state / call-shape family one of
    accept-extra, residual-shift, levels-both); ``eps``: its size (a probability, a shift, a
    log-factor); ``sign``: its direction; ``effect``: :class:`Effect` (None for a control).
    """

    base: str
    family: str
    group: str
    mechanism: str
    stratum: Stratum
    eps: float
    sign: int = 1
    effect: Optional[Effect] = None
    seed: int = 0
    target_ratio: float = math.nan

    @property
    def is_control(self) -> bool:
        return self.group == "control"

    def describe(self) -> str:
        """One human line: what goes wrong, where, how large."""
        if self.is_control:
            return f"exact control '{self.family.removeprefix('control-')}' around {self.base}"
        what = {
            "accept-extra": f"a rejected row accepts its first child with probability {self.eps:.3g}",
            "accept-drop": f"an accepted row is reported rejected with a fresh target draw "
                           f"(probability {self.eps:.3g})",
            "flag": f"an accepted row is flagged rejected, s_out kept (probability {self.eps:.3g})",
            "levels-selection": f"selection at delta x {math.exp(self.sign * self.eps):.3g}, residual right",
            "levels-residual": f"residual of delta x {math.exp(self.sign * self.eps):.3g}, selection right",
            "levels-both": f"the rule runs at delta x {math.exp(self.sign * self.eps):.3g}",
            "residual-shift": f"residual shifted by {self.sign * self.eps:+.3g}",
            "residual-scale": f"residual scaled by {math.exp(self.sign * self.eps):.3g} around delta",
            "shared-randomness": f"pairs of rows share one random stream (probability {self.eps:.3g} per pair)",
            "declared": f"acceptance() declares {self.sign * self.eps:+.3g} off",
            "states-perp": f"verify_states: perpendicular part of rebuilt states scaled by "
                           f"{math.exp(self.sign * self.eps):.3g}",
            "states-sigma": f"verify_states: sigma taken x {math.exp(self.sign * self.eps):.3g}",
            "index-off": f"index off by one on accepted rows (probability {self.eps:.3g})",
            "global-rng": f"rejected rows redraw their residual from the global RNG (probability {self.eps:.3g})",
        }[self.mechanism]
        line = f"{self.family} ({self.group}) on {self.base}: {what}; where {self.stratum.describe()}"
        if self.effect is not None:
            e = self.effect
            line += (f"; effect PIT {e.pit:.3g} +- {e.pit_error:.2g}, acceptance {e.acc:+.3g} +- {e.acc_error:.2g}, "
                     f"share {e.share:.3g}, {e.ratio:.3g} x MDD")
        return line

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        return json.loads(json.dumps(d, default=str).replace("Infinity", '"inf"'))

    @classmethod
    def from_dict(cls, d: dict) -> Defect:
        def num(x: Any) -> Any:
            return math.inf if x == "inf" else x

        st = {k: num(v) for k, v in d["stratum"].items()}
        if st.get("Ks") is not None:
            st["Ks"] = tuple(int(k) for k in st["Ks"])
        eff = d.get("effect")
        kw = {k: num(v) for k, v in d.items() if k not in ("stratum", "effect")}
        return cls(stratum=Stratum(**st), effect=None if eff is None else Effect(**{k: num(v) for k, v in eff.items()}),
                   **kw)

    @property
    def token(self) -> str:
        """A compact string that :func:`from_token` turns back into the wrapped rule."""
        raw = zlib.compress(json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":")).encode(), 9)
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    @property
    def spec(self) -> str:
        """``"speccheck.validation.defects:defect_<token>"``: a verifier spec any battery path loads."""
        return f"{__name__}:defect_{self.token}"


def decode_token(token: str) -> Defect:
    """The :class:`Defect` of a token (:class:`LoadError` naming it when corrupt)."""
    try:
        raw = zlib.decompress(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        return Defect.from_dict(json.loads(raw))
    except (ValueError, TypeError, KeyError, zlib.error) as exc:
        raise LoadError(f"defect token {token[:24]!r}... is corrupt: {exc}") from None


def from_token(token: str) -> DefectiveRule:
    """The wrapped rule of a token (its base loaded by spec)."""
    return DefectiveRule(decode_token(token))


def __getattr__(name: str) -> Any:
    if name.startswith("defect_"):
        return from_token(name[len("defect_"):])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# ------------------------------------------------------------------------- the wrapped rule
def _load_base(spec: Any) -> Any:
    from speccheck.verifiers import get

    return get(spec)


def _uniform(n: int, like: Tensor, generator: Optional[torch.Generator]) -> Tensor:
    return torch.rand(n, generator=generator, dtype=torch.float64, device=like.device)


def _randn(shape: Any, like: Tensor, generator: Optional[torch.Generator]) -> Tensor:
    return torch.randn(shape, generator=generator, dtype=torch.float64, device=like.device)


def _residual_draws(base: Any, delta: Tensor, K: int, dtype: torch.dtype, generator: Optional[torch.Generator],
                    rounds: int = 4, copies: int = 8) -> tuple[Tensor, Tensor]:
    """Draws from the base rule's residual law at each ``delta`` (its output given rejection, on
    fresh N(0, 1) children), by running it until a row is rejected: (values, got); rows never
    rejected in ``rounds`` x ``copies`` tries have got = False."""
    n = delta.numel()
    out = torch.zeros(n, dtype=torch.float64, device=delta.device)
    got = torch.zeros(n, dtype=torch.bool, device=delta.device)
    for _ in range(rounds):
        pend = torch.nonzero(~got, as_tuple=True)[0]
        if pend.numel() == 0:
            break
        d_rep = delta[pend].repeat_interleave(copies)
        kids = _randn((d_rep.numel(), K), d_rep, generator).to(dtype)
        s_out, acc, _ = base.verify(d_rep, kids, generator)
        rej = (~acc).reshape(-1, copies)
        any_rej = rej.any(dim=1)
        first = torch.argmax(rej.to(torch.uint8), dim=1)
        vals = s_out.to(torch.float64).reshape(-1, copies)[torch.arange(pend.numel(), device=delta.device), first]
        out[pend[any_rej]] = vals[any_rej]
        got[pend[any_rej]] = True
    return out, got


def _pit(x: Tensor, delta: Tensor) -> Tensor:
    return torch.special.ndtr(x.to(torch.float64) - delta)


class DefectiveRule:
    """``base`` with ``defect`` injected (or an exact control). Keeps ``base``'s ``supports_K``
    and ``acceptance`` (the declaration is what the author believes; the ``declared`` family
    changes it); counts its calls and remembers its first K (the state families)."""

    def __init__(self, defect: Defect, base: Any = None):
        if not isinstance(defect, Defect):
            raise InputError(f"defect must be a Defect, got {type(defect).__name__}")
        self.defect = defect
        self.base = _load_base(defect.base) if base is None else base
        if not callable(getattr(self.base, "verify", None)):
            raise InputError(f"base {defect.base!r} has no verify method")
        tag = f"{zlib.crc32(defect.token.encode()):08x}"
        self.name = f"{getattr(self.base, 'name', defect.base)}+{defect.family}-{tag}"
        self.description = defect.describe()
        self.calls = 0
        self.first_K: Optional[int] = None
        self.k_changed = False

    def __repr__(self) -> str:
        return f"DefectiveRule({self.name!r})"

    def supports_K(self, K: int) -> bool:
        f = getattr(self.base, "supports_K", None)
        return True if f is None else bool(f(K))

    def __getattr__(self, name: str) -> Any:
        # ``acceptance`` exists exactly when the base declares one
        if name == "acceptance" and callable(getattr(self.__dict__.get("base"), "acceptance", None)):
            return self._acceptance
        raise AttributeError(name)

    def _acceptance(self, delta: Any, K: int) -> np.ndarray:
        a = np.asarray(self.base.acceptance(delta, K), dtype=np.float64)
        d = self.defect
        if d.mechanism != "declared" or (d.stratum.Ks is not None and K not in d.stratum.Ks):
            return a
        dl = np.broadcast_to(np.asarray(delta, dtype=np.float64), a.shape)
        inside = (dl >= d.stratum.delta_lo) & (dl < d.stratum.delta_hi)
        return np.where(inside, np.clip(a + d.sign * d.eps, 0.0, 1.0), a)

    # ------------------------------------------------------------------------- verify
    def verify(self, delta: Any, s: Any, generator: Optional[torch.Generator] = None) -> Triple:
        d64, s64 = check_verify_inputs(delta, s)
        B, K = s64.shape
        self.calls += 1
        if self.first_K is None:
            self.first_K = K
        elif K != self.first_K:
            self.k_changed = True
        dfc = self.defect
        if dfc.is_control:
            return self._control(dfc.family.removeprefix("control-"), delta, s, d64, generator)
        if dfc.mechanism == "declared" or dfc.group == "states" or B == 0:
            return self.base.verify(delta, s, generator)
        dtype = s.dtype if isinstance(s, torch.Tensor) else torch.float64
        if not dfc.stratum.call_matches(B, K, dtype, d64, self.calls, self.k_changed):
            return self.base.verify(delta, s, generator)
        rows = dfc.stratum.rows(d64, B)
        if not bool(rows.any()):
            return self.base.verify(delta, s, generator)
        return apply_mechanism(self.base, dfc.mechanism, dfc.eps, dfc.sign, delta, s, d64, rows, generator)

    def _control(self, kind: str, delta: Any, s: Any, d64: Tensor, generator: Optional[torch.Generator]) -> Triple:
        base = self.base
        s_t = s if isinstance(s, torch.Tensor) else torch.as_tensor(np.asarray(s, dtype=np.float64))
        B = s_t.shape[0]
        if kind == "none" or B == 0:
            return base.verify(delta, s, generator)
        dev = s_t.device
        if kind == "variable-draws":
            n = int(torch.randint(0, 65, (1,), generator=generator, device=dev))
            torch.rand(n, generator=generator, device=dev, dtype=torch.float64)
            return base.verify(delta, s, generator)
        if kind == "log-space":
            d2 = torch.where(d64 > 0, torch.exp(torch.log(torch.where(d64 > 0, d64, 1.0))), d64)
            return base.verify(d2, s_t, generator)
        if kind == "shuffle":
            perm = torch.randperm(B, generator=generator, device=dev)
            out = base.verify(d64[perm], s_t[perm], generator)
            inv = torch.empty_like(perm)
            inv[perm] = torch.arange(B, device=dev)
            return tuple(t[inv] for t in out)  # type: ignore[return-value]
        if kind == "padded":
            extra = int(torch.randint(0, 65, (1,), generator=generator, device=dev))
            pick = torch.randint(0, B, (extra,), generator=generator, device=dev)
            kids = _randn((extra, s_t.shape[1]), s_t, generator).to(s_t.dtype)
            out = base.verify(torch.cat([d64, d64[pick]]), torch.cat([s_t, kids]), generator)
            return tuple(t[:B] for t in out)  # type: ignore[return-value]
        if kind == "chunked":
            m = int(torch.randint(1, min(B, 8) + 1, (1,), generator=generator, device=dev))
            cuts = torch.sort(torch.randperm(B - 1, generator=generator, device=dev)[: m - 1] + 1).values.tolist()
            edges = [0] + cuts + [B]
            parts = [base.verify(d64[a:b], s_t[a:b], generator) for a, b in zip(edges[:-1], edges[1:])]
            return tuple(torch.cat([p[i] for p in parts]) for i in range(3))  # type: ignore[return-value]
        raise InputError(f"unknown control {kind!r}; allowed: {', '.join(CONTROLS)}")

    # --------------------------------------------------------------- the d-dim wrapper
    def verify_states(self, mu_p: Tensor, mu_q: Tensor, sigma: Any, children: Tensor,
                      generator: Optional[torch.Generator] = None) -> Triple:
        dfc = self.defect
        own = getattr(self.base, "verify_states", None)
        if dfc.group != "states":
            if callable(own):
                return own(mu_p, mu_q, sigma, children, generator)
            return shared_verify_states(self, mu_p, mu_q, sigma, children, generator)
        return states_mechanism(self.base, dfc.mechanism, dfc.eps, dfc.sign, dfc.stratum, mu_p, mu_q, sigma,
                                children, generator)


def apply_mechanism(base: Any, mechanism: str, eps: float, sign: int, delta: Any, s: Any, d64: Tensor, rows: Tensor,
                    generator: Optional[torch.Generator], base_out: Optional[Triple] = None) -> Triple:
    """The base rule's output on (delta, s) with ``mechanism`` of size ``eps`` on ``rows`` [B].

    ``base_out``: the base's output on (delta, s) already computed with ``generator`` (which is
    then in its state after that call); the mechanisms that keep the base's selection reuse it."""
    s_t = s if isinstance(s, torch.Tensor) else torch.as_tensor(np.asarray(s, dtype=np.float64))
    B, K = s_t.shape
    factor = math.exp(sign * eps)
    if mechanism in ("levels-both", "levels-selection"):
        d_wrong = torch.where(rows, (d64 * factor).clamp(max=40.0), d64)
        s_out, acc, idx = base.verify(d_wrong, s_t, generator)
    elif base_out is not None:
        s_out, acc, idx = base_out
    else:
        s_out, acc, idx = base.verify(delta, s_t, generator)
    s_out, acc, idx = s_out.clone(), acc.clone(), idx.clone()
    out_dtype = s_out.dtype
    if mechanism in ("accept-extra", "accept-drop", "flag", "index-off", "global-rng"):
        u = _uniform(B, d64, generator)
        if mechanism == "accept-extra":
            take = rows & ~acc & (u < eps)
            s_out = torch.where(take, s_t[:, 0].to(out_dtype), s_out)
            acc, idx = acc | take, torch.where(take, torch.zeros_like(idx), idx)
        elif mechanism == "accept-drop":
            take = rows & acc & (u < eps)
            fresh = (d64 + _randn(B, d64, generator)).to(out_dtype)
            s_out = torch.where(take, fresh, s_out)
            acc, idx = acc & ~take, torch.where(take, torch.full_like(idx, K), idx)
        elif mechanism == "flag":
            take = rows & acc & (u < eps)
            acc, idx = acc & ~take, torch.where(take, torch.full_like(idx, K), idx)
        elif mechanism == "index-off" and K > 1:
            take = rows & acc & (u < eps)
            idx = torch.where(take, (idx + 1) % K, idx)
        elif mechanism == "global-rng":
            take = torch.nonzero(rows & ~acc & (u < eps), as_tuple=True)[0]
            if take.numel():
                vals, got = _residual_draws(base, d64[take], K, s_t.dtype, None)
                s_out[take[got]] = vals[got].to(out_dtype)
        return s_out, acc, idx
    rej = rows & ~acc
    if mechanism == "residual-shift":
        s_out = torch.where(rej, (s_out.to(torch.float64) + sign * eps).to(out_dtype), s_out)
    elif mechanism == "residual-scale":
        scaled = d64 + (s_out.to(torch.float64) - d64) * factor
        s_out = torch.where(rej, scaled.to(out_dtype), s_out)
    elif mechanism in ("levels-selection", "levels-residual"):
        where = torch.nonzero(rej, as_tuple=True)[0]
        if where.numel():
            d_res = d64[where] if mechanism == "levels-selection" else (d64[where] * factor).clamp(max=40.0)
            vals, got = _residual_draws(base, d_res, K, s_t.dtype, generator)
            s_out[where[got]] = vals[got].to(out_dtype)
    elif mechanism == "shared-randomness":
        where = torch.nonzero(rows, as_tuple=True)[0]
        m = where.numel() // 2
        if m and generator is not None:
            pairs = where[: 2 * m].reshape(m, 2)
            pairs = pairs[_uniform(m, d64, generator) < eps]
            if pairs.numel():
                a, b = pairs[:, 0], pairs[:, 1]
                state = generator.get_state()
                out_a = base.verify(d64[a], s_t[a], generator)
                after = generator.get_state()
                generator.set_state(state)
                out_b = base.verify(d64[b], s_t[b], generator)
                generator.set_state(after)
                for r, o in ((a, out_a), (b, out_b)):
                    s_out[r], acc[r], idx[r] = o[0].to(out_dtype), o[1], o[2].to(idx.dtype)
    elif mechanism != "levels-both":
        raise InputError(f"unknown mechanism {mechanism!r}")
    return s_out, acc, idx


def states_mechanism(base: Any, mechanism: str, eps: float, sign: int, stratum: Stratum, mu_p: Tensor, mu_q: Tensor,
                     sigma: Any, children: Tensor, generator: Optional[torch.Generator]) -> Triple:
    """``verify_states`` of ``base`` (its own, else the shared wrapper) with a wrapper defect on the
    stratum's rows: ``states-perp`` scales the perpendicular part of rebuilt (rejected) states,
    ``states-sigma`` standardises with sigma x exp(sign eps)."""
    own = getattr(base, "verify_states", None)

    def run(sig: Any) -> Triple:
        if callable(own):
            return own(mu_p, mu_q, sig, children, generator)
        return shared_verify_states(base, mu_p, mu_q, sig, children, generator)

    delta, e, _, _, sig = project(mu_p, mu_q, sigma, children)
    B = delta.shape[0]
    d = int(np.prod(mu_p.shape[1:])) if mu_p.dim() > 1 else 1
    rows = (delta >= stratum.delta_lo) & (delta < stratum.delta_hi)
    rows &= (sig >= stratum.sigma_lo) & (sig < stratum.sigma_hi)
    if d < stratum.d_lo or not bool(rows.any()):
        return run(sigma)
    factor = math.exp(sign * eps)
    if mechanism == "states-sigma":
        return run(torch.where(rows, sig * factor, sig))
    y, acc, idx = run(sigma)
    fix = rows & ~acc
    z = (y.reshape(B, -1).to(torch.float64) - mu_p.reshape(B, -1).to(torch.float64)) / sig[:, None]
    along = (z * e).sum(dim=1, keepdim=True) * e
    z2 = along + factor * (z - along)
    y2 = (mu_p.reshape(B, -1).to(torch.float64) + sig[:, None] * z2).reshape(mu_p.shape).to(y.dtype)
    return torch.where(fix.reshape((B,) + (1,) * (y.dim() - 1)), y2, y), acc, idx


# ------------------------------------------------------------------------------ the effect
def _sup_diff(a: np.ndarray, b: np.ndarray) -> float:
    """sup_x |F_a(x) - F_b(x)| of two empirical CDFs."""
    a, b = np.sort(a), np.sort(b)
    x = np.concatenate([a, b])
    fa = np.searchsorted(a, x, side="right") / a.size
    return float(np.max(np.abs(fa - np.searchsorted(b, x, side="right") / b.size)))


#: at most this many K of a stratum enter the effect's Monte Carlo (spread over the stratum's K)
EFFECT_KS = 6


def _acc_error(diff: np.ndarray) -> float:
    """99% bound on the Monte Carlo error of a mean of per-row acceptance differences."""
    return 2.576 * float(diff.std()) / math.sqrt(diff.size) + 1.0 / diff.size


def _stratum_rows(law: CallSpace, stratum: Stratum, base: Any, n: int, m_nodes: int = 24
                  ) -> list[tuple[int, np.ndarray]]:
    """[(K, deltas)]: ``n`` rows of the stratum's (delta, K) law, split evenly over at most
    :data:`EFFECT_KS` of its K (spread over them), deltas on ``m_nodes`` quantile nodes (few
    distinct deltas keep the base rule fast)."""
    Ks = [K for K in (stratum.Ks or law.Ks) if K in law.Ks and _supports(base, K)]
    if not Ks:
        raise InputError(f"stratum {stratum.describe()} holds no K the rule supports")
    if len(Ks) > EFFECT_KS:
        Ks = [Ks[i] for i in np.unique(np.round(np.linspace(0, len(Ks) - 1, EFFECT_KS)).astype(int))]
    nodes, weights = law.delta_nodes(stratum.delta_lo, stratum.delta_hi, m_nodes)
    per_K = max(n // len(Ks), 64)
    counts = np.maximum(np.round(weights * per_K).astype(int), 1)
    deltas = np.repeat(nodes, counts)
    return [(K, deltas) for K in Ks]


def _effect_rows(law: Any, stratum: Stratum, base: Any, n: int) -> list[tuple[int, np.ndarray]]:
    """The stratum's rows for an effect: the battery's law's own (a :class:`BatteryLaw`, where the
    stratum holds any), else the model's (:class:`CallSpace`)."""
    if isinstance(law, BatteryLaw):
        got = [(K, d) for K, d in law.rows(stratum, n) if _supports(base, K)]
        return got or _stratum_rows(CallSpace(), stratum, base, n)
    return _stratum_rows(law, stratum, base, n)


def _supports(base: Any, K: int) -> bool:
    f = getattr(base, "supports_K", None)
    return True if f is None else bool(f(K))


_EXACT_CACHE: dict = {}


def _exact_runs(base: Any, stratum: Stratum, law: CallSpace, n: int, seed: int, pairs: bool) -> list:
    """[(K, delta, s, exact output, generator state after it)] of the stratum's rows: the exact
    base's runs that every size tried by the bisection shares (cached for the last stratum)."""
    key = (id(base), stratum, law, n, seed, pairs)
    if key in _EXACT_CACHE and _EXACT_CACHE[key][0] is base:  # the cache holds base: its id is not reused
        return _EXACT_CACHE[key][1]
    runs = []
    for K, deltas in _effect_rows(law, stratum, base, n):
        if pairs:  # pairs of equal delta (the constant calls of a sampler)
            deltas = np.repeat(deltas[: deltas.size // 2], 2)
        d = torch.as_tensor(deltas)
        s = torch.randn(d.numel(), K, generator=make_generator(seed + K), dtype=torch.float64)
        g = make_generator(seed + 1000 + K)
        ex = base.verify(d, s, g)
        runs.append((K, d, s, ex, g.get_state()))
    _EXACT_CACHE.clear()
    _EXACT_CACHE[key] = (base, runs)
    return runs


def measure_effect(base: Any, mechanism: str, eps: float, sign: int, stratum: Stratum, law: CallSpace, *, n: int,
                   seed: int) -> tuple[float, float, float, float, int]:
    """(pit, pit_error, acc, acc_error, rows) of ``mechanism`` applied to every row of the
    stratum's (delta, K) law: common random numbers (the exact base and the defect on the same
    children and generator seed), so only the rows the defect changes add noise; errors are 99%
    bounds (two DKW bands for the PIT, a normal bound for the acceptance)."""
    if mechanism == "declared":
        acc = _declared_shift(base, eps, sign, stratum, law)
        return 0.0, 0.0, acc, 0.0, 0
    if mechanism in ("states-perp", "states-sigma"):
        model = CallSpace() if isinstance(law, BatteryLaw) else law
        return _states_effect(base, mechanism, eps, sign, stratum, model, n=n, seed=seed)
    u_def, u_ex, acc_diff = [], [], []
    for _K, d, s, ex, state in _exact_runs(base, stratum, law, n, seed, mechanism == "shared-randomness"):
        g = torch.Generator()
        g.set_state(state)
        rows = torch.ones(d.numel(), dtype=torch.bool)
        de = apply_mechanism(base, mechanism, eps, sign, d, s, d, rows, g, base_out=ex)
        pe, pd = _pit(ex[0], d).numpy(), _pit(de[0], d).numpy()
        if mechanism == "shared-randomness":
            pe, pd = (1 - (1 - np.abs(pe[0::2] - pe[1::2])) ** 2), (1 - (1 - np.abs(pd[0::2] - pd[1::2])) ** 2)
        u_ex.append(pe)
        u_def.append(pd)
        acc_diff.append(de[1].numpy().astype(float) - ex[1].numpy().astype(float))
    ue, ud, ad = np.concatenate(u_ex), np.concatenate(u_def), np.concatenate(acc_diff)
    if mechanism in ("accept-drop", "flag"):  # s_out's law is untouched: exactly 0
        return 0.0, 0.0, float(ad.mean()), _acc_error(ad), int(ad.size)
    pit = _sup_diff(ud, ue)
    acc = float(ad.mean())
    return pit, 2 * dkw_threshold(ue.size, 0.01), acc, _acc_error(ad), int(ad.size)


def _declared_shift(base: Any, eps: float, sign: int, stratum: Stratum, law: CallSpace) -> float:
    """Mean |declared - true| over the stratum's (delta, K) law: exact (quadrature nodes)."""
    if not callable(getattr(base, "acceptance", None)):
        raise InputError("the declared family needs a base rule with acceptance()")
    if isinstance(law, BatteryLaw):  # the rows where draw_law reads the declaration, and no other
        rows = law.rows(stratum, 4096, declared=True)
        n = sum(d.size for _, d in rows)
        return sum(float(np.sum(np.clip(a + sign * eps, 0, 1) - a)) for a in
                   (np.asarray(base.acceptance(d, K), dtype=np.float64) for K, d in rows)) / n if n else 0.0
    total, count = 0.0, 0
    for K, _ in _stratum_rows(law, stratum, base, 64):
        nodes, weights = law.delta_nodes(stratum.delta_lo, stratum.delta_hi, 16)
        a = np.asarray(base.acceptance(nodes, K), dtype=np.float64)
        total += float(np.sum(weights * (np.clip(a + sign * eps, 0, 1) - a)))
        count += 1
    return total / count


def _states_effect(base: Any, mechanism: str, eps: float, sign: int, stratum: Stratum, law: CallSpace, *, n: int,
                   seed: int) -> tuple[float, float, float, float, int]:
    from scipy import stats

    dims = [d for d in law.dims if d >= max(stratum.d_lo, 2 if mechanism == "states-perp" else 1)]
    if not dims:
        raise InputError(f"the call law has no state dimension >= {stratum.d_lo}")
    if len(dims) > 3:  # the smallest, a middle and the largest dimension
        dims = [dims[0], dims[len(dims) // 2], dims[-1]]
    per = max(n // (2 * len(dims)), 256)
    K = 3 if _supports(base, 3) else 1
    t_ex, t_de, acc_diff = [[], []], [[], []], []
    slo, shi = max(stratum.sigma_lo, law.sigma_lo), min(stratum.sigma_hi, law.sigma_hi)
    if shi <= slo:
        raise InputError(f"stratum sigma window [{stratum.sigma_lo}, {stratum.sigma_hi}) is outside the call law's")
    for d in dims:
        rows = max(min(per, (1 << 21) // (d * (K + 2))), 256)
        g = torch.Generator().manual_seed(seed + d)
        nodes, weights = law.delta_nodes(stratum.delta_lo, stratum.delta_hi, 16)
        dl = torch.as_tensor(np.repeat(nodes, np.maximum(np.round(weights * rows).astype(int), 1)))
        B = dl.numel()
        span = math.log(shi) - math.log(slo)
        sig = torch.exp(math.log(slo) + span * torch.rand(B, generator=g, dtype=torch.float64))
        mu_p = torch.randn(B, d, generator=g, dtype=torch.float64)
        e = torch.randn(B, d, generator=g, dtype=torch.float64)
        e = e / torch.linalg.vector_norm(e, dim=1, keepdim=True)
        mu_q = mu_p + (sig * dl)[:, None] * e
        kids = mu_p[:, None, :] + sig[:, None, None] * torch.randn(B, K, d, generator=g, dtype=torch.float64)
        r = torch.randn(B, d, generator=g, dtype=torch.float64)
        r = r / torch.linalg.vector_norm(r, dim=1, keepdim=True)
        ex = shared_verify_states(base, mu_p, mu_q, sig, kids, make_generator(seed + 7 + d)) \
            if not callable(getattr(base, "verify_states", None)) else \
            base.verify_states(mu_p, mu_q, sig, kids, make_generator(seed + 7 + d))
        de = states_mechanism(base, mechanism, eps, sign, Stratum(), mu_p, mu_q, sig, kids,
                              make_generator(seed + 7 + d))
        for out, tgt in ((ex, t_ex), (de, t_de)):
            z = (out[0] - mu_q) / sig[:, None]
            tgt[0].append(torch.special.ndtr((z * r).sum(dim=1)).numpy())
            tgt[1].append(stats.chi2.cdf((z * z).sum(dim=1).numpy(), d))
        acc_diff.append(de[1].numpy().astype(float) - ex[1].numpy().astype(float))
    pit = max(_sup_diff(np.concatenate(t_de[i]), np.concatenate(t_ex[i])) for i in range(2))
    m = sum(x.size for x in t_ex[0])
    ad = np.concatenate(acc_diff)
    return pit, 2 * dkw_threshold(m, 0.01), float(ad.mean()), _acc_error(ad), m


def _ratio(pit: float, acc: float, mdd_pit: float, mdd_acc: float) -> float:
    return max(pit / mdd_pit, abs(acc) / mdd_acc)


# ------------------------------------------------------------------------------- drawing
def _draw_stratum(family: str, rng: np.random.Generator, law: CallSpace, Ks: tuple[int, ...], min_share: float,
                  share_seed: int, share: Optional[Any] = None) -> tuple[Stratum, float]:
    """A random stratum for ``family`` whose share of rows is >= ``min_share`` (rejection,
    bounded: after 200 tries the delta and K windows are dropped)."""
    lo_l, hi_l = math.log(law.delta_lo), math.log(law.delta_hi)
    last = None
    for attempt in range(201):
        kw: dict[str, Any] = {}
        if attempt < 200:
            width = rng.uniform(0.15, 1.0) * (hi_l - lo_l)
            a = rng.uniform(lo_l - 0.05 * (hi_l - lo_l), hi_l - width)
            kw["delta_lo"] = 0.0 if a < lo_l else float(math.exp(a))
            kw["delta_hi"] = math.inf if a + width >= hi_l - 1e-9 else float(math.exp(a + width))
            if rng.random() < 0.5 and len(Ks) > 1 and not family.startswith("states"):
                i = int(rng.integers(0, len(Ks)))
                j = int(rng.integers(i + 1, len(Ks) + 1))
                kw["Ks"] = tuple(Ks[i:j])
        if family == "stale-calls":
            kw["call_lo"] = int(math.exp(rng.uniform(math.log(10), math.log(1000))))
        elif family == "stale-K":
            kw["after_K_change"] = True
        elif family == "batch-size":
            b_lo = int(math.exp(rng.uniform(0, math.log(law.B_max))))
            kw["B_lo"], kw["B_hi"] = b_lo, min(law.B_max, b_lo * int(rng.integers(4, 256)))
        elif family == "batch-tail":
            kw["chunk"] = int(rng.choice([256, 512, 1024, 2048, 4096]))
        elif family == "dtype":
            kw["dtype"] = "float32"
        elif family == "near-constant":
            kw["near"] = float(rng.choice([0.01, 0.05, 0.1]))
        elif family == "position":
            kw["pos_lo"] = int(math.exp(rng.uniform(0, math.log(8192))))
        elif family in ("states-perp", "states-sigma"):
            kw["d_lo"] = int(rng.choice([1, 2, 16])) if family == "states-sigma" else int(rng.choice([2, 16]))
            if rng.random() < 0.5:
                s_lo = math.exp(rng.uniform(math.log(law.sigma_lo), math.log(law.sigma_hi) - 1.0))
                kw["sigma_lo"], kw["sigma_hi"] = s_lo, s_lo * math.exp(rng.uniform(1.0, 2.5))
        st = Stratum(**kw)
        got = call_share(st, law, seed=share_seed) if share is None else share(st, family)
        last = (st, got)
        if got >= min_share:
            return st, got
    return last  # type: ignore[return-value]


def draw_defect(base: Any, rng: np.random.Generator, *, ratio: float, mdd_pit: float, mdd_acc: float,
                family: Optional[str] = None, group: Optional[str] = None, law: Optional[CallSpace] = None,
                min_share: float = 0.05, n_effect: int = 1 << 15, tries: int = 3,
                share: Optional[Any] = None, effect_law: Optional[BatteryLaw] = None) -> Defect:
    """Draw one defect of the rule ``base`` (a name or ``"module:attr"``; an object works
    in-process, but its token then needs ``base`` at load) from ``rng``, sized so that its effect
    (:class:`Effect`) is about ``ratio`` times the MDDs (``mdd_pit``: PIT sup-distance;
    ``mdd_acc``: acceptance shift) in a stratum holding >= ``min_share`` of the rows under
    ``law``. ``family`` or ``group`` restrict the draw. The size is found by bisection on a
    Monte Carlo with common random numbers; an effect the family cannot reach keeps its largest
    size (``effect.ratio`` then says what it reached) after ``tries`` draws of the stratum and
    mechanism. Contract families are not sized (ratio NaN). ``share(stratum, family)``: the
    stratum's share of rows to draw against instead of ``law``'s (e.g. :func:`law_share` under
    the battery's own law of calls, so that the defect lives where the battery sends its rows);
    ``effect_law``: measure the effect over the stratum's rows of the battery's own law of calls
    (:class:`BatteryLaw`) instead of the model's.
    """
    if not (isinstance(ratio, (int, float)) and ratio > 0 and math.isfinite(ratio)):
        raise InputError(f"ratio must be a finite number > 0, got ratio={ratio!r}")
    for label, v in (("mdd_pit", mdd_pit), ("mdd_acc", mdd_acc)):
        if not (isinstance(v, (int, float)) and 0 < v <= 1):
            raise InputError(f"{label} must be in (0, 1], got {label}={v!r}")
    if not 0 < min_share <= 1:
        raise InputError(f"min_share must be in (0, 1], got min_share={min_share!r}")
    law = law or CallSpace()
    rule = _load_base(base)
    spec = base if isinstance(base, str) else getattr(rule, "name", type(rule).__name__)
    has_acc = callable(getattr(rule, "acceptance", None))
    if family is None:
        choices = [f for f, g in FAMILIES.items() if group is None or g == group]
        if not has_acc:
            choices = [f for f in choices if f != "declared"]
        if not any(_supports(rule, K) for K in law.Ks if K > 1):
            choices = [f for f in choices if f not in ("index-off", "stale-K")]
        if not choices:
            raise InputError(f"group {group!r} has no family for rule {spec!r}; groups: {', '.join(GROUPS)}")
        family = str(rng.choice(choices))
    elif family not in FAMILIES:
        raise InputError(f"unknown family {family!r}; allowed: {', '.join(FAMILIES)}")
    if family == "declared" and not has_acc:
        raise InputError(f"rule {spec!r} declares no acceptance(): the declared family does not apply")
    Ks = tuple(K for K in law.Ks if _supports(rule, K))
    if not Ks:
        raise InputError(f"rule {spec!r} supports none of the call law's K {law.Ks}")
    law = dataclasses.replace(law, Ks=Ks)  # the calls this rule gets: only the K it supports
    if family == "stale-K" and len(Ks) == 1:
        raise InputError(f"rule {spec!r} supports one K only: the stale-K family does not apply")
    if family == "index-off":  # an index off by one needs two children
        Ks = tuple(K for K in Ks if K > 1)
        if not Ks:
            raise InputError(f"rule {spec!r} supports no K > 1: the index-off family does not apply")
    seed = int(rng.integers(0, 2**62))
    share_fn = share

    def share_of(st: Stratum) -> float:
        return call_share(st, law, seed=seed % (2**31)) if share_fn is None else share_fn(st, family)

    stratum, share = _draw_stratum(family, rng, law, Ks, min_share, seed % (2**31), share_fn)
    if family == "index-off" and stratum.Ks is None and 1 in law.Ks:
        stratum = dataclasses.replace(stratum, Ks=Ks)
        share = share_of(stratum)
    mechanism = str(rng.choice(_INNER)) if family in _TRIGGERED else family
    sign = int(rng.choice([-1, 1])) if mechanism in _SIGNED else 1
    if mechanism in ("levels-selection", "levels-residual", "levels-both") and stratum.delta_lo == 0 \
            and stratum.delta_hi < law.delta_lo * 10:
        sign = 1
    common = {"base": spec, "family": family, "group": FAMILIES[family], "mechanism": mechanism, "stratum": stratum,
              "sign": sign, "seed": seed, "target_ratio": float(ratio)}
    if FAMILIES[family] == "contract":
        eps = float(math.exp(rng.uniform(math.log(0.01), 0.0)))
        eff = Effect(pit=0.0, pit_error=0.0, acc=0.0, acc_error=0.0, share=share, ratio=math.nan, mdd_pit=mdd_pit,
                     mdd_acc=mdd_acc, n=0, method="deterministic (contract checks)")
        return Defect(eps=eps, effect=eff, **common)

    def at(mech: str, st: Stratum, sgn: int, eps: float, n: int) -> tuple[float, float, float, float, int]:
        return measure_effect(rule, mech, eps, sgn, st, effect_law or law, n=n, seed=seed % (2**31))

    n_cal = max(n_effect // 4, 1024)
    best = None
    for attempt in range(tries):  # a mechanism the stratum cannot make large enough is redrawn
        top = at(mechanism, stratum, sign, _EPS_MAX[mechanism], n_cal)
        reach = _ratio(top[0], top[2], mdd_pit, mdd_acc)
        if best is None or reach > best[0]:
            best = (reach, stratum, share, mechanism, sign)
        if reach >= ratio or attempt == tries - 1:
            break
        stratum, share = _draw_stratum(family, rng, law, Ks, min_share, seed % (2**31), share_fn)
        mechanism = str(rng.choice(_INNER)) if family in _TRIGGERED else family
        sign = int(rng.choice([-1, 1])) if mechanism in _SIGNED else 1
    reach, stratum, share, mechanism, sign = best
    common.update(stratum=stratum, mechanism=mechanism, sign=sign)
    lo, hi = 0.0, _EPS_MAX[mechanism]
    if reach > ratio:
        for _ in range(14):
            mid = 0.5 * (lo + hi)
            r = _ratio(*at(mechanism, stratum, sign, mid, n_cal)[0:3:2], mdd_pit, mdd_acc)
            if r < ratio:
                lo = mid
            else:
                hi = mid
            if abs(r - ratio) < 0.03 * ratio:
                hi = mid
                break
    pit, pit_err, acc, acc_err, n = at(mechanism, stratum, sign, hi, n_effect)
    for _ in range(4):  # the final, larger sample may land under the target: step the size up a little
        if _ratio(pit, acc, mdd_pit, mdd_acc) >= ratio or hi >= _EPS_MAX[mechanism]:
            break
        hi = min(_EPS_MAX[mechanism], hi * 1.06)
        pit, pit_err, acc, acc_err, n = at(mechanism, stratum, sign, hi, n_effect)
    method = ("exact (declared acceptance vs the base's, 16 quadrature deltas per K)" if mechanism == "declared" else
              f"Monte Carlo, {n} rows, seed {seed % (2**31)}, common random numbers vs the exact base")
    if effect_law is not None and not mechanism.startswith("states"):
        method += "; over the stratum's rows of the battery's law of calls" + (
            " where it reads the declaration" if mechanism == "declared" else "")
    eff = Effect(pit=pit, pit_error=pit_err, acc=acc, acc_error=acc_err, share=share,
                 ratio=_ratio(pit, acc, mdd_pit, mdd_acc), mdd_pit=mdd_pit, mdd_acc=mdd_acc, n=n, method=method)
    return Defect(eps=float(hi), effect=eff, **common)


def draw_control(base: Any, rng: np.random.Generator, kind: Optional[str] = None) -> Defect:
    """An exact control (``kind`` in :data:`CONTROLS`, or drawn from ``rng``)."""
    kind = str(rng.choice(CONTROLS)) if kind is None else kind
    if kind not in CONTROLS:
        raise InputError(f"unknown control {kind!r}; allowed: {', '.join(CONTROLS)}")
    spec = base if isinstance(base, str) else getattr(base, "name", type(base).__name__)
    return Defect(base=spec, family=f"control-{kind}", group="control", mechanism="none", stratum=Stratum(), eps=0.0,
                  seed=int(rng.integers(0, 2**62)))


def wrap(defect: Defect, base: Any = None) -> DefectiveRule:
    """The rule ``base`` (default: loaded from ``defect.base``) with ``defect`` injected."""
    return DefectiveRule(defect, base)


__all__ = ["CONTROLS", "FAMILIES", "GROUPS", "STATISTICAL_GROUPS", "BatteryLaw", "CallSpace", "Defect", "DefectiveRule",
           "Effect", "Stratum", "apply_mechanism", "call_share", "decode_token", "draw_control", "draw_defect",
           "from_token", "law_share", "measure_effect", "states_mechanism", "wrap"]
