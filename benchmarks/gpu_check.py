"""The GPU check in one go (issue 17.6): everything the cuda path needs, each stage's result
written to its own JSON file the moment it finishes (a crash or a timeout keeps what ran).

    python benchmarks/gpu_check.py                       # on a GPU: cuda, full sizes (< 10 min on one H200)
    python benchmarks/gpu_check.py --quick               # CPU dry run, small sizes (< 2 min on 2 cores; CI)
    python benchmarks/gpu_check.py --out validation/reports/gpu

Stages (files ``NN_<stage>.json`` in --out, plus ``summary.json``):
 1. environment: torch, CUDA, device name and memory, deterministic settings, speccheck version;
 2. smoke battery for every built-in rule on the device (``run_battery``);
 3. the mutant matrix on the device (``run_mutants``): every mutant must be killed;
 4. same seed twice: bitwise-equal (s_out, accepted, index) for every rule;
 5. deterministic mode: every rule and one battery under ``torch.use_deterministic_algorithms``;
 6. host syncs per verify call (CUDA's sync debug mode on a GPU; the fake-CUDA counters on CPU);
 7. trials/s at 2^20 and 2^24 rows, delta = 1, K in {1, 4, 16} (--quick: 2^12, 2^14; K in {1, 4});
 8. one 2^24-draw cell per rule, wall time split into device work (drafts + verify) and the
    statistics (KS, tails, acceptance count computed on the device, one sync);
 9. the d = 1024 wrapper layer (L3) on the device;
10. a small end-to-end run (digits-edm, shipped weights) on the device.

Reports say which device made them: CPU and CUDA random streams differ, so bitwise equality is
only promised for the same seed on the same device. Exit code: 0 every stage passed, 1 a stage
found a defect, 2 the check could not run as asked (e.g. --device cuda without CUDA).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
import traceback
from dataclasses import replace
from pathlib import Path
from typing import Callable

# cuBLAS needs a fixed workspace for deterministic matmuls: set before CUDA initialises
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import torch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RULES = ["rmc", "dgrs", "rass", "rass-icdf", "mcrs", "mcrs2"]


def _json_default(x: object) -> object:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if hasattr(x, "tolist"):
        return x.tolist()
    return str(x)


def _write(out: Path, index: int, stage: str, payload: dict) -> Path:
    path = out / f"{index:02d}_{stage}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(payload, indent=1, default=_json_default, allow_nan=False))
    os.replace(tmp, path)
    return path


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _rule_K(rule: str, K: int) -> int:
    return 1 if rule == "rmc" else K


def _failures(rep: object) -> list[str]:
    """The first failed tests of a battery report (``failures`` is a method or a property)."""
    failed = getattr(rep, "failures", [])
    failed = failed() if callable(failed) else failed
    return [f"{r.cell} {r.test}: {r.note}" for r in failed][:10]


def _quick_suite(base: str, quick: bool, *, scalar: bool = True, wrapper_dims: list[int] | None = None,
                 trajectory: bool = True):
    """The shipped ``base`` suite, shrunk for --quick, with layers switched off as asked."""
    from speccheck.validation.suites import load_suite

    st = load_suite(base)
    changes: dict = {}
    if quick:
        changes["name"] = f"{base}-quick"
        if st.scalar is not None:
            changes["scalar"] = replace(st.scalar, deltas=[1.0], K=[1, 2], n=4096, extra=[])
        if st.wrapper is not None:
            changes["wrapper"] = replace(st.wrapper, dims=[2], n=1024)
        changes["trajectory"] = None
        changes["continuous"] = None
        changes["contract_n"] = 64
    if not scalar:
        changes["scalar"] = None
        changes["continuous"] = None
    if wrapper_dims is not None and st.wrapper is not None:
        changes["wrapper"] = replace(changes.get("wrapper", st.wrapper), dims=wrapper_dims)
    if not trajectory:
        changes["trajectory"] = None
    return replace(st, **changes)


# ----------------------------------------------------------------------------------- stages
def stage_environment(device: torch.device, quick: bool) -> dict:
    import speccheck

    info = {"python": platform.python_version(), "torch": torch.__version__, "device": str(device),
            "cuda_available": torch.cuda.is_available(), "quick": quick,
            "speccheck": getattr(speccheck, "__version__", "unknown"),
            "cublas_workspace_config": os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
            "deterministic_default": torch.are_deterministic_algorithms_enabled(),
            "cpu_threads": torch.get_num_threads()}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        free, total = torch.cuda.mem_get_info(device)
        info.update(gpu=props.name, capability=f"{props.major}.{props.minor}", memory_gb=total / 2**30,
                    free_gb=free / 2**30, cuda=torch.version.cuda)
    return {"passed": True, **info}


def stage_battery(device: torch.device, quick: bool, seed: int) -> dict:
    from speccheck.validation.battery import run_battery

    suite = _quick_suite("smoke", quick)
    rows = {}
    for rule in RULES:
        t0 = time.perf_counter()
        rep = run_battery(rule, suite, device=str(device), seed=seed)
        rows[rule] = {"passed": rep.passed, "wall_s": time.perf_counter() - t0, "tests": len(rep.results),
                      "failures": _failures(rep)}
    return {"passed": all(r["passed"] for r in rows.values()), "suite": suite.name, "rules": rows}


def stage_mutants(device: torch.device, quick: bool, seed: int) -> dict:
    from speccheck.validation.mutants import run_mutants

    suite = _quick_suite("smoke", quick)
    names = ["rmc-fresh", "dgrs-stale_lambda", "rass-weights_Km1"] if quick else None
    t0 = time.perf_counter()
    reports = run_mutants(suite, names=names, device=str(device), seed=seed)
    killed = {name: (not rep.passed) for name, rep in reports.items()}
    # --quick runs a tiny suite: the matrix is recorded, not judged (its power is too low)
    return {"passed": quick or all(killed.values()), "judged": not quick, "wall_s": time.perf_counter() - t0,
            "killed": killed, "n_killed": sum(killed.values()), "n_mutants": len(killed)}


def _verify_once(rule: str, K: int, delta: float, B: int, device: torch.device, seed: int) -> tuple:
    from speccheck.verifiers import get

    g = torch.Generator(device=device).manual_seed(seed)
    s = torch.randn(B, K, generator=g, dtype=torch.float64, device=device)
    d = torch.full((B,), delta, dtype=torch.float64, device=device)
    if rule != "mcrs":  # two groups (mcrs: its shipped policies cover the constant deltas only)
        d[: B // 4] = 0.5 * delta
    return get(rule).verify(d, s, g)


def stage_same_seed(device: torch.device, quick: bool, seed: int) -> dict:
    B = 1 << (12 if quick else 16)
    rows = {}
    for rule in RULES:
        for K in sorted({_rule_K(rule, k) for k in ((1, 4) if quick else (1, 4, 16))}):
            for delta in (0.001, 1.0, 10.0):
                a = _verify_once(rule, K, delta, B, device, seed)
                b = _verify_once(rule, K, delta, B, device, seed)
                rows[f"{rule},K={K},delta={delta:g}"] = all(torch.equal(x, y) for x, y in zip(a, b))
    return {"passed": all(rows.values()), "batch": B, "bitwise_equal": rows}


def stage_deterministic(device: torch.device, quick: bool, seed: int) -> dict:
    from speccheck.validation.battery import run_battery

    B = 1 << (12 if quick else 16)
    rows: dict[str, object] = {}
    previous = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        for rule in RULES:
            for K in sorted({_rule_K(rule, k) for k in ((1, 4) if quick else (1, 4, 16))}):
                try:
                    a = _verify_once(rule, K, 1.0, B, device, seed)
                    b = _verify_once(rule, K, 1.0, B, device, seed)
                    rows[f"{rule},K={K}"] = all(torch.equal(x, y) for x, y in zip(a, b))
                except RuntimeError as exc:  # an op without a deterministic implementation
                    rows[f"{rule},K={K}"] = f"raised: {exc}"
        suite = _quick_suite("smoke", True, trajectory=not quick)
        rep = run_battery("dgrs", suite, device=str(device), seed=seed)
        rows["battery:dgrs"] = rep.passed
    finally:
        torch.use_deterministic_algorithms(previous)
    return {"passed": all(v is True for v in rows.values()), "results": rows}


def _count_syncs_cuda(rule: str, K: int, delta: float, B: int, device: torch.device, seed: int) -> int:
    import warnings

    _verify_once(rule, K, delta, B, device, seed)
    _sync(device)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            _verify_once_prepared(rule, K, delta, B, device, seed)
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return sum("synchroniz" in str(w.message) for w in caught)


def _verify_once_prepared(rule: str, K: int, delta: float, B: int, device: torch.device, seed: int) -> None:
    """Like _verify_once, but the inputs are made before the counted call (no factory syncs)."""
    from speccheck.verifiers import get

    v = get(rule)
    g = torch.Generator(device=device).manual_seed(seed)
    s = torch.randn(B, K, generator=g, dtype=torch.float64, device=device)
    d = torch.full((B,), delta, dtype=torch.float64, device=device)
    _sync(device)
    v.verify(d, s, g)


def _count_syncs_fake(rule: str, K: int, delta: float, B: int, seed: int) -> int | None:
    """Host syncs of one verify call of B rows under the fake-CUDA emulation (bench_verifiers')."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_verifiers import count_call

    counted = count_call(rule, K, delta, B, seed)
    return None if counted is None else counted[1]


def stage_syncs(device: torch.device, quick: bool, seed: int) -> dict:
    sizes = [1 << 12, 1 << 14] if quick else [1 << 16, 1 << 22]
    rows = {}
    ok = True
    for rule in RULES:
        for K in sorted({_rule_K(rule, k) for k in ((1, 4) if quick else (1, 4, 16))}):
            for delta in (0.001, 1.0, 10.0):
                counts = []
                for B in sizes:
                    if device.type == "cuda":
                        counts.append(_count_syncs_cuda(rule, K, delta, B, device, seed))
                    else:
                        counts.append(_count_syncs_fake(rule, K, delta, B, seed))
                key = f"{rule},K={K},delta={delta:g}"
                rows[key] = dict(zip([str(b) for b in sizes], counts))
                if None not in counts and rule != "mcrs":  # mcrs: its owner's kernel (reported, not judged)
                    ok = ok and counts[1] <= counts[0] + 4
    method = "cuda sync debug mode" if device.type == "cuda" else "fake-CUDA emulation"
    return {"passed": ok, "method": method, "sizes": sizes, "syncs_per_call": rows,
            "rule": "syncs(largest) <= syncs(smallest) + 4 (mcrs reported only)"}


def _throughput(rule: str, K: int, B: int, device: torch.device, seed: int, repeat: int) -> float:
    from speccheck.verifiers import get

    v = get(rule)
    g = torch.Generator(device=device).manual_seed(seed)
    s = torch.randn(B, K, generator=g, dtype=torch.float64, device=device)
    d = torch.full((B,), 1.0, dtype=torch.float64, device=device)
    v.verify(d, s, g)
    _sync(device)
    best = math.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        v.verify(d, s, g)
        _sync(device)
        best = min(best, time.perf_counter() - t0)
    return B / best


def stage_throughput(device: torch.device, quick: bool, seed: int) -> dict:
    sizes = [1 << 12, 1 << 14] if quick else [1 << 20, 1 << 24]
    rows: dict[str, object] = {}
    for rule in RULES:
        for K in sorted({_rule_K(rule, k) for k in ((1, 4) if quick else (1, 4, 16))}):
            for B in sizes:
                try:
                    rows[f"{rule},K={K},B={B}"] = _throughput(rule, K, B, device, seed, 1 if quick else 3)
                except Exception as exc:  # noqa: BLE001 - e.g. a policy that is not shipped: recorded
                    rows[f"{rule},K={K},B={B}"] = f"{type(exc).__name__}: {exc}"
    return {"passed": all(isinstance(v, float) for v in rows.values()), "delta": 1.0, "trials_per_s": rows}


def stage_big_cell(device: torch.device, quick: bool, seed: int) -> dict:
    """One (delta = 1, K = 4) cell of 2^24 draws per rule: device work vs statistics."""
    from scipy import special

    from speccheck.validation import device_stats as ds
    from speccheck.validation.stats import binom_test, dkw_threshold
    from speccheck.verifiers import get

    n = 1 << (16 if quick else 24)
    chunk = min(n, 1 << 22)
    delta, alpha = 1.0, 1e-3
    rows = {}
    ok = True
    for rule in RULES:
        K = _rule_K(rule, 4)
        v = get(rule)
        g = torch.Generator(device=device).manual_seed(seed)
        _sync(device)
        t0 = time.perf_counter()
        outs, accs = [], []
        for start in range(0, n, chunk):
            b = min(chunk, n - start)
            s = torch.randn(b, K, generator=g, dtype=torch.float64, device=device)
            d = torch.full((b,), delta, dtype=torch.float64, device=device)
            s_out, accepted, _ = v.verify(d, s, g)
            outs.append(s_out)
            accs.append(accepted)
        _sync(device)
        t1 = time.perf_counter()
        x = torch.cat(outs)
        cdf = ds.normal_cdf(delta)
        finite, D, k_lo, k_hi, n_acc = ds.fetch(ds.all_finite(x), ds.ks_statistic(x, cdf), ds.tail_counts(x, cdf, 0.01),
                                                ds.acceptance_count(torch.cat(accs)))
        t2 = time.perf_counter()
        a_th = float(v.acceptance([delta], K)[0])
        acc_test = binom_test(int(n_acc), n, a_th, alpha)
        ks_ok = bool(finite) and D <= dkw_threshold(n, alpha)
        rows[rule] = {"K": K, "n": n, "device_work_s": t1 - t0, "statistics_s": t2 - t1, "ks": D,
                      "ks_threshold": dkw_threshold(n, alpha), "tails": [k_lo, k_hi],
                      "tail_expected": 0.01 * n, "acceptance": n_acc / n, "acceptance_theory": a_th,
                      "acceptance_ok": acc_test.passed, "ks_ok": ks_ok,
                      "phi_check": float(special.ndtr(0.0))}
        ok = ok and ks_ok and acc_test.passed
        del x, outs, accs
    return {"passed": ok, "delta": delta, "alpha_per_test": alpha, "cells": rows}


def stage_wrapper(device: torch.device, quick: bool, seed: int) -> dict:
    from speccheck.validation.battery import run_battery

    suite = _quick_suite("smoke", quick, scalar=False, wrapper_dims=[64 if quick else 1024], trajectory=False)
    rows = {}
    for rule in ("dgrs", "rass"):
        t0 = time.perf_counter()
        rep = run_battery(rule, suite, device=str(device), seed=seed)
        rows[rule] = {"passed": rep.passed, "wall_s": time.perf_counter() - t0,
                      "failures": _failures(rep)}
    return {"passed": all(r["passed"] for r in rows.values()), "dims": suite.wrapper.dims, "rules": rows}


def stage_e2e(device: torch.device, quick: bool, seed: int) -> dict:
    from speccheck.validation.e2e import E2EConfig, run_e2e

    cfg = E2EConfig(model="digits-edm", verifier="dgrs", K=2, L=3, samples=64 if quick else 512,
                    steps=8 if quick else None, n_perm=2000, device=str(device), seed=seed, figures=None)
    t0 = time.perf_counter()
    rep = run_e2e(cfg)
    exact = rep.get("exact") if isinstance(rep, dict) else None
    keep = {k: v for k, v in (rep.items() if isinstance(rep, dict) else ())
            if isinstance(v, (bool, int, float, str)) or v is None}
    return {"passed": exact is not False, "wall_s": time.perf_counter() - t0, "samples": cfg.samples, **keep}


STAGES: list[tuple[str, Callable]] = [
    ("battery", stage_battery), ("mutants", stage_mutants), ("same_seed", stage_same_seed),
    ("deterministic", stage_deterministic), ("syncs", stage_syncs), ("throughput", stage_throughput),
    ("big_cell", stage_big_cell), ("wrapper", stage_wrapper), ("e2e", stage_e2e),
]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="CPU dry run with small sizes (default device cpu)")
    ap.add_argument("--device", default=None, help="cuda (default) or cpu; --quick defaults to cpu")
    ap.add_argument("--out", default=None, help="folder for the JSON files (default validation/reports/gpu, "
                    "or a temporary folder with --quick)")
    ap.add_argument("--seed", type=int, default=20261201)
    ap.add_argument("--only", nargs="*", default=None, help=f"stages to run: {[s for s, _ in STAGES]}")
    args = ap.parse_args(argv)
    device_name = args.device or ("cpu" if args.quick else "cuda")
    if device_name.startswith("cuda") and not torch.cuda.is_available():
        print(f"gpu_check: --device {device_name} requested but CUDA is not available (use --quick for the CPU dry "
              "run, or --device cpu)", file=sys.stderr)
        return 2
    try:
        device = torch.device(device_name)
    except RuntimeError as exc:
        print(f"gpu_check: --device {device_name!r} is not a device ({exc}); use cpu or cuda[:N]", file=sys.stderr)
        return 2
    unknown = [s for s in (args.only or []) if s not in dict(STAGES)]
    if unknown:
        print(f"gpu_check: unknown stage(s) {unknown}; choose from {[s for s, _ in STAGES]}", file=sys.stderr)
        return 2
    if args.out:
        out = Path(args.out)
    elif args.quick:
        import tempfile

        out = Path(tempfile.mkdtemp(prefix="gpu_check_"))
    else:
        out = ROOT / "validation" / "reports" / "gpu"
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    summary = {"device": str(device), "quick": args.quick, "seed": args.seed, "stages": {}}
    env = stage_environment(device, args.quick)
    _write(out, 1, "environment", env)
    print(f"[gpu_check] environment: torch {env['torch']} on {device} -> {out}", flush=True)
    for i, (name, fn) in enumerate(STAGES, start=2):
        if args.only and name not in args.only:
            continue
        t0 = time.perf_counter()
        try:
            payload = fn(device, args.quick, args.seed)
        except Exception as exc:  # noqa: BLE001 - recorded as a failed stage, the others still run
            payload = {"passed": False, "error": f"{type(exc).__name__}: {exc}",
                       "traceback": traceback.format_exc(limit=8)}
        payload["stage_wall_s"] = time.perf_counter() - t0
        payload["device"] = str(device)
        _write(out, i, name, payload)
        summary["stages"][name] = {"passed": payload["passed"], "wall_s": payload["stage_wall_s"]}
        print(f"[gpu_check] {name:<13} {'ok  ' if payload['passed'] else 'FAIL'} {payload['stage_wall_s']:7.1f} s"
              + (f"  {payload['error']}" if "error" in payload else ""), flush=True)
    summary["wall_s"] = time.perf_counter() - t_start
    summary["passed"] = all(s["passed"] for s in summary["stages"].values())
    _write(out, 99, "summary", summary)
    print(f"[gpu_check] {'all stages passed' if summary['passed'] else 'some stages FAILED'} in "
          f"{summary['wall_s']:.0f} s; JSON in {out}", flush=True)
    return 0 if summary["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
