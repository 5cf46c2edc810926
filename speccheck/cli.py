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
    p = sub.add_parser("theory", help="acceptance (RMC, D-GRS, RASS, MCRS), bounds and optimal RASS weights per (delta, K)")
    p.add_argument("--delta", type=float, nargs="+", default=[0.5, 1.0, 2.0])
    p.add_argument("--K", type=int, nargs="+", default=[1, 2, 4, 8])
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--mcrs-G", type=int, default=64,
                   help="cells of MCRS's policy (0: skip MCRS; its cold LP takes ~0.1-10 s per (delta, K))")
    p.set_defaults(func=_cmd_theory)


def _cmd_theory(args: argparse.Namespace) -> int:
    from speccheck.theory.table import format_theory_table, theory_table

    rows = theory_table(args.delta, args.K, mcrs_G=args.mcrs_G or None)
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


# --------------------------------------------------------------------------- speedup / sweep
def _add_protocol_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", default="gmm-paper", choices=["gmm-paper", "gmm-d512"],
                   help="preset (gmm-paper: d=500, eps=0.1, uniform grid, leaves evaluated; gmm-d512: "
                        "d=512, eps=0.06, flow grid with deterministic ends, leaves not evaluated)")
    p.add_argument("--trajectories", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lazy", action=argparse.BooleanOptionalAction, default=None,
                   help="realise only visited branches (same law and NFE); default: lazy for sweeps, "
                        "and for speedup when the tree has more than 20000 nodes")
    p.add_argument("--prefetch", choices=["nearest", "parent", "none"], default=None)
    p.add_argument("--leaves", action=argparse.BooleanOptionalAction, default=None,
                   help="evaluate leaves too (|V| rows per round) or not (|I| rows)")
    p.add_argument("--freeze", choices=["drift", "velocity", "denoised"], default=None)
    p.add_argument("--grid", choices=["uniform", "shifted", "flow", "edm"], default=None)
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--eps", type=float, default=None)
    p.add_argument("--chain-match", choices=["budget", "rows"], default=None,
                   help="chain compared with a (K, L) tree: same drafted budget B or same rows")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")


def _protocol_from(args: argparse.Namespace, lazy_default: bool):
    from speccheck.sampler.experiments import preset

    if args.trajectories < 2:
        raise UsageError(f"--trajectories must be >= 2, got {args.trajectories}")
    lazy = lazy_default if args.lazy is None else args.lazy
    return preset(args.target, prefetch=args.prefetch, leaves=args.leaves, freeze=args.freeze,
                  grid=args.grid, steps=args.steps, eps=args.eps, chain_match=args.chain_match, lazy=lazy)


def _add_speedup(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("speedup", help="NFE speed-up of the speculative sampler on a mixture preset, "
                                       "with theory-vs-measurement checks")
    p.add_argument("--verifier", default="dgrs")
    p.add_argument("--K", type=int, default=6)
    p.add_argument("--L", type=int, default=6)
    _add_protocol_args(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_speedup)


def _cmd_speedup(args: argparse.Namespace) -> int:
    import torch

    from speccheck.sampler.experiments import speedup_run

    torch.set_num_threads(max(1, args.threads))
    big = args.K >= 1 and args.L >= 1 and sum(args.K**l for l in range(args.L + 1)) > 20000
    proto = _protocol_from(args, lazy_default=big)
    out = speedup_run(proto, args.verifier, args.K, args.L, args.trajectories, args.seed)
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(f"{out['rule']} {out['tree']} on {proto.target}: speed-up {out['speedup']:.3f} +- "
              f"{out['speedup_se']:.3f} (stochastic steps / target calls, warm-up included; "
              f"without warm-up {out['speedup_no_warmup']:.3f})")
        print(f"  NFE {out['nfe_mean']:.2f} +- {out['nfe_se']:.2f}, predicted {out['predicted_nfe']:.2f} "
              f"(z = {out['nfe_z']:+.2f}); acceptance {out['acceptance']:.3f}, calibration z = "
              f"{out['calibration_z']:+.2f}; deterministic steps/trajectory {out['det_calls_mean']:.0f}")
        print(f"  protocol: {json.dumps(out['protocol'])}")
    return 0


def _parse_range(vals: list[str], name: str) -> list[int]:
    out: list[int] = []
    for v in vals:
        try:
            if ".." in v:
                a, b = v.split("..")
                out += list(range(int(a), int(b) + 1))
            else:
                out.append(int(v))
        except ValueError:
            raise UsageError(f"--{name} takes integers or ranges like 1..7, got {v!r}") from None
    if not out or min(out) < 1:
        raise UsageError(f"--{name} must be integers >= 1, got {vals}")
    return sorted(set(out))


def _add_sweep(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sweep", help="resumable (rule, K, L) speed-up sweep on a mixture preset: one row "
                                     "per trajectory, summary with SE and theory prediction")
    p.add_argument("--verifiers", nargs="+", default=["rmc", "dgrs", "rass"])
    p.add_argument("--K", nargs="+", default=["1..7"])
    p.add_argument("--L", nargs="+", default=["2..7"])
    p.add_argument("--cells", nargs="+", default=None, help="explicit cells like 6x6 5x3 (instead of K x L)")
    p.add_argument("--out", default="results", help="results folder (a sub-folder per protocol)")
    p.add_argument("--name", default=None, help="sub-folder name (default: target + protocol hash)")
    _add_protocol_args(p)
    p.set_defaults(func=_cmd_sweep)


def _cmd_sweep(args: argparse.Namespace) -> int:
    import os

    import torch

    from speccheck.scale.sweep import sweep

    torch.set_num_threads(max(1, args.threads))
    proto = _protocol_from(args, lazy_default=True)
    cells = None
    if args.cells:
        try:
            cells = [tuple(int(x) for x in c.lower().split("x")) for c in args.cells]
        except ValueError:
            raise UsageError(f"--cells takes KxL pairs like 6x6, got {args.cells}") from None
        if any(len(c) != 2 or min(c) < 1 for c in cells):
            raise UsageError(f"--cells takes KxL pairs like 6x6, got {args.cells}")
    out = os.path.join(args.out, args.name or f"{proto.target}-{proto.key()}")
    sweep(proto, args.verifiers, _parse_range(args.K, "K"), _parse_range(args.L, "L"), args.trajectories,
          args.seed, out, cells=cells, log=lambda m: print(m, flush=True))
    print(f"wrote {out}/trajectories.csv, summary.csv, summary.md")
    return 0


# --------------------------------------------------------------------------- battery
def _add_battery(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("battery", help="exactness test battery: prove a verifier exact or catch it (exit 0/1/2)")
    p.add_argument("--verifier", help="name (rmc, dgrs, rass, rass-icdf, ...) or package.module:attr")
    p.add_argument("--suite", default="gate", help="smoke | gate | full, or a path to a suite .toml (default gate)")
    p.add_argument("--device", default="cpu", help="cpu | cuda")
    p.add_argument("--seed", type=int, default=None, help="replace the suite's fixed seed")
    p.add_argument("--json", metavar="PATH", help="write the report as JSON")
    p.add_argument("--junit", metavar="PATH", help="write the report as JUnit XML")
    p.add_argument("--mutants", action="store_true", help="run the suite on every mutant; print the kill matrix")
    p.add_argument("--mutant", action="append", default=None, metavar="NAME", help="with --mutants: only these")
    p.add_argument("--failures-only", action="store_true", help="table: only the failed tests")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.set_defaults(func=_cmd_battery)


def _cmd_battery(args: argparse.Namespace) -> int:
    from speccheck.validation.battery import run_battery, run_mutants
    from speccheck.validation.report import format_kill_matrix, format_report, write_json, write_junit

    progress = not args.no_progress and args.suite != "smoke"
    if args.mutants:
        reports = run_mutants(args.suite, names=args.mutant, device=args.device, seed=args.seed, progress=progress)
        print(format_kill_matrix(reports))
        if args.json:
            import json as _json

            from speccheck.validation.report import report_dict

            with open(args.json, "w") as fh:
                _json.dump({k: report_dict(r) for k, r in reports.items()}, fh, indent=2)
        return 0 if all(not r.passed for r in reports.values()) else 1
    if not args.verifier:
        raise UsageError("--verifier is required (or --mutants)")
    rep = run_battery(args.verifier, args.suite, device=args.device, seed=args.seed, progress=progress)
    print(format_report(rep, only_failures=args.failures_only))
    if args.json:
        write_json(rep, args.json)
    if args.junit:
        write_junit(rep, args.junit)
    return 0 if rep.passed else 1


# --------------------------------------------------------------------------- e2e
def _add_e2e(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("e2e", help="standard vs speculative sampler on a learned model: speed-up, calibration, exactness")
    p.add_argument("--model", required=True,
                   choices=["digits-edm", "digits-flow", "edm-cifar10", "edm-ffhq", "sd35-medium"])
    p.add_argument("--weights", default=None, help="checkpoint file / diffusers directory (required for edm-*, sd35-*)")
    p.add_argument("--embeddings", default=None, help="sd35: torch file of precomputed prompt embeddings")
    p.add_argument("--verifier", nargs="+", default=["dgrs"])
    p.add_argument("--K", type=int, nargs="+", default=[2])
    p.add_argument("--L", type=int, nargs="+", default=[3])
    p.add_argument("--eps", type=float, nargs="+", default=[0.3])
    p.add_argument("--samples", type=int, default=2000)
    p.add_argument("--steps", type=int, default=None, help="grid steps (default: the model's, 100 / 50 for sd35)")
    p.add_argument("--shift", type=float, default=None, help="timestep shift k (default: the model's)")
    p.add_argument("--freeze", choices=["drift", "velocity", "denoised"], default=None,
                   help="delayed-drift variant (default: denoised for EDM, velocity for flows)")
    p.add_argument("--prefetch", choices=["nearest", "parent", "none"], default="nearest")
    p.add_argument("--no-leaves", action="store_true", help="evaluate internal nodes only (|I| rows)")
    p.add_argument("--match", choices=["budget", "rows", "none"], default="budget",
                   help="chain length for K=1-only verifiers (rmc): same budget B as the (K, L) tree")
    p.add_argument("--guidance", type=float, default=None)
    p.add_argument("--device", default="cpu")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--alpha", type=float, default=0.01, help="false-failure rate of the exactness verdict")
    p.add_argument("--n-perm", type=int, default=500)
    p.add_argument("--no-innovation", action="store_true")
    p.add_argument("--no-two-sample", action="store_true")
    p.add_argument("--sampler-mutant", default=None, help="a deliberately broken sampler (validation.sampler_mutants)")
    p.add_argument("--figures", default=None, help="directory for PNG sample grids")
    p.add_argument("--json", default=None, help="write all cells' reports to this JSON file")
    p.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default="float32", help="sd35 network dtype")
    p.add_argument("--threads", type=int, default=None)
    p.set_defaults(func=_cmd_e2e)


def _cmd_e2e(args: argparse.Namespace) -> int:
    import torch

    from speccheck.validation import e2e

    if args.threads:
        torch.set_num_threads(args.threads)
    base = e2e.E2EConfig(
        model=args.model, weights=args.weights, embeddings=args.embeddings, samples=args.samples, steps=args.steps,
        shift=args.shift, freeze=args.freeze, prefetch=args.prefetch, leaves=not args.no_leaves, match=args.match,
        guidance=args.guidance, device=args.device, seed=args.seed, alpha=args.alpha, n_perm=args.n_perm,
        innovation=not args.no_innovation, two_sample=not args.no_two_sample, sampler_mutant=args.sampler_mutant,
        figures=args.figures, dtype=args.dtype,
    )
    model = e2e.load_model(base)
    reports, ok = [], True
    for eps in args.eps:
        for ver in args.verifier:
            for K in args.K:
                for L in args.L:
                    cfg = e2e.E2EConfig(**{**base.__dict__, "verifier": ver, "K": K, "L": L, "eps": eps})
                    try:
                        r = e2e.run_e2e(cfg, model)
                    except Exception as exc:  # one broken cell (e.g. a verifier failing to load) must not lose the others
                        r = {"config": cfg.__dict__, "error": f"{type(exc).__name__}: {exc}", "exact": False}
                        print(f"{args.model} {ver} K={K} L={L} eps={eps}: error: {r['error']}", file=sys.stderr, flush=True)
                    else:
                        print(e2e.format_report(r), flush=True)
                    reports.append(r)
                    ok &= r["exact"]
                    if args.json:
                        e2e.write_json(reports, args.json)
    return 0 if ok else 1


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
    p.add_argument("--battery-suite", default=None, help="suite for figure 7's kill matrix (default: smoke; quick: tiny)")
    p.add_argument("--battery-json", default=None, metavar="PATH",
                   help="figure 7: read the battery reports from PATH (`speccheck battery --mutants --json PATH`) "
                        "if it exists, else run them and save them there")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.set_defaults(func=_cmd_figures)


def _cmd_figures(args: argparse.Namespace) -> int:
    from speccheck.figures import render, resolve

    resolve(args.only)  # unknown names -> ValueError (exit 2) before any work
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    if args.no_sweep_run and not args.sweep:
        raise UsageError("--no-sweep-run needs --sweep DIR")
    man = render(args.out, only=args.only, quick=args.quick, sweep_dir=args.sweep, sweep_run=not args.no_sweep_run,
                 seed=args.seed,
                 battery_suite=args.battery_suite, battery_json=args.battery_json,
                 log=lambda m: print(m, flush=True))
    failed = [k for k, v in man["figures"].items() if "error" in v and (not args.only or k in
              {s.stem for s in resolve(args.only)})]
    if failed:
        print(f"speccheck figures: {len(failed)} figure(s) failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    print(f"wrote {args.out}/ (manifest.json lists the files)")
    return 0


# --------------------------------------------------------------------------- verifiers
def _add_verifiers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("verifiers", help="list the available verifiers (built-in and entry points)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--check", metavar="SPEC", help="load SPEC (a name or package.module:attr) and run it once")
    p.set_defaults(func=_cmd_verifiers)


def _cmd_verifiers(args: argparse.Namespace) -> int:
    from speccheck.verifiers import available, get

    if args.check:
        import torch

        v = get(args.check)
        K = 1 if not getattr(v, "supports_K", lambda k: True)(2) else 2
        g = torch.Generator().manual_seed(0)
        s = torch.randn(8, K, generator=g, dtype=torch.float64)
        s_out, accepted, index = v.verify(torch.full((8,), 0.5, dtype=torch.float64), s, g)
        print(f"{getattr(v, 'name', args.check)}: ok (K={K}, accepted {int(accepted.sum())}/8)")
        return 0
    rows = available()
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        width = max(len(n) for n in rows)
        for name, desc in rows.items():
            print(f"{name:<{width}}  {desc}")
    return 0


# --------------------------------------------------------------------------- main
_COMMANDS = [_add_theory, _add_train_digits, _add_speedup, _add_sweep, _add_battery, _add_e2e, _add_figures, _add_verifiers]


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
