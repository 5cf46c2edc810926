"""Battery suites: TOML files in the top-level ``validation/`` folder (users add their own).

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
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

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


def suite_dirs() -> list[Path]:
    """Where suite names are looked up: ./validation, then the repository's validation/."""
    here = Path(__file__).resolve().parents[2] / "validation"
    cwd = Path.cwd() / "validation"
    return [cwd] if cwd == here else [cwd, here]


def find_suite(name_or_path: str) -> Path:
    p = Path(name_or_path)
    if p.suffix == ".toml" and p.is_file():
        return p
    for d in suite_dirs():
        cand = d / f"{name_or_path}.toml"
        if cand.is_file():
            return cand
    known = sorted({f.stem for d in suite_dirs() if d.is_dir() for f in d.glob("*.toml")})
    raise ValueError(f"unknown suite {name_or_path!r}: not a .toml file and not one of {known}")


def _pos_int(tab: dict, key: str, where: str, default=None) -> int:
    v = tab.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"suite [{where}] {key} must be an integer >= 1, got {key}={v!r}")
    return v


def parse_suite(data: dict, name: str = "suite", path: str = "") -> Suite:
    """Validate a suite's TOML table (ValueError naming the bad key)."""
    alpha = float(data.get("family_alpha", 1e-3))
    if not 0 < alpha < 1:
        raise ValueError(f"suite family_alpha must be in (0, 1), got family_alpha={alpha!r}")
    power = float(data.get("power", 0.99))
    if not 0 < power < 1:
        raise ValueError(f"suite power must be in (0, 1), got power={power!r}")
    seed = data.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"suite seed must be an integer >= 0, got seed={seed!r}")
    scalar = None
    if "scalar" in data:
        t = data["scalar"]
        deltas = [float(x) for x in t.get("deltas", [])]
        if not deltas or any(not (d >= 0) or d != d or d == float("inf") for d in deltas):
            raise ValueError(f"suite [scalar] deltas must be a non-empty list of finite values >= 0, got {deltas!r}")
        Ks = t.get("K", [])
        if not Ks or any(isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in Ks):
            raise ValueError(f"suite [scalar] K must be a non-empty list of integers >= 1, got {Ks!r}")
        tail_q = float(t.get("tail_q", 0.01))
        if not 0 < tail_q < 0.5:
            raise ValueError(f"suite [scalar] tail_q must be in (0, 0.5), got tail_q={tail_q!r}")
        extra = []
        for i, c in enumerate(t.get("extra", [])):
            d = float(c.get("delta", -1.0))
            if not d >= 0 or d == float("inf"):
                raise ValueError(f"suite [[scalar.extra]] #{i}: delta must be finite and >= 0, got delta={c.get('delta')!r}")
            extra.append((d, _pos_int(c, "K", "scalar.extra"), _pos_int(c, "n", "scalar.extra")))
        scalar = ScalarSpec(deltas, list(Ks), _pos_int(t, "n", "scalar"), _pos_int(t, "chunk", "scalar", 1 << 18), tail_q,
                            extra)
    wrapper = None
    if "wrapper" in data:
        t = data["wrapper"]
        dims = t.get("dims", [])
        if not dims or any(isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in dims):
            raise ValueError(f"suite [wrapper] dims must be a non-empty list of integers >= 1, got {dims!r}")
        deltas = [float(x) for x in t.get("deltas", [0.0, 0.5, 1.0, 2.0])]
        if not deltas or any(not (d >= 0) for d in deltas):
            raise ValueError(f"suite [wrapper] deltas must be a non-empty list of values >= 0, got {deltas!r}")
        wrapper = WrapperSpec(list(dims), _pos_int(t, "n", "wrapper"), _pos_int(t, "K", "wrapper", 3), deltas,
                              _pos_int(t, "chunk", "wrapper", 4096))
    traj = data.get("trajectory")
    if traj is not None and not traj.get("enabled", True):
        traj = None
    contract_n = _pos_int(data.get("contract", {}), "n", "contract", 256)
    return Suite(str(data.get("name", name)), seed, alpha, power, scalar, contract_n, wrapper, traj,
                 str(data.get("description", "")), path)


def load_suite(name_or_path: str) -> Suite:
    """Load ``validation/<name>.toml`` (or a path to a .toml file) into a :class:`Suite`."""
    p = find_suite(name_or_path)
    with open(p, "rb") as fh:
        try:
            data = tomllib.load(fh)
        except tomllib.TOMLDecodeError as exc:
            raise ValueError(f"suite file {p} is not valid TOML: {exc}") from exc
    return parse_suite(data, p.stem, str(p))
