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
    [``delta_lo``, ``delta_hi``]; the first ``replay`` calls replayed on a fresh instance (0 = off,
    the shipped suites' setting: the contract layer checks same seed => same output);
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
    if p.suffix == ".toml" or len(p.parts) > 1:
        raise LoadError(f"suite file {str(p)!r} does not exist")
    for d in suite_dirs():
        cand = d / f"{name_or_path}.toml"
        if cand.is_file():
            return cand
    raise LoadError(f"unknown suite {name_or_path!r}: not a .toml file and not one of {known_suites()}")


#: the verifier contract's domain (docs/contract.md): a suite may not ask for more
MAX_K = 128
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
    values inside the verifier contract's domain."""
    _check_keys(data, "")
    for section in ("scalar", "contract", "wrapper", "trajectory", "continuous", "sequence", "law"):
        if section in data:
            _check_keys(data[section], section)
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
    return Suite(str(data.get("name", name)), seed, alpha, power, scalar, contract_n, wrapper, traj,
                 str(data.get("description", "")), path, continuous, sequence, law)


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
