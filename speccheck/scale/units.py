"""Units of work: pure functions of (spec, identity) that return a JSON-able result record.

A :class:`Unit` names its kind (``sweep-cell``, ``sweep-chunk``, ``calibration-seed``, ``battery``,
``battery-cell``, ``mutant``), the job's ``spec`` (shared by every unit of a job) and its
``identity`` (what distinguishes it: a rule and a cell, a chunk of a cell, a rule and a seed, a
mutant's name, a verifier, its battery seed and a battery cell). Its random seed is
``unit_seed(base_seed, kind, *identity)``, so a unit's result is the same whichever worker runs
it, in whichever order, next to whichever other units (a unit whose identity names its seed
outright, such as a calibration's battery seed, sets ``fixed_seed``). :func:`run_unit` is the one
function the executors ship to workers; it runs the unit with one torch thread (reductions then do
not depend on the worker's thread count) and returns ``{"result", "wall_s", "worker", "code"}``;
timing is kept out of ``result`` so that results are bit-identical between runs.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import hashlib
import math
import os
import socket
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Optional

import numpy as np

from speccheck.errors import InputError, IsolatedCodeError, LoadError
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

    def to_dict(self) -> dict:
        """Plain JSON (for a unit sent to another process); :meth:`from_dict` inverts it."""
        return {"kind": self.kind, "spec": self.spec, "identity": list(self.identity), "base_seed": self.base_seed,
                "device": self.device, "fixed_seed": self.fixed_seed}

    @classmethod
    def from_dict(cls, data: dict) -> Unit:
        return cls(str(data["kind"]), dict(data["spec"]), tuple(data["identity"]), int(data["base_seed"]),
                   str(data["device"]), None if data["fixed_seed"] is None else int(data["fixed_seed"]))


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


_HEARTBEAT: contextvars.ContextVar[Optional[Callable[[str], None]]] = contextvars.ContextVar(
    "speccheck_unit_heartbeat", default=None)


@contextlib.contextmanager
def heartbeat_to(beat: Optional[Callable[[str], None]]) -> Iterator[None]:
    """Units run inside call ``beat(label)`` at each battery cell (the isolated child's heartbeat,
    so that ``--timeout`` bounds a cell, not a whole mutant's or calibration seed's battery run)."""
    token = _HEARTBEAT.set(beat)
    try:
        yield
    finally:
        _HEARTBEAT.reset(token)


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
    """One (rule, K, L) cell of a Gaussian-mixture sweep, raw: the run's counters, events and
    the verifier's declared acceptance per event (:func:`speccheck.sampler.experiments.cell_raw`)
    as plain JSON. The process that judges it computes the summary
    (:func:`speccheck.scale.jobs.merge_chunks`), never this one."""
    from speccheck.sampler.experiments import Protocol, cell_raw

    rule, K, L = unit.identity
    proto = Protocol(**unit.spec["protocol"])
    return plain(cell_raw(proto, str(rule), int(K), int(L), int(unit.spec["trajectories"]), unit.seed))


def sweep_chunk(unit: Unit) -> dict:
    """Trajectories ``[index * chunk, (index + 1) * chunk)`` of one (rule, K, L) sweep cell
    (identity ``(rule, K, L, index)``), drawn from the unit's own seed, raw as
    :func:`sweep_cell`'s (:func:`speccheck.scale.jobs.merge_chunks` merges the chunks of a cell
    exactly). The sampler is set up as :func:`speccheck.sampler.experiments.run_cells` sets up a
    one-L cell."""
    import torch

    from speccheck.sampler.analysis import declared_acceptance, run_raw
    from speccheck.sampler.core import SpeculativeSampler, resolve_verifier, verifier_name
    from speccheck.sampler.experiments import Protocol, cell_tree
    from speccheck.sampler.tree import uniform_tree
    from speccheck.seeding import generator
    from speccheck.targets.gmm import gmm_preset

    rule_spec, K, L, index = unit.identity
    proto = Protocol(**unit.spec["protocol"])
    chunk, n_traj = int(unit.spec["chunk"]), int(unit.spec["trajectories"])
    count = min(chunk, n_traj - int(index) * chunk)
    if count < 1:
        raise InputError(f"sweep chunk {unit.key}: no trajectories (cell of {n_traj}, chunks of {chunk})")
    rule = resolve_verifier(str(rule_spec))
    target = gmm_preset(proto.target)
    schedule = proto.schedule()
    tree = cell_tree(rule, int(K), int(L), proto, schedule.n_stochastic)
    sampler = SpeculativeSampler(target, schedule, uniform_tree(tree.max_K, tree.L), rule, freeze=proto.freeze,
                                 prefetch=proto.prefetch, leaves=proto.leaves, lazy=proto.lazy)
    gen = generator(unit.seed, "cpu")
    x0 = torch.randn(count, target.d, generator=gen, dtype=torch.float64)
    result = sampler.run(x0, gen, depth_cap=torch.full((count,), tree.L, dtype=torch.long))
    return plain({**run_raw(result, declared_acceptance(result, rule)), "rule": verifier_name(rule),
                  "tree_L": int(tree.L)})


def calibration_seed(unit: Unit) -> dict:
    """The suite on a correct rule under battery seed ``seed`` (the identity's second part, so
    ``speccheck battery --seed N`` reproduces the run): verdict, failed tests, raw p-value shares."""
    from speccheck.validation.battery import run_battery

    rule, _ = unit.identity
    report = run_battery(str(rule), _load_suite_checked(unit.spec), device=unit.device, seed=unit.seed,
                         heartbeat=_HEARTBEAT.get())
    return calibration_record(str(rule), unit.seed, report)


def calibration_record(rule: str, seed: int, report: Any) -> dict:
    """A calibration run's record from its battery report: verdict, failed tests, p-value shares."""
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
    report = run_battery(str(verifier), _load_suite_checked(unit.spec), device=unit.device, seed=unit.seed,
                         heartbeat=_HEARTBEAT.get())
    return _report_record(report)


def mutant_run(unit: Unit) -> dict:
    """The suite on one mutant (identity: its name): the report dict (a kill = ``passed`` False).
    The spec's ``options`` (``layers``, ``Ks``, ``scale``) go to the battery."""
    from speccheck.validation.mutants import mutant_factories, run_mutants

    (name,) = unit.identity
    if str(name) not in mutant_factories():
        raise InputError(f"unknown mutant {name!r}; known: {sorted(mutant_factories())}")
    reports = run_mutants(_load_suite_checked(unit.spec), names=[str(name)], device=unit.device, seed=unit.seed,
                          heartbeat=_HEARTBEAT.get(), **unit.spec.get("options", {}))
    if str(name) not in reports:  # e.g. a sampler mutant on a suite without the trajectory layer
        return {"skipped": True, "note": "mutant not applicable to this suite (no trajectory layer)"}
    return _report_record(reports[str(name)])


def _battery_context(unit: Unit):  # noqa: ANN202 - (verifier, suite, device, options) of a battery-cell unit
    from speccheck.validation.battery import fresh_verifier, load_verifier, resolve_device
    from speccheck.validation.suites import sized_suite

    options = dict(unit.spec.get("options", {}))
    suite = _load_suite_checked(unit.spec)
    return (fresh_verifier(load_verifier(str(unit.identity[0]))),
            sized_suite(suite, options["sizes"]) if options.get("sizes") else suite, resolve_device(unit.device),
            options)


def battery_cell(unit: Unit) -> dict:
    """One cell of one battery run (identity: the verifier's spec string, the run's battery seed,
    then the cell, e.g. ``("dgrs", 7, "L1", "delta=0.5,K=2")``, ``("dgrs", 7, "L5", 3)``; see
    :func:`speccheck.validation.battery.run_cell`), or the run's plan (``("dgrs", 7, "plan")``),
    or its localisation (``("dgrs", 7, "localise")``, the spec carrying the failed tests). A cell
    returns its contract results and raw outputs (:func:`speccheck.validation.battery.draw_cell`),
    which the job's client judges. The cell's seed is derived from the battery seed and the cell's
    identity; the later cells take the ``plan`` from the spec."""
    from speccheck.validation import battery
    from speccheck.validation.results import TestResult

    verifier, st, device, options = _battery_context(unit)
    base, cell = int(unit.identity[1]), tuple(unit.identity[2:])
    spec, scale = unit.spec, float(options.get("scale", 1.0))
    if cell == ("plan",):
        layers = battery.resolve_layers(options.get("layers"))
        return {"plan": battery.plan_battery(verifier, st, layers=layers, Ks=battery._check_Ks(options.get("Ks")),
                                             scale=scale)}
    if cell == ("pilot",):  # a budgeted run's pilot: the rule's cost measured here, where the cells run
        from speccheck.validation.battery.budget import measure_cost

        cost = measure_cost(verifier, st, device=device, seed=unit_seed(base, "pilot"), limit_s=float(spec["pilot_s"]))
        return {"pilot": cost.as_dict()}
    if cell == ("localise",):
        failures = [TestResult.from_dict(r) for r in spec["failures"]]
        found, notes = battery.localise_report(verifier, st, spec["plan"], failures, None, base=base,
                                               alpha=float(spec["family_alpha"]), alpha_t=float(spec["alpha_t"]),
                                               device=device, scale=scale)
        return {"localisations": [loc.to_dict() for loc in found], "notes": notes}
    contract, raw = battery.draw_cell(verifier, st, cell, plan=spec.get("plan"), base=base, device=device,
                                      scale=scale)
    # the contract results and the raw outputs only: the judging process computes every statistic
    # from ``raw`` (speccheck.validation.battery.judge_cell), whatever this process computed
    return {"results": [plain(r.as_dict()) for r in contract], "raw": raw}


def battery_law(unit: Unit) -> dict:
    """The law layer's cell of one battery run (identity: verifier, battery seed, ``"L7"``), drawn
    by :func:`speccheck.sampler.calls.draw_law` with nothing of ``speccheck.validation`` imported
    here: the rule meets a process shaped like a sampler's (the isolated path runs these units in a
    process of their own, see :class:`speccheck.scale.executors.IsolatedExecutor`). Returns the raw
    outputs, the contract counts among them, which the job's client judges
    (:func:`speccheck.validation.battery.judge_cell`). The same outputs as the cell drawn anywhere else."""
    import copy

    import torch

    from speccheck.sampler.calls import draw_law
    from speccheck.seeding import pinned_global_rngs
    from speccheck.verifiers import get

    spec_string, base = str(unit.identity[0]), int(unit.identity[1])
    try:
        verifier = get(spec_string)
    except ValueError as exc:
        raise LoadError(str(exc)) from None
    plan = unit.spec["plan"]
    device = torch.device(unit.device)
    with _no_speccheck_environment(), pinned_global_rngs(unit_seed(base, "global-rngs", repr(("L7",))), device):
        raw = draw_law(copy.deepcopy(verifier), plan["law"], seed=unit_seed(base, 7), device=device,
                       has_acceptance=bool(plan["has_acceptance"]), beat=_HEARTBEAT.get())
    return {"results": [], "raw": raw}


@contextlib.contextmanager
def _no_speccheck_environment() -> Iterator[None]:
    """No SPECCHECK_* variable in the environment inside (restored after); the cache folder the
    user set with $SPECCHECK_CACHE_DIR reaches the built-in rules through their cache module."""
    from speccheck.verifiers import _cache

    saved = {k: os.environ.pop(k) for k in [k for k in os.environ if k.startswith("SPECCHECK_")]}
    root = _cache.ROOT
    if "SPECCHECK_CACHE_DIR" in saved and root is None:
        _cache.ROOT = saved["SPECCHECK_CACHE_DIR"]
    try:
        yield
    finally:
        _cache.ROOT = root
        os.environ.update(saved)


def echo(unit: Unit) -> dict:
    """No work: the unit's identity and seed (measures the executors' own cost per unit)."""
    return {"identity": list(unit.identity), "seed": unit.seed}


UNIT_KINDS: dict[str, Callable[[Unit], dict]] = {
    "echo": echo,
    "sweep-cell": sweep_cell,
    "sweep-chunk": sweep_chunk,
    "calibration-seed": calibration_seed,
    "battery": battery_run,
    "mutant": mutant_run,
    "battery-cell": battery_cell,
    "battery-law": battery_law,
}


def run_unit(unit: Unit) -> dict:
    """Run ``unit`` here; ``{"result": record, "wall_s": seconds, "cpu_s": this process's CPU seconds in
    the unit, "worker": host:pid, "code", "deps"}``
    (``deps``: :func:`speccheck.scale.deps.manifest` after the run, what the result depended on)."""
    if unit.kind not in UNIT_KINDS:
        raise InputError(f"unknown unit kind {unit.kind!r}; known: {sorted(UNIT_KINDS)}")
    start, cpu = time.perf_counter(), time.process_time()
    try:
        with _one_torch_thread():
            result = UNIT_KINDS[unit.kind](unit)
    except SystemExit as exc:  # user code in a unit never ends the worker (nor decides an exit code)
        raise IsolatedCodeError(f"unit {unit.kind} {unit.key}: the code under test called sys.exit({exc.code!r}) "
                                "before a result; no verdict") from None
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    from speccheck.scale.deps import manifest
    from speccheck.scale.store import code_version

    return {"result": result, "wall_s": wall if math.isfinite(wall) else 0.0,
            "cpu_s": cpu if math.isfinite(cpu) else 0.0, "worker": f"{socket.gethostname()}:{os.getpid()}",
            "code": code_version(), "deps": manifest()}
