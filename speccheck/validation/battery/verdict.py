"""From cells to a judged report: the cells' results merged with Holm over the whole family,
and failures localised on fresh draws. The verdict itself is :func:`speccheck.validation.verdict.judge`."""

from __future__ import annotations

from typing import Any, Callable

import torch

from speccheck.errors import DeviceError
from speccheck.seeding import pinned_global_rngs, unit_seed
from speccheck.validation import continuous, localise
from speccheck.validation.battery.cells import draw_cell
from speccheck.validation.battery.plan import per_test_alpha
from speccheck.validation.results import BatteryReport, TestResult
from speccheck.validation.stats import holm_adjust
from speccheck.validation.suites import Suite

__all__ = ["assemble_report", "failures_to_localise", "localise_report"]


def assemble_report(plan: dict, suite: Suite, *, base: int, alpha: float, device: str, scale: float,
                    contract: list[TestResult], trajectory: list[TestResult] | None,
                    cells: list[list[TestResult]]) -> BatteryReport:
    """One report from the cells' results (``cells`` in :func:`battery_cells` order;
    ``trajectory`` None: layer L4 was not run because the contract failed): the results in
    layer order, Holm over the whole family at ``alpha``, the notes. No localisation yet."""
    traj = trajectory or []
    alpha_t = per_test_alpha(plan, traj, alpha)
    for r in traj:
        if r.kind == "stat":
            r.threshold = alpha_t  # L4 tests are p-value tests: threshold on p
    rep = BatteryReport(plan["verifier"], suite.name, base, alpha, alpha_t, device, power=suite.power, scale=scale,
                        layers=list(plan["layers"]))
    notes: list[str] = []
    if trajectory is None and "L4" in plan["layers"] and suite.trajectory is not None:
        notes.append("L4: not run (the contract failed, so sampler trajectories would only repeat it)")
    if plan["skipped_K"]:
        notes.append(f"K={plan['skipped_K']} skipped (supports_K is false)")
    if plan["grid_cells"] and not plan["has_acceptance"]:
        notes.append("L2: the verifier declares no acceptance(delta, K); only the list-bound tests ran")
    results = list(contract) + [r for cell in cells for r in cell] + traj
    n_planned = int(plan["n_stat"]) + sum(r.kind == "stat" for r in traj)
    n_stat = sum(r.kind == "stat" for r in results)
    if n_stat > n_planned:  # a layer ran more tests than planned: Holm keeps the family-wise rate
        notes.append(f"{n_stat} statistical tests ran, {n_planned} planned; Holm over all of them")
    holm_adjust(results, alpha)
    rep.results, rep.notes = results, notes
    return rep


def failures_to_localise(rep: BatteryReport) -> list[TestResult]:
    """The failed statistical tests (after Holm), the candidates of :func:`localise_report`."""
    return [r for r in rep.results if r.kind == "stat" and not r.passed]


def localise_report(verifier: Any, suite: Suite, plan: dict, failures: list[TestResult], screens: dict | None, *,
                    base: int, alpha: float, alpha_t: float, device: torch.device, scale: float,
                    heartbeat: Callable[[str], None] | None = None) -> tuple[list, list[str]]:
    """Localise ``failures`` on fresh draws: ``(localisations, notes)``. ``screens`` None: the
    continuous layer's rows are redrawn for the failing K (same seeds, so the same rows as the
    run's; a worker that localises need not receive them)."""
    cs = suite.continuous
    try:
        if screens is None:
            needed = sorted({int(r.extra["K"]) for r in failures if "K" in r.extra} & set(plan["continuous_Ks"]))
            screens = {}
            for K in needed:
                _, raw = draw_cell(verifier, suite, ("L5", K), plan=plan, base=base, device=device, scale=scale)
                if raw is not None:
                    screens[K] = continuous.screen_of(raw, K)
        with pinned_global_rngs(unit_seed(base, "global-rngs", "localisation"), device):
            found = localise.localise(
                verifier, failures, screens, alpha=alpha, refine=cs.refine if cs else 8,
                confirm_n=continuous.scaled(cs.confirm_n if cs else 16384, scale, 256), device=device,
                base_seed=unit_seed(base, 6), spec=cs, layer_n=continuous.scaled(cs.n, scale, 16) if cs else 0,
                heartbeat=heartbeat or (lambda label: None))
    except DeviceError:
        raise
    except Exception as exc:  # noqa: BLE001 - the verdict stands; only the localisation is lost
        return [], [f"localisation not possible: the verifier raised {type(exc).__name__}: {exc}"]
    return found, []
