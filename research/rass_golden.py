"""The issue-38 golden table of RASS's certified optimum (K x delta), checked at high precision.

    python -m research.rass_golden [--K 2 3 ...] [--delta ...]   # rewrites tests/theory/data/rass_golden.csv
    python -m research.rass_golden --cells 64:1e-30 8:1e-4     # just these cells (merged into the file)

For every cell (K in 2..16, 17, 24, 32, 48, 64, 96, 128; delta in DELTAS) the package's full
solve ``rank_weight_solution(delta, K)`` (cold: a fresh process per run, the shipped tables as
the package holds them) gives weights (as deviations eps = omega - 1/K, stored exactly as hex
floats; where the solution carries an expansion, ``deviation_expansion``, each deviation as its
components joined by "+", each a hex float: a "+" before "0x" or "-0x" separates), the reported
1 - A and the certified gap. Independently, with mpmath at
max(60, 40 - log10(delta) + log10(1 + max|eps| / delta)) digits (research/reference.py: crossings
refined by Newton from the float ones, order-statistic masses as binomial sums):

- ``rass_rejection_mp``: 1 - A at exactly those weights (omega_r = 1/K + eps_r in full precision);
- ``dgrs_rejection_mp``: D-GRS's 1 - A = G_{K+1} by the exact recursion.

Columns ``reported_rel_err`` = |reported - mp| / mp and ``gap_rel`` = gap / mp. The CI test
(tests/theory/test_rass_golden.py) reads this file; it re-solves only a subset of cells.
"""

from __future__ import annotations

import argparse
import csv
import math
import time
from pathlib import Path

import mpmath as mp
import numpy as np

from research.reference import mp_acceptance_dgrs, mp_rass_at

OUT = Path(__file__).resolve().parents[1] / "tests" / "theory" / "data" / "rass_golden.csv"
KS = list(range(2, 17)) + [17, 24, 32, 48, 64, 96, 128]
# the smallest positive normal double (below it delta and 1 - A are subnormal), and the list of issue 38
DELTAS = [2.2250738585072014e-308, 1e-300, 1e-30, 1e-14, 1e-8, 1e-4, 0.01, 0.1, 1.0, 4.0, 40.0]
FIELDS = ["K", "delta", "deviation_hex", "rass_rejection", "rass_gap", "rass_rejection_mp", "dgrs_rejection_mp",
          "reported_rel_err", "gap_rel", "solve_cpu_s"]


def _hex(components: np.ndarray) -> str:
    """One deviation as hex floats: its leading component, then "+" and each nonzero further one."""
    return "+".join(float(x).hex() for x in [components[0], *components[1:][components[1:] != 0.0]])


def cell(K: int, d: float) -> dict:
    from speccheck.theory import rank_weight_solution

    t0 = time.process_time()
    sol = rank_weight_solution(d, K)
    cpu = time.process_time() - t0
    expansion = sol.deviation_expansion  # (m, K): the exact deviations are the column sums
    # digits: 40 beyond 1 - A's scale delta, plus the cancellation of deviations up to max|eps| >> delta
    dps = max(60, int(40 - math.log10(d) + math.log10(1.0 + float(np.abs(sol.deviation).max()) / d)))
    with mp.workdps(dps):
        md = mp.mpf(d)
        omega = [mp.mpf(1) / K + mp.fsum(mp.mpf(float(x)) for x in expansion[:, r]) if (1.0 / K + e) > 1e-15
                 else mp.mpf(0) for r, e in enumerate(sol.deviation)]
        total = mp.fsum(omega)
        omega = [w / total for w in omega]
        res = mp_rass_at(omega, md, [mp.mpf(float(c)) for c in sol.crossings])
        rej = res["rejection"]
        dgrs = 1 - mp_acceptance_dgrs(md, K)
        rel = abs(mp.mpf(sol.rejection) - rej) / rej if rej > 0 else mp.mpf(0)
        return {"K": K, "delta": repr(d), "deviation_hex": " ".join(_hex(col) for col in expansion.T),
                "rass_rejection": repr(sol.rejection), "rass_gap": repr(sol.gap),
                "rass_rejection_mp": mp.nstr(rej, 20), "dgrs_rejection_mp": mp.nstr(dgrs, 20),
                "reported_rel_err": mp.nstr(rel, 3),
                "gap_rel": mp.nstr(mp.mpf(sol.gap) / rej if rej > 0 else 0, 3), "solve_cpu_s": f"{cpu:.3f}"}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--K", type=int, nargs="+", default=KS)
    ap.add_argument("--delta", type=float, nargs="+", default=DELTAS)
    ap.add_argument("--cells", nargs="+", default=None, metavar="K:DELTA",
                    help="these (K, delta) cells only, e.g. 64:1e-30 (instead of --K x --delta)")
    ap.add_argument("--out", type=Path, default=OUT, help="CSV to merge the cells into (default: the golden file)")
    args = ap.parse_args()
    cells = ([(int(c.split(":")[0]), float(c.split(":")[1])) for c in args.cells] if args.cells
             else [(K, d) for K in args.K for d in args.delta])
    out = args.out
    done = {}
    if out.exists():
        with out.open() as fh:
            done = {(int(r["K"]), float(r["delta"])): r for r in csv.DictReader(x for x in fh if not x.startswith("#"))}
    for K, d in cells:
        row = cell(K, d)
        done[(K, d)] = row
        print(K, d, *(row[k] for k in FIELDS[3:]), flush=True)
        with out.open("w", newline="") as fh:
            fh.write("# RASS golden cells (issue 38) by research/rass_golden.py: the package's full solve,\n"
                     f"# and 1 - A at its weights and D-GRS's 1 - A by mpmath {mp.__version__} at\n"
                     "# max(60, 40 - log10(delta) + log10(1 + max|eps| / delta)) digits (research/reference.py)\n")
            w = csv.DictWriter(fh, FIELDS, lineterminator="\n")
            w.writeheader()
            for key in sorted(done):
                w.writerow(done[key])


if __name__ == "__main__":
    main()
