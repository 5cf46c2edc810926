"""``speccheck train-digits``: train the small digits models, one call of
:func:`speccheck.targets.digits.train_and_save`."""

from __future__ import annotations

import argparse

from speccheck.cli._options import check_int, check_output_dir, check_seed, check_threads, set_threads
from speccheck.cli._output import json_text
from speccheck.errors import EXIT_OK


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add ``train-digits`` to the sub-parsers."""
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
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Train, save, print the report as JSON; exit 0."""
    check_seed(args.seed)
    check_int(args.steps_edm, "--steps-edm", 1, 1_000_000)
    check_int(args.steps_flow, "--steps-flow", 1, 1_000_000)
    check_int(args.batch, "--batch", 1, 4096)
    check_int(args.check_per_class, "--check-per-class", 0, 1000)
    check_threads(args.threads)
    from speccheck.targets import digits

    out = args.out if args.out is not None else digits.user_checkpoint_dir()
    check_output_dir(out, "--out")
    set_threads(args.threads)
    report = digits.train_and_save(which=args.which, out_dir=out, steps_edm=args.steps_edm,
                                   steps_flow=args.steps_flow, batch=args.batch, seed=args.seed,
                                   check_per_class=args.check_per_class,
                                   log=lambda m: print(m, flush=True))
    print(json_text(report), flush=True)
    return EXIT_OK
