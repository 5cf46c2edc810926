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

from typing import Any, Callable, Optional

from speccheck import errors
from speccheck.validation.verdict import BatteryOutcome, judge, no_verdict

__all__ = ["BatteryOutcome", "battery", "measure_acceptance", "DEFAULT_CELL_TIMEOUT_S"]

#: seconds one battery cell (a unit of work) may take before the run is stopped (no verdict)
DEFAULT_CELL_TIMEOUT_S = 900.0


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


def _battery_child(heartbeat: Callable[[str], None], *, verifier: str, suite: str, device: str,
                   seed: Optional[int], options: dict, progress: bool, store: Optional[str]) -> dict:
    """Child side of an isolated run: the run's units one after another in this process."""
    from speccheck.scale import jobs
    from speccheck.scale.executors import InProcessExecutor

    executor = InProcessExecutor(progress=progress, heartbeat=heartbeat)
    return {"report": jobs.battery_job(verifier, suite, device=device, seed=seed, options=options,
                                       executor=executor, store=store)}


def battery(verifier: Any, suite: str = "gate", *, layers: Any = None, Ks: Any = None, scale: float = 1.0,
            seed: Optional[int] = None, device: str = "cpu", workers: int = 1, scheduler: Optional[str] = None,
            isolate: bool = True, timeout: float = DEFAULT_CELL_TIMEOUT_S, store: Optional[str] = None,
            progress: bool = False) -> BatteryOutcome:
    """Run the battery's ``suite`` (smoke / gate / full or a .toml path) on ``verifier`` and judge it.

    ``verifier``: a registered name or ``"package.module:attr"``; an object only with
    ``isolate=False`` (it then runs in this process, a deep copy per cell). ``layers``, ``Ks``,
    ``scale``, ``seed``: the run's selections (see :func:`speccheck.validation.battery.run_battery`).
    Where it runs: ``workers`` > 1 local Dask worker processes or ``scheduler`` (a Dask address);
    otherwise one child process (``isolate=True``, the default: the verifier cannot touch this
    process, its memory is capped, ``timeout`` bounds each cell) or this process
    (``isolate=False``). ``store``: a SQLite results store whose finished units are reused.

    Bad options raise :class:`~speccheck.errors.InputError` before anything runs; everything
    that happens once the run started is in the outcome: a defect, or no verdict with its reason
    (the verifier crashed its process, hung, ran out of memory, could not be loaded, ...).
    """
    from speccheck.validation import battery as bt
    from speccheck.validation.results import BatteryReport
    from speccheck.validation.suites import load_suite

    seed = bt._check_seed(seed)
    options = _options(layers, Ks, scale)
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
        report = bt.run_battery(verifier, suite, device=device, seed=seed, progress=progress, **_run_kwargs(options))
        return judge(bt.rejudge_sequence(report, report.sequence_raw, load_suite(suite)))
    try:
        if workers > 1 or scheduler:
            from speccheck.scale import jobs
            from speccheck.scale.executors import ALL_MODULES, make_executor

            executor = make_executor(workers=None if scheduler else workers, scheduler=scheduler, progress=progress,
                                     timeout=timeout,
                                     modules=ALL_MODULES).start()
            try:
                data = jobs.battery_job(verifier, suite, device=device, seed=seed, options=options,
                                        executor=executor, store=store)
            finally:
                executor.close()
        elif isolate:
            from speccheck.isolation import run_isolated

            cuda = str(device).startswith("cuda")
            data = run_isolated("speccheck.api:_battery_child",
                                dict(verifier=verifier, suite=suite, device=device, seed=seed, options=options,
                                     progress=progress, store=store),
                                timeout=timeout, what=f"verifier {verifier!r}",
                                preload=("torch", "speccheck.validation.battery"),
                                memory_fraction=None if cuda else 0.8).get("report")
        else:
            data = _battery_child(lambda label: None, verifier=verifier, suite=suite, device=device, seed=seed,
                                  options=options, progress=progress, store=store)["report"]
    except (errors.IsolatedCodeError, errors.DeviceError, errors.LoadError) as exc:
        return no_verdict(str(exc))
    try:
        report = BatteryReport.from_dict(data)
        report = bt.rejudge_sequence(report, data.get("sequence_raw"), load_suite(suite))
    except errors.FileFormatError as exc:
        return no_verdict(f"verifier {verifier!r}: {exc}")
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        return no_verdict(f"verifier {verifier!r}: the battery returned a malformed report ({exc})")
    return judge(report)


def _run_kwargs(options: dict) -> dict:
    return {k: v for k, v in options.items() if k in ("layers", "Ks", "scale")}


def measure_acceptance(verifier: Any, deltas: Any, K: Any, n: int = 100_000, *, seed: int = 0,
                       device: str = "cpu", chunk: int = 1 << 16) -> Any:
    """Measured acceptance of ``verifier`` at every (delta, K): a pandas DataFrame, one row per
    cell, columns ``rule, delta, K, n, accepted, acceptance, se`` (the binomial standard error
    sqrt(a (1 - a) / n)), ``declared`` (the rule's ``acceptance(delta, K)``, NaN if it declares
    none), ``z`` ((measured - declared) / its standard error under the declaration) and
    ``list_bound`` (the i.i.d.-list bound no exact rule beats).

    Runs in this process: ``n`` rows per cell, s[b, :] i.i.d. N(0, 1), each cell seeded from
    ``seed`` and its (delta, K), in chunks of ``chunk`` rows. ``verifier``: a name,
    ``"package.module:attr"`` or an object. Bad input raises :class:`~speccheck.errors.InputError`.
    """
    import math

    import numpy as np
    import pandas as pd
    import torch

    from speccheck.seeding import generator as make_generator
    from speccheck.seeding import unit_seed
    from speccheck.theory import list_bound_iid
    from speccheck.validation import battery as bt
    from speccheck.validation.contract import call_verify, check_batch

    d = np.atleast_1d(np.asarray(deltas, dtype=np.float64))
    if d.size == 0 or not np.all(np.isfinite(d)) or np.any(d < 0) or np.any(d > 40):
        raise errors.InputError(f"deltas must be finite values in [0, 40] (the contract's domain), got {deltas!r}")
    Ks = bt._check_Ks(K)
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 10**9:
        raise errors.InputError(f"n must be an integer in [1, 1e9] (rows per cell), got n={n!r}")
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
        raise errors.InputError(f"chunk must be an integer >= 1, got chunk={chunk!r}")
    seed = bt._check_seed(seed)
    dev = bt.resolve_device(device)
    v = bt.load_verifier(verifier)
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
    return pd.DataFrame(rows)
