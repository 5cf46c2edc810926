"""The ``speccheck`` command. Each subcommand is a thin layer over package functions.

Exit codes: 0 success, 1 a defect was found (battery), 2 bad options or a verifier that
cannot be loaded.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Sequence


class UsageError(Exception):
    """Bad options: reported on stderr with exit code 2."""


# --------------------------------------------------------------------------- theory
def _add_theory(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("theory", help="acceptance, bounds and optimal RASS weights per (delta, K)")
    p.add_argument("--delta", type=float, nargs="+", default=[0.5, 1.0, 2.0])
    p.add_argument("--K", type=int, nargs="+", default=[1, 2, 4, 8])
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=_cmd_theory)


def _cmd_theory(args: argparse.Namespace) -> int:
    from speccheck.theory.table import format_theory_table, theory_table

    rows = theory_table(args.delta, args.K)
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print(format_theory_table(rows))
    return 0


# --------------------------------------------------------------------------- train-digits
def _add_train_digits(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train-digits", help="train the small digits models (EDM denoiser, SD3-transformer flow) on CPU")
    p.add_argument("--which", choices=["edm", "flow", "both"], default="both")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps-edm", type=int, default=4000)
    p.add_argument("--steps-flow", type=int, default=1500)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--out", default=None, help="output directory (default: the package's speccheck/data)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--check-per-class", type=int, default=50, help="samples per digit for the held-out check (0: skip)")
    p.set_defaults(func=_cmd_train_digits)


def _cmd_train_digits(args: argparse.Namespace) -> int:
    import os

    import torch

    from speccheck.targets import digits

    if args.threads:
        torch.set_num_threads(args.threads)
    out = args.out or digits.DATA_DIR
    report = {}
    jobs = []
    if args.which in ("edm", "both"):
        jobs.append(("digits-edm", "digits-mlp", "digits_edm.pt", lambda log: digits.train_digits_edm(
            steps=args.steps_edm, batch=args.batch, seed=args.seed, log=log)))
    if args.which in ("flow", "both"):
        jobs.append(("digits-flow", "digits-flow", "digits_flow.pt", lambda log: digits.train_digits_flow(
            steps=args.steps_flow, batch=args.batch, seed=args.seed, log=log)))
    for kind, arch, fname, train in jobs:
        model, meta = train(lambda m, k=kind: print(f"[{k}] {m}", flush=True))
        path = os.path.join(out, fname)
        digits.save_checkpoint(model, arch, path, meta)
        entry = {"path": path, "bytes": os.path.getsize(path), **meta}
        if args.check_per_class > 0:
            entry["heldout_check"] = digits.heldout_check(digits.digits_target(kind, path), n_per_class=args.check_per_class)
        report[kind] = entry
        print(json.dumps({kind: entry}, indent=2), flush=True)
    return 0


# --------------------------------------------------------------------------- main
_COMMANDS = [_add_theory, _add_train_digits]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="speccheck", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for add in _COMMANDS:
        add(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (UsageError, ValueError) as exc:
        print(f"speccheck {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
