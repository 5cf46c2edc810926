"""Result types of the exactness battery: one :class:`TestResult` per test, a
:class:`Localisation` per confirmed failure region, and the :class:`BatteryReport` of a run.

Kept apart from the battery and the report formatters so neither imports the other; every
type round-trips exactly through JSON (``to_dict`` / ``from_dict``).
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from speccheck.strict_json import finite_json

#: layer id -> what it tests (the report and ``layers=`` use both spellings)
LAYERS: dict[str, str] = {
    "L0": "contract",
    "L1": "scalar",
    "L2": "acceptance",
    "L3": "wrapper",
    "L4": "trajectory",
    "L5": "continuous",
    "L6": "sequence",
    "L7": "law",
}

#: kinds of test: a statistical test in the Holm family, a deterministic contract check, and a
#: test that cannot fail at its cell (e.g. the list bound is 1), reported as n/a
KINDS = ("stat", "contract", "n/a")

_FLOATS = ("statistic", "threshold", "p_value", "mdd")
_CELL_K = re.compile(r"(?:^|,)K=(\d+)(?:,|$)")
_CELL_DELTA = re.compile(r"^delta=([^,]+),")
#: the columns of :meth:`BatteryReport.to_frame`
FRAME_COLUMNS = ("layer", "cell", "test", "kind", "K", "delta_lo", "delta_hi", "statistic", "threshold", "p_value",
                 "p_holm", "mdd", "n", "passed", "note")


def _float_or_none(value: Any) -> float | None:
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _float_from(value: Any, default: float = math.nan) -> float:
    return default if value is None else float(value)


@dataclass
class TestResult:
    """One test in one cell of the battery.

    ``kind``: "stat" (a statistical test, part of the Holm family), "contract" (deterministic:
    false-failure rate 0) or "n/a" (cannot fail at this cell; not in the family). ``passed``
    is the final verdict (after Holm for "stat" tests); ``p_value`` is the raw p-value.
    ``mdd``: the minimum detectable deviation, in the statistic's own units, at the suite's
    power. In :meth:`as_dict` (strict JSON) every non-finite float is ``null``; an infinite one
    is also named in ``infinite`` (field -> +1 or -1), so :meth:`from_dict` restores it exactly.
    """

    __test__ = False  # not a pytest class

    cell: str
    test: str
    statistic: float
    threshold: float
    p_value: float
    mdd: float
    n: int
    kind: str = "stat"
    passed: bool = True
    note: str = ""
    layer: str = ""
    extra: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        """Strict-JSON-ready dict: non-finite floats are None (numeric columns for pandas and
        every JSON reader); ``"infinite": {field: +1 | -1}``, present only when a float field is
        infinite, keeps the sign for :meth:`from_dict`."""
        d = asdict(self)
        infinite = {}
        for key in _FLOATS:
            v = d[key]
            if isinstance(v, (int, float)) and math.isinf(v):
                infinite[key] = 1 if v > 0 else -1
            d[key] = _float_or_none(v)
        d["extra"] = finite_json(d["extra"])
        if infinite:
            d["infinite"] = infinite
        return d

    to_dict = as_dict

    @property
    def name(self) -> str:
        """A one-string name: the trajectory checks' own, else "cell test"."""
        return str(self.extra.get("name") or f"{self.cell} {self.test}")

    @property
    def where(self) -> tuple[int | None, float, float]:
        """(K, delta_lo, delta_hi) the test ran at, from its own record: a grid point has
        delta_lo = delta_hi, a stratum of the continuous layer its [lo, hi); None / NaN where the
        test names no K or delta (the wrapper, trajectory and sequence layers, pooled tests)."""
        match = _CELL_K.search(self.cell)
        K = self.extra.get("K", int(match.group(1)) if match else None)
        if "lo" in self.extra and "hi" in self.extra:
            lo, hi = self.extra["lo"], self.extra["hi"]
        elif "delta" in self.extra:
            lo = hi = self.extra["delta"]
        else:
            point = _CELL_DELTA.match(self.cell)
            lo = hi = float(point.group(1)) if point else math.nan
        return (None if K is None else int(K)), _float_from(lo), _float_from(hi)

    @property
    def level(self) -> float:
        """The level on the p-value of a p-value test (the trajectory checks): its threshold."""
        return self.threshold

    @classmethod
    def from_dict(cls, d: dict) -> TestResult:
        """Inverse of :meth:`as_dict`."""
        kw = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        infinite = d.get("infinite") or {}
        for key in _FLOATS:
            v = kw.get(key)
            if isinstance(v, str):  # reports written before strict JSON spelled infinities "inf" / "-inf"
                kw[key] = float(v)
            elif v is None and infinite.get(key) in (1, -1):
                kw[key] = math.copysign(math.inf, infinite[key])
            else:
                kw[key] = _float_from(v)
        kw["n"] = int(kw.get("n", 0))
        kw["extra"] = dict(kw.get("extra") or {})
        return cls(**kw)


@dataclass
class Localisation:
    """Where a failure lives: a delta window and K, the effect there, confirmed on fresh draws.

    ``confirmed``: the confirmation tests (fresh draws inside the window, their own error
    budget ``alpha``) rejected exactness there. ``acceptance`` / ``declared``: observed and
    declared (or bounded, ``declared_kind`` = "bound") acceptance over the window's rows;
    ``pit_distance``: the KS distance of u = Phi(s_out - delta) from U(0, 1).
    """

    delta_lo: float
    delta_hi: float
    K: int
    confirmed: bool
    n: int
    p_value: float
    alpha: float
    acceptance: float
    declared: float
    declared_kind: str
    pit_distance: float
    source: str = ""

    def describe(self) -> str:
        """One line: "delta in [0.01, 0.1), K = 2: acceptance 1.000 vs declared 0.984; ..."."""
        if self.delta_lo == self.delta_hi:
            where = f"delta = {self.delta_lo:.4g}"
        else:
            where = f"delta in [{self.delta_lo:.4g}, {self.delta_hi:.4g})"
        verdict = "confirmed" if self.confirmed else "NOT confirmed"
        if not math.isfinite(self.acceptance):  # the fresh draws broke the contract: no law to measure
            return f"{where}, K = {self.K}: the contract is violated there ({verdict} on {self.n} fresh draws)"
        acc = f"acceptance {self.acceptance:.3f} vs {self.declared_kind} {self.declared:.3f}" \
            if math.isfinite(self.declared) else f"acceptance {self.acceptance:.3f}"
        how = " in mixed-delta batches" if "mixed-delta" in self.source else ""
        return (f"{where}, K = {self.K}: {acc}; PIT KS distance {self.pit_distance:.3f} "
                f"({verdict} on {self.n} fresh draws{how}, p = {self.p_value:.2g} at alpha {self.alpha:.2g})")

    def to_dict(self) -> dict:
        d = asdict(self)
        for key, v in d.items():
            if isinstance(v, float) and not math.isfinite(v):
                d[key] = None
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Localisation:
        kw = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        for key in ("delta_lo", "delta_hi", "p_value", "alpha", "acceptance", "declared", "pit_distance"):
            kw[key] = _float_from(kw.get(key))
        return cls(**kw)


@dataclass(frozen=True)
class Promise:
    """The smallest defects the law layer detects with probability >= ``power`` in any stratum
    holding >= ``share`` of its rows: ``pit`` (PIT sup-distance), ``acceptance`` (acceptance
    shift; NaN without a declared acceptance); ``rows`` and ``declared_rows`` of the layer;
    ``table``: per covariate family and resolution (family, bins, per-bin level, PIT MDD,
    acceptance MDD)."""

    share: float
    power: float
    pit: float
    acceptance: float
    rows: int
    declared_rows: int
    table: tuple

    def line(self) -> str:
        acc = (f" or its acceptance shift >= {self.acceptance:.4f} (of the {self.declared_rows:,} rows with a declared "
               "acceptance)") if math.isfinite(self.acceptance) else ""
        families = len({f for f, *_ in self.table if f != "all"})
        return (f"promise (L7, {self.rows:,} rows): a defect in any stratum holding >= {self.share:.0%} of the rows "
                f"({families} covariates, 2..16 bins each) is detected with probability >= {self.power:g} when its "
                f"PIT sup-distance >= {self.pit:.4f}{acc}")

    def table_lines(self) -> list[str]:
        rows = [f"  {'covariate':10s} {'bins':>4s} {'level/bin':>9s} {'PIT MDD':>8s} {'acc MDD':>8s}"]
        for family, bins, level, pit, accm in self.table:
            rows.append(f"  {family:10s} {bins:4d} {level:9.2g} {pit:8.4f} {accm:8.4f}")
        return rows


def promise_of(results: list[TestResult], power: float) -> Promise | None:
    """The promise of a report's law-layer strata tests (``speccheck.validation.law``: each
    carries the largest MDD over its bins holding >= the stated share of the rows, at its per-bin
    level); None when the layer did not run."""
    strata = [r for r in results if r.layer == "L7" and r.kind == "stat" and "mdd_at_share" in r.extra
              and "bin_level" in r.extra]
    if not strata:
        return None
    table: dict[tuple, list] = {}
    for r in strata:
        key = (str(r.extra["family"]), int(r.extra["bins"]))
        row = table.setdefault(key, [float(r.extra["bin_level"]), math.nan, math.nan])
        at_share = r.extra["mdd_at_share"]
        row[1 if r.extra["kind"] == "pit" else 2] = math.nan if at_share is None else float(at_share)
    rows = max((r.n for r in strata if r.extra["kind"] == "pit"), default=0)
    declared = max((r.n for r in strata if r.extra["kind"] == "acceptance"), default=0)

    def worst(kind: str) -> float:
        values = [float(r.extra["mdd_at_share"]) for r in strata
                  if r.extra["kind"] == kind and r.extra["mdd_at_share"] is not None]
        finite = [v for v in values if math.isfinite(v)]
        return max(finite) if finite else math.nan

    return Promise(float(strata[0].extra["share"]), power, worst("pit"), worst("acceptance"), int(rows),
                   int(declared), tuple((f, b, v[0], v[1], v[2]) for (f, b), v in table.items()))


@dataclass
class BatteryReport:
    """Everything a run produced; ``passed`` iff no test failed."""

    verifier: str
    suite: str
    seed: int
    family_alpha: float
    per_test_alpha: float
    device: str
    results: list[TestResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    wall_s: float = 0.0
    cpu_s: float = 0.0  # process CPU time (all threads) spent in the run
    power: float = 0.99
    scale: float = 1.0
    layers: list[str] = field(default_factory=list)
    localisations: list[Localisation] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.results)

    @property
    def failures(self) -> list[TestResult]:
        return [r for r in self.results if not r.passed]

    def to_frame(self, failures_only: bool = False) -> Any:
        """The tests as a pandas DataFrame, one row per test (``failures_only``: the failed ones),
        columns :data:`FRAME_COLUMNS`: layer, cell, test, kind, ``K`` (nullable integer: <NA> where
        the test has no K), the delta range ``delta_lo``, ``delta_hi`` (equal at a grid point; NaN
        where the test names none; see :attr:`TestResult.where`), statistic, threshold, p_value
        (raw), p_holm (Holm-adjusted; a test fails when it is <= ``family_alpha``), mdd, n, passed,
        note. Infinite values stay infinite."""
        import pandas as pd

        rows = []
        for r in self.results:
            if failures_only and r.passed:
                continue
            K, lo, hi = r.where
            p_holm = r.extra.get("p_holm")
            rows.append({"layer": r.layer, "cell": r.cell, "test": r.test, "kind": r.kind, "K": K, "delta_lo": lo,
                         "delta_hi": hi, "statistic": float(r.statistic), "threshold": float(r.threshold),
                         "p_value": float(r.p_value), "p_holm": math.nan if p_holm is None else float(p_holm),
                         "mdd": float(r.mdd), "n": int(r.n), "passed": bool(r.passed), "note": r.note})
        frame = pd.DataFrame(rows, columns=list(FRAME_COLUMNS))
        frame["K"] = frame["K"].astype("Int64")
        for column in ("delta_lo", "delta_hi", "statistic", "threshold", "p_value", "p_holm", "mdd"):
            frame[column] = frame[column].astype(float)
        frame["n"] = frame["n"].astype("int64")
        frame["passed"] = frame["passed"].astype(bool)
        return frame

    @property
    def promise(self) -> Promise | None:
        """The law layer's power promise (:func:`promise_of`), None without that layer."""
        return promise_of(self.results, self.power)

    def to_dict(self) -> dict:
        """Strict JSON (non-finite floats null, see :meth:`TestResult.as_dict`); :meth:`from_dict`
        rebuilds an equal report."""
        return finite_json({
            "verifier": self.verifier, "suite": self.suite, "seed": self.seed, "device": self.device,
            "family_alpha": self.family_alpha, "per_test_alpha": self.per_test_alpha, "passed": self.passed,
            "power": self.power, "scale": self.scale, "layers": list(self.layers),
            "wall_s": self.wall_s, "cpu_s": self.cpu_s, "notes": list(self.notes),
            "results": [r.as_dict() for r in self.results],
            "localisations": [loc.to_dict() for loc in self.localisations],
        })

    @classmethod
    def from_dict(cls, d: dict) -> BatteryReport:
        """Inverse of :meth:`to_dict` (also reads reports written before ``power``/``layers``)."""
        return cls(
            verifier=d["verifier"], suite=d["suite"], seed=int(d["seed"]), family_alpha=float(d["family_alpha"]),
            per_test_alpha=float(d["per_test_alpha"]), device=d["device"],
            results=[TestResult.from_dict(r) for r in d.get("results", [])],
            notes=list(d.get("notes", [])), wall_s=float(d.get("wall_s", 0.0)), cpu_s=float(d.get("cpu_s", 0.0)),
            power=float(d.get("power", 0.99)), scale=float(d.get("scale", 1.0)), layers=list(d.get("layers", [])),
            localisations=[Localisation.from_dict(x) for x in d.get("localisations", [])],
        )
