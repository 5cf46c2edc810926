"""``speccheck e2e``: standard vs speculative sampler on a learned model, one call of
:func:`speccheck.api.e2e` (the verdict: :func:`speccheck.validation.e2e.grid_exit_code`)."""

from __future__ import annotations

import argparse
import sys

from speccheck.cli._options import (
    MAX_K,
    MAX_L,
    TIMEOUT_E2E_CELL_S,
    add_timeout,
    check_float,
    check_int,
    check_ints,
    check_output_dir,
    check_output_file,
    check_seed,
    check_threads,
    check_timeout,
    check_tree,
    check_values,
)
from speccheck.cli._output import write_json
from speccheck.errors import UsageError


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add ``e2e`` to the sub-parsers."""
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
    add_timeout(p, "e2e cell (or the model load)", TIMEOUT_E2E_CELL_S)
    p.set_defaults(func=run)


def _check_grid(args: argparse.Namespace) -> None:
    """The grid options: lists non-empty, K and L in range, every tree small enough, eps in (0, 1]."""
    for values, option in ((args.K, "--K"), (args.L, "--L"), (args.eps, "--eps"), (args.verifier, "--verifier")):
        check_values(values, option)
    check_ints(args.K, "--K", 1, MAX_K)
    check_ints(args.L, "--L", 1, MAX_L)
    for K in args.K:
        for L in args.L:
            check_tree(K, L)
    for eps in args.eps:
        check_float(eps, "--eps", 0.0, 1.0, low_open=True)


def _check_cell(args: argparse.Namespace) -> None:
    """The per-cell options, the tests asked for, and the outputs."""
    from speccheck.validation import e2e

    check_int(args.samples, "--samples", 2, 1_000_000)
    if args.steps is not None:
        check_int(args.steps, "--steps", 2, 10_000)
    if args.shift is not None:
        check_float(args.shift, "--shift", 0.0, 1e3, low_open=True)
    if args.guidance is not None:
        check_float(args.guidance, "--guidance", 0.0, 100.0)
    check_seed(args.seed)
    check_float(args.alpha, "--alpha", 0.0, 1.0, low_open=True, high_open=True)
    check_int(args.max_rows, "--max-rows", 1, 2**20)
    check_threads(args.threads)
    check_timeout(args.timeout)
    if args.no_innovation and args.no_two_sample:
        raise UsageError("--no-innovation with --no-two-sample leaves no exactness test; no verdict from no evidence")
    if not args.no_two_sample:
        e2e.check_n_perm(args.n_perm, args.alpha, option="--n-perm")
    if len(args.verifier) * len(args.K) * len(args.L) * len(args.eps) > 1000:
        raise UsageError("--verifier x --K x --L x --eps asks for more than 1000 cells")


def _base_config(args: argparse.Namespace) -> dict:
    """Validate the e2e options (messages name them); the base cell's config as a dict."""
    from speccheck.validation import e2e

    _check_grid(args)
    _check_cell(args)
    check_output_file(args.json, "--json")
    if args.figures:
        check_output_dir(args.figures, "--figures")
    if args.device != "cpu":
        e2e.check_device(args.device)
    return dict(model=args.model, weights=args.weights, embeddings=args.embeddings, samples=args.samples,
                steps=args.steps, shift=args.shift, freeze=args.freeze, prefetch=args.prefetch,
                leaves=not args.no_leaves, match=args.match, guidance=args.guidance, device=args.device,
                seed=args.seed, alpha=args.alpha, n_perm=args.n_perm, innovation=not args.no_innovation,
                two_sample=not args.no_two_sample, sampler_mutant=args.sampler_mutant, figures=args.figures,
                dtype=args.dtype, max_rows=args.max_rows)


def run(args: argparse.Namespace) -> int:
    """Print each cell's report (errors on stderr), write --json; the grid's exit code."""
    from speccheck.api import e2e as run_e2e
    from speccheck.validation.e2e import format_report

    outcome = run_e2e(_base_config(args), args.verifier, args.K, args.L, args.eps, threads=args.threads,
                      timeout=args.timeout)
    reports = outcome.data["reports"]
    for r in reports:
        if "error" in r:
            print(f"{r.get('config', {}).get('model')} cell error: {r['error']}", file=sys.stderr, flush=True)
        else:
            print(format_report(r), flush=True)
    if args.json:
        write_json(args.json, reports, "--json")
    return outcome.exit_code
