"""The ``speccheck`` command. Each subcommand is a thin layer over package functions.

Exit codes (docs/exit-codes.md): 0 = the job ran and its verdict is positive, printed and
written; 1 = a defect was found; 2 = the job could not be run as asked (bad option,
unloadable verifier, timeout, missing or corrupt input, unwritable output), with a message
naming the option or file. Code the user supplies (verifiers) runs in a child process
(:mod:`speccheck.isolation`), so it cannot choose the exit code.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
from typing import Any, Callable, Optional, Sequence

from speccheck import errors
from speccheck.errors import EXIT_CANNOT_RUN, EXIT_DEFECT, EXIT_OK, InputError, SpeccheckError, UsageError
from speccheck.scale.commands import THEORY_ALPHA  # false-failure rate of the speed-up's theory check

__all__ = ["UsageError", "build_parser", "main"]

# Domains stated once (README / docs/exit-codes.md quote them).
MAX_K = 128                  # draft-tree width: the theory and kernels are validated up to K = 128
MAX_L = 64                   # draft-tree depth
MAX_TREE_NODES = 400_000     # |V| = sum_{l <= L} K^l of one draft tree
MAX_SEED = 2**63 - 1
# --timeout defaults, per unit: a battery cell (the full suite's largest takes ~1 min on a CPU), a
# contract check, a whole speed-up run, an e2e cell (an SD3.5 cell of 2000 samples takes hours)
TIMEOUT_BATTERY_CELL_S = 900.0
TIMEOUT_CHECK_S = 300.0
TIMEOUT_SPEEDUP_S = 4 * 3600.0
TIMEOUT_E2E_CELL_S = 12 * 3600.0
MAX_TIMEOUT_S = 7 * 24 * 3600.0
MEMORY_SHARE = 0.25          # a request whose estimated working set exceeds this share of RAM is refused
# options naming files or folders a command writes: no two may name the same path
_OUTPUT_OPTIONS = {"json": "--json", "junit": "--junit", "store": "--store", "out": "--out", "figures": "--figures",
                   "battery_json": "--battery-json"}


# --------------------------------------------------------------------------- option checks
def _check_int(value: int, option: str, low: int, high: Optional[int] = None) -> int:
    """``value`` in [low, high]; else UsageError naming ``option`` and the allowed range."""
    if value < low or (high is not None and value > high):
        allowed = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise UsageError(f"{option} must be {allowed}, got {value}")
    return value


def _check_float(value: float, option: str, low: float, high: float, *, low_open: bool = False,
                 high_open: bool = False) -> float:
    """``value`` finite and in the interval; else UsageError naming ``option`` and the interval."""
    lo_ok = value > low if low_open else value >= low
    hi_ok = value < high if high_open else value <= high
    if not math.isfinite(value) or not (lo_ok and hi_ok):
        interval = f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
        raise UsageError(f"{option} must be a finite number in {interval}, got {value}")
    return value


def _check_values(values: Optional[list], option: str) -> Optional[list]:
    """A list option given explicitly must hold at least one value."""
    if values is not None and len(values) == 0:
        raise UsageError(f"{option} needs at least one value")
    return values


def _check_seed(seed: Optional[int], option: str = "--seed") -> Optional[int]:
    return None if seed is None else _check_int(seed, option, 0, MAX_SEED)


def _check_timeout(timeout: float) -> float:
    return _check_float(timeout, "--timeout", 0.0, MAX_TIMEOUT_S, low_open=True)


def _check_output_file(path: Optional[str], option: str) -> Optional[str]:
    """An output file we will be able to write: not a folder, its folder creatable and writable.
    Checked before any work starts, so a long job never ends in an unwritable path."""
    if path is None:
        return None
    if not path or os.path.isdir(path):
        raise UsageError(f"{option} {path!r} is a folder or empty; give a file path")
    _check_output_dir(os.path.dirname(os.path.abspath(path)), option, what=f"the folder of {option} {path!r}")
    if os.path.exists(path) and not os.access(path, os.W_OK):
        raise UsageError(f"{option} {path!r} exists and is not writable")
    return path


def _check_output_dir(path: str, option: str, what: Optional[str] = None) -> str:
    """Create ``path`` if needed and prove it writable with a probe file."""
    what = what or f"{option} {path!r}"
    if os.path.exists(path) and not os.path.isdir(path):
        raise UsageError(f"{what} exists and is not a folder")
    try:
        os.makedirs(path, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".speccheck-probe-"):
            pass
    except OSError as exc:
        raise UsageError(f"{what} is not writable ({exc.strerror or exc})") from None
    return path


def _write_text(path: str, text: str, option: str) -> None:
    """Write atomically (temporary file + rename); an OSError becomes exit 2 naming ``option``."""
    folder = os.path.dirname(os.path.abspath(path))
    try:
        with tempfile.NamedTemporaryFile("w", dir=folder, prefix=".speccheck-", delete=False) as fh:
            fh.write(text)
            tmp = fh.name
        os.replace(tmp, path)
    except OSError as exc:
        raise UsageError(f"{option} {path!r} could not be written ({exc.strerror or exc})") from None


def _finite_json(obj: Any) -> Any:
    """``obj`` with every non-finite float replaced by None: printed JSON stays valid JSON."""
    from speccheck.scale.jobs import finite_json

    return finite_json(obj)


def _json_text(obj: Any) -> str:
    return json.dumps(_finite_json(json.loads(json.dumps(obj, default=float))), indent=2, allow_nan=False)


def _tree_nodes(K: int, L: int) -> int:
    """|V| of the uniform (K, L) tree, stopping once it passes the bound (no huge integers)."""
    total, level = 0, 1
    for _ in range(L + 1):
        total += level
        if total > MAX_TREE_NODES:
            return total
        level *= K
    return total


def _physical_memory() -> int:
    from speccheck.isolation import physical_memory_bytes

    return physical_memory_bytes() or 8 * 2**30


def _check_memory(estimate_bytes: float, what: str) -> None:
    budget = MEMORY_SHARE * _physical_memory()
    if estimate_bytes > budget:
        raise UsageError(f"{what} needs about {estimate_bytes / 2**30:.1f} GiB, more than {MEMORY_SHARE:.0%} of this "
                         f"machine's memory ({budget / 2**30:.1f} GiB); reduce it")


def _isolated(job: str, kwargs: dict, *, timeout: float, what: str, device: str = "cpu",
              preload: Sequence[str] = ("torch",)) -> dict:
    from speccheck.isolation import run_isolated

    cuda = str(device).startswith("cuda")
    return run_isolated(job, kwargs, timeout=timeout, what=what, preload=preload,
                        memory_fraction=None if cuda else 0.8)


def _add_timeout(p: argparse.ArgumentParser, unit: str, default: float) -> None:
    p.add_argument("--timeout", type=float, default=default, metavar="SECONDS",
                   help=f"stop and exit 2 when one {unit} runs longer than this (default {default:g} s)")


# --------------------------------------------------------------------------- theory
def _add_theory(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("theory", help="acceptance (RMC, D-GRS, RASS, MCRS), bounds and optimal RASS weights per "
                                      "(delta, K)",
                       description="RASS's row is speccheck.theory.rank_weight_solution(delta, K, max_iter=M) with "
                                   "M = speccheck.theory.table.rass_budget(K) (JSON: rass_max_iter): the full solve "
                                   "for K <= 32, a budget of partition rounds above (the command: 0.6-1.6 s of CPU "
                                   "per cell measured), its certified gap printed as the API returns it; a note "
                                   "names the full-solve call where the gap is above 1e-12.")
    p.add_argument("--delta", type=float, nargs="+", default=[0.5, 1.0, 2.0], help="finite, >= 0")
    p.add_argument("--K", type=int, nargs="+", default=[1, 2, 4, 8], help=f"draft counts in [1, {MAX_K}]")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--mcrs", action=argparse.BooleanOptionalAction, default=None,
                   help="compute MCRS values whose policy is not stored (its cold LP takes ~0.1-10 s per "
                        "(delta, K)); default: stored policies only, the rest skipped with a note")
    p.add_argument("--mcrs-G", type=int, default=64, help="cells of MCRS's policy, in [2, 1024] (0: skip MCRS)")
    p.set_defaults(func=_cmd_theory)


def _cmd_theory(args: argparse.Namespace) -> int:
    from speccheck.theory.table import format_theory_table, theory_table

    _check_values(args.delta, "--delta")
    _check_values(args.K, "--K")
    for delta in args.delta:
        if not math.isfinite(delta) or delta < 0:
            raise UsageError(f"--delta must be finite and >= 0, got {delta}")
    for K in args.K:
        _check_int(K, "--K", 1, MAX_K)
    if args.mcrs_G != 0:
        _check_int(args.mcrs_G, "--mcrs-G", 2, 1024)
    if len(args.delta) * len(args.K) > 10_000:
        raise UsageError(f"--delta x --K asks for {len(args.delta) * len(args.K)} rows; at most 10000")
    mcrs_G = args.mcrs_G if (args.mcrs is not False and args.mcrs_G) else None
    rows = theory_table(args.delta, args.K, mcrs_G=mcrs_G, mcrs="auto" if args.mcrs is None else args.mcrs)
    print(_json_text(rows) if args.json else format_theory_table(rows))
    return EXIT_OK


# --------------------------------------------------------------------------- train-digits
def _add_train_digits(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train-digits", help="train the small digits models (EDM denoiser, SD3-transformer flow) on CPU")
    p.add_argument("--which", choices=["edm", "flow", "both"], default="both")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps-edm", type=int, default=4000, help="in [1, 1000000]")
    p.add_argument("--steps-flow", type=int, default=1500, help="in [1, 1000000]")
    p.add_argument("--batch", type=int, default=256, help="in [1, 4096]")
    p.add_argument("--out", default=None,
                   help="output folder (default: $SPECCHECK_CACHE_DIR/digits or ~/.cache/speccheck/digits; "
                        "never the installed package)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads, in [1, 256]")
    p.add_argument("--check-per-class", type=int, default=50,
                   help="samples per digit for the held-out check, in [0, 1000] (0: skip)")
    p.set_defaults(func=_cmd_train_digits)


def _cmd_train_digits(args: argparse.Namespace) -> int:
    _check_seed(args.seed)
    _check_int(args.steps_edm, "--steps-edm", 1, 1_000_000)
    _check_int(args.steps_flow, "--steps-flow", 1, 1_000_000)
    _check_int(args.batch, "--batch", 1, 4096)
    _check_int(args.check_per_class, "--check-per-class", 0, 1000)
    if args.threads is not None:
        _check_int(args.threads, "--threads", 1, 256)
    from speccheck.targets import digits

    out = args.out if args.out is not None else digits.user_checkpoint_dir()
    _check_output_dir(out, "--out")
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    report = digits.train_and_save(which=args.which, out_dir=out, steps_edm=args.steps_edm,
                                   steps_flow=args.steps_flow, batch=args.batch, seed=args.seed,
                                   check_per_class=args.check_per_class,
                                   log=lambda m: print(m, flush=True))
    print(_json_text(report), flush=True)
    return EXIT_OK


# --------------------------------------------------------------------------- speedup
def _add_protocol_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", default="gmm-paper", choices=["gmm-paper", "gmm-d512"],
                   help="preset (gmm-paper: d=500, eps=0.1, uniform grid, leaves evaluated; gmm-d512: "
                        "d=512, eps=0.06, flow grid with deterministic ends, leaves not evaluated)")
    p.add_argument("--trajectories", type=int, default=100, help="in [2, 100000]")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lazy", action=argparse.BooleanOptionalAction, default=None,
                   help="realise only visited branches (same law and NFE); default: lazy when the tree has "
                        "more than 20000 nodes")
    p.add_argument("--prefetch", choices=["nearest", "parent", "none"], default=None)
    p.add_argument("--leaves", action=argparse.BooleanOptionalAction, default=None,
                   help="evaluate leaves too (|V| rows per round) or not (|I| rows)")
    p.add_argument("--freeze", choices=["drift", "velocity", "denoised"], default=None)
    p.add_argument("--grid", choices=["uniform", "shifted", "flow", "edm"], default=None)
    p.add_argument("--steps", type=int, default=None, help="grid steps, in [2, 10000]")
    p.add_argument("--eps", type=float, default=None, help="churn, in (0, 1)")
    p.add_argument("--chain-match", choices=["budget", "rows"], default=None,
                   help="chain compared with a (K, L) tree: same drafted budget B or same rows")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads, in [1, 256] (default 1)")


def _add_speedup(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("speedup", help="NFE speed-up of the speculative sampler on a mixture preset, "
                                       "with theory-vs-measurement checks")
    p.add_argument("--verifier", default="dgrs", help="name or package.module:attr")
    p.add_argument("--K", type=int, default=6, help=f"draft width, in [1, {MAX_K}]")
    p.add_argument("--L", type=int, default=6, help=f"draft depth, in [1, {MAX_L}]; |V| <= {MAX_TREE_NODES}")
    _add_protocol_args(p)
    p.add_argument("--json", action="store_true")
    p.add_argument("--alpha", type=float, default=THEORY_ALPHA,
                   help="false-failure rate of the theory check: exit 1 when the acceptance calibration z rejects "
                        f"the verifier's acceptance law (two-sided), in (0, 1) (default {THEORY_ALPHA:g})")
    _add_timeout(p, "speed-up run", TIMEOUT_SPEEDUP_S)
    p.set_defaults(func=_cmd_speedup)


def _speedup_options(args: argparse.Namespace) -> dict:
    """Validate every speedup option; return the protocol overrides (JSON-friendly)."""
    _check_int(args.K, "--K", 1, MAX_K)
    _check_int(args.L, "--L", 1, MAX_L)
    nodes = _tree_nodes(args.K, args.L)
    if nodes > MAX_TREE_NODES:
        raise UsageError(f"--K {args.K} --L {args.L}: the draft tree has more than {MAX_TREE_NODES} nodes "
                         f"(|V| = sum of K^l for l <= L); choose a smaller K or L")
    _check_int(args.trajectories, "--trajectories", 2, 100_000)
    _check_seed(args.seed)
    _check_int(args.threads, "--threads", 1, 256)
    if args.steps is not None:
        _check_int(args.steps, "--steps", 2, 10_000)
    if args.eps is not None:
        _check_float(args.eps, "--eps", 0.0, 1.0, low_open=True, high_open=True)
    _check_timeout(args.timeout)
    _check_float(args.alpha, "--alpha", 0.0, 1.0, low_open=True, high_open=True)
    lazy = nodes > 20_000 if args.lazy is None else args.lazy
    rows = args.K * args.L + 1 if lazy else nodes   # rows realised per round and trajectory
    _check_memory(8.0 * 4 * args.trajectories * rows * 512, f"--trajectories {args.trajectories} with "
                  f"--K {args.K} --L {args.L}{'' if lazy else ' (not lazy)'}")
    return dict(prefetch=args.prefetch, leaves=args.leaves, freeze=args.freeze, grid=args.grid, steps=args.steps,
                eps=args.eps, chain_match=args.chain_match, lazy=lazy)


def _job_speedup(heartbeat: Callable[[str], None], *, target: str, overrides: dict, verifier: str, K: int, L: int,
                 trajectories: int, seed: int, threads: int) -> dict:
    """Child side of ``speccheck speedup`` (runs the user's verifier)."""
    import torch

    from speccheck.sampler.experiments import preset, speedup_run

    torch.set_num_threads(threads)
    heartbeat(f"speed-up run {verifier} K={K} L={L}")
    proto = preset(target, **overrides)
    out = speedup_run(proto, verifier, K, L, trajectories, seed)
    return {"result": json.loads(json.dumps(out, default=float)), "target": proto.target}


def _cmd_speedup(args: argparse.Namespace) -> int:
    overrides = _speedup_options(args)
    value = _isolated("speccheck.cli:_job_speedup",
                      dict(target=args.target, overrides=overrides, verifier=args.verifier, K=args.K, L=args.L,
                           trajectories=args.trajectories, seed=args.seed, threads=args.threads),
                      timeout=args.timeout, what=f"verifier {args.verifier!r}",
                      preload=("torch", "speccheck.sampler.experiments"))
    out = value.get("result")
    needed = ("rule", "tree", "speedup", "speedup_se", "nfe_mean", "nfe_se", "predicted_nfe", "nfe_z",
              "acceptance", "calibration_z")
    if not isinstance(out, dict) or any(k not in out for k in needed):
        raise errors.IsolatedCodeError("the speed-up run returned an incomplete result; no verdict")
    from speccheck.scale.jobs import calibration_contradictions, format_contradictions

    cell = {"rule": out["rule"], "K": args.K, "L": args.L, "acceptance": out["acceptance"],
            "calibration_z": out["calibration_z"]}
    rejected = calibration_contradictions([cell], args.alpha)
    out["theory_consistent"] = not rejected
    if args.json:
        print(_json_text(out))
    else:
        print(f"{out['rule']} {out['tree']} on {value.get('target')}: speed-up {out['speedup']:.3f} +- "
              f"{out['speedup_se']:.3f} (stochastic steps / target calls, warm-up included; "
              f"without warm-up {out.get('speedup_no_warmup', float('nan')):.3f})")
        print(f"  NFE {out['nfe_mean']:.2f} +- {out['nfe_se']:.2f}, predicted {out['predicted_nfe']:.2f} "
              f"(z = {out['nfe_z']:+.2f}); acceptance {out['acceptance']:.3f}, calibration z = "
              f"{out['calibration_z']:+.2f}; deterministic steps/trajectory {out.get('det_calls_mean', 0):.0f}")
        print(f"  protocol: {json.dumps(out.get('protocol'))}")
    if rejected:
        print(format_contradictions(rejected, args.alpha, 1), file=sys.stdout if not args.json else sys.stderr)
        return EXIT_DEFECT
    return EXIT_OK


# --------------------------------------------------------------------------- battery
def _add_battery(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("battery", help="exactness test battery: prove a verifier exact or catch it (exit 0/1/2)")
    p.add_argument("--verifier", help="name (rmc, dgrs, rass, rass-icdf, ...) or package.module:attr")
    p.add_argument("--suite", default="gate", help="smoke | gate | full, or a path to a suite .toml (default gate)")
    p.add_argument("--device", default="cpu", help="cpu | cuda | cuda:N")
    p.add_argument("--seed", type=int, default=None, help=f"replace the suite's fixed seed (in [0, {MAX_SEED}])")
    p.add_argument("--json", metavar="PATH", help="write the report as JSON")
    p.add_argument("--junit", metavar="PATH", help="write the report as JUnit XML")
    p.add_argument("--mutants", action="store_true", help="run the suite on every mutant; print the kill matrix")
    p.add_argument("--mutant", action="append", default=None, metavar="NAME", help="with --mutants: only these")
    p.add_argument("--failures-only", action="store_true", help="table: only the failed tests")
    p.add_argument("--verbose", action="store_true", help="the report's full table")
    p.add_argument("--layers", nargs="+", default=None, help="only these layers (e.g. L1 L3)")
    p.add_argument("--K", type=int, nargs="+", default=None, help="only these draft counts")
    p.add_argument("--scale", type=float, default=None, help="multiply the suite's draw counts")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    _add_timeout(p, "battery cell", TIMEOUT_BATTERY_CELL_S)
    from speccheck.scale.commands import add_executor_args

    add_executor_args(p, store_default=None, workers_default="1", progress_option=False)
    p.set_defaults(func=_cmd_battery)


def _battery_extra(args: argparse.Namespace) -> dict:
    """The battery's optional selections (--layers, --K, --scale), checked up front."""
    from speccheck.validation.battery import resolve_layers

    extra: dict = {}
    if args.K is not None:
        _check_values(args.K, "--K")
        for K in args.K:
            _check_int(K, "--K", 1, MAX_K)
        extra["Ks"] = args.K
    if args.scale is not None:
        _check_float(args.scale, "--scale", 0.0, 100.0, low_open=True)
        extra["scale"] = args.scale
    if args.layers is not None:
        _check_values(args.layers, "--layers")
        try:
            resolve_layers(args.layers)
        except ValueError as exc:
            raise UsageError(f"--layers: {exc}") from None
        extra["layers"] = args.layers
    return extra


def _battery_units(*, verifier: Optional[str], suite: str, device: str, seed: Optional[int], mutants: bool,
                   names: Optional[list[str]], extra: dict, executor: Any, store: Optional[str]) -> dict:
    """``speccheck battery`` as units on ``executor`` (:func:`speccheck.scale.jobs.battery_job`, one
    unit per cell; :func:`speccheck.scale.jobs.mutant_matrix`, one unit per mutant): report dicts."""
    from speccheck.scale import jobs

    if mutants:
        unit_time: dict[str, float] = {}
        reports = jobs.mutant_matrix(suite, names=names, device=device, seed=seed, executor=executor, store=store,
                                     options=extra,
                                     on_outcome=lambda unit, outcome: unit_time.update({unit.key: outcome["wall_s"]}))
        for name, rep in reports.items():  # timing is kept out of the stored result: the unit's own
            rep["wall_s"] = rep["cpu_s"] = unit_time.get(name, 0.0)
        return {"mutants": reports}
    return {"report": jobs.battery_job(verifier, suite, device=device, seed=seed, options=extra, executor=executor,
                                       store=store)}


def _job_battery(heartbeat: Callable[[str], None], *, verifier: Optional[str], suite: str, device: str,
                 seed: Optional[int], mutants: bool, names: Optional[list[str]], progress: bool,
                 extra: dict, store: Optional[str] = None) -> dict:
    """Child side of ``speccheck battery --workers 1``: its units one after another in this child
    (a heartbeat at each unit and at each battery cell inside one, so ``--timeout`` bounds a
    cell); returns report dicts only."""
    from speccheck.scale.executors import InProcessExecutor

    executor = InProcessExecutor(progress=progress, heartbeat=heartbeat)
    return _battery_units(verifier=verifier, suite=suite, device=device, seed=seed, mutants=mutants, names=names,
                          extra=extra, executor=executor, store=store)


def _rebuild_report(data: Any, what: str) -> Any:
    """A BatteryReport from the child's JSON; anything malformed is no verdict (exit 2)."""
    from speccheck.validation.results import BatteryReport

    try:
        return BatteryReport.from_dict(data)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise errors.IsolatedCodeError(f"{what}: the battery returned a malformed report ({exc}); no verdict") from None


def _evidence(rep: Any) -> tuple[int, int]:
    """(tests, statistical tests) in a report."""
    return len(rep.results), sum(1 for r in rep.results if r.kind == "stat")


def _cmd_battery(args: argparse.Namespace) -> int:
    _check_seed(args.seed)
    _check_timeout(args.timeout)
    if args.mutant and not args.mutants:
        raise UsageError("--mutant NAME only applies with --mutants")
    if args.mutants and args.verifier:
        raise UsageError("--verifier and --mutants exclude each other (the mutants are the verifiers)")
    if not args.mutants and not args.verifier:
        raise UsageError("--verifier is required (a name such as dgrs, or package.module:attr), or --mutants")
    if args.device not in ("cpu", "cuda") and not (args.device.startswith("cuda:") and args.device[5:].isdigit()):
        raise UsageError(f"--device must be cpu, cuda or cuda:N, got {args.device!r}")
    if args.device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise errors.DeviceError(f"--device {args.device}: CUDA is not available on this machine")
    _check_output_file(args.json, "--json")
    _check_output_file(args.junit, "--junit")
    if args.store is not None:
        _check_output_file(args.store, "--store")
    extra = _battery_extra(args)
    progress = not args.no_progress and args.suite != "smoke"
    if args.mutants:
        return _cmd_mutants(args, extra, progress)
    from speccheck.api import battery
    from speccheck.scale.commands import wants_dask

    dask = wants_dask(args)
    scheduler = args.scheduler or (os.environ.get("DASK_SCHEDULER_ADDRESS") if dask and args.workers is None else None)
    outcome = battery(args.verifier, args.suite, device=args.device, seed=args.seed, progress=progress,
                      workers=(args.workers or 1) if dask else 1, scheduler=scheduler, timeout=args.timeout,
                      store=args.store, **{k: v for k, v in extra.items() if k in ("layers", "Ks", "scale")})
    return _report_outcome(args, outcome)


def _report_outcome(args: argparse.Namespace, outcome: Any) -> int:
    """Print the report and write --json / --junit; the verdict's exit code (no verdict: exit 2
    with the reason, nothing written)."""
    from speccheck.validation.report import format_report, junit_xml, report_dict

    if outcome.verdict == "no_verdict":
        raise errors.IsolatedCodeError(outcome.reason)
    rep = outcome.report
    print(format_report(rep, verbose=args.verbose, only_failures=args.failures_only))
    if args.json:
        _write_text(args.json, _json_text(report_dict(rep)), "--json")
    if args.junit:
        _write_text(args.junit, '<?xml version="1.0" encoding="UTF-8"?>\n' + junit_xml(rep), "--junit")
    return outcome.exit_code


def _cmd_mutants(args: argparse.Namespace, extra: dict, progress: bool) -> int:
    """``battery --mutants``: the suite on every mutant; exit 0 iff every mutant is killed."""
    from speccheck.scale.commands import executor_from, wants_dask
    from speccheck.validation.report import format_kill_matrix, report_dict

    what = "the mutants"
    if wants_dask(args):
        executor = executor_from(argparse.Namespace(workers=args.workers, scheduler=args.scheduler,
                                                    no_progress=not progress), timeout=args.timeout)
        try:
            value = _battery_units(verifier=None, suite=args.suite, device=args.device, seed=args.seed,
                                   mutants=True, names=args.mutant, extra=extra, executor=executor, store=args.store)
        finally:
            executor.close()
    else:
        value = _isolated("speccheck.cli:_job_battery",
                          dict(verifier=None, suite=args.suite, device=args.device, seed=args.seed, mutants=True,
                               names=args.mutant, progress=progress, extra=extra, store=args.store),
                          timeout=args.timeout, what=what, device=args.device,
                          preload=("torch", "speccheck.validation.battery"))
    raw = value.get("mutants")
    if not isinstance(raw, dict) or not raw:
        raise InputError("no mutant was run (the suite has no layer the selected mutants can be tested on)")
    reports = {str(k): _rebuild_report(v, what) for k, v in raw.items()}
    empty = [k for k, rep in reports.items() if _evidence(rep)[0] == 0]
    if empty:
        raise InputError(f"suite {args.suite!r} ran no test on mutant(s) {empty}; no verdict")
    print(format_kill_matrix(reports))
    if args.json:
        _write_text(args.json, _json_text({k: report_dict(r) for k, r in reports.items()}), "--json")
    return EXIT_OK if all(not r.passed for r in reports.values()) else EXIT_DEFECT


# --------------------------------------------------------------------------- e2e
def _add_e2e(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("e2e", help="standard vs speculative sampler on a learned model: speed-up, calibration, "
                                   "exactness")
    p.add_argument("--model", required=True,
                   choices=["digits-edm", "digits-flow", "edm-cifar10", "edm-ffhq", "sd35-medium"])
    p.add_argument("--weights", default=None, help="checkpoint file / diffusers directory (required for edm-*, sd35-*)")
    p.add_argument("--embeddings", default=None, help="sd35: torch file of precomputed prompt embeddings")
    p.add_argument("--verifier", nargs="+", default=["dgrs"])
    p.add_argument("--K", type=int, nargs="+", default=[2], help=f"in [1, {MAX_K}]")
    p.add_argument("--L", type=int, nargs="+", default=[3], help=f"in [1, {MAX_L}]")
    p.add_argument("--eps", type=float, nargs="+", default=[0.3], help="churn, in (0, 1]")
    p.add_argument("--samples", type=int, default=2000, help="trajectories, in [2, 1000000]")
    p.add_argument("--steps", type=int, default=None, help="grid steps in [2, 10000] (default: the model's)")
    p.add_argument("--shift", type=float, default=None, help="timestep shift k > 0 (default: the model's)")
    p.add_argument("--freeze", choices=["drift", "velocity", "denoised"], default=None,
                   help="delayed-drift variant (default: denoised for EDM, velocity for flows)")
    p.add_argument("--prefetch", choices=["nearest", "parent", "none"], default="nearest")
    p.add_argument("--no-leaves", action="store_true", help="evaluate internal nodes only (|I| rows)")
    p.add_argument("--match", choices=["budget", "rows", "none"], default="budget",
                   help="chain length for K=1-only verifiers (rmc): same budget B as the (K, L) tree")
    p.add_argument("--guidance", type=float, default=None)
    p.add_argument("--device", default="cpu")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--alpha", type=float, default=0.01, help="false-failure rate of the verdict, in (0, 1)")
    p.add_argument("--n-perm", type=int, default=500, help="permutations of the two-sample test, in [19, 100000]")
    p.add_argument("--max-rows", type=int, default=8192, help="rows per target call, in [1, 1048576]")
    p.add_argument("--no-innovation", action="store_true")
    p.add_argument("--no-two-sample", action="store_true")
    p.add_argument("--sampler-mutant", default=None, help="a deliberately broken sampler (validation.sampler_mutants)")
    p.add_argument("--figures", default=None, help="directory for PNG sample grids")
    p.add_argument("--json", default=None, help="write all cells' reports to this JSON file")
    p.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default="float32", help="sd35 network dtype")
    p.add_argument("--threads", type=int, default=None)
    _add_timeout(p, "e2e cell (or the model load)", TIMEOUT_E2E_CELL_S)
    p.set_defaults(func=_cmd_e2e)


def _e2e_config(args: argparse.Namespace) -> dict:
    """Validate the e2e options (messages name them) and return the base config as a dict."""
    from speccheck.validation import e2e

    for values, option in ((args.K, "--K"), (args.L, "--L"), (args.eps, "--eps"), (args.verifier, "--verifier")):
        _check_values(values, option)
    for K in args.K:
        _check_int(K, "--K", 1, MAX_K)
    for L in args.L:
        _check_int(L, "--L", 1, MAX_L)
    for K in args.K:
        for L in args.L:
            if _tree_nodes(K, L) > MAX_TREE_NODES:
                raise UsageError(f"--K {K} --L {L}: the draft tree has more than {MAX_TREE_NODES} nodes")
    for eps in args.eps:
        _check_float(eps, "--eps", 0.0, 1.0, low_open=True)
    _check_int(args.samples, "--samples", 2, 1_000_000)
    if args.steps is not None:
        _check_int(args.steps, "--steps", 2, 10_000)
    if args.shift is not None:
        _check_float(args.shift, "--shift", 0.0, 1e3, low_open=True)
    if args.guidance is not None:
        _check_float(args.guidance, "--guidance", 0.0, 100.0)
    _check_seed(args.seed)
    _check_float(args.alpha, "--alpha", 0.0, 1.0, low_open=True, high_open=True)
    _check_int(args.max_rows, "--max-rows", 1, 2**20)
    if args.threads is not None:
        _check_int(args.threads, "--threads", 1, 256)
    _check_timeout(args.timeout)
    if args.no_innovation and args.no_two_sample:
        raise UsageError("--no-innovation with --no-two-sample leaves no exactness test; no verdict from no evidence")
    if not args.no_two_sample:
        e2e.check_n_perm(args.n_perm, args.alpha, option="--n-perm")
    if len(args.verifier) * len(args.K) * len(args.L) * len(args.eps) > 1000:
        raise UsageError("--verifier x --K x --L x --eps asks for more than 1000 cells")
    _check_output_file(args.json, "--json")
    if args.figures:
        _check_output_dir(args.figures, "--figures")
    if args.device != "cpu":
        e2e.check_device(args.device)
    return dict(model=args.model, weights=args.weights, embeddings=args.embeddings, samples=args.samples,
                steps=args.steps, shift=args.shift, freeze=args.freeze, prefetch=args.prefetch,
                leaves=not args.no_leaves, match=args.match, guidance=args.guidance, device=args.device,
                seed=args.seed, alpha=args.alpha, n_perm=args.n_perm, innovation=not args.no_innovation,
                two_sample=not args.no_two_sample, sampler_mutant=args.sampler_mutant, figures=args.figures,
                dtype=args.dtype, max_rows=args.max_rows)


def _job_e2e(heartbeat: Callable[[str], None], *, base: dict, verifiers: list[str], Ks: list[int], Ls: list[int],
             epss: list[float], threads: Optional[int]) -> dict:
    """Child side of ``speccheck e2e``: the grid of cells, reports as JSON-friendly dicts."""
    import torch

    from speccheck.validation import e2e

    if threads:
        torch.set_num_threads(threads)
    reports = e2e.run_e2e_grid(e2e.E2EConfig(**base), verifiers, Ks, Ls, epss, heartbeat=heartbeat,
                               log=lambda m: print(m, flush=True))
    return {"reports": json.loads(json.dumps(reports, default=float))}


def _cmd_e2e(args: argparse.Namespace) -> int:
    from speccheck.validation import e2e

    base = _e2e_config(args)
    value = _isolated("speccheck.cli:_job_e2e",
                      dict(base=base, verifiers=list(args.verifier), Ks=list(args.K), Ls=list(args.L),
                           epss=list(args.eps), threads=args.threads),
                      timeout=args.timeout, what=f"the e2e run (verifier(s) {', '.join(args.verifier)})",
                      device=args.device, preload=("torch", "speccheck.validation.e2e"))
    reports = value.get("reports")
    if not isinstance(reports, list) or not reports:
        raise errors.IsolatedCodeError("the e2e run returned no cell reports; no verdict")
    for r in reports:
        if "error" in r:
            print(f"{r.get('config', {}).get('model')} cell error: {r['error']}", file=sys.stderr, flush=True)
        else:
            print(e2e.format_report(r), flush=True)
    if args.json:
        _write_text(args.json, _json_text(reports), "--json")
    return e2e.grid_exit_code(reports)


# --------------------------------------------------------------------------- figures
def _add_figures(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("figures", help="regenerate the theory and speed-up figures: PNG + SVG + the CSV behind each")
    p.add_argument("--only", nargs="+", default=None, metavar="NAME",
                   help="figures to render: number (1..7), short name (acceptance, bounds, rank-weights, frontier, "
                        "heatmaps, speedup-vs-K, battery) or file stem; default all")
    p.add_argument("--out", default="figures", help="output directory (default: figures/)")
    p.add_argument("--quick", action="store_true", help="CI sizes: coarse grids, tiny sweep and battery")
    p.add_argument("--sweep", default=None, metavar="DIR",
                   help="reuse/resume this sampler sweep folder for figures 4-6 (default: a temporary one)")
    p.add_argument("--no-sweep-run", action="store_true",
                   help="with --sweep: only read the folder (cells it lacks are noted, not run)")
    p.add_argument("--battery-suite", default=None,
                   help="suite for figure 7's kill matrix (default: smoke; quick: tiny)")
    p.add_argument("--battery-json", default=None, metavar="PATH",
                   help="figure 7: read the battery reports from PATH (`speccheck battery --mutants --json PATH`) "
                        "if it exists, else run them and save them there")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.set_defaults(func=_cmd_figures)


def _cmd_figures(args: argparse.Namespace) -> int:
    from speccheck.figures import MEASURED, check_inputs, render, resolve

    _check_seed(args.seed)
    if args.threads is not None:
        _check_int(args.threads, "--threads", 1, 256)
    selected = resolve(args.only)  # unknown names -> InputError (exit 2) before any work
    if args.no_sweep_run and not args.sweep:
        raise UsageError("--no-sweep-run needs --sweep DIR")
    check_inputs(selected, sweep_dir=args.sweep, sweep_run=not args.no_sweep_run, battery_json=args.battery_json)
    _check_output_dir(args.out, "--out")
    if args.battery_json and not os.path.exists(args.battery_json):
        _check_output_file(args.battery_json, "--battery-json")  # the reports will be saved there
    measured = {s.stem for s in selected} & set(MEASURED)
    if args.sweep and measured and not args.no_sweep_run and not os.path.isfile(args.sweep):
        _check_output_dir(args.sweep, "--sweep")
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    man = render(args.out, only=args.only, quick=args.quick, sweep_dir=args.sweep, sweep_run=not args.no_sweep_run,
                 seed=args.seed, battery_suite=args.battery_suite, battery_json=args.battery_json,
                 log=lambda m: print(m, flush=True))
    stems = {s.stem for s in selected}
    failed = [k for k, v in man["figures"].items() if "error" in v and k in stems]
    if failed:
        details = "; ".join(f"{k}: {man['figures'][k]['error']}" for k in failed)
        raise SpeccheckError(f"{len(failed)} figure(s) could not be drawn: {details}")
    print(f"wrote {args.out}/ (manifest.json lists the files)")
    return EXIT_OK


# --------------------------------------------------------------------------- verifiers
def _add_verifiers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("verifiers", help="list the available verifiers (built-in and entry points)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--check", metavar="SPEC",
                   help="load SPEC (a name or package.module:attr) and run the battery's contract checks on it "
                        "(exit 0 all pass, 1 a check failed, 2 not loadable)")
    p.add_argument("--device", default="cpu", help="with --check: cpu | cuda | cuda:N")
    p.add_argument("--seed", type=int, default=0, help="with --check: seed of the inputs")
    _add_timeout(p, "contract check", TIMEOUT_CHECK_S)
    p.set_defaults(func=_cmd_verifiers)


def _job_check(heartbeat: Callable[[str], None], *, spec: str, device: str, seed: int) -> dict:
    """Child side of ``speccheck verifiers --check``: the battery's contract layer (L0)."""
    from speccheck.validation.battery import load_verifier
    from speccheck.validation.contract import contract_checks

    heartbeat(f"loading verifier {spec!r}")
    verifier = load_verifier(spec)
    heartbeat(f"contract checks of {spec!r}")
    results = contract_checks(verifier, device=device, seed=seed)
    rows = []
    for r in results:
        get = r.get if isinstance(r, dict) else (lambda k, default=None, _r=r: getattr(_r, k, default))
        rows.append({"cell": str(get("cell", "")), "test": str(get("test", get("name", ""))),
                     "passed": bool(get("passed", False)), "note": str(get("note", "") or "")})
    return {"name": str(getattr(verifier, "name", spec)), "checks": rows}


def _cmd_verifiers(args: argparse.Namespace) -> int:
    if args.check:
        _check_seed(args.seed)
        _check_timeout(args.timeout)
        if args.device not in ("cpu", "cuda") and not (args.device.startswith("cuda:") and args.device[5:].isdigit()):
            raise UsageError(f"--device must be cpu, cuda or cuda:N, got {args.device!r}")
        value = _isolated("speccheck.cli:_job_check", dict(spec=args.check, device=args.device, seed=args.seed),
                          timeout=args.timeout, what=f"verifier {args.check!r}", device=args.device,
                          preload=("torch", "speccheck.validation.battery"))
        checks = value.get("checks")
        if not isinstance(checks, list) or not checks:
            raise InputError(f"no contract check could be run on {args.check!r} (does supports_K accept any K?)")
        failed = [c for c in checks if not c.get("passed")]
        for c in failed:
            if "MemoryError" in c.get("note", ""):
                raise errors.IsolatedCodeError(f"verifier {args.check!r} ran out of memory ({c['note']}); no verdict")
        for c in failed:
            print(f"FAIL {c['cell']} {c['test']}: {c['note']}")
        name = value.get("name", args.check)
        if failed:
            print(f"{name}: {len(failed)} of {len(checks)} contract checks FAILED")
            return EXIT_DEFECT
        print(f"{name}: ok ({len(checks)} contract checks passed)")
        return EXIT_OK
    from speccheck.verifiers import available

    rows = available()
    if args.json:
        print(_json_text(rows))
    else:
        width = max(len(n) for n in rows)
        for name, desc in rows.items():
            print(f"{name:<{width}}  {desc}")
    return EXIT_OK


# --------------------------------------------------------------------------- main
_COMMANDS = [_add_theory, _add_train_digits, _add_speedup, _add_battery, _add_e2e, _add_figures, _add_verifiers]
_REGISTERED = ("speccheck.scale.commands", "speccheck.reproduce")  # modules with register(subparsers)


def _register_external(sub: argparse._SubParsersAction) -> None:
    import importlib

    for name in _REGISTERED:
        importlib.import_module(name).register(sub)


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="speccheck", description=(__doc__ or "").splitlines()[0],
                                     epilog="exit codes: 0 ran and positive, 1 defect found, 2 could not run as asked "
                                            "(docs/exit-codes.md)")
    from speccheck import __version__

    parser.add_argument("--version", action="version", version=f"speccheck {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for add in _COMMANDS:
        add(sub)
    _register_external(sub)
    return parser


def build_parser() -> argparse.ArgumentParser:
    """The full parser: this module's commands and those registered by other modules."""
    return _build_parser()


def _check_parsed(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """argparse lets ``--opt=--`` through as an empty list: refuse a list where one value is
    expected and an empty list where values are expected, naming the option."""
    sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
    command_parser = sub.choices.get(getattr(args, "command", None)) if sub is not None else None
    for action in command_parser._actions if command_parser is not None else []:
        if not action.option_strings or action.dest not in vars(args):
            continue
        value = getattr(args, action.dest)
        option = action.option_strings[0]
        if action.nargs is None and isinstance(value, list) and action.type is not None:
            raise UsageError(f"{option} takes one value, got {value!r}")
        if action.nargs in ("+", "*") and isinstance(value, list) and not value:
            raise UsageError(f"{option} needs at least one value")


def _check_outputs(args: argparse.Namespace) -> None:
    """Before any work: ``--store`` is a file that persists (not '' or ':memory:'), and no two
    output options name the same file (``--json`` would replace the ``--store`` database)."""
    from speccheck.scale.commands import check_distinct_outputs, check_store

    if isinstance(getattr(args, "store", None), str):
        check_store(args.store)
    check_distinct_outputs({option: getattr(args, dest) for dest, option in _OUTPUT_OPTIONS.items()
                            if isinstance(getattr(args, dest, None), str)})


def _error(command: str, message: str) -> None:
    print(f"speccheck {command}: error: {message}", file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; return its exit code (0, 1 or 2; see the module docstring)."""
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: --help (0) or a bad option (2, message printed)
        return EXIT_OK if exc.code in (0, None) else EXIT_CANNOT_RUN
    except Exception as exc:  # noqa: BLE001 - a registered command module failed to import
        if os.environ.get("SPECCHECK_DEBUG") == "1":
            raise
        _error("?", f"internal error {type(exc).__name__}: {exc} (please report it)")
        return EXIT_CANNOT_RUN
    command = getattr(args, "command", "?")
    try:
        _check_parsed(parser, args)
        _check_outputs(args)
        code = args.func(args)
    except SpeccheckError as exc:
        _error(command, str(exc))
        return exc.exit_code
    except ValueError as exc:  # library domain checks that predate speccheck.errors
        _error(command, str(exc))
        return EXIT_CANNOT_RUN
    except MemoryError:
        _error(command, "out of memory; reduce the sizes asked for")
        return EXIT_CANNOT_RUN
    except OSError as exc:
        where = f" {exc.filename!r}" if getattr(exc, "filename", None) else ""
        _error(command, f"file error{where}: {exc.strerror or exc}")
        return EXIT_CANNOT_RUN
    except KeyboardInterrupt:
        _error(command, "interrupted; no verdict")
        return EXIT_CANNOT_RUN
    except Exception as exc:  # noqa: BLE001 - never a raw traceback, never exit 0
        if os.environ.get("SPECCHECK_DEBUG") == "1":
            raise
        _error(command, f"internal error {type(exc).__name__}: {exc} (please report it; SPECCHECK_DEBUG=1 shows "
                        "the traceback)")
        return EXIT_CANNOT_RUN
    if code not in (EXIT_OK, EXIT_DEFECT, EXIT_CANNOT_RUN):
        _error(command, f"internal error: command returned {code!r} (please report it)")
        return EXIT_CANNOT_RUN
    return int(code)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
