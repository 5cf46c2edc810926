"""``speccheck sweep``: a resumable (rule, K, L) speed-up sweep into the results store, one call
of :func:`speccheck.api.sweep`, whose verdict is :func:`speccheck.scale.jobs.judge_calibration`
(exit 1 when a cell contradicts its verifier's acceptance law, Holm over the cells)."""

from __future__ import annotations

import argparse
import os

from speccheck.api import THEORY_ALPHA
from speccheck.cli._executor import add_executor_args, check_name, check_store, show_progress
from speccheck.cli._options import TIMEOUT_SPEEDUP_S, add_protocol_args, add_timeout, check_timeout, parse_range
from speccheck.errors import EXIT_OK, InputError, UsageError


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add ``sweep`` to the sub-parsers."""
    p = sub.add_parser("sweep", help="resumable (rule, K, L) speed-up sweep on a mixture preset, one unit per "
                                     "cell, into the results store; summary with SE and theory prediction")
    p.add_argument("--verifiers", nargs="+", default=["rmc", "dgrs", "rass"])
    p.add_argument("--K", nargs="+", default=None, help="K values or ranges (default 1..7)")
    p.add_argument("--L", nargs="+", default=None, help="L values or ranges (default 2..7)")
    p.add_argument("--cells", nargs="+", default=None, help="explicit cells like 6x6 5x3 (instead of --K/--L)")
    p.add_argument("--chunk", type=int, default=None, metavar="N",
                   help="trajectories per unit: a cell of more is split into chunks of N (run in parallel, "
                        "stored as they finish, merged exactly into the cell); default: one unit per cell")
    p.add_argument("--name", default=None, help="sweep name in the store (default: target + protocol hash)")
    p.add_argument("--out", default=None, metavar="DIR",
                   help="also write DIR/<name>/summary.csv and summary.md (every cell stored in the sweep)")
    p.add_argument("--convert", default=None, metavar="DIR",
                   help="run nothing: import a legacy CSV sweep folder (trajectories.csv) into the store")
    p.add_argument("--alpha", type=float, default=THEORY_ALPHA,
                   help="false-failure rate of the theory check: exit 1 when a cell's acceptance calibration z "
                        "rejects its verifier's acceptance law (two-sided, Holm over the cells; default "
                        f"{THEORY_ALPHA:g})")
    add_protocol_args(p, threads_help="torch CPU threads per unit (default 1)")
    add_executor_args(p)
    add_timeout(p, "cell (or chunk)", TIMEOUT_SPEEDUP_S)
    p.set_defaults(func=run)


def parse_cells(values: list[str]) -> list[tuple[int, int]]:
    """``["6x6", "5x3"]`` -> ``[(6, 6), (5, 3)]``."""
    cells = []
    for value in values:
        parts = value.lower().split("x")
        try:
            pair = tuple(int(p) for p in parts)
        except ValueError:
            pair = ()
        if len(pair) != 2 or min(pair) < 1:
            raise InputError(f"--cells takes KxL pairs like 6x6 (K, L >= 1), got {value!r}")
        cells.append(pair)
    return cells


def _check_alpha(alpha: float) -> float:
    import math

    if not (math.isfinite(alpha) and 0 < alpha < 1):
        raise InputError(f"--alpha must be a finite number in (0, 1), got {alpha}")
    return alpha


def _cells(args: argparse.Namespace) -> list[tuple[int, int]]:
    """The (K, L) cells asked for, after the options that shape them are checked."""
    if args.cells and (args.K is not None or args.L is not None):
        raise UsageError("--cells cannot be combined with --K/--L (give either explicit KxL cells or K and L ranges)")
    if args.trajectories < 2:
        raise InputError(f"--trajectories must be >= 2, got {args.trajectories}")
    if args.chunk is not None and args.chunk < 1:
        raise InputError(f"--chunk must be >= 1 trajectories per unit, got {args.chunk}")
    return parse_cells(args.cells) if args.cells else [
        (k, l) for k in parse_range(args.K or ["1..7"], "K") for l in parse_range(args.L or ["2..7"], "L")]


def _overrides(args: argparse.Namespace) -> dict:
    """The protocol overrides of :func:`speccheck.sampler.experiments.preset` the options give."""
    if args.steps is not None and args.steps < 2:
        raise InputError(f"--steps must be >= 2, got {args.steps}")
    return dict(prefetch=args.prefetch, leaves=args.leaves, freeze=args.freeze, grid=args.grid, steps=args.steps,
                eps=args.eps, chain_match=args.chain_match, lazy=args.lazy)


def _write_summary(args: argparse.Namespace, name: str) -> None:
    """DIR/<name>/summary.csv and summary.md of every cell stored in the sweep."""
    from speccheck.scale import jobs

    folder = os.path.join(args.out, name)
    every_cell, _ = jobs.load_sweep(args.store, name)
    jobs.write_summary_files(every_cell, folder)
    print(f"wrote {folder}/summary.csv, summary.md ({len(every_cell)} cells stored in the sweep)")


def _convert(args: argparse.Namespace) -> int:
    from speccheck.scale import jobs

    name = jobs.convert_legacy_sweep(args.convert, args.store, name=args.name and check_name(args.name))
    print(f"imported {args.convert} into {args.store} as sweep {name!r}")
    return EXIT_OK


def run(args: argparse.Namespace) -> int:
    """Run the missing cells into the store, print/write the summary; the theory verdict's exit code."""
    check_store(args.store)
    _check_alpha(args.alpha)
    check_timeout(args.timeout)
    if args.convert:
        return _convert(args)
    from speccheck.api import sweep

    cells = _cells(args)
    outcome = sweep(args.verifiers, cells, args.trajectories, target=args.target, overrides=_overrides(args),
                    seed=args.seed, store=args.store, name=check_name(args.name) if args.name else None,
                    chunk=args.chunk, threads=args.threads, workers=args.workers, scheduler=args.scheduler,
                    progress=show_progress(args), alpha=args.alpha, log=lambda m: print(m, flush=True),
                    timeout=args.timeout)
    name, rows = outcome.data["name"], outcome.data["rows"]
    print(f"sweep {name!r}: {len(rows)} cells run or found in {args.store}")
    if args.out:
        _write_summary(args, name)
    for line in outcome.lines:
        print(line)
    return outcome.exit_code
