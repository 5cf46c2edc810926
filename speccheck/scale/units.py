"""Units of work: pure functions of (spec, identity) that return a JSON-able result record.

A :class:`Unit` names its kind (``sweep-cell``, ``calibration-seed``, ``battery``, ``mutant``),
the job's ``spec`` (shared by every unit of a job) and its ``identity`` (what distinguishes it:
a rule and a cell, a rule and a seed, a mutant's name). Its random seed is
``unit_seed(base_seed, kind, *identity)``, so a unit's result is the same whichever worker runs
it, in whichever order, next to whichever other units (a unit whose identity names its seed
outright, such as a calibration's battery seed, sets ``fixed_seed``). :func:`run_unit` is the one
function the executors ship to workers; it runs the unit with one torch thread (reductions then do
not depend on the worker's thread count) and returns ``{"result", "wall_s", "worker", "code"}``;
timing is kept out of ``result`` so that results are bit-identical between runs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import math
import os
import socket
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Optional

import numpy as np

from speccheck.errors import InputError, LoadError
from speccheck.seeding import Part, unit_seed


@dataclass(frozen=True)
class Unit:
    """One unit of work. ``key`` (its identity joined by ``/``) is unique within a job."""

    kind: str
    spec: dict = field(compare=False)
    identity: tuple[Part, ...]
    base_seed: int = 0
    device: str = "cpu"
    fixed_seed: Optional[int] = None  # a seed the identity names outright (a calibration's battery seed)

    @property
    def key(self) -> str:
        return "/".join(str(part) for part in self.identity)

    @property
    def seed(self) -> int:
        """The unit's seed: ``fixed_seed`` if given, else ``unit_seed(base_seed, kind, *identity)``."""
        if self.fixed_seed is not None:
            return int(self.fixed_seed)
        return unit_seed(self.base_seed, self.kind, *self.identity)

    @property
    def needs_gpu(self) -> bool:
        return str(self.device).startswith("cuda")


# ----------------------------------------------------------------------------- JSON hygiene
def plain(value: Any) -> Any:
    """Numpy/torch scalars and arrays, tuples and dataclasses -> plain JSON types (recursively)."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return plain(dataclasses.asdict(value))
    if isinstance(value, np.ndarray):
        return plain(value.tolist())
    if isinstance(value, (np.bool_, bool)):
        return bool(value)
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating, float)):
        return float(value)
    if hasattr(value, "item") and callable(value.item) and getattr(value, "ndim", 1) == 0:
        return plain(value.item())
    return value


@contextlib.contextmanager
def _one_torch_thread() -> Iterator[None]:
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def suite_digest(suite: str) -> str:
    """SHA-256 (16 hex) of the suite's .toml file: part of a job's spec, so an edited suite is another spec."""
    from speccheck.validation.suites import find_suite

    try:
        path = find_suite(suite)
    except ValueError as exc:
        raise LoadError(str(exc)) from None
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()[:16]


def _load_suite_checked(spec: dict):  # noqa: ANN202 - returns a validation.suites.Suite
    from speccheck.validation.suites import load_suite

    if suite_digest(spec["suite"]) != spec["suite_sha"]:
        raise LoadError(f"suite {spec['suite']!r} on worker {socket.gethostname()} differs from the client's "
                        "(another .toml file content); install the same speccheck and suites on every worker")
    return load_suite(spec["suite"])


def _report_record(report: Any) -> dict:
    """A battery report as a dict without its timing (wall_s, cpu_s), which goes to the store row."""
    to_dict = getattr(report, "to_dict", None)
    if callable(to_dict):
        record = to_dict()
    else:
        from speccheck.validation.report import report_dict

        record = report_dict(report)
    record = plain(record)
    for timing in ("wall_s", "cpu_s"):
        record.pop(timing, None)
    return record


# ----------------------------------------------------------------------------- the unit kinds
def sweep_cell(unit: Unit) -> dict:
    """One (rule, K, L) cell of a Gaussian-mixture sweep: per-trajectory columns plus the cell's
    theory summary (predicted NFE and speed-up, acceptance calibration z)."""
    from speccheck.sampler.experiments import Protocol, run_cells

    rule, K, L = unit.identity
    proto = Protocol(**unit.spec["protocol"])
    rows, summaries = run_cells(proto, str(rule), int(K), [int(L)], int(unit.spec["trajectories"]), unit.seed)
    columns = ("traj", "nfe", "root_calls", "det_calls", "rounds", "accepted", "verified", "speedup")
    return {"summary": plain(summaries[0]),
            "trajectories": {name: [plain(r[name]) for r in rows] for name in columns},
            "stochastic_steps": plain(rows[0]["stochastic_steps"]) if rows else 0}


def calibration_seed(unit: Unit) -> dict:
    """The suite on a correct rule under battery seed ``seed`` (the identity's second part, so
    ``speccheck battery --seed N`` reproduces the run): verdict, failed tests, raw p-value shares."""
    from speccheck.validation.battery import run_battery

    rule, _ = unit.identity
    seed = unit.seed
    report = run_battery(str(rule), _load_suite_checked(unit.spec), device=unit.device, seed=seed)
    stat = [r for r in report.results if r.kind == "stat"]
    return {"rule": str(rule), "seed": int(seed), "passed": bool(report.passed),
            "failed": [f"{r.layer} {r.cell} {r.test} (p={r.p_value:.3g})" for r in report.failures],
            "n_stat": len(stat),
            "p_lt_001": sum(bool(r.p_value < 0.01) for r in stat),
            "p_lt_005": sum(bool(r.p_value < 0.05) for r in stat),
            "min_p": float(min((r.p_value for r in stat), default=1.0)),
            "family_alpha": float(report.family_alpha)}


def battery_run(unit: Unit) -> dict:
    """The suite on one verifier (identity: its spec string) with the job's seed: the report dict."""
    from speccheck.validation.battery import run_battery

    (verifier,) = unit.identity
    report = run_battery(str(verifier), _load_suite_checked(unit.spec), device=unit.device, seed=unit.seed)
    return _report_record(report)


def mutant_run(unit: Unit) -> dict:
    """The suite on one mutant (identity: its name): the report dict (a kill = ``passed`` False)."""
    import importlib

    (name,) = unit.identity
    try:
        mutants = importlib.import_module("speccheck.validation.mutants")
        factories = mutants.mutant_factories
    except (ImportError, AttributeError):  # before the move out of validation.battery
        from speccheck.validation.battery import mutant_factories as factories
    from speccheck.validation.battery import run_mutants

    if str(name) not in factories():
        raise InputError(f"unknown mutant {name!r}; known: {sorted(factories())}")
    reports = run_mutants(_load_suite_checked(unit.spec), names=[str(name)], device=unit.device, seed=unit.seed)
    if str(name) not in reports:  # e.g. a sampler mutant on a suite without the trajectory layer
        return {"skipped": True, "note": "mutant not applicable to this suite (no trajectory layer)"}
    return _report_record(reports[str(name)])


def echo(unit: Unit) -> dict:
    """No work: the unit's identity and seed (measures the executors' own cost per unit)."""
    return {"identity": list(unit.identity), "seed": unit.seed}


UNIT_KINDS: dict[str, Callable[[Unit], dict]] = {
    "echo": echo,
    "sweep-cell": sweep_cell,
    "calibration-seed": calibration_seed,
    "battery": battery_run,
    "mutant": mutant_run,
}


def run_unit(unit: Unit) -> dict:
    """Run ``unit`` here; ``{"result": record, "wall_s": seconds, "worker": host:pid}``."""
    if unit.kind not in UNIT_KINDS:
        raise InputError(f"unknown unit kind {unit.kind!r}; known: {sorted(UNIT_KINDS)}")
    start = time.perf_counter()
    with _one_torch_thread():
        result = UNIT_KINDS[unit.kind](unit)
    wall = time.perf_counter() - start
    from speccheck.scale.store import code_version

    return {"result": result, "wall_s": wall if math.isfinite(wall) else 0.0,
            "worker": f"{socket.gethostname()}:{os.getpid()}", "code": code_version()}
