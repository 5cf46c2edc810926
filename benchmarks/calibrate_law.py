"""False failures of the law layer (L7) on exact rules over seeds, and the gate's printed promise at each seed.

    python benchmarks/calibrate_law.py --rules rmc dgrs rass rass-icdf mcrs mcrs2 --seeds 20
    python benchmarks/calibrate_law.py --suite smoke --seeds 50 --out /tmp/cal.json

Per rule and seed ``s`` the L7 cell of the suite is drawn exactly as a battery run with seed ``s``
draws it (``speccheck.validation.battery.draw_cell``: same plan, same cell seed), then judged twice
from the same raw outputs:

- *alone*: the layer's tests only, Holm over them at the suite's family-wise rate (1e-3 for the
  shipped suites). That is a harder check than the layer inside the whole suite, whose tests run
  at the smaller per-test level of the whole family. An exact rule fails with probability <=
  family_alpha, so over n runs the failures are stochastically below Binomial(n, family_alpha);
  printed: the failures, the smallest Holm p-value per run (a run fails when it is <= family_alpha);
- *in the suite*: at the whole suite's binding per-test level alpha / m (m: every layer's planned
  tests plus the trajectory layer's, counted from that layer's cell at the same seed), the level
  the report's promise is computed at: printed, the promise (PIT sup-distance, acceptance shift)
  at every seed, and its largest value over the seeds.

The thresholds come from the stated rate; nothing here tunes them. Exit 0 when it ran; 1 when an
exact rule failed more often than the one-sided 99.9% binomial bound allows (a calibration defect).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path


def calibrate(rule: str, suite: str, seeds: list[int]) -> dict:
    """Per seed: the L7-alone verdict and smallest Holm p, and the in-suite promise."""
    import torch

    from speccheck.validation import law
    from speccheck.validation.battery import draw_cell, judge_cell, load_verifier, plan_battery, resolve_layers
    from speccheck.validation.battery.plan import fresh_verifier, suite_for
    from speccheck.validation.results import promise_of
    from speccheck.validation.stats import holm_adjust
    from speccheck.validation.suites import load_suite

    v = load_verifier(rule)
    st, _ = suite_for(v, load_suite(suite))
    plan = plan_battery(fresh_verifier(v), st, layers=resolve_layers(None), Ks=None, scale=1.0)
    if plan.get("law") is None:
        raise SystemExit(f"error: suite {suite!r} has no [law] section for {rule!r}")
    cpu = torch.device("cpu")
    alpha = st.family_alpha
    runs = []
    for seed in seeds:
        c0 = time.process_time()
        n_l4 = 0
        if st.trajectory is not None:
            l4c, l4raw = draw_cell(fresh_verifier(v), st, ("L4",), plan=None, base=seed, device=cpu, scale=1.0)
            n_l4 = sum(r.kind == "stat" for r in judge_cell(st, ("L4",), l4c, l4raw, plan=None, base=seed,
                                                            alpha_t=alpha, scale=1.0))
        alpha_suite = alpha / (int(plan["n_stat"]) + n_l4)
        contract, raw = draw_cell(fresh_verifier(v), st, ("L7",), plan=plan, base=seed, device=cpu, scale=1.0)
        alone = judge_cell(st, ("L7",), contract, raw, plan=plan, base=seed,
                           alpha_t=alpha / law.planned_tests(bool(plan["has_acceptance"])), scale=1.0)
        holm_adjust(alone, alpha)
        in_suite = judge_cell(st, ("L7",), contract, raw, plan=plan, base=seed, alpha_t=alpha_suite, scale=1.0)
        promise = promise_of(in_suite, st.power)
        stat = [r for r in alone if r.kind == "stat"]
        runs.append({"seed": seed, "passed": all(r.passed for r in alone),
                     "failed": [f"{r.cell} {r.test}" for r in alone if not r.passed],
                     "min_holm_p": min(float(r.extra.get("p_holm", 1.0)) for r in stat),
                     "suite_level": alpha_suite, "promise_pit": promise.pit if promise else math.nan,
                     "promise_acc": promise.acceptance if promise else math.nan,
                     "rows": promise.rows if promise else 0, "declared_rows": promise.declared_rows if promise else 0,
                     "cpu_s": time.process_time() - c0})
        r = runs[-1]
        print(f"{rule:10s} seed {seed}: {'PASS' if r['passed'] else 'FAIL'}  smallest Holm p {r['min_holm_p']:.3g}  "
              f"promise PIT {r['promise_pit']:.4f} acc {r['promise_acc']:.4f}  CPU {r['cpu_s']:5.1f} s", flush=True)
    return {"rule": rule, "suite": suite, "family_alpha": alpha, "runs": runs}


def binomial_bound(n: int, p: float, level: float = 1e-3) -> int:
    """The largest k with P(Binomial(n, p) >= k) > level: more failures than this is a defect."""
    from scipy import stats

    k = 0
    while stats.binom.sf(k, n, p) > level:  # sf(k) = P(X > k) = P(X >= k + 1)
        k += 1
    return k


def summary(res: dict) -> str:
    runs = res["runs"]
    n, fails = len(runs), sum(not r["passed"] for r in runs)
    pits = [r["promise_pit"] for r in runs if math.isfinite(r["promise_pit"])]
    accs = [r["promise_acc"] for r in runs if math.isfinite(r["promise_acc"])]
    line = (f"{res['rule']:10s} {res['suite']}: {fails} false failures in {n} runs at family_alpha "
            f"{res['family_alpha']:g} (allowed <= {binomial_bound(n, res['family_alpha'])}); smallest Holm p "
            f"{min(r['min_holm_p'] for r in runs):.3g}; promise in the suite: PIT <= {max(pits):.4f}")
    line += f", acceptance <= {max(accs):.4f}" if accs else ", no declared acceptance"
    return line + f"; CPU {sum(r['cpu_s'] for r in runs) / n:.1f} s per seed"


def main(argv: list[str] | None = None) -> int:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", default="gate")
    ap.add_argument("--rules", nargs="+", default=["dgrs", "rmc"])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--first-seed", type=int, default=1000)
    ap.add_argument("--out", default=None, help="write every run as JSON here")
    args = ap.parse_args(argv)
    if args.seeds < 1:
        print("error: --seeds must be >= 1", file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    results = [calibrate(rule, args.suite, seeds) for rule in args.rules]
    for res in results:
        print(summary(res), flush=True)
    if args.out:
        from speccheck.strict_json import dumps

        Path(args.out).write_text(dumps(results, indent=1) + "\n")
    bad = [r for r in results if sum(not x["passed"] for x in r["runs"]) > binomial_bound(len(r["runs"]),
                                                                                          r["family_alpha"])]
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
