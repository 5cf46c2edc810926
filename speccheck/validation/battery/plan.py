"""The battery's options and its plan: the request checked up front, the suite parsed once into
the cells a run will execute (plain JSON, so a Dask client and its workers share it) and the
number of statistical tests Holm splits the family-wise rate over."""

from __future__ import annotations

import copy
import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from speccheck.errors import DeviceError, InputError, LoadError
from speccheck.theory.validate import MAX_K
from speccheck.validation import continuous, law, sequence
from speccheck.validation.contract import supports
from speccheck.validation.results import LAYERS, TestResult
from speccheck.validation.suites import Suite, load_suite

__all__ = ["battery_cells", "check_evidence", "first_cells", "fresh_verifier", "load_verifier", "per_test_alpha",
           "plan_battery", "planned_tests", "resolve_device", "resolve_layers"]


# ----------------------------------------------------------------------------- loading
def load_verifier(spec: Any) -> Any:
    """A verifier from a name / "module:attr" / object, through ``speccheck.verifiers.get``.

    Raises :class:`speccheck.errors.LoadError` (exit code 2) when it cannot be loaded."""
    from speccheck.verifiers import get

    try:
        v = get(spec)
    except LoadError:
        raise
    except ValueError as exc:
        raise LoadError(str(exc)) from None
    if not callable(getattr(v, "verify", None)):
        raise LoadError(f"verifier {spec!r} loaded {v!r}, which has no verify method")
    return v


def fresh_verifier(verifier: Any) -> Any:
    """A fresh instance of a loaded verifier for one unit of work (a deep copy; the object itself
    when it cannot be copied). Every path (API, CLI, Dask units) gives each battery cell its
    own instance in the same initial state, so state a verifier keeps between calls cannot make
    the verdict depend on how the cells were scheduled."""
    try:
        return copy.deepcopy(verifier)
    except Exception:  # noqa: BLE001 - an uncopyable verifier (a lock, a handle) is used as it is
        return verifier


# ----------------------------------------------------------------------------- options
def _check_seed(seed: Any) -> int | None:
    if seed is None:
        return None
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or int(seed) < 0:
        raise InputError(f"seed must be an integer >= 0, got seed={seed!r}")
    return int(seed)


def _check_scale(scale: Any) -> float:
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale) or scale <= 0:
        raise InputError(f"scale must be a finite number > 0 (a factor on every draw count), got scale={scale!r}")
    return float(scale)


def _check_alpha(alpha: Any) -> float | None:
    if alpha is None:
        return None
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0.0 < float(alpha) < 1.0:
        raise InputError(f"family_alpha must be in (0, 1), got family_alpha={alpha!r}")
    return float(alpha)


def resolve_layers(layers: Any) -> list[str]:
    """Layer ids ("L0".."L6") from ids or names ("contract", "scalar", "acceptance", "wrapper",
    "trajectory", "continuous", "sequence"); None = all. L1 and L2 share their draws: either runs both."""
    if layers is None:
        return list(LAYERS)
    if isinstance(layers, str):
        layers = [layers]
    layers = [x.strip() for item in layers for x in (item.split(",") if isinstance(item, str) else [item])
              if not isinstance(x, str) or x.strip()]
    by_name = {name: lid for lid, name in LAYERS.items()}
    out = []
    for item in layers:
        lid = item.upper() if isinstance(item, str) and item.upper() in LAYERS else by_name.get(item)
        if lid is None:
            allowed = ", ".join(f"{k} ({v})" for k, v in LAYERS.items())
            raise InputError(f"layers: unknown layer {item!r}; allowed: {allowed}")
        out.append(lid)
    if "L1" in out or "L2" in out:
        out += ["L1", "L2"]
    return [lid for lid in LAYERS if lid in out]


def _check_Ks(Ks: Any) -> list[int] | None:
    if Ks is None:
        return None
    if isinstance(Ks, (int, np.integer)) and not isinstance(Ks, bool):
        Ks = [Ks]
    try:
        values = list(Ks)
    except TypeError:
        raise InputError(f"Ks must be a list of integers >= 1, got Ks={Ks!r}") from None
    if not values or any(isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1 for k in values):
        raise InputError(f"Ks must be a non-empty list of integers >= 1, got Ks={Ks!r}")
    return sorted({int(k) for k in values})


def resolve_device(device: Any) -> torch.device:
    """'cpu', 'cuda' or 'cuda:N' that exists here; :class:`DeviceError` naming it otherwise."""
    text = str(device)
    if text != "cpu" and text != "cuda" and not text.startswith("cuda:"):
        raise DeviceError(f"device must be 'cpu', 'cuda' or 'cuda:N', got device={device!r}")
    try:
        dev = torch.device(text)
    except RuntimeError as exc:
        raise DeviceError(f"device={device!r} is not a valid torch device: {exc}") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise DeviceError(f"device={device!r} requested but CUDA is not available here; use device='cpu'")
        count = torch.cuda.device_count()
        if dev.index is not None and dev.index >= count:
            raise DeviceError(f"device={device!r}: there are {count} CUDA device(s), indices 0..{count - 1}")
    return dev


# -------------------------------------------------------------------------- the plan
@dataclass
class _Plan:
    layers: list[str]
    grid_cells: list[tuple[float, int, int, str]]  # (delta, K, n, cell label)
    continuous_Ks: list[int]
    wrapper_dims: list[int]
    has_acceptance: bool
    n_stat: int
    skipped_K: list[int]
    sequence_Ks: list[int]
    law: dict | None = None  # layer 7's CallLaw (plain JSON: rows scaled, K the rule supports)


def _grid_cells(v: Any, st: Suite, Ks: list[int] | None, scale: float) -> tuple[list, list[int]]:
    if st.scalar is None:
        return [], []
    sc = st.scalar
    chosen = [K for K in sc.K if Ks is None or K in Ks]
    skipped = [K for K in chosen if not supports(v, K)]
    n_cell = continuous.scaled(sc.n, scale, 16)
    cells = [(d, K, n_cell, f"delta={d:g},K={K}") for K in chosen if K not in skipped for d in sc.deltas]
    for d, K, n in sc.extra:
        if (Ks is None or K in Ks) and supports(v, K):
            n_extra = continuous.scaled(n, scale, 16)
            cells.append((d, K, n_extra, f"delta={d:g},K={K},n={n_extra}"))
    return cells, skipped


def _plan(v: Any, st: Suite, traj_tests: int = 0, *, layers: list[str] | None = None, Ks: list[int] | None = None,
          scale: float = 1.0) -> _Plan:
    layers = resolve_layers(None) if layers is None else layers
    has_acc = callable(getattr(v, "acceptance", None))
    cells, skipped = _grid_cells(v, st, Ks, scale) if "L1" in layers else ([], [])
    cont_Ks = []
    if "L5" in layers and st.continuous is not None:
        cont_Ks = [K for K in st.continuous.K if (Ks is None or K in Ks) and supports(v, K)]
        skipped += [K for K in st.continuous.K if (Ks is None or K in Ks) and not supports(v, K) and K not in skipped]
    seq_Ks = []
    if "L6" in layers and st.sequence is not None:
        seq_Ks = [K for K in st.sequence.K if (Ks is None or K in Ks) and supports(v, K)]
    dims = list(st.wrapper.dims) if ("L3" in layers and st.wrapper is not None) else []
    n = len(cells) * (2 + 1 + (1 if has_acc else 0))  # ks, tails, list bound, declared (n/a ones drop out later)
    n += continuous.planned_tests(st.continuous, cont_Ks, has_acc) if cont_Ks else 0
    n += 4 * len(dims) + traj_tests
    n += sequence.planned_tests(st.sequence, has_acc) if seq_Ks else 0
    law_plan = _law_plan(v, st, Ks, scale) if "L7" in layers else None
    n += law.planned_tests(has_acc) if law_plan else 0
    return _Plan(layers, cells, cont_Ks, dims, has_acc, n, sorted(skipped), seq_Ks, law_plan)


def _law_plan(v: Any, st: Suite, Ks: list[int] | None, scale: float) -> dict | None:
    """Layer 7's law for this rule: the suite's [law] with K the rule supports, rows times ``scale``."""
    if st.law is None:
        return None
    chosen = [K for K in st.law["Ks"] if (Ks is None or K in Ks) and supports(v, K)]
    if not chosen:
        return None
    return {**st.law, "Ks": chosen, "rows": continuous.scaled(int(st.law["rows"]), scale, 1024)}


def planned_tests(verifier: Any, suite: str | Suite = "gate", *, layers: Any = None, Ks: Any = None,
                  scale: float = 1.0) -> int:
    """How many statistical tests a run plans without layer L4 (whose count depends on the
    draws); the binding per-test level is family_alpha / (this + L4's tests)."""
    v = load_verifier(verifier)
    st = load_suite(suite) if isinstance(suite, str) else suite
    return _plan(v, st, 0, layers=resolve_layers(layers), Ks=_check_Ks(Ks), scale=_check_scale(scale)).n_stat


# ------------------------------------------------------------------- cells (units of work)
def plan_battery(verifier: Any, suite: Suite, *, layers: list[str], Ks: list[int] | None, scale: float) -> dict:
    """The run's plan as plain JSON (needs the verifier: ``supports_K``, ``acceptance``): its name,
    layers, grid cells ``[delta, K, n, label]``, continuous K, wrapper dims, whether it declares
    its acceptance, the planned statistical tests without layer L4, and the skipped K."""
    plan = _plan(verifier, suite, 0, layers=layers, Ks=Ks, scale=scale)
    out = {"verifier": getattr(verifier, "name", type(verifier).__name__), "layers": list(plan.layers),
           "grid_cells": [[float(d), int(K), int(n), str(label)] for d, K, n, label in plan.grid_cells],
           "continuous_Ks": [int(K) for K in plan.continuous_Ks], "wrapper_dims": [int(d) for d in plan.wrapper_dims],
           "has_acceptance": bool(plan.has_acceptance), "n_stat": int(plan.n_stat),
           "skipped_K": [int(K) for K in plan.skipped_K], "sequence_Ks": [int(K) for K in plan.sequence_Ks],
           "law": plan.law}
    if Ks is not None and not set(Ks) & _Ks_run(out):  # check_evidence refuses it, naming what the rule takes
        out["supported_K"] = [K for K in range(1, MAX_K + 1) if supports(verifier, K)]
    return out


def _Ks_run(plan: dict) -> set[int]:
    """The K at which the plan's K-selected layers (L1-L2 grid, L5 continuous, L6 sequence) run."""
    return ({int(cell[1]) for cell in plan["grid_cells"]} | {int(K) for K in plan["continuous_Ks"]}
            | {int(K) for K in plan.get("sequence_Ks", [])})


def _spans(values: list[int]) -> str:
    """1, 2, 3, 5 -> "1..3, 5"."""
    spans: list[list[int]] = []
    for v in sorted(values):
        if spans and v == spans[-1][1] + 1:
            spans[-1][1] = v
        else:
            spans.append([v, v])
    return ", ".join(f"{a}" if a == b else f"{a}..{b}" for a, b in spans) or "none"


def _plan_of(plan: dict) -> _Plan:
    grid = [(float(d), int(K), int(n), str(label)) for d, K, n, label in plan["grid_cells"]]
    return _Plan(list(plan["layers"]), grid,
                 list(plan["continuous_Ks"]), list(plan["wrapper_dims"]), bool(plan["has_acceptance"]),
                 int(plan["n_stat"]), list(plan["skipped_K"]), list(plan.get("sequence_Ks", [])), plan.get("law"))


SAMPLER_RULE_NOTE = "sampler mutant: only layers 0 and 4 were run (the others do not involve the sampler)"


def suite_for(verifier: Any, suite: Suite) -> tuple[Suite, list[str]]:
    """The suite a rule is run on, and a note when it differs: a rule that brings its own sampler
    (``sampler_factory``, the sampler mutants) only where the sampler is involved, layers 0 and 4."""
    if getattr(verifier, "sampler_factory", None) is None:
        return suite, []
    return (dataclasses.replace(suite, scalar=None, wrapper=None, continuous=None, sequence=None, law=None),
            [SAMPLER_RULE_NOTE])


def first_cells(suite: Suite, layers: list[str]) -> list[tuple]:
    """The cells that run before the plan's per-test level is known: the contract ``("L0",)`` and
    the trajectory layer ``("L4",)`` (its number of tests is random, and Holm needs the count)."""
    cells = [("L0",)] if "L0" in layers else []
    return cells + ([("L4",)] if "L4" in layers and suite.trajectory is not None else [])


def battery_cells(plan: dict) -> list[tuple]:
    """The plan's other cells, in report order: ``("L1", grid-cell label)`` (layers 1-2 share
    their draws), ``("L5", K)`` (the continuous layer at one K), ``("L3", dim)`` (the wrapper),
    ``("L6",)`` (the sequence layer: one instance through all its calls), ``("L7",)`` (the law of calls)."""
    return ([("L1", label) for _, _, _, label in plan["grid_cells"]] + [("L5", K) for K in plan["continuous_Ks"]]
            + [("L3", d) for d in plan["wrapper_dims"]] + ([("L6",)] if plan.get("sequence_Ks") else [])
            + ([("L7",)] if plan.get("law") else []))


def per_test_alpha(plan: dict, trajectory: list[TestResult], alpha: float) -> float:
    """The binding per-test level alpha / m, m = the plan's statistical tests + layer L4's."""
    return alpha / max(int(plan["n_stat"]) + sum(r.kind == "stat" for r in trajectory), 1)


def check_evidence(plan: dict, suite: Suite, contract: list[TestResult], trajectory: list[TestResult],
                   Ks: list[int] | None) -> None:
    """A run that plans no statistical test has no verdict: :class:`InputError` (unless the
    contract already failed, which is a verdict)."""
    n_stat = int(plan["n_stat"]) + sum(r.kind == "stat" for r in trajectory)
    if n_stat == 0 and all(r.passed for r in contract):
        raise InputError(f"suite {suite.name!r} with layers={[LAYERS[x] for x in plan['layers']]} and Ks={Ks} "
                         "selects no statistical test: no verdict from no evidence (choose layers or K the suite has)")
    if Ks is not None and all(r.passed for r in contract) and not set(Ks) & _Ks_run(plan):
        # the other layers ran, but nothing at the K asked for: a pass would say nothing about it
        suite_K = sorted({int(K) for part in (suite.scalar, suite.continuous, suite.sequence) if part is not None
                          for K in part.K})
        takes = [x for x in ("L1", "L5", "L6") if x in plan["layers"]]
        why = f"suite {suite.name!r} has K = {_spans(suite_K)}"
        if "supported_K" in plan:
            why = f"verifier {plan['verifier']!r} supports K = {_spans(plan['supported_K'])}; {why}"
        if not takes:
            why = f"the layers selected ({', '.join(plan['layers'])}) take no K; K selects in L1-L2, L5 and L6"
        raise InputError(f"--K / Ks={list(Ks)}: no test ran at the K asked for ({why}); no verdict (choose K the "
                         "rule supports and the suite has)")
