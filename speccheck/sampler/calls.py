"""One law of ``verify`` calls shaped like a sampler's, and the code that drives a rule through them.

This is the drawing half of the battery's law layer (L7). It imports nothing from
``speccheck.validation``: in the process that runs the rule under test, the code that calls
``verify`` is the kind of code a sampler runs (torch, numpy, :mod:`speccheck.verifiers`), so a
rule that looks for the test harness's modules finds none. The statistics are computed
elsewhere, from the raw arrays :func:`draw_law` returns.

The law (every draw from numpy's generator seeded by the unit's seed):

- *instances*: one long-lived instance serves most calls (thousands of them, its age counted);
  a share ``fresh_share`` of the calls goes to a fresh copy of the rule instead (age 0); the
  long-lived instance's first call has the smallest K, its second the largest;
- *batch size* B: an octave j in 0 .. log2(``max_batch``) with probability proportional to
  2^(-``octave_tilt`` j) (so the rows spread over the octaves instead of sitting in the largest
  calls), B uniform in [2^j, 2^(j+1)) (and <= ``max_batch``); a share ``edge_share`` of the calls instead sits just
  around a chunk boundary (c - 1, c, c + 1 for c in :data:`CHUNK_EDGES`);
- *K*: uniform on the rule's supported K;
- *deltas*: the long-lived instance's delta range changes every ``epoch`` calls (a window of
  1 to 6 decades, log-uniform inside [``delta_lo``, ``delta_hi``]); a call's deltas follow one of
  :data:`PATTERNS`: *constant* (one delta) and *levels* (2..4 deltas in random rows), their
  deltas taken from the unit's ``points`` points (delta, K) (delta log-uniform, 0 with
  probability ``zero_share``; inside the window where one is), *near* (a centre times 1 + e (2U - 1), e log-uniform on
  [1e-9, 0.05]), *mixed* (log-uniform per row, 0 with probability ``zero_share``), *sorted*
  and *reversed* (mixed, sorted up / down);
- *dtype*: float32 with probability ``float32_share`` (the contract allows it), else float64;
- *path*: a share ``states_share`` of the calls goes through ``verify_states`` (the rule's own
  or :func:`speccheck.verifiers.verify_states`) with states of :data:`STATE_SHAPES`, sigma a
  float or a per-row tensor in [0.3, 3] (never 1 exactly), the displacement sigma * delta along
  a random unit direction;
- s[b, :] i.i.d. N(0, 1) (children N(mu_p, sigma^2 I) on the state path).

Per row the raw output holds z = s_out - delta in float64 (on the state path, the output's
standardised projection on the displacement minus delta, and ``zp`` its projection on a random
direction orthogonal to it), the accepted flag, the declared acceptance (every row of constant
and levels calls, read once per point, and ``probe_rows`` rows of the others; NaN elsewhere: a
declaration may cost milliseconds per delta), and per call its covariates. The contract is checked on every call
(shapes and dtypes by :func:`speccheck.verifiers.base.output_problems`, index == K iff rejected,
accepted => s_out == s[index], finite outputs, inputs unchanged) and so is the rule's use of the
global generators: the torch, numpy and ``random`` global states are compared before and after
every call (a deterministic check; numpy's and ``random``'s in a process with one thread only).
The time inside ``verify`` is measured.
"""

from __future__ import annotations

import copy
import math
import random
import threading
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable

import numpy as np
import torch

from speccheck.errors import DeviceError
from speccheck.seeding import generator as make_generator
from speccheck.verifiers.base import normalize_verify_outputs, output_problems

__all__ = ["CHUNK_EDGES", "CONTRACT_TESTS", "DTYPES", "PATHS", "PATTERNS", "STATE_SHAPES", "CallLaw", "call_deltas",
           "draw_law", "plan_calls"]

PATTERNS = ("constant", "levels", "near", "mixed", "sorted", "reversed")
#: pattern weights (share of calls): three quarters of the calls have few distinct deltas (constant,
#: levels), where the declared acceptance is read for every row: the rows the acceptance tests and
#: the promise's acceptance shift rest on (a declaration may cost tens of ms per delta, so the other
#: patterns' rows carry none); the others keep every pattern a sampler makes
PATTERN_WEIGHTS = (0.35, 0.4, 0.1, 0.05, 0.05, 0.05)
DTYPES = ("float64", "float32")
PATHS = ("verify", "verify_states")
#: chunk sizes kernels use (and the largest batch): calls sit at c - 1, c, c + 1
CHUNK_EDGES = (256, 1024, 4096, 16384, 65536)
#: state shapes of the verify_states path: d = 1, 2, 3, 5, 64 (as 4 x 16), 60 (as 3 x 4 x 5)
STATE_SHAPES = ((1,), (2,), (3,), (5,), (4, 16), (3, 4, 5))
#: the deterministic checks of every call, in report order
CONTRACT_TESTS = ("contract:no-exception", "contract:shape", "contract:dtype", "contract:index",
                  "contract:accepted-equals-child", "contract:finite", "contract:inputs-unchanged",
                  "contract:global-rng")
_STATE_ELEMENTS = 1 << 21  # B * K * d of one verify_states call at most (memory)


@dataclass(frozen=True)
class CallLaw:
    """Parameters of the law (a suite's ``[law]`` section; see the module docstring)."""

    rows: int
    Ks: tuple[int, ...]
    max_batch: int = 100_000
    octave_tilt: float = 0.45
    edge_share: float = 0.05
    delta_lo: float = 1e-4
    delta_hi: float = 40.0
    zero_share: float = 0.05
    epoch: int = 100
    fresh_share: float = 0.1
    states_share: float = 0.1
    float32_share: float = 0.5
    points: int = 64
    probe_rows: int = 0

    def to_dict(self) -> dict:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, d: dict) -> CallLaw:
        kw = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        kw["Ks"] = tuple(int(k) for k in kw["Ks"])
        return cls(**kw)


def _batch(law: CallLaw, rng: np.random.Generator) -> int:
    if rng.random() < law.edge_share:  # each boundary with the same expected rows
        edges = np.array([c for c in CHUNK_EDGES if c <= law.max_batch] or [law.max_batch], dtype=np.float64)
        c = int(rng.choice(edges, p=(1.0 / edges) / (1.0 / edges).sum()))
        return max(1, min(law.max_batch + 1, c + int(rng.integers(-1, 2))))
    top = max(int(math.floor(math.log2(law.max_batch))), 0)
    w = 2.0 ** (-law.octave_tilt * np.arange(top + 1))
    j = int(rng.choice(top + 1, p=w / w.sum()))
    return int(rng.integers(2 ** j, min(2 ** (j + 1), law.max_batch + 1)))


def plan_calls(law: CallLaw, seed: int) -> list[dict]:
    """The calls of one unit, drawn until they hold ``law.rows`` rows: per call ``K``, ``B``,
    ``pattern``, ``dtype``, ``path``, ``fresh`` (a fresh instance), ``age`` (calls the instance
    served before), ``window`` (log delta range), ``seed`` (of its inputs and generator)."""
    rng = np.random.default_rng(seed)
    calls: list[dict] = []
    rows, age, window = 0, 0, (math.log(law.delta_lo), math.log(law.delta_hi))
    Ks = sorted(law.Ks)
    lo_all, hi_all = math.log(law.delta_lo), math.log(law.delta_hi)
    # the points (delta, K) of constant and levels calls: the declared acceptance is read there
    # once per point (it may cost milliseconds per delta)
    pool_K = rng.choice(Ks, size=law.points)
    pool_d = np.where(rng.random(law.points) < law.zero_share, 0.0, np.exp(rng.uniform(lo_all, hi_all, law.points)))
    while rows < law.rows:
        if age % law.epoch == 0:  # the long-lived instance's delta range moves
            width = min(hi_all - lo_all, math.log(10.0) * rng.uniform(1.0, 6.0))
            start = rng.uniform(lo_all, hi_all - width)
            window = (start, start + width)
        fresh = bool(calls) and rng.random() < law.fresh_share
        K = int(rng.choice(Ks))
        if not calls:
            K = Ks[0]
        elif age == 1 and not fresh:
            K = Ks[-1]
        path = PATHS[1] if rng.random() < law.states_share else PATHS[0]
        B = _batch(law, rng)
        call = {"K": K, "B": B, "pattern": str(rng.choice(PATTERNS, p=PATTERN_WEIGHTS)),
                "dtype": DTYPES[1] if rng.random() < law.float32_share else DTYPES[0], "path": path,
                "fresh": fresh, "age": 0 if fresh else age, "window": [window[0], window[1]],
                "seed": int(rng.integers(0, 2 ** 62))}
        if call["pattern"] in ("constant", "levels"):
            at_K = np.flatnonzero(pool_K == K)
            if at_K.size == 0:  # no point at this K: the call takes a point's K
                at_K = np.arange(law.points)
                call["K"] = K = int(pool_K[int(rng.integers(law.points))])
                at_K = np.flatnonzero(pool_K == K)
            inside = at_K[(pool_d[at_K] == 0) | ((np.log(np.maximum(pool_d[at_K], 1e-300)) >= window[0])
                                                  & (np.log(np.maximum(pool_d[at_K], 1e-300)) <= window[1]))]
            choose = inside if inside.size else at_K
            m = 1 if call["pattern"] == "constant" else int(rng.integers(2, 5))
            call["levels"] = [float(x) for x in pool_d[rng.choice(choose, size=m)]]
        if path == PATHS[1]:
            shape = STATE_SHAPES[int(rng.integers(len(STATE_SHAPES)))]
            call["shape"] = list(shape)
            call["B"] = max(2, min(B, _STATE_ELEMENTS // (K * math.prod(shape))))
            call["sigma"] = "float" if rng.random() < 0.3 else "tensor"
        calls.append(call)
        rows += call["B"]
        age += 0 if fresh else 1
    return calls


def call_deltas(call: dict, law: CallLaw) -> torch.Tensor:
    """The float64 deltas of a ``verify`` call of :func:`plan_calls` as :func:`draw_law` draws them
    (before the cast to the call's dtype): the call's input generator starts with them."""
    return _deltas(call, law, make_generator(call["seed"], "cpu"))


def _deltas(call: dict, law: CallLaw, g: torch.Generator) -> torch.Tensor:
    """float64 deltas of one call (cast to its dtype by the caller)."""
    B, pattern = call["B"], call["pattern"]
    lo, hi = call["window"]

    def log_uniform(n: int) -> torch.Tensor:
        return torch.empty(n, dtype=torch.float64).uniform_(lo, hi, generator=g).exp()

    def zeros_in(d: torch.Tensor) -> torch.Tensor:
        return torch.where(torch.rand(d.shape, generator=g, dtype=torch.float64) < law.zero_share, 0.0, d)

    if pattern in ("constant", "levels"):
        levels = torch.tensor(call["levels"], dtype=torch.float64)
        d = levels[torch.randint(levels.numel(), (B,), generator=g)]
    elif pattern == "near":
        centre = float(log_uniform(1))
        e = math.exp(math.log(1e-9) + (math.log(0.05) - math.log(1e-9)) * float(torch.rand(1, generator=g)))
        d = centre * (1.0 + e * (2.0 * torch.rand(B, generator=g, dtype=torch.float64) - 1.0))
    else:
        d = zeros_in(log_uniform(B))
        if pattern == "sorted":
            d = torch.sort(d).values
        elif pattern == "reversed":
            d = torch.sort(d, descending=True).values
    return d.clamp(0.0, law.delta_hi)


def _state_fn(verifier: Any) -> Callable:
    own = getattr(verifier, "verify_states", None)
    if callable(own):
        return own
    from speccheck.verifiers import verify_states

    return lambda mu_p, mu_q, sigma, children, generator: verify_states(verifier, mu_p, mu_q, sigma, children,
                                                                        generator)


class _GlobalRngs:
    """The torch, numpy and ``random`` global generator states, to compare around a call. numpy's
    and ``random``'s are compared only in a process with one thread (the isolated child that draws
    the law): elsewhere (a Dask worker) other threads may draw from them during the call; torch's
    always (nothing else in speccheck's processes draws from it)."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"

    def state(self) -> tuple:
        cuda = torch.cuda.get_rng_state() if self.cuda else None
        alone = threading.active_count() == 1
        return (torch.get_rng_state(), cuda, np.random.get_state() if alone else None,
                random.getstate() if alone else None)

    @staticmethod
    def moved(a: tuple, b: tuple) -> list[str]:
        which = []
        if not torch.equal(a[0], b[0]) or (a[1] is not None and not torch.equal(a[1], b[1])):
            which.append("torch")
        if a[2] is not None and b[2] is not None and (a[2][0] != b[2][0] or a[2][2:] != b[2][2:]
                                                      or not np.array_equal(a[2][1], b[2][1])):
            which.append("numpy")
        if a[3] is not None and b[3] is not None and a[3] != b[3]:
            which.append("random")
        return which

    def restore(self, s: tuple) -> None:
        torch.set_rng_state(s[0])
        if s[1] is not None:
            torch.cuda.set_rng_state(s[1])
        if s[2] is not None:
            np.random.set_state(s[2])
        if s[3] is not None:
            random.setstate(s[3])


class _Contract:
    """Violations per check: (bad rows or calls, checked, first note)."""

    def __init__(self) -> None:
        self.bad = {t: 0 for t in CONTRACT_TESTS}
        self.n = {t: 0 for t in CONTRACT_TESTS}
        self.note = {t: "" for t in CONTRACT_TESTS}

    def add(self, test: str, bad: int, n: int, note: str) -> None:
        self.bad[test] += int(bad)
        self.n[test] += int(n)
        if bad and not self.note[test]:
            self.note[test] = note

    def results(self) -> list[dict]:
        return [{"test": t, "bad": self.bad[t], "n": self.n[t], "note": self.note[t]} for t in CONTRACT_TESTS
                if self.n[t] or self.bad[t]]


def _check_scalar(contract: _Contract, where: str, s: torch.Tensor, out: Any) -> tuple | None:
    B, K = s.shape
    problems = output_problems(out, B, K, s.dtype, s.device)
    structural = [p for p in problems if "dtype" not in p]
    contract.add("contract:shape", len(structural), B, f"{where}: " + "; ".join(structural))
    if structural:
        return None
    contract.add("contract:dtype", len(problems), B, f"{where}: " + "; ".join(problems))
    if problems:
        return None
    s_out, accepted, index = normalize_verify_outputs(out, s.dtype)
    bad_range = int(((index < 0) | (index > K)).sum())
    bad_iff = int(((index == K) != ~accepted).sum())
    contract.add("contract:index", bad_range + bad_iff, B,
                 f"{where}: {bad_range} index out of [0, K], {bad_iff} rows where (index == K) != rejected")
    picked = torch.gather(s, 1, index.clamp(0, K - 1)[:, None])[:, 0]
    bad_eq = int((accepted & (s_out != picked)).sum())
    contract.add("contract:accepted-equals-child", bad_eq, B, f"{where}: {bad_eq} accepted rows with s_out != s[index]")
    bad_fin = int((~torch.isfinite(s_out)).sum())
    contract.add("contract:finite", bad_fin, B, f"{where}: non-finite s_out in {bad_fin} rows")
    return (None if bad_fin else s_out), accepted, index


def _scalar_call(v: Any, call: dict, law: CallLaw, gens: tuple, device: torch.device,
                 contract: _Contract, where: str, clock: list[float]) -> tuple | None:
    g, gv = gens
    dtype = torch.float32 if call["dtype"] == "float32" else torch.float64
    delta = _deltas(call, law, g).to(device=device, dtype=dtype)
    s = torch.randn(call["B"], call["K"], generator=g, dtype=torch.float64).to(device=device, dtype=dtype)
    kept = (delta.clone(), s.clone())
    t0 = time.process_time()
    out = v.verify(delta, s, gv)
    clock[0] += time.process_time() - t0
    changed = not (torch.equal(delta, kept[0]) and torch.equal(s, kept[1]))
    contract.add("contract:inputs-unchanged", int(changed), 1, f"{where}: verify modified its inputs in place")
    parsed = _check_scalar(contract, where, kept[1], out)
    if parsed is None or parsed[0] is None:
        return None
    z = parsed[0].to(torch.float64) - kept[0].to(torch.float64)
    return z, parsed[1], kept[0].to(torch.float64), None


def _states_call(fn: Callable, call: dict, law: CallLaw, gens: tuple, device: torch.device,
                 contract: _Contract, where: str, clock: list[float]) -> tuple | None:
    g, gv = gens
    dtype = torch.float32 if call["dtype"] == "float32" else torch.float64
    B, K, shape = call["B"], call["K"], tuple(call["shape"])
    d = math.prod(shape)
    dl = _deltas(call, law, g)
    sigma = 0.3 * 10.0 ** torch.rand(B, generator=g, dtype=torch.float64)  # log-uniform on [0.3, 3]
    sigma = torch.where(sigma == 1.0, 1.5, sigma)
    if call["sigma"] == "float":
        sigma = torch.full_like(sigma, float(sigma[0]))
    e = torch.randn(B, d, generator=g, dtype=torch.float64)
    e = e / torch.linalg.vector_norm(e, dim=1, keepdim=True)
    w = torch.randn(B, d, generator=g, dtype=torch.float64)  # a direction orthogonal to e
    w = w - (w * e).sum(1, keepdim=True) * e
    w_norm = torch.linalg.vector_norm(w, dim=1, keepdim=True)
    w = torch.where(w_norm > 0, w / w_norm.clamp_min(1e-300), 0.0)
    mu_p = 2.0 * torch.randn(B, d, generator=g, dtype=torch.float64)
    mu_q = mu_p + (sigma * dl)[:, None] * e
    children = mu_p[:, None] + sigma[:, None, None] * torch.randn(B, K, d, generator=g, dtype=torch.float64)
    args = [x.reshape((B,) + shape).to(device=device, dtype=dtype) for x in (mu_p, mu_q)]
    kids = children.reshape((B, K) + shape).to(device=device, dtype=dtype)
    sig_arg: Any = float(sigma[0]) if call["sigma"] == "float" else sigma.to(device=device, dtype=dtype)
    kept = (args[0].clone(), args[1].clone(), kids.clone())
    t0 = time.process_time()
    out = fn(args[0], args[1], sig_arg, kids, gv)
    clock[0] += time.process_time() - t0
    changed = not all(torch.equal(a, b) for a, b in zip((args[0], args[1], kids), kept))
    contract.add("contract:inputs-unchanged", int(changed), 1, f"{where}: verify_states modified its inputs in place")
    try:
        y, acc, idx = out
    except (TypeError, ValueError):
        contract.add("contract:shape", 1, 1, f"{where}: verify_states must return (y, accepted, index)")
        return None
    ok = (torch.is_tensor(y) and tuple(y.shape) == (B,) + shape and y.is_floating_point() and torch.is_tensor(acc)
          and tuple(acc.shape) == (B,) and torch.is_tensor(idx) and tuple(idx.shape) == (B,))
    contract.add("contract:shape", int(not ok), 1, f"{where}: verify_states returned y {getattr(y, 'shape', None)}, "
                 f"accepted {getattr(acc, 'shape', None)}, index {getattr(idx, 'shape', None)}; expected [{B}, "
                 f"{', '.join(map(str, shape))}], [{B}], [{B}]")
    if not ok:
        return None
    acc, idx = acc.to(torch.bool), idx.to(torch.long)
    y64 = y.to(torch.float64).reshape(B, d)
    contract.add("contract:index", int(((idx == K) != ~acc).sum() + ((idx < 0) | (idx > K)).sum()), B,
                 f"{where}: index == K must hold exactly on the rejected rows, index in [0, K]")
    rows = torch.nonzero(acc & (idx < K)).flatten()
    if rows.numel():
        child = kept[2].reshape(B, K, d)[rows, idx[rows]].to(torch.float64)
        off = int((y64[rows] != child).any(dim=1).sum())
        contract.add("contract:accepted-equals-child", off, B, f"{where}: {off} accepted rows whose state is not "
                     "the child at index")
    bad_fin = int((~torch.isfinite(y64)).any(dim=1).sum())
    contract.add("contract:finite", bad_fin, B, f"{where}: non-finite states in {bad_fin} rows")
    if bad_fin:
        return None
    # the standardised output, from the states as the rule saw them (cast to its dtype)
    mp, mq = kept[0].to(torch.float64).reshape(B, d), kept[1].to(torch.float64).reshape(B, d)
    sig = torch.as_tensor(sig_arg, dtype=torch.float64).reshape(-1, 1)
    std = (y64 - mp) / sig
    disp = (mq - mp) / sig
    delta = torch.linalg.vector_norm(disp, dim=1)
    unit = torch.where(delta[:, None] > 0, disp / delta.clamp_min(1e-300)[:, None], e)
    w = w - (w * unit).sum(1, keepdim=True) * unit  # orthogonal to the displacement as cast
    w = w / torch.linalg.vector_norm(w, dim=1, keepdim=True).clamp_min(1e-300)
    z = (std * unit).sum(1) - delta
    zp = (std * w).sum(1) if d > 1 else torch.full((B,), math.nan, dtype=torch.float64)
    return z, acc, delta, zp


def _read_points(v: Any, calls: list[dict]) -> dict:
    """The declared acceptance at every (delta, K) point of the constant and levels calls, one
    ``acceptance`` call per K: {(delta, K): a}. ValueError when a value is not a probability."""
    by_K: dict[int, set] = {}
    for call in calls:
        for x in call.get("levels", []):
            by_K.setdefault(int(call["K"]), set()).add(float(x))
    cache: dict = {}
    for K, values in sorted(by_K.items()):
        new = np.array(sorted(values), dtype=np.float64)
        a = np.asarray(v.acceptance(new, K), dtype=np.float64).reshape(-1)
        if a.shape != new.shape:
            raise ValueError(f"acceptance returned shape {a.shape} for {new.size} deltas")
        if not np.all((a >= 0.0) & (a <= 1.0)):
            bad = new[~((a >= 0.0) & (a <= 1.0))][0]
            raise ValueError(f"declared acceptance at delta={bad!r}, K={K} is not a probability")
        cache.update({(float(x), K): float(y) for x, y in zip(new, a)})
    return cache


def _declared(v: Any, call: dict, delta: np.ndarray, rng: np.random.Generator, law: CallLaw,
              cache: dict) -> np.ndarray:
    """Declared acceptance per row (NaN where not read): every row of constant and levels calls
    (from ``cache``), ``probe_rows`` random rows of the others."""
    out = np.full(delta.size, np.nan)
    K = int(call["K"])
    if call["pattern"] in ("constant", "levels"):
        levels = np.array(call["levels"], dtype=np.float64)
        values = np.array([cache[(float(x), K)] for x in levels])
        return _lookup(delta, levels, values)
    if not law.probe_rows:
        return out
    rows = rng.choice(delta.size, size=min(law.probe_rows, delta.size), replace=False)
    a = np.asarray(v.acceptance(delta[rows], K), dtype=np.float64).reshape(-1)
    if a.shape != rows.shape or not np.all((a >= 0.0) & (a <= 1.0)):
        raise ValueError(f"declared acceptance at deltas {delta[rows]!r}, K={K}: {a!r} is not a probability per delta")
    out[rows] = a
    return out


def _lookup(delta: np.ndarray, levels: np.ndarray, values: np.ndarray) -> np.ndarray:
    """values[j] for every row whose delta is levels[j] (the nearest level: a float32 call's deltas
    are the levels rounded, a state call's the norm of a displacement built from them)."""
    return values[np.abs(delta[:, None] - levels[None, :]).argmin(axis=1)]


def draw_law(verifier: Any, law: CallLaw | dict, *, seed: int, device: torch.device | str = "cpu",
             has_acceptance: bool = True, beat: Callable[[str], None] | None = None) -> dict:
    """Drive ``verifier`` (the long-lived instance; fresh ones are copies of it made before its
    first call) through the calls of :func:`plan_calls`. Returns plain data: ``contract``
    [{test, bad, n, note}], ``calls`` (the call descriptors), and numpy arrays per row ``z``,
    ``zp`` (NaN off the state path), ``delta``, ``accepted`` (int8), ``declared`` (NaN where not
    read), ``call`` (int32, the row's call), ``position`` (int32, the row in its call); per
    call ``rows_done`` (int64: rows the call returned, 0 when its contract failed); ``verify_s``,
    ``acceptance_s`` and ``total_s`` (process CPU seconds inside verify, in acceptance, in all). A
    call that raises or returns unusable outputs stops the draw (``stopped`` names it): the
    statistics need every row."""
    t_start = time.process_time()
    law = law if isinstance(law, CallLaw) else CallLaw.from_dict(law)
    dev = torch.device(device)
    pristine = copy.deepcopy(verifier)
    calls = plan_calls(law, seed)
    contract, rngs = _Contract(), _GlobalRngs(dev)
    has_acc = has_acceptance and callable(getattr(verifier, "acceptance", None))
    rng = np.random.default_rng(seed ^ 0x5DEECE66D)
    clock, cache = [0.0], {}
    t0 = time.process_time()
    declared_error = ""
    if has_acc:
        try:
            cache = _read_points(verifier, calls)
        except Exception as exc:  # noqa: BLE001 - a broken declaration is a defect
            declared_error = f"acceptance() raised {type(exc).__name__}: {exc}"
    acceptance_s = time.process_time() - t0
    parts: dict[str, list] = {k: [] for k in ("z", "zp", "delta", "accepted", "declared")}
    done = np.zeros(len(calls), dtype=np.int64)
    stopped = ""
    for i, call in enumerate(calls):
        if beat is not None and i % 256 == 0:
            beat(f"L7 law calls {i}..{min(i + 256, len(calls)) - 1}")
        v = copy.deepcopy(pristine) if call["fresh"] else verifier
        where = f"call {i} (K={call['K']}, B={call['B']}, {call['pattern']} deltas, {call['dtype']}, {call['path']})"
        g = make_generator(call["seed"], "cpu")  # the inputs
        gv = g if dev.type == "cpu" else make_generator(call["seed"] ^ 1, dev)  # the rule's randomness
        before = rngs.state()
        try:
            if call["path"] == PATHS[0]:
                got = _scalar_call(v, call, law, (g, gv), dev, contract, where, clock)
            else:
                got = _states_call(_state_fn(v), call, law, (g, gv), dev, contract, where, clock)
        except DeviceError:
            raise
        except Exception as exc:
            if isinstance(exc, (MemoryError, torch.cuda.OutOfMemoryError)) or "out of memory" in str(exc):
                raise DeviceError(f"device {dev} failed in {where} ({type(exc).__name__}: {exc})") from exc
            contract.add("contract:no-exception", 1, 1, f"{where}: raised {type(exc).__name__}: {exc}")
            stopped = where
            break
        contract.add("contract:no-exception", 0, 1, "")
        after = rngs.state()
        moved = rngs.moved(before, after)
        contract.add("contract:global-rng", int(bool(moved)), 1,
                     f"{where}: the global {' and '.join(moved)} generator state changed (all randomness must "
                     "come from the generator argument)")
        if moved:
            rngs.restore(before)
        if got is None:
            stopped = where
            break
        z, acc, delta, zp = got
        B = int(z.numel())
        d_np = delta.cpu().numpy()
        parts["z"].append(z.cpu().numpy())
        parts["zp"].append(np.full(B, np.nan) if zp is None else zp.cpu().numpy())
        parts["delta"].append(d_np)
        parts["accepted"].append(acc.cpu().numpy().astype(np.int8))
        declared = np.full(B, np.nan)
        if has_acc and not declared_error:
            try:
                declared = _declared(v, call, d_np, rng, law, cache)
            except Exception as exc:  # noqa: BLE001 - a broken declaration is a defect
                declared_error = f"acceptance() raised {type(exc).__name__}: {exc} ({where})"
        parts["declared"].append(declared)
        done[i] = B
    n_rows = int(done.sum())
    rows_of = np.repeat(np.arange(len(calls), dtype=np.int32), done)
    starts = np.repeat(np.cumsum(done) - done, done)
    raw: dict = {k: (np.concatenate(p) if p else np.zeros(0)) for k, p in parts.items()}
    raw["accepted"] = raw["accepted"].astype(np.int8)
    per_call = {f"call_{key}": np.array([c[key] for c in calls], dtype=np.int64) for key in ("K", "B", "age")}
    per_call.update({f"call_{key}": np.array([names.index(c[key]) for c in calls], dtype=np.int64)
                     for key, names in (("pattern", PATTERNS), ("dtype", DTYPES), ("path", PATHS))})
    per_call["call_fresh"] = np.array([c["fresh"] for c in calls], dtype=np.int64)
    per_call["call_d"] = np.array([math.prod(c.get("shape", [1])) for c in calls], dtype=np.int64)
    raw.update(per_call)
    raw.update(contract=contract.results(), call=rows_of,
               position=(np.arange(n_rows, dtype=np.int64) - starts).astype(np.int32), rows_done=done,
               stopped=stopped, declared_error=declared_error, has_acceptance=bool(has_acc),
               verify_s=clock[0], acceptance_s=acceptance_s, total_s=time.process_time() - t_start)
    return raw
