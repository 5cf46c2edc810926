"""``speccheck speedup``: one speed-up run and its theory check, one call of
:func:`speccheck.api.speedup` (the verdict: :func:`speccheck.scale.jobs.judge_calibration`)."""

from __future__ import annotations

import argparse
import json
import sys

from speccheck.api import THEORY_ALPHA
from speccheck.cli._options import (
    MAX_K,
    MAX_L,
    MAX_TREE_NODES,
    TIMEOUT_SPEEDUP_S,
    add_protocol_args,
    add_timeout,
    check_float,
    check_int,
    check_memory,
    check_output_file,
    check_seed,
    check_timeout,
    check_tree,
)
from speccheck.cli._output import json_text, write_json


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add ``speedup`` to the sub-parsers."""
    p = sub.add_parser("speedup", help="NFE speed-up of the speculative sampler on a mixture preset, "
                                       "with theory-vs-measurement checks")
    p.add_argument("--verifier", default="dgrs", help="name or package.module:attr")
    p.add_argument("--K", type=int, default=6, help=f"draft width, in [1, {MAX_K}]")
    p.add_argument("--L", type=int, default=6, help=f"draft depth, in [1, {MAX_L}]; |V| <= {MAX_TREE_NODES}")
    add_protocol_args(p, threads_help="torch CPU threads, in [1, 256] (default 1)")
    p.add_argument("--json", metavar="PATH", default=None,
                   help="write the run's record as JSON to PATH ('-': print it on stdout instead of the table)")
    p.add_argument("--alpha", type=float, default=THEORY_ALPHA,
                   help="false-failure rate of the theory check: exit 1 when the acceptance calibration z rejects "
                        f"the verifier's acceptance law (two-sided), in (0, 1) (default {THEORY_ALPHA:g})")
    add_timeout(p, "speed-up run", TIMEOUT_SPEEDUP_S)
    p.set_defaults(func=run)


def _overrides(args: argparse.Namespace) -> dict:
    """Validate every speedup option; return the protocol overrides (JSON-friendly)."""
    check_int(args.K, "--K", 1, MAX_K)
    check_int(args.L, "--L", 1, MAX_L)
    nodes = check_tree(args.K, args.L, " (|V| = sum of K^l for l <= L); choose a smaller K or L")
    check_int(args.trajectories, "--trajectories", 2, 100_000)
    check_seed(args.seed)
    check_int(args.threads, "--threads", 1, 256)
    if args.steps is not None:
        check_int(args.steps, "--steps", 2, 10_000)
    if args.eps is not None:
        check_float(args.eps, "--eps", 0.0, 1.0, low_open=True, high_open=True)
    check_timeout(args.timeout)
    check_float(args.alpha, "--alpha", 0.0, 1.0, low_open=True, high_open=True)
    if args.json != "-":
        check_output_file(args.json, "--json")
    lazy = args.lazy  # the preset's default (lazy), as speccheck.api.speedup: one seed, one set of numbers
    rows = args.K * args.L + 1 if lazy else nodes   # rows realised per round and trajectory
    check_memory(8.0 * 4 * args.trajectories * rows * 512, f"--trajectories {args.trajectories} with "
                 f"--K {args.K} --L {args.L}{'' if lazy else ' (not lazy)'}")
    return dict(prefetch=args.prefetch, leaves=args.leaves, freeze=args.freeze, grid=args.grid, steps=args.steps,
                eps=args.eps, chain_match=args.chain_match, lazy=lazy)


def _print_table(out: dict, target: object) -> None:
    print(f"{out['rule']} {out['tree']} on {target}: speed-up {out['speedup']:.3f} +- "
          f"{out['speedup_se']:.3f} (stochastic steps / target calls, warm-up included; "
          f"without warm-up {out.get('speedup_no_warmup', float('nan')):.3f})")
    print(f"  NFE {out['nfe_mean']:.2f} +- {out['nfe_se']:.2f}, predicted {out['predicted_nfe']:.2f} "
          f"(z = {out['nfe_z']:+.2f}); acceptance {out['acceptance']:.3f}, calibration z = "
          f"{out['calibration_z']:+.2f}; deterministic steps/trajectory {out.get('det_calls_mean', 0):.0f}")
    print(f"  protocol: {json.dumps(out.get('protocol'))}")


def run(args: argparse.Namespace) -> int:
    """Print the run (table or JSON) and any contradiction; exit 1 when theory is contradicted."""
    from speccheck.api import speedup

    overrides = _overrides(args)
    outcome = speedup(args.verifier, args.K, args.L, target=args.target, trajectories=args.trajectories,
                      seed=args.seed, overrides=overrides, threads=args.threads, alpha=args.alpha,
                      timeout=args.timeout)
    out = outcome.data["result"]
    record = out if out is not None else {"verdict": outcome.verdict, "reason": outcome.reason}
    to_stdout = args.json == "-"
    if to_stdout:
        print(json_text(record))
    elif out is not None:  # None: the run itself was a defect (the lines below say which)
        _print_table(out, outcome.data["target"])
    for line in outcome.lines:
        print(line, file=sys.stderr if to_stdout else sys.stdout)
    if args.json and not to_stdout:
        write_json(args.json, record, "--json")
    return outcome.exit_code
