"""The researcher's entry points: one call per job, data out.

:func:`battery` runs the exactness battery and returns a
:class:`~speccheck.validation.verdict.BatteryOutcome` (``verdict`` exact / defect / no_verdict,
the report, the reason). :func:`measure_acceptance` measures a rule's acceptance as a table. The ``speccheck battery``
command, the pytest fixture
``speccheck_battery`` and Dask runs all go through it, so one seed gives one verdict and one
report whatever the path: every path runs the same units (the run's cells, each on a fresh
verifier instance, each seeded from its identity) and judges them with the same
:func:`~speccheck.validation.verdict.judge`.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Optional

from speccheck import errors
from speccheck.validation.verdict import BatteryOutcome, CheckOutcome, judge, no_verdict

__all__ = ["BatteryOutcome", "CheckOutcome", "battery", "calibrate", "contract_check", "e2e", "measure_acceptance",
           "mutants", "speedup", "sweep",
           "DEFAULT_CELL_TIMEOUT_S", "THEORY_ALPHA"]

#: seconds one battery cell (a unit of work) may take before the run is stopped (no verdict)
DEFAULT_CELL_TIMEOUT_S = 900.0
#: false-failure rate of the theory-vs-measurement verdict of a speed-up run (``speccheck speedup``)
THEORY_ALPHA = 1e-3


def _options(layers: Any, Ks: Any, scale: float) -> dict:
    """The battery's selections, checked now (before any process starts), as plain JSON."""
    from speccheck.validation import battery as bt

    options: dict = {}
    if layers is not None:
        bt.resolve_layers(layers)
        options["layers"] = [str(x) for x in ([layers] if isinstance(layers, str) else layers)]
    if Ks is not None:
        options["Ks"] = bt._check_Ks(Ks)
    if scale != 1.0:
        options["scale"] = bt._check_scale(scale)
    return options


def battery(verifier: Any, suite: str = "gate", *, layers: Any = None, Ks: Any = None, scale: float = 1.0,
            seed: Optional[int] = None, device: str = "cpu", workers: int = 1, scheduler: Optional[str] = None,
            isolate: bool = True, timeout: float = DEFAULT_CELL_TIMEOUT_S, store: Optional[str] = None,
            progress: bool = False, threads: Optional[int] = 1, budget: Optional[float] = None) -> BatteryOutcome:
    """Run the battery's ``suite`` (smoke / gate / full or a .toml path) on ``verifier`` and judge it.

    ``verifier``: a registered name or ``"package.module:attr"``; an object only with
    ``isolate=False`` (it then runs in this process, a deep copy per cell). ``layers``, ``Ks``,
    ``scale``, ``seed``: the run's selections (see :func:`speccheck.validation.battery.run_battery`).
    Where it runs: ``workers`` > 1 local Dask worker processes or ``scheduler`` (a Dask address);
    otherwise one child process (``isolate=True``, the default: the verifier cannot touch this
    process, its memory is capped, ``timeout`` bounds each cell) or this process
    (``isolate=False``). ``store``: a SQLite results store whose finished units are reused.
    ``threads``: torch (and BLAS) CPU threads while a verifier *object* runs in this process, the
    caller's restored after (None: leave them as they are); a spec string's cells run as units of
    work, one thread each, wherever they run (a child process, this process, Dask workers).
    ``budget``: seconds of wall time for the whole run instead of the suite's size: a pilot where
    the cells run measures the rule's cost per call and per row, the suite's draws are scaled down
    to fit (never below what each layer's tests need; :mod:`speccheck.validation.battery.budget`),
    and the report notes the sizing and the time taken; its promise (law layer) is what the
    budget afforded, and a budgeted run without one has no verdict. A budget too small for the
    least useful run raises :class:`~speccheck.errors.InputError` naming it (after the pilot).

    Bad options raise :class:`~speccheck.errors.InputError` before anything runs; everything
    that happens once the run started is in the outcome: a defect, or no verdict with its reason
    (the verifier crashed its process, hung, ran out of memory, could not be loaded, ...).
    """
    from speccheck.seeding import check_threads, torch_threads
    from speccheck.validation import battery as bt
    from speccheck.validation.battery.budget import check_budget
    from speccheck.validation.results import BatteryReport
    from speccheck.validation.suites import load_suite

    started = time.perf_counter()
    seed = bt._check_seed(seed)
    check_threads(threads)
    options = _options(layers, Ks, scale)
    budget = check_budget(budget)
    if budget is not None and "scale" in options:
        raise errors.InputError("budget and scale exclude each other: a budget sizes the run itself")
    load_suite(suite)  # an unknown or malformed suite is a bad option (LoadError)
    if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or not 0 < timeout < float("inf"):
        raise errors.InputError(f"timeout must be a finite number of seconds > 0, got timeout={timeout!r}")
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise errors.InputError(f"workers must be an integer >= 1, got workers={workers!r}")
    if scheduler and workers > 1:
        raise errors.InputError("--workers and --scheduler exclude each other (the cluster at --scheduler has its own "
                                "workers)")
    if not isinstance(verifier, str):
        if isolate or workers > 1 or scheduler:
            raise errors.InputError("a verifier object runs only in this process (isolate=False); to isolate it, "
                                    "pass its spec string 'package.module:attr'")
        from speccheck.isolation import exits_guarded

        plan = None
        try:  # sys.exit / os._exit from the object's code: no verdict, never the process's end
            with torch_threads(threads), \
                    exits_guarded(f"verifier {getattr(verifier, 'name', type(verifier).__name__)!r}"):
                if budget is not None:
                    plan = _budget_here(verifier, suite, budget, started, device=device, seed=seed, layers=layers)
                report = bt.run_battery(verifier, suite, device=device, seed=seed, progress=progress,
                                        sizes=plan.factors if plan else None, **_run_kwargs(options))
        except errors.IsolatedCodeError as exc:
            return no_verdict(str(exc))
        return _budgeted(judge(report), plan, started)
    from speccheck.scale import jobs
    from speccheck.scale.executors import ALL_MODULES, InProcessExecutor, IsolatedExecutor, make_executor

    # the cells run where the executor puts them; this process judges every one from its raw outputs
    # (jobs.battery_cell_runs) and never imports the verifier's module, unless isolate=False
    if workers > 1 or scheduler:
        executor = make_executor(workers=None if scheduler else workers, scheduler=scheduler, progress=progress,
                                 timeout=timeout, modules=ALL_MODULES).start()
    elif isolate:
        executor = IsolatedExecutor(timeout=timeout, what=f"verifier {verifier!r}", progress=progress,
                                    memory_fraction=None if str(device).startswith("cuda") else 0.8)
    else:
        executor = InProcessExecutor(progress=progress)
    plan = None
    try:
        if budget is not None:
            plan = _budget_pilot(executor, verifier, suite, budget, started, device=device, seed=seed,
                                 layers=layers, parallel=workers)
            options["sizes"] = plan.factors
        data = jobs.battery_job(verifier, suite, device=device, seed=seed, options=options, executor=executor,
                                store=store)
    except (errors.IsolatedCodeError, errors.DeviceError, errors.LoadError) as exc:
        return no_verdict(str(exc))
    except errors.FileFormatError as exc:
        return no_verdict(f"verifier {verifier!r}: {exc}")
    finally:
        executor.close()
    try:
        report = BatteryReport.from_dict(data)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        return no_verdict(f"verifier {verifier!r}: the battery returned a malformed report ({exc})")
    return _budgeted(judge(report), plan, started)


def _pilot_limit(budget: float) -> float:
    """Seconds the pilot may use: 5% of the budget, between 0.2 s and 20 s."""
    return min(20.0, max(0.2, 0.05 * budget))


def _budget_here(verifier: Any, suite: str, budget: float, started: float, *, device: str, seed: Optional[int],
                 layers: Any) -> Any:
    """A verifier object's budget plan: the pilot in this process (no process start to pay for)."""
    from speccheck.seeding import unit_seed
    from speccheck.validation import battery as bt
    from speccheck.validation.battery.budget import measure_cost, plan_budget
    from speccheck.validation.suites import load_suite

    st = load_suite(suite)
    base = st.seed if seed is None else seed
    cost = measure_cost(bt.fresh_verifier(bt.load_verifier(verifier)), st, device=bt.resolve_device(device),
                        seed=unit_seed(base, "pilot"), limit_s=_pilot_limit(budget))
    return plan_budget(st, cost, budget, spent_s=time.perf_counter() - started, layers=bt.resolve_layers(layers),
                       round_s=0.5, base=base)


def _budget_pilot(executor: Any, verifier: str, suite: str, budget: float, started: float, *, device: str,
                  seed: Optional[int], layers: Any, parallel: int) -> Any:
    """A spec string's budget plan: the pilot as a unit on ``executor`` (where the cells will run);
    the wall time of its round beyond the pilot's own is the fixed cost of a round."""
    from speccheck.scale import jobs
    from speccheck.scale.units import Unit
    from speccheck.validation import battery as bt
    from speccheck.validation.battery.budget import RuleCost, plan_budget
    from speccheck.validation.suites import load_suite

    spec = jobs._battery_spec(suite, device, seed)
    spec.update(verifier=str(verifier), pilot_s=_pilot_limit(budget))
    unit = Unit("battery-cell", spec, (str(verifier), int(spec["seed"]), "pilot"), device=device,
                fixed_seed=int(spec["seed"]))
    got: dict = {}
    t0 = time.perf_counter()
    executor.run([unit], lambda u, outcome: got.update(outcome))
    round_wall = time.perf_counter() - t0
    try:
        cost = RuleCost.from_dict(got["result"]["pilot"])
    except (KeyError, TypeError, ValueError) as exc:
        raise errors.FileFormatError(f"the budget pilot returned a malformed result ({exc})") from None
    return plan_budget(load_suite(suite), cost, budget, spent_s=time.perf_counter() - started,
                       layers=bt.resolve_layers(layers), parallel=parallel,
                       round_s=max(0.0, round_wall - cost.pilot_s), base=int(spec["seed"]))


def _budgeted(outcome: BatteryOutcome, plan: Any, started: float) -> BatteryOutcome:
    """A budgeted run's outcome: the sizing and the time taken noted; a pass with no promise (the
    law layer did not run) is no verdict."""
    if plan is None:
        return outcome
    report = outcome.report
    if report is not None:
        report.notes.append(plan.note(time.perf_counter() - started))
    if outcome.verdict == "exact" and (report is None or report.promise is None):
        return no_verdict("a budgeted run promises what its law layer (L7) can detect, and it did not run: no pass "
                          "without a promise (select layer L7, or run without --budget)", report)
    return outcome


def _run_kwargs(options: dict) -> dict:
    return {k: v for k, v in options.items() if k in ("layers", "Ks", "scale")}


def measure_acceptance(verifier: Any, deltas: Any, K: Any, n: int = 100_000, *, seed: int = 0,
                       device: str = "cpu", chunk: int = 1 << 16, threads: Optional[int] = 1) -> Any:
    """Measured acceptance of ``verifier`` at every (delta, K): a pandas DataFrame, one row per
    cell, columns ``rule, delta, K, n, accepted, acceptance, se`` (the binomial standard error
    sqrt(a (1 - a) / n)), ``declared`` (the rule's ``acceptance(delta, K)``, NaN if it declares
    none), ``z`` ((measured - declared) / its standard error under the declaration) and
    ``list_bound`` (the i.i.d.-list bound no exact rule beats).

    Runs in this process: ``n`` rows per cell, s[b, :] i.i.d. N(0, 1), each cell seeded from
    ``seed`` and its (delta, K), in chunks of ``chunk`` rows. ``verifier``: a name,
    ``"package.module:attr"`` or an object; ``threads``: torch (and BLAS) CPU threads during the
    call, the caller's restored after (None: leave them as they are). Bad input raises
    :class:`~speccheck.errors.InputError`.
    """
    import numpy as np
    import pandas as pd

    from speccheck.seeding import check_threads, torch_threads
    from speccheck.validation import battery as bt

    d = np.atleast_1d(np.asarray(deltas, dtype=np.float64))
    if d.size == 0 or not np.all(np.isfinite(d)) or np.any(d < 0) or np.any(d > 40):
        raise errors.InputError(f"deltas must be finite values in [0, 40] (the contract's domain), got {deltas!r}")
    Ks = bt._check_Ks(K)
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 10**9:
        raise errors.InputError(f"n must be an integer in [1, 1e9] (rows per cell), got n={n!r}")
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
        raise errors.InputError(f"chunk must be an integer >= 1, got chunk={chunk!r}")
    seed = bt._check_seed(seed)
    check_threads(threads)
    dev = bt.resolve_device(device)
    v = bt.load_verifier(verifier)
    with torch_threads(threads):
        return pd.DataFrame(_acceptance_rows(v, verifier, d, Ks, n, seed, dev, chunk))


def _acceptance_rows(v: Any, verifier: Any, d: Any, Ks: list[int], n: int, seed: int, dev: Any,
                     chunk: int) -> list[dict]:
    """:func:`measure_acceptance`'s rows, one per (delta, K)."""
    import math

    import numpy as np
    import torch

    from speccheck.seeding import generator as make_generator
    from speccheck.seeding import unit_seed
    from speccheck.theory import list_bound_iid
    from speccheck.validation.contract import call_verify, check_batch

    rows = []
    for k in Ks:
        for delta in d:
            g = make_generator(unit_seed(seed, "acceptance", f"{delta!r}", k), dev)
            accepted = done = 0
            while done < n:
                b = min(chunk, n - done)
                s = torch.randn(b, k, generator=g, dtype=torch.float64, device=dev)
                dt = torch.full((b,), float(delta), dtype=torch.float64, device=dev)
                checks, parsed = check_batch(f"delta={delta:g},K={k}", dt, s, call_verify(v, dt.clone(), s.clone(), g))
                if parsed is None:
                    bad = next(r for r in checks if not r.passed)
                    raise errors.InputError(f"verifier {verifier!r} broke the contract at delta={delta:g}, K={k}: "
                                            f"{bad.test} {bad.note}")
                accepted += int(parsed[1].sum())
                done += b
            a = accepted / n
            declared = float(np.asarray(v.acceptance(np.array([delta]), k)).ravel()[0]) \
                if callable(getattr(v, "acceptance", None)) else math.nan
            sd = math.sqrt(declared * (1 - declared) / n) if math.isfinite(declared) else math.nan
            rows.append({"rule": getattr(v, "name", str(verifier)), "delta": float(delta), "K": k, "n": n,
                         "accepted": accepted, "acceptance": a, "se": math.sqrt(a * (1 - a) / n),
                         "declared": declared, "z": (a - declared) / sd if sd > 0 else math.nan,
                         "list_bound": float(list_bound_iid(np.array(delta), k))})
    return rows


# ----------------------------------------------------------------------------- speed-up, contract, mutants
def _isolated(job: str, kwargs: dict, *, timeout: float, what: str, device: str = "cpu",
              preload: tuple[str, ...] = ("torch",), on_value: Optional[Callable[[dict], None]] = None) -> dict:
    from speccheck.isolation import run_isolated
    from speccheck.scale.executors import launch_worker_template

    cuda = str(device).startswith("cuda")
    return run_isolated(job, kwargs, timeout=timeout, what=what, preload=preload,
                        memory_fraction=None if cuda else 0.8, on_value=on_value,
                        start_method="forkserver" if launch_worker_template() else "spawn")


def _speedup_child(heartbeat: Callable[[str], None], *, target: str, overrides: dict, verifier: str, K: int, L: int,
                   trajectories: int, seed: int, threads: int) -> dict:
    """Child side of :func:`speedup` (runs the user's verifier): the cell's raw run
    (:func:`speccheck.sampler.experiments.cell_raw`), arrays sent as raw bytes."""
    import torch

    from speccheck.sampler.experiments import cell_raw, preset

    torch.set_num_threads(threads)
    heartbeat(f"speed-up run {verifier} K={K} L={L}")
    return {"raw": cell_raw(preset(target, **overrides), verifier, K, L, trajectories, seed)}


def speedup(verifier: str, K: int, L: int, *, target: str = "gmm-paper", trajectories: int = 100, seed: int = 0,
            overrides: Optional[dict] = None, threads: int = 1, alpha: float = THEORY_ALPHA,
            timeout: float = 4 * 3600.0) -> CheckOutcome:
    """NFE speed-up of ``verifier`` on a (K, L) tree and the mixture preset ``target`` (with the
    protocol ``overrides`` of :func:`speccheck.sampler.experiments.preset`). The verifier runs in
    a child process bounded by ``timeout``, which returns only the raw run; this process computes
    the summary from it (:func:`speccheck.sampler.experiments.summarize_cell`) and judges it by
    :func:`speccheck.scale.jobs.judge_calibration` (defect: the acceptance calibration z rejects
    the verifier's law, two-sided at ``alpha``): ``data["result"]`` is
    :func:`speccheck.sampler.experiments.speedup_run`'s record plus ``theory_consistent``,
    ``data["target"]`` the preset's target. A crash, hang or malformed result raises
    :class:`~speccheck.errors.IsolatedCodeError`."""
    from speccheck.sampler.experiments import preset, speedup_record, summarize_cell
    from speccheck.scale.jobs import judge_calibration

    proto = preset(target, **dict(overrides or {}))  # bad options fail here, before any child starts
    value = _isolated("speccheck.api:_speedup_child",
                      dict(target=target, overrides=dict(overrides or {}), verifier=verifier, K=K, L=L,
                           trajectories=trajectories, seed=seed, threads=threads),
                      timeout=timeout, what=f"verifier {verifier!r}",
                      preload=("torch", "speccheck.sampler.experiments"))
    try:
        summary, _ = summarize_cell(proto, value.get("raw"), K, L, trajectories, seed)
    except errors.DefectError as exc:
        return CheckOutcome("defect", str(exc), {"result": None, "target": proto.target}, [f"DEFECT: {exc}"])
    except (ValueError, TypeError, AttributeError, KeyError, OverflowError) as exc:
        raise errors.IsolatedCodeError(f"the speed-up run returned a malformed raw run ({exc}); no verdict") from None
    out = speedup_record(proto, summary)
    cell = {"rule": out["rule"], "K": K, "L": L, "acceptance": out["acceptance"], "calibration_z": out["calibration_z"]}
    outcome = judge_calibration([cell], alpha)
    outcome.data.update(result={**out, "theory_consistent": outcome.verdict == "exact"}, target=proto.target)
    return outcome


def _contract_child(heartbeat: Callable[[str], None], *, spec: str, device: str, seed: int) -> dict:
    """Child side of :func:`contract_check`: the battery's contract layer (L0) as plain rows."""
    from speccheck.validation.battery import load_verifier
    from speccheck.validation.contract import contract_checks

    heartbeat(f"loading verifier {spec!r}")
    verifier = load_verifier(spec)
    heartbeat(f"contract checks of {spec!r}")
    rows = []
    for r in contract_checks(verifier, device=device, seed=seed):
        get = r.get if isinstance(r, dict) else (lambda k, default=None, _r=r: getattr(_r, k, default))
        rows.append({"cell": str(get("cell", "")), "test": str(get("test", get("name", ""))),
                     "passed": bool(get("passed", False)), "note": str(get("note", "") or "")})
    return {"name": str(getattr(verifier, "name", spec)), "checks": rows}


def contract_check(spec: str, *, device: str = "cpu", seed: int = 0, timeout: float = 300.0) -> CheckOutcome:
    """Load ``spec`` (a name or ``package.module:attr``) in a child process and run the battery's
    contract checks on it, judged by :func:`~speccheck.validation.verdict.judge_contract`
    (``data``: ``name`` and the ``checks`` rows). Unloadable code raises a SpeccheckError."""
    from speccheck.validation.verdict import judge_contract

    value = _isolated("speccheck.api:_contract_child", dict(spec=spec, device=device, seed=seed),
                      timeout=timeout, what=f"verifier {spec!r}", device=device,
                      preload=("torch", "speccheck.validation.battery"))
    checks = value.get("checks")
    return judge_contract(str(value.get("name", spec)), checks if isinstance(checks, list) else [], spec)


def _mutants_units(*, suite: str, names: Optional[list[str]], device: str, seed: Optional[int], options: dict,
                   executor: Any, store: Optional[str]) -> dict:
    """The kill matrix as units on ``executor`` (one per mutant): report dicts, each with the
    unit's own ``wall_s`` (kept out of the stored result)."""
    from speccheck.scale import jobs

    unit_time: dict[str, float] = {}
    reports = jobs.mutant_matrix(suite, names=names, device=device, seed=seed, executor=executor, store=store,
                                 options=options,
                                 on_outcome=lambda unit, outcome: unit_time.update({unit.key: outcome["wall_s"]}))
    for name, rep in reports.items():
        rep["wall_s"] = rep["cpu_s"] = unit_time.get(name, 0.0)
    return {"mutants": reports}


def _mutants_child(heartbeat: Callable[[str], None], *, progress: bool, **kwargs: Any) -> dict:
    """Child side of :func:`mutants` on one process: its units one after another, a heartbeat at
    each unit and each battery cell inside one (so ``timeout`` bounds a cell)."""
    from speccheck.scale.executors import InProcessExecutor

    return _mutants_units(executor=InProcessExecutor(progress=progress, heartbeat=heartbeat), **kwargs)


def _wants_dask(workers: Optional[int], scheduler: Optional[str]) -> bool:
    import os

    if scheduler:
        return True
    if workers is None:
        return bool(os.environ.get("DASK_SCHEDULER_ADDRESS"))
    if workers < 1:
        raise errors.InputError(f"--workers must be >= 1, got {workers}")
    return workers > 1


def _mutant_reports(raw: Any) -> dict:
    from speccheck.validation.results import BatteryReport

    if not isinstance(raw, dict):
        return {}
    try:
        return {str(k): BatteryReport.from_dict(v) for k, v in raw.items()}
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise errors.IsolatedCodeError(f"the mutants: the battery returned a malformed report ({exc}); "
                                       "no verdict") from None


def mutants(suite: str = "gate", *, names: Optional[list[str]] = None, device: str = "cpu",
            seed: Optional[int] = None, options: Optional[dict] = None, workers: Optional[int] = 1,
            scheduler: Optional[str] = None, timeout: float = DEFAULT_CELL_TIMEOUT_S, store: Optional[str] = None,
            progress: bool = False) -> CheckOutcome:
    """The kill matrix: ``suite`` on every mutant (or ``names``), judged by
    :func:`~speccheck.validation.verdict.judge_kill_matrix` (exact: every mutant killed);
    ``data["reports"]``: mutant name -> BatteryReport. ``options``: the battery's selections
    (``layers``, ``Ks``, ``scale``). On Dask when ``scheduler`` or ``workers`` > 1 (``workers``
    None: when $DASK_SCHEDULER_ADDRESS is set), else in one child process bounded per cell by
    ``timeout``."""
    from speccheck.validation.verdict import judge_kill_matrix

    kwargs = dict(suite=suite, names=names, device=device, seed=seed, options=dict(options or {}), store=store)
    if _wants_dask(workers, scheduler):
        from speccheck.scale.executors import ALL_MODULES, make_executor

        executor = make_executor(workers=workers, scheduler=scheduler, progress=progress, timeout=timeout,
                                 modules=ALL_MODULES).start()
        try:
            value = _mutants_units(executor=executor, **kwargs)
        finally:
            executor.close()
    else:
        value = _isolated("speccheck.api:_mutants_child", dict(progress=progress, **kwargs), timeout=timeout,
                          what="the mutants", device=device, preload=("torch", "speccheck.validation.battery"))
    return judge_kill_matrix(_mutant_reports(value.get("mutants")), suite)


def _e2e_child(heartbeat: Callable[[str], None], emit: Callable[[dict], None], *, base: dict, verifiers: list[str],
               Ks: list[int], Ls: list[int], epss: list[float], threads: Optional[int]) -> dict:
    """Child side of :func:`e2e`: every cell drawn (:func:`speccheck.validation.e2e.draw_e2e_grid`),
    its report and raw outputs emitted as it is done (arrays as raw bytes)."""
    import json

    import torch

    from speccheck.validation import e2e as e2e_module

    if threads:
        torch.set_num_threads(threads)
    cells = e2e_module.grid_cells(e2e_module.E2EConfig(**base), verifiers, Ks, Ls, epss)

    def send(message: dict) -> None:
        emit({**message, "report": json.loads(json.dumps(message["report"], default=float))})

    e2e_module.draw_e2e_grid(cells, emit=send, heartbeat=heartbeat, log=lambda m: print(m, flush=True))
    return {"cells": len(cells)}


def e2e(base: dict, verifiers: list[str], Ks: list[int], Ls: list[int], epss: list[float], *,
        threads: Optional[int] = None, timeout: float = 12 * 3600.0) -> CheckOutcome:
    """Standard vs speculative sampler on a learned model: every (eps, verifier, K, L) cell of
    :func:`speccheck.validation.e2e.grid_cells` on the config ``base`` (the fields of
    :class:`~speccheck.validation.e2e.E2EConfig`). The model and the verifiers run in a child
    process bounded per cell (and the model load) by ``timeout``, which sends each cell's raw
    outputs; this process judges them (:func:`speccheck.validation.e2e.judge_e2e_cell`) as they
    arrive. ``data["reports"]``: one dict per cell; the verdict is
    :func:`speccheck.validation.e2e.grid_exit_code`'s (no verdict when a cell could not run)."""
    from speccheck.validation import e2e as e2e_module
    from speccheck.validation.verdict import VERDICTS

    cells = e2e_module.grid_cells(e2e_module.E2EConfig(**base), list(verifiers), list(Ks), list(Ls), list(epss))
    reports: dict[int, dict] = {}

    def judge(message: dict) -> None:
        index = message.get("cell") if isinstance(message, dict) else None
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < len(cells) or index in reports:
            raise errors.IsolatedCodeError("the e2e run sent a report for no cell it was given, or twice; no verdict")
        reports[index] = e2e_module.judge_e2e_cell(cells[index], message)

    _isolated("speccheck.api:_e2e_child",
              dict(base=base, verifiers=list(verifiers), Ks=list(Ks), Ls=list(Ls), epss=list(epss), threads=threads),
              timeout=timeout, what=f"the e2e run (verifier(s) {', '.join(verifiers)})",
              device=str(base.get("device", "cpu")), preload=("torch", "speccheck.validation.e2e"), on_value=judge)
    if len(reports) != len(cells):
        raise errors.IsolatedCodeError(f"the e2e run returned {len(reports)} of {len(cells)} cell reports; no verdict")
    ordered = [reports[index] for index in range(len(cells))]
    verdict = {code: name for name, code in VERDICTS.items()}[e2e_module.grid_exit_code(ordered)]
    return CheckOutcome(verdict, f"{len(ordered)} cell(s): {verdict}", {"reports": ordered})


def calibrate(suite: str, verifiers: list[str], *, seeds: range, device: str = "cpu", store: Optional[str] = None,
              name: Optional[str] = None, cells: bool = False, run: bool = True, workers: Optional[int] = None,
              scheduler: Optional[str] = None, timeout: float = 3600.0, progress: bool = False) -> dict:
    """How often do correct ``verifiers`` fail ``suite`` over ``seeds`` (a ``range``): the summary of
    :func:`speccheck.scale.jobs.calibrate`, whose ``consistent`` is the verdict (every rule's
    failure rate consistent with the suite's stated rate). ``run=False``: summarise the runs
    already in ``store``. The executor is :func:`speccheck.scale.executors.make_executor`'s for
    ``workers``/``scheduler`` (Dask bounds each unit by ``timeout``); in-process, the units run in
    isolated child processes bounded per unit by ``timeout``. A rule outside speccheck is run
    cell by cell and judged in this process (see :func:`speccheck.scale.jobs.calibrate`)."""
    from speccheck.scale import jobs

    options = dict(suite=suite, verifiers=[str(v) for v in verifiers], device=device, store=store, name=name,
                   cells=cells)
    if not run:
        return jobs.calibrate(seeds=seeds, executor=None, run=False, **options)
    from speccheck.scale.executors import BATTERY_MODULES, InProcessExecutor, IsolatedExecutor, make_executor

    # local workers start while this process imports; in-process, the units run in isolated children
    executor = make_executor(workers=workers, scheduler=scheduler, progress=progress, timeout=timeout,
                             modules=BATTERY_MODULES).start()
    if isinstance(executor, InProcessExecutor):
        executor = IsolatedExecutor(timeout=timeout, what=f"the calibration of {', '.join(options['verifiers'])}",
                                    progress=progress, memory_fraction=None if str(device).startswith("cuda") else 0.8)
    try:
        return jobs.calibrate(seeds=seeds, executor=executor, run=True, **options)
    finally:
        executor.close()


def sweep(verifiers: list[str], cells: list[tuple[int, int]], trajectories: int, *, target: str = "gmm-paper",
          overrides: Optional[dict] = None, seed: int = 0, store: Optional[str] = None, name: Optional[str] = None,
          chunk: Optional[int] = None, threads: int = 1, workers: Optional[int] = None,
          scheduler: Optional[str] = None, progress: bool = False, alpha: float = THEORY_ALPHA,
          log: Optional[Callable[[str], None]] = None, timeout: float = 4 * 3600.0) -> CheckOutcome:
    """A resumable speed-up sweep: every (verifier, K, L) of ``cells`` on the mixture preset
    ``target`` (with the protocol ``overrides`` of :func:`speccheck.sampler.experiments.preset`),
    ``trajectories`` per cell (in units of ``chunk`` when given), run by
    :func:`speccheck.scale.jobs.run_sweep` into ``store`` on the executor of ``workers`` /
    ``scheduler``, each unit bounded by ``timeout`` seconds (in-process: the units run in an
    isolated child process); each cell summarised in this process from its raw run and judged by
    :func:`speccheck.scale.jobs.judge_calibration` at ``alpha`` (Holm over the cells).
    ``data``: ``name`` (default: target + protocol hash, ``-chunkN`` when chunked) and ``rows``
    (one per cell)."""
    from speccheck.sampler.experiments import preset
    from speccheck.scale import jobs
    from speccheck.scale.executors import SWEEP_MODULES, InProcessExecutor, IsolatedExecutor, make_executor

    # local workers start while this process imports and plans; in-process, the units run in an isolated child
    executor = make_executor(workers=workers, scheduler=scheduler, progress=progress, timeout=timeout,
                             modules=SWEEP_MODULES).start()
    if isinstance(executor, InProcessExecutor):
        executor = IsolatedExecutor(timeout=timeout, what=f"the sweep of {', '.join(map(str, verifiers))}",
                                    progress=progress, preload=("torch",) + SWEEP_MODULES)
    try:
        proto = preset(target, **dict(overrides or {}))
        chunked = chunk is not None and chunk < trajectories
        name = name or f"{proto.target}-{proto.key()}" + (f"-chunk{chunk}" if chunked else "")
        rows = jobs.run_sweep(proto, verifiers, cells, trajectories, seed, store=store, name=name, executor=executor,
                              threads=threads, log=log, chunk=chunk)
    except errors.DefectError as exc:  # a cell's run broke Algorithm 1 or declared an impossible law
        return CheckOutcome("defect", str(exc), {"name": name, "rows": []}, [f"DEFECT: {exc}"])
    finally:
        executor.close()
    outcome = jobs.judge_calibration(rows, alpha)
    outcome.data.update(name=name, rows=rows)
    return outcome
