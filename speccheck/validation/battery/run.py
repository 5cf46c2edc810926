"""A whole battery run in this process: options checked, the contract and trajectory cells,
the plan, every other cell on a fresh copy of the verifier, one report, localisation."""

from __future__ import annotations

import sys
import time
from typing import Any, Callable

from speccheck.errors import DeviceError, InputError
from speccheck.validation import continuous
from speccheck.validation.battery.cells import run_cell
from speccheck.validation.battery.plan import (
    _check_alpha,
    _check_Ks,
    _check_scale,
    _check_seed,
    battery_cells,
    check_evidence,
    first_cells,
    fresh_verifier,
    load_verifier,
    per_test_alpha,
    plan_battery,
    resolve_device,
    resolve_layers,
    suite_for,
)
from speccheck.validation.battery.verdict import assemble_report, failures_to_localise, localise_report
from speccheck.validation.results import BatteryReport, TestResult
from speccheck.validation.suites import Suite, check_cost, load_suite, sized_suite

__all__ = ["assert_battery_passes", "run_battery"]


# ----------------------------------------------------------------------------------- run
def _beat(heartbeat: Callable[[str], None] | None, progress: bool, t0: float) -> Callable[[str], None]:
    def beat(label: str) -> None:
        if progress:
            print(f"[battery {time.perf_counter() - t0:7.1f} s] {label}", file=sys.stderr, flush=True)
        if heartbeat is not None:
            heartbeat(label)

    return beat


def _cell_label(cell: tuple) -> str:
    return {"L0": "L0 contract", "L4": "L4 trajectory", "L6": "L6 sequence", "L7": "L7 law",
            "L5": f"L5 continuous K={cell[-1]}", "L3": f"L3 d={cell[-1]}"}.get(cell[0], f"{cell[0]} {cell[-1]}")


def run_battery(verifier: Any, suite: str | Suite = "gate", *, device: str = "cpu", seed: int | None = None,
                progress: bool = False, family_alpha: float | None = None, layers: Any = None, Ks: Any = None,
                scale: float = 1.0, heartbeat: Callable[[str], None] | None = None,
                localise_failures: bool = True, sizes: dict | None = None) -> BatteryReport:
    """Run ``suite`` (a shipped name, a .toml path or a :class:`Suite`) on ``verifier`` (a spec
    string or an object).

    ``layers``: ids or names of the layers to run (default all the suite has); ``Ks``: run
    only these K (scalar grid and continuous layers); ``scale``: a factor on every draw count
    (the printed minimum detectable deviations show the power it implies); ``sizes``: a factor
    per section on its draws (:func:`speccheck.validation.suites.sized_suite`; a budgeted run's
    sizing, :mod:`speccheck.validation.battery.budget`); ``heartbeat(label)``
    is called at the start of every unit of work. Raises :class:`InputError` for a bad option
    or a selection with no statistical test, :class:`LoadError` for an unloadable verifier or
    suite, :class:`DeviceError` for an unusable device; whatever the verifier does wrong
    (raises, NaN, wrong law) is a failed test in the report.

    The run is a set of cells (:func:`first_cells`, :func:`battery_cells`), each seeded from
    its identity and run by :func:`run_cell` (the verifier's outputs drawn, then judged from those
    outputs alone), merged by :func:`assemble_report` with Holm over
    the whole family; ``speccheck.scale.jobs.battery_job`` runs the same cells as units on
    several processes and gives the same report.
    """
    t0, c0 = time.perf_counter(), time.process_time()
    seed = _check_seed(seed)
    scale = _check_scale(scale)
    alpha_opt = _check_alpha(family_alpha)
    Ks = _check_Ks(Ks)
    lay = resolve_layers(layers)
    dev = resolve_device(device)
    v = load_verifier(verifier)
    if isinstance(suite, str):
        st = load_suite(suite)
    elif isinstance(suite, Suite):
        st = suite
    else:
        raise InputError(f"suite must be a name, a .toml path or a Suite, got {type(suite).__name__}")
    if sizes:
        st = sized_suite(st, sizes)
    check_cost(st, scale)  # a suite beyond its bounds is refused before anything runs
    st, suite_notes = suite_for(v, st)
    base = st.seed if seed is None else seed
    alpha = st.family_alpha if alpha_opt is None else alpha_opt
    beat = _beat(heartbeat, progress, t0)

    def cell_results(cell: tuple, plan: dict | None, alpha_t: float) -> tuple[list[TestResult], Any]:
        beat(_cell_label(cell))
        return run_cell(fresh_verifier(v), st, cell, plan=plan, base=base, alpha_t=alpha_t, device=dev, scale=scale)

    contract: list[TestResult] = []
    trajectory: list[TestResult] | None = None
    for cell in first_cells(st, lay):
        if cell[0] == "L0":
            contract = cell_results(cell, None, alpha)[0]
        elif all(r.passed for r in contract):  # L4 only on a verifier that keeps the contract
            trajectory = cell_results(cell, None, alpha)[0]
    plan = plan_battery(fresh_verifier(v), st, layers=lay, Ks=Ks, scale=scale)
    check_evidence(plan, st, contract, trajectory or [], Ks)
    alpha_t = per_test_alpha(plan, trajectory or [], alpha)
    cells, continuous_raw = [], {}
    for cell in battery_cells(plan):
        results, raw = cell_results(cell, plan, alpha_t)
        cells.append(results)
        if cell[0] == "L5" and raw is not None:
            continuous_raw[int(cell[1])] = raw
    rep = assemble_report(plan, st, base=base, alpha=alpha, device=str(dev), scale=scale, contract=contract,
                          trajectory=trajectory, cells=cells)
    rep.notes += suite_notes
    failed_stat = failures_to_localise(rep)
    if failed_stat and localise_failures:
        screens = {K: continuous.screen_of(raw, K) for K, raw in continuous_raw.items()}
        rep.localisations, notes = localise_report(fresh_verifier(v), st, plan, failed_stat, screens, base=base,
                                                   alpha=alpha, alpha_t=alpha_t, device=dev, scale=scale,
                                                   heartbeat=beat)
        rep.notes += notes
    rep.wall_s = time.perf_counter() - t0
    rep.cpu_s = time.process_time() - c0
    return rep


def assert_battery_passes(verifier: Any, suite: str | Suite = "smoke", *, device: str = "cpu",
                          seed: int | None = None, **options: Any) -> BatteryReport:
    """Run the battery in this process and judge it
    (:func:`speccheck.validation.verdict.judge`): AssertionError with the report on a defect
    and on no verdict (no evidence, no power, out of memory); the report when exact.

    For a verifier object in a test. The pytest fixture ``speccheck_battery`` runs a spec string
    isolated instead (``speccheck.api.battery``), as the command does. ``options`` go to
    :func:`run_battery` (``layers``, ``Ks``, ``scale``, ...)."""
    from speccheck.validation.report import format_report
    from speccheck.validation.verdict import judge

    try:
        rep = run_battery(verifier, suite, device=device, seed=seed, **options)
    except DeviceError as exc:
        raise AssertionError(f"speccheck battery: no verdict: {exc}") from None
    outcome = judge(rep)
    if outcome.verdict != "exact":
        what = "found a defect" if outcome.verdict == "defect" else f"has no verdict ({outcome.reason})"
        raise AssertionError(f"speccheck battery {what}:\n" + format_report(rep))
    return rep
