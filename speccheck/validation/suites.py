"""Battery suites: TOML files shipped in ``speccheck/data/suites/`` (``smoke``, ``gate``,
``full``); a user's own suite loads by its path.

A suite names its seed, family-wise false-failure rate, and the size of each layer::

    name = "gate"
    seed = 20261129
    family_alpha = 1e-3          # P(a correct verifier fails the suite) <= this (Holm)
    power = 0.99                 # the power at which minimum detectable deviations are quoted
    [scalar]                     # layers 1 and 2: the delta x K grid
    deltas = [0.001, 0.5, 1.0, 2.0, 6.0]
    K = [1, 2, 4, 16]
    n = 131072                   # draws per cell
    tail_q = 0.01                # the binned tail test looks at the lower and upper 1%
    [[scalar.extra]]             # extra cells with their own n (e.g. a hard cell sampled more)
    delta = 1.0
    K = 2
    n = 524288
    [contract]
    n = 256                      # rows for the determinism checks
    [wrapper]                    # layer 3: verify_states in d dimensions
    dims = [1, 2, 64, 1024]
    n = 16384
    K = 3
    deltas = [0.0, 0.5, 1.0, 2.0]
    [trajectory]                 # layer 4 (options passed to speccheck.validation.trajectory)
    enabled = true
    [continuous]                 # layer 5: rows carry their own delta (see ContinuousSpec)
    K = [1, 2, 3, 4]
    edges = [1e-8, 1e-4, 1e-2, 0.1, 1.0, 2.0, 4.0, 15.0, 40.0]
    zero_atom = true             # a stratum at delta = 0 exactly
    n = 4096                     # rows per stratum and K
    declared_deltas = 2          # distinct deltas per stratum for the declared-acceptance test
    declared_rows = 512          # rows at each of them
"""

from __future__ import annotations

import copy
import functools
import math
import sys
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from speccheck.errors import LoadError
from speccheck.theory.validate import MAX_K  # the one definition: theory and kernels validated to it

BUILTIN_SUITES = ("smoke", "gate", "full")


@dataclass
class ScalarSpec:
    deltas: list[float]
    K: list[int]
    n: int
    chunk: int = 1 << 18
    tail_q: float = 0.01
    extra: list[tuple[float, int, int]] = field(default_factory=list)  # (delta, K, n) cells


@dataclass
class WrapperSpec:
    dims: list[int]
    n: int
    K: int = 3
    deltas: list[float] = field(default_factory=lambda: [0.0, 0.5, 1.0, 2.0])
    chunk: int = 4096


@dataclass
class ContinuousSpec:
    """Layer 5: each row carries its own delta, so every delta in [0, edges[-1]] is covered.

    The law of a row's delta: strata = the atom at 0 (``zero_atom``) and the bins
    [edges[i], edges[i+1]); in each stratum and for each K, ``n`` rows with delta drawn
    log-uniform on the bin (i.i.d. per row). The first ``declared_deltas * declared_rows`` rows of
    a stratum share ``declared_deltas`` such deltas (``declared_rows`` rows each): the
    declared acceptance is evaluated there only (it may cost milliseconds per delta).
    """

    K: list[int]
    edges: list[float]
    n: int
    zero_atom: bool = True
    declared_deltas: int = 2
    declared_rows: int = 512
    chunk: int = 1 << 16
    refine: int = 8          # sub-windows per failing stratum when localising
    confirm_n: int = 8192    # fresh rows per localisation confirmation

    def strata(self) -> list[tuple[float, float]]:
        """[(lo, hi)] per stratum; the atom at 0 is (0.0, 0.0)."""
        bins = list(zip(self.edges[:-1], self.edges[1:]))
        return ([(0.0, 0.0)] if self.zero_atom else []) + bins


@dataclass
class SequenceSpec:
    """Layer 6: ``calls`` calls on one instance (see :mod:`speccheck.validation.sequence`); K from
    ``K`` (K = 1 with probability ``k1_share``), batch sizes log-uniform on 1 .. ``max_batch``,
    constant and near-constant calls at the ``anchors``, mixed calls log-uniform on
    [``delta_lo``, ``delta_hi``]; the first ``replay`` calls replayed on a fresh instance after the
    global generators moved (0 = off; the shipped suites replay 16, 64 and 256 calls);
    ``small_calls`` extra K = 1 constant calls at the ``small_anchors``."""

    K: list[int]
    calls: int = 1200
    max_batch: int = 256
    k1_share: float = 0.3
    anchors: list[float] = field(default_factory=lambda: [0.002, 0.005, 0.01, 0.02, 0.05, 0.2, 0.5, 1.0, 2.0, 4.0])
    delta_lo: float = 1e-3
    delta_hi: float = 40.0
    small_delta: float = 0.1
    replay: int = 0
    small_calls: int = 1000
    small_anchors: list[float] = field(default_factory=lambda: [0.005, 0.008, 0.02, 0.04])


@dataclass
class Suite:
    name: str
    seed: int
    family_alpha: float
    power: float
    scalar: ScalarSpec | None
    contract_n: int
    wrapper: WrapperSpec | None
    trajectory: dict | None
    description: str = ""
    path: str = ""
    continuous: ContinuousSpec | None = None
    sequence: SequenceSpec | None = None
    law: dict | None = None  # layer 7: the parameters of speccheck.sampler.calls.CallLaw but Ks (plain JSON)


def _builtin_dir() -> Path:
    return Path(str(resources.files("speccheck") / "data" / "suites"))


def suite_dirs() -> list[Path]:
    """Where suite names are looked up: the suites shipped in the package."""
    return [_builtin_dir()]


def known_suites() -> list[str]:
    """Names of the shipped suites."""
    return sorted(f.stem for d in suite_dirs() if d.is_dir() for f in d.glob("*.toml"))


def find_suite(name_or_path: str) -> Path:
    """The .toml file of a shipped suite name or of a path (LoadError naming both otherwise)."""
    if not isinstance(name_or_path, str) or not name_or_path:
        raise LoadError(f"suite must be a name ({', '.join(known_suites())}) or a path to a .toml file, "
                        f"got {name_or_path!r}")
    p = Path(name_or_path).expanduser()
    if p.is_file():
        return p
    if p.exists():  # never opened: a FIFO would block, /dev/zero never ends
        kind = "a folder" if p.is_dir() else "a FIFO" if p.is_fifo() else "a character device" if p.is_char_device() \
            else "a block device" if p.is_block_device() else "a socket" if p.is_socket() else "not a regular file"
        raise LoadError(f"suite file {str(p)!r} is {kind}, not a regular file; give a .toml file")
    if p.suffix == ".toml" or len(p.parts) > 1:
        raise LoadError(f"suite file {str(p)!r} does not exist")
    for d in suite_dirs():
        cand = d / f"{name_or_path}.toml"
        if cand.is_file():
            return cand
    raise LoadError(f"unknown suite {name_or_path!r}: not a .toml file and not one of {known_suites()}")


#: the verifier contract's domain (docs/contract.md): a suite may not ask for more
MAX_DELTA = 40.0

_KEYS = {
    "": {"name", "description", "seed", "family_alpha", "power", "scalar", "contract", "wrapper", "trajectory",
         "continuous", "sequence", "law"},
    "scalar": {"deltas", "K", "n", "chunk", "tail_q", "extra"},
    "scalar.extra": {"delta", "K", "n"},
    "contract": {"n"},
    "wrapper": {"dims", "n", "K", "deltas", "chunk"},
    "trajectory": {"enabled", "n_traj", "K", "L", "d"},
    "continuous": {"K", "edges", "n", "zero_atom", "declared_deltas", "declared_rows", "chunk", "refine",
                   "confirm_n"},
    "law": {"rows", "K", "max_batch", "octave_tilt", "edge_share", "delta_lo", "delta_hi", "zero_share", "epoch",
            "fresh_share", "states_share", "float32_share", "points", "probe_rows"},
    "sequence": {"K", "calls", "max_batch", "k1_share", "anchors", "delta_lo", "delta_hi", "small_delta", "replay",
                 "small_calls", "small_anchors"},
}


def _check_keys(tab: object, where: str) -> dict:
    """``tab`` is a table with only the keys its section knows (a typo must not drop a layer)."""
    label = f"[{where}]" if where else "top level"
    if not isinstance(tab, dict):
        raise LoadError(f"suite {label} must be a table, got {type(tab).__name__}")
    unknown = sorted(set(tab) - _KEYS[where])
    if unknown:
        raise LoadError(f"suite {label}: unknown key(s) {unknown}; allowed: {sorted(_KEYS[where])}")
    return tab


def _check_domain(deltas: list[float], Ks: list[int], where: str) -> None:
    """Deltas and K inside the contract's domain: delta in [0, MAX_DELTA], K in [1, MAX_K]."""
    if any(not 0.0 <= d <= MAX_DELTA for d in deltas):
        raise LoadError(f"suite [{where}] deltas must lie in [0, {MAX_DELTA:g}] (the verifier contract's domain), "
                        f"got {deltas!r}")
    if any(k > MAX_K for k in Ks):
        raise LoadError(f"suite [{where}] K must be <= {MAX_K} (the largest K the theory and kernels are validated "
                        f"at), got {Ks!r}")


def _pos_int(tab: dict, key: str, where: str, default=None) -> int:
    v = tab.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise LoadError(f"suite [{where}] {key} must be an integer >= 1, got {key}={v!r}")
    return v


def parse_suite(data: dict, name: str = "suite", path: str = "") -> Suite:
    """Validate a suite's TOML table (LoadError, a ValueError, naming the bad key): only known keys,
    values inside the verifier contract's domain and the suite bounds (:data:`BOUNDS`)."""
    _check_keys(data, "")
    for section in ("scalar", "contract", "wrapper", "trajectory", "continuous", "sequence", "law"):
        if section in data:
            _check_keys(data[section], section)
    check_types(data)
    for c in data.get("scalar", {}).get("extra", []):
        _check_keys(c, "scalar.extra")
    alpha = float(data.get("family_alpha", 1e-3))
    if not 0 < alpha < 1:
        raise LoadError(f"suite family_alpha must be in (0, 1), got family_alpha={alpha!r}")
    power = float(data.get("power", 0.99))
    if not 0 < power < 1:
        raise LoadError(f"suite power must be in (0, 1), got power={power!r}")
    seed = data.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise LoadError(f"suite seed must be an integer >= 0, got seed={seed!r}")
    scalar = None
    if "scalar" in data:
        t = data["scalar"]
        deltas = [float(x) for x in t.get("deltas", [])]
        if not deltas or any(not (d >= 0) or d != d or d == float("inf") for d in deltas):
            raise LoadError(f"suite [scalar] deltas must be a non-empty list of finite values >= 0, got {deltas!r}")
        Ks = t.get("K", [])
        if not Ks or any(isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in Ks):
            raise LoadError(f"suite [scalar] K must be a non-empty list of integers >= 1, got {Ks!r}")
        tail_q = float(t.get("tail_q", 0.01))
        if not 0 < tail_q < 0.5:
            raise LoadError(f"suite [scalar] tail_q must be in (0, 0.5), got tail_q={tail_q!r}")
        extra = []
        for i, c in enumerate(t.get("extra", [])):
            d = float(c.get("delta", -1.0))
            if not d >= 0 or d == float("inf"):
                raise LoadError(f"suite [[scalar.extra]] #{i}: delta must be finite and >= 0, "
                                f"got delta={c.get('delta')!r}")
            extra.append((d, _pos_int(c, "K", "scalar.extra"), _pos_int(c, "n", "scalar.extra")))
        _check_domain(deltas + [d for d, _, _ in extra], list(Ks) + [k for _, k, _ in extra], "scalar")
        scalar = ScalarSpec(deltas, list(Ks), _pos_int(t, "n", "scalar"), _pos_int(t, "chunk", "scalar", 1 << 18),
                            tail_q, extra)
    wrapper = None
    if "wrapper" in data:
        t = data["wrapper"]
        dims = t.get("dims", [])
        if not dims or any(isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in dims):
            raise LoadError(f"suite [wrapper] dims must be a non-empty list of integers >= 1, got {dims!r}")
        deltas = [float(x) for x in t.get("deltas", [0.0, 0.5, 1.0, 2.0])]
        if not deltas or any(not (d >= 0) for d in deltas):
            raise LoadError(f"suite [wrapper] deltas must be a non-empty list of values >= 0, got {deltas!r}")
        _check_domain(deltas, [t.get("K", 3)], "wrapper")
        wrapper = WrapperSpec(list(dims), _pos_int(t, "n", "wrapper"), _pos_int(t, "K", "wrapper", 3), deltas,
                              _pos_int(t, "chunk", "wrapper", 4096))
    traj = data.get("trajectory")
    if traj is not None and not traj.get("enabled", True):
        traj = None
    contract_n = _pos_int(data.get("contract", {}), "n", "contract", 256)
    continuous = _parse_continuous(data["continuous"]) if "continuous" in data else None
    sequence = _parse_sequence(data["sequence"]) if "sequence" in data else None
    law = _parse_law(data["law"]) if "law" in data else None
    suite = Suite(str(data.get("name", name)), seed, alpha, power, scalar, contract_n, wrapper, traj,
                  str(data.get("description", "")), path, continuous, sequence, law)
    check_bounds(data)
    try:
        check_cost(suite)
    except ValueError as exc:
        raise LoadError(str(exc)) from None
    return suite


def _parse_law(t: dict) -> dict:
    """The [law] section (layer 7, :mod:`speccheck.sampler.calls`): rows, K and the law's shares."""
    Ks = t.get("K", [])
    if not Ks or any(isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K for k in Ks):
        raise LoadError(f"suite [law] K must be a non-empty list of integers in [1, {MAX_K}], got {Ks!r}")
    law = {"rows": _pos_int(t, "rows", "law"), "Ks": sorted(set(Ks))}
    for key in ("max_batch", "epoch", "points"):
        if key in t:
            law[key] = _pos_int(t, key, "law")
    if "probe_rows" in t:
        v = t["probe_rows"]
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise LoadError(f"suite [law] probe_rows must be an integer >= 0, got probe_rows={v!r}")
        law["probe_rows"] = v
    for key in ("octave_tilt", "edge_share", "zero_share", "fresh_share", "states_share", "float32_share"):
        if key in t:
            v = t[key]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= (4 if key == "octave_tilt"
                                                                                      else 1):
                raise LoadError(f"suite [law] {key} must be a number in [0, {4 if key == 'octave_tilt' else 1}], "
                                f"got {key}={v!r}")
            law[key] = float(v)
    lo, hi = float(t.get("delta_lo", 1e-4)), float(t.get("delta_hi", MAX_DELTA))
    if not 0 < lo < hi <= MAX_DELTA:
        raise LoadError(f"suite [law] needs 0 < delta_lo < delta_hi <= {MAX_DELTA:g}, got {lo!r}, {hi!r}")
    law.update(delta_lo=lo, delta_hi=hi)
    return law


def _parse_sequence(t: dict) -> SequenceSpec:
    Ks = t.get("K", [])
    if not Ks or any(isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K for k in Ks):
        raise LoadError(f"suite [sequence] K must be a non-empty list of integers in [1, {MAX_K}], got {Ks!r}")
    anchors = [float(x) for x in t.get("anchors", SequenceSpec([1]).anchors)]
    if not anchors or any(not 0 < a <= MAX_DELTA for a in anchors):
        raise LoadError(f"suite [sequence] anchors must be values in (0, {MAX_DELTA:g}], got {anchors!r}")
    lo, hi = float(t.get("delta_lo", 1e-3)), float(t.get("delta_hi", 40.0))
    if not 0 < lo < hi <= MAX_DELTA:
        raise LoadError(f"suite [sequence] needs 0 < delta_lo < delta_hi <= {MAX_DELTA:g}, got {lo!r}, {hi!r}")
    share, small = float(t.get("k1_share", 0.3)), float(t.get("small_delta", 0.1))
    if not 0 <= share <= 1 or not 0 < small <= MAX_DELTA:
        raise LoadError(f"suite [sequence] k1_share must be in [0, 1] and small_delta in (0, {MAX_DELTA:g}], got "
                        f"{share!r}, {small!r}")
    replay = t.get("replay", 0)
    if isinstance(replay, bool) or not isinstance(replay, int) or replay < 0:
        raise LoadError(f"suite [sequence] replay must be an integer >= 0, got replay={replay!r}")
    small_anchors = [float(x) for x in t.get("small_anchors", SequenceSpec([1]).small_anchors)]
    if not small_anchors or any(not 0 < a <= MAX_DELTA for a in small_anchors):
        raise LoadError(f"suite [sequence] small_anchors must be values in (0, {MAX_DELTA:g}], got {small_anchors!r}")
    small_calls = t.get("small_calls", 1000)
    if isinstance(small_calls, bool) or not isinstance(small_calls, int) or small_calls < 0:
        raise LoadError(f"suite [sequence] small_calls must be an integer >= 0, got small_calls={small_calls!r}")
    return SequenceSpec(list(Ks), _pos_int(t, "calls", "sequence", 1200), _pos_int(t, "max_batch", "sequence", 256),
                        share, anchors, lo, hi, small, replay, small_calls, small_anchors)


def _parse_continuous(t: dict) -> ContinuousSpec:
    Ks = t.get("K", [])
    if not Ks or any(isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in Ks):
        raise LoadError(f"suite [continuous] K must be a non-empty list of integers >= 1, got {Ks!r}")
    edges = [float(x) for x in t.get("edges", [])]
    if len(edges) < 2 or any(not (math.isfinite(e) and e > 0) for e in edges) or edges != sorted(set(edges)):
        raise LoadError(f"suite [continuous] edges must be >= 2 increasing finite values > 0, got {edges!r}")
    _check_domain(edges, Ks, "continuous")
    zero = t.get("zero_atom", True)
    if not isinstance(zero, bool):
        raise LoadError(f"suite [continuous] zero_atom must be true or false, got {zero!r}")
    spec = ContinuousSpec(list(Ks), edges, _pos_int(t, "n", "continuous"), zero,
                          _pos_int(t, "declared_deltas", "continuous", 2),
                          _pos_int(t, "declared_rows", "continuous", 512),
                          _pos_int(t, "chunk", "continuous", 1 << 16), _pos_int(t, "refine", "continuous", 8),
                          _pos_int(t, "confirm_n", "continuous", 8192))
    shared = spec.declared_deltas * spec.declared_rows
    if shared > spec.n:
        raise LoadError(f"suite [continuous] declared_deltas * declared_rows = {shared} must be <= n = {spec.n}")
    return spec


def load_suite(name_or_path: str) -> Suite:
    """Load a shipped suite by name (``smoke``, ``gate``, ``full``) or a .toml file by path.

    Raises :class:`speccheck.errors.LoadError` naming the file or listing the known suites."""
    p = find_suite(name_or_path)
    with open(p, "rb") as fh:
        raw = fh.read()
    return copy.deepcopy(_parsed(raw, p.stem, str(p)))


@functools.lru_cache(maxsize=64)
def _parsed(raw: bytes, stem: str, path: str) -> Suite:
    """A suite file's content parsed once per content (a run reads its suite in several places;
    callers get copies, so none can change another's)."""
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise LoadError(f"suite file {path} is not valid TOML: {exc}") from exc
    try:
        return parse_suite(data, stem, path)
    except LoadError as exc:
        raise LoadError(f"suite file {path}: {exc}") from None


# ----------------------------------------------------------------------------- types, bounds and cost
#: the type each suite field must have: "int", "float" (an int is accepted), "bool", "str",
#: "ints" / "floats" (a list of them); fields not listed are checked where they are parsed
_TYPES = {
    "": {"name": "str", "description": "str", "seed": "int", "family_alpha": "float", "power": "float"},
    "scalar": {"deltas": "floats", "K": "ints", "n": "int", "chunk": "int", "tail_q": "float"},
    "scalar.extra": {"delta": "float", "K": "int", "n": "int"},
    "contract": {"n": "int"},
    "wrapper": {"dims": "ints", "n": "int", "K": "int", "deltas": "floats", "chunk": "int"},
    "trajectory": {"enabled": "bool", "n_traj": "int", "K": "int", "L": "int", "d": "int"},
    "continuous": {"K": "ints", "edges": "floats", "n": "int", "zero_atom": "bool", "declared_deltas": "int",
                   "declared_rows": "int", "chunk": "int", "refine": "int", "confirm_n": "int"},
    "sequence": {"K": "ints", "calls": "int", "max_batch": "int", "k1_share": "float", "anchors": "floats",
                 "delta_lo": "float", "delta_hi": "float", "small_delta": "float", "replay": "int",
                 "small_calls": "int", "small_anchors": "floats"},
}

#: the bounds of a suite (docs/exit-codes.md quotes them): (section, field) -> (low, high) for a
#: number, or the largest length of a list. The shipped ``full`` suite sits well inside them
#: (2^24 rows per scalar cell, 72 cells).
BOUNDS: dict[tuple[str, str], tuple[float, float]] = {
    ("scalar", "n"): (1, 2**27), ("scalar", "chunk"): (1, 2**22), ("scalar.extra", "n"): (1, 2**27),
    ("contract", "n"): (1, 2**20),
    ("wrapper", "n"): (1, 2**24), ("wrapper", "dims"): (1, 2**16), ("wrapper", "chunk"): (1, 2**20),
    ("wrapper", "K"): (1, 128),
    ("trajectory", "n_traj"): (20, 10**6), ("trajectory", "K"): (1, 128), ("trajectory", "L"): (1, 16),
    ("trajectory", "d"): (1, 4096),
    ("continuous", "n"): (1, 2**24), ("continuous", "chunk"): (1, 2**22), ("continuous", "refine"): (1, 1024),
    ("continuous", "confirm_n"): (1, 2**24), ("continuous", "declared_deltas"): (1, 1024),
    ("continuous", "declared_rows"): (1, 2**20),
    ("sequence", "calls"): (1, 10**6), ("sequence", "max_batch"): (1, 2**16), ("sequence", "small_calls"): (0, 10**6),
    ("sequence", "replay"): (0, 10**6),
    ("law", "rows"): (1, 2**28), ("law", "max_batch"): (1, 2**20), ("law", "epoch"): (1, 10**6),
    ("law", "points"): (1, 4096), ("law", "probe_rows"): (0, 2**24),
}
#: the longest list a field may hold (a grid of 100 000 deltas would run for hours)
MAX_LIST = {"deltas": 256, "K": 128, "dims": 64, "edges": 257, "anchors": 1024, "small_anchors": 1024, "extra": 256}
#: a whole run: at most this many rows (verifier outputs) and this estimated peak memory
MAX_ROWS = 2**33
MAX_MEMORY_BYTES = 16 * 2**30
#: a --scale factor beyond this is refused whatever the suite (the counts above bound it first)
MAX_SCALE = 1e6


def _number(x: object) -> bool:
    return isinstance(x, (int, float))


def _kind_ok(value: object, kind: str) -> bool:
    """The structure a field needs before its own check can judge it (a list of numbers, a number,
    a string); finer checks (an integer >= 1, a K in range) give their own messages."""
    if kind in ("ints", "floats"):
        return isinstance(value, list) and all(_number(x) for x in value)
    if kind == "str":
        return isinstance(value, str)
    return _number(value)  # int, float, bool: True/False and 1.5 get the field's own message


_KIND_WORDS = {"int": "an integer", "float": "a number", "bool": "true or false", "str": "a string",
               "ints": "a list of integers", "floats": "a list of numbers"}


def _tables(data: dict) -> list[tuple[str, dict]]:
    """(section, table) of every known section present (``scalar.extra`` once per cell)."""
    out = [("", data)] + [(s, data[s]) for s in _TYPES if s and "." not in s and isinstance(data.get(s), dict)]
    extra = data["scalar"].get("extra", []) if isinstance(data.get("scalar"), dict) else []
    return out + [("scalar.extra", c) for c in extra if isinstance(c, dict)] if isinstance(extra, list) else out


def check_types(data: dict) -> None:
    """Every known field of a suite's TOML table has the structure its check needs
    (``[scalar] K = 2`` is not a list): LoadError naming the section and field, never a TypeError."""
    extra = data.get("scalar", {}).get("extra", []) if isinstance(data.get("scalar"), dict) else []
    if not isinstance(extra, list):
        raise LoadError(f"suite [[scalar.extra]] must be a list of tables, got {extra!r}")
    for where, tab in _tables(data):
        for key, value in tab.items():
            kind = _TYPES.get(where, {}).get(key)
            if kind is not None and not _kind_ok(value, kind):
                label = f"[{where}] " if where else ""
                raise LoadError(f"suite {label}{key} must be {_KIND_WORDS[kind]}, got {key} = {value!r}")


def check_bounds(data: dict) -> None:
    """Every bounded field within :data:`BOUNDS` and every list within :data:`MAX_LIST`: LoadError
    naming the section and field (a suite of 10^15 draws, 100 000 deltas, ``n_traj = -1``)."""
    for where, tab in _tables(data):
        label = f"[{where}] " if where else ""
        for key, value in tab.items():
            if isinstance(value, list) and len(value) > MAX_LIST.get(key, 10**9):
                raise LoadError(f"suite {label}{key} holds {len(value)} values; at most {MAX_LIST[key]} are allowed")
            bound = BOUNDS.get((where, key))
            if bound is None:
                continue
            for x in value if isinstance(value, list) else [value]:
                if not (_number(x) and not isinstance(x, bool) and x == int(x) and bound[0] <= x <= bound[1]):
                    raise LoadError(f"suite {label}{key} = {value!r} must be an integer in [{bound[0]:,}, "
                                    f"{bound[1]:,}], the suite bounds (docs/exit-codes.md)")
    extra = data["scalar"].get("extra", []) if isinstance(data.get("scalar"), dict) else []
    if len(extra) > MAX_LIST["extra"]:
        raise LoadError(f"suite [[scalar.extra]] holds {len(extra)} cells; at most {MAX_LIST['extra']} are allowed")


@dataclass(frozen=True)
class SuiteCost:
    """What a run of a suite costs, estimated before it runs: ``calls`` of ``verify``, ``rows``
    (verifier outputs), ``memory_bytes`` (the estimated peak of the largest cell: its inputs,
    its raw outputs and the judge's copies) and per layer ``(section, rows)``."""

    calls: int
    rows: int
    memory_bytes: int
    layers: tuple[tuple[str, int], ...]

    def describe(self) -> str:
        per = ", ".join(f"[{name}] {rows:,} rows" for name, rows in self.layers)
        mib = self.memory_bytes / 2**20
        memory = f"{mib:,.1f}" if mib < 10 else f"{mib:,.0f}"
        return (f"cost: about {self.calls:,} verify calls, {self.rows:,} rows, peak memory about {memory} MiB "
                f"({per})")


def _scaled(n: int, scale: float, minimum: int = 1) -> int:
    value = n * scale
    return max(minimum, int(round(value))) if math.isfinite(value) and value < 2**62 else 2**62


_ROW_BYTES = 64  # a judged row: s_out, accepted, delta, their frame copies and the judge's sorted copy


def suite_cost(suite: Suite, scale: float = 1.0) -> SuiteCost:
    """The cost of running ``suite`` with every draw count times ``scale`` (every layer, every K)."""
    layers, calls, peak = [], 0, 0
    contract = suite.contract_n * 8
    layers.append(("contract", contract))
    calls += 16
    if suite.scalar is not None:
        sc = suite.scalar
        cells = [(K, _scaled(sc.n, scale, 16)) for K in sc.K for _ in sc.deltas]
        cells += [(K, _scaled(n, scale, 16)) for _, K, n in sc.extra]
        layers.append(("scalar", sum(n for _, n in cells)))
        calls += sum(-(-n // sc.chunk) for _, n in cells)
        peak = max([peak] + [n * _ROW_BYTES + min(n, sc.chunk) * K * 8 * 3 for K, n in cells])
    if suite.wrapper is not None:
        w = suite.wrapper
        n = _scaled(w.n, scale, 16)
        layers.append(("wrapper", n * len(w.dims) * len(w.deltas)))
        calls += sum(-(-n // w.chunk) for _ in w.dims) * len(w.deltas)
        peak = max([peak] + [n * _ROW_BYTES + min(n, w.chunk) * (w.K + 1) * d * 8 * 3 for d in w.dims])
    if suite.continuous is not None:
        c = suite.continuous
        n = _scaled(c.n, scale, 16) * len(c.strata())
        layers.append(("continuous", n * len(c.K)))
        calls += sum(-(-n // c.chunk) for _ in c.K)
        peak = max([peak] + [n * _ROW_BYTES + min(n, c.chunk) * K * 8 * 3 for K in c.K])
    if suite.sequence is not None:
        s = suite.sequence
        n_calls = max(8, int(round(s.calls * scale))) + int(round(s.small_calls * scale)) + s.replay
        # batch sizes floor(exp(U(0, log(max_batch + 1)))): mean about max_batch / log(max_batch + 1)
        mean_batch = max(1.0, s.max_batch / math.log(s.max_batch + 1.0) - 0.5)
        layers.append(("sequence", int(math.ceil(n_calls * mean_batch))))
        calls += n_calls
        peak = max(peak, n_calls * s.max_batch * _ROW_BYTES)
    if suite.law is not None:
        rows = _scaled(int(suite.law["rows"]), scale, 1024)
        batch = int(suite.law.get("max_batch", 100_000))
        layers.append(("law", rows))
        calls += rows // 256 + 1  # the law's mean batch is a few hundred rows (speccheck.sampler.calls)
        peak = max(peak, (rows + batch) * _ROW_BYTES + batch * max(suite.law["Ks"]) * 8 * 3)
    if suite.trajectory is not None:
        t = suite.trajectory
        n = _scaled(int(t.get("n_traj", 300)), scale, 20)
        d, K, L = int(t.get("d", 6)), int(t.get("K", 2)), int(t.get("L", 3))
        steps = 64  # the trajectory layer's default schedule, bounded
        layers.append(("trajectory", 2 * n * steps))
        calls += 2 * steps * L
        peak = max(peak, 2 * n * (steps + 1) * d * 8 * 4 + n * K ** min(L, 6) * d * 8)
    rows = sum(r for _, r in layers)
    return SuiteCost(int(calls), int(rows), int(peak), tuple(layers))


#: the sections :func:`sized_suite` sizes, with the least draw count each keeps (the floors the
#: ``scale`` option keeps too)
SIZED_SECTIONS = {"scalar": 16, "wrapper": 16, "continuous": 16, "sequence": 8, "law": 1024, "trajectory": 20}


def sized_suite(suite: Suite, factors: dict) -> Suite:
    """``suite`` with the draw counts of each section in ``factors`` times its factor (in (0, 1]),
    kept at or above the section's floor (:data:`SIZED_SECTIONS`): ``scalar`` (n of every cell),
    ``wrapper`` (n), ``continuous`` (n per stratum), ``sequence`` (calls and small calls; the
    replay is kept), ``law`` (rows), ``trajectory`` (n_traj). The budgeted run's suite
    (:mod:`speccheck.validation.battery.budget`); InputError naming a bad factor."""
    from speccheck.errors import InputError

    if not isinstance(factors, dict):
        raise InputError(f"sizes must be a mapping of section to factor, got {type(factors).__name__}")
    unknown = sorted(set(factors) - set(SIZED_SECTIONS))
    if unknown:
        raise InputError(f"sizes: unknown section(s) {unknown}; allowed: {sorted(SIZED_SECTIONS)}")
    for key, f in factors.items():
        if isinstance(f, bool) or not isinstance(f, (int, float)) or not 0.0 < float(f) <= 1.0:
            raise InputError(f"sizes[{key!r}] must be a factor in (0, 1], got {f!r}")
    out = copy.deepcopy(suite)

    def times(section: str, n: int) -> int:
        return max(min(n, SIZED_SECTIONS[section]), int(round(n * float(factors.get(section, 1.0)))))

    if out.scalar is not None:
        out.scalar.n = times("scalar", out.scalar.n)
        out.scalar.extra = [(d, K, times("scalar", n)) for d, K, n in out.scalar.extra]
    if out.wrapper is not None:
        out.wrapper.n = times("wrapper", out.wrapper.n)
    if out.continuous is not None:
        out.continuous.n = times("continuous", out.continuous.n)
    if out.sequence is not None:
        out.sequence.calls = times("sequence", out.sequence.calls)
        out.sequence.small_calls = int(round(out.sequence.small_calls * float(factors.get("sequence", 1.0))))
    if out.law is not None:
        out.law["rows"] = times("law", int(out.law["rows"]))
    if out.trajectory is not None and "n_traj" in out.trajectory:
        out.trajectory["n_traj"] = times("trajectory", int(out.trajectory["n_traj"]))
    return out


def check_cost(suite: Suite, scale: float = 1.0) -> SuiteCost:
    """:func:`suite_cost`, refused above the bounds: a scaled count beyond its :data:`BOUNDS`
    (naming the section and field and the scale), more than :data:`MAX_ROWS` rows or an estimated
    peak above :data:`MAX_MEMORY_BYTES`. InputError (exit 2) before anything runs."""
    from speccheck.errors import InputError

    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not 0 < scale <= MAX_SCALE:
        raise InputError(f"scale must be a number in (0, {MAX_SCALE:g}] (a factor on every draw count), "
                         f"got scale={scale!r}")
    counted = []
    if suite.scalar is not None:
        counted += [("scalar", "n", suite.scalar.n)] + [("scalar.extra", "n", n) for _, _, n in suite.scalar.extra]
    if suite.wrapper is not None:
        counted.append(("wrapper", "n", suite.wrapper.n))
    if suite.continuous is not None:
        counted.append(("continuous", "n", suite.continuous.n))
    if suite.trajectory is not None:
        counted.append(("trajectory", "n_traj", int(suite.trajectory.get("n_traj", 300))))
    if suite.law is not None:
        counted.append(("law", "rows", int(suite.law["rows"])))
    for section, key, n in counted:
        high = BOUNDS[(section, key)][1]
        if _scaled(n, scale) > high:
            raise InputError(f"suite [{section}] {key} = {n} times scale {scale:g} is {n * scale:.3g} draws, more "
                             f"than the bound {high:,} (docs/exit-codes.md); lower the scale or {key}")
    cost = suite_cost(suite, scale)
    if cost.rows > MAX_ROWS or cost.memory_bytes > MAX_MEMORY_BYTES:
        raise InputError(f"suite {suite.name!r} at scale {scale:g} is too large: {cost.describe()}; the bounds are "
                         f"{MAX_ROWS:,} rows and {MAX_MEMORY_BYTES / 2**30:g} GiB (docs/exit-codes.md)")
    return cost
