"""Regenerate validation/gmm_protocol_sensitivity.{csv,md} (issue 5, "Done when" 2).

Runs `speccheck sweep` once per protocol of speccheck.scale.sweep.SENSITIVITY_PROTOCOLS
(resumable; results under --root, default results/protocol-sensitivity) and collects the table.

    python validation/run_gmm_protocol_sensitivity.py [--trajectories 100] [--jobs 2]
"""

import argparse
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

from speccheck.scale.sweep import SENSITIVITY_CELLS, SENSITIVITY_PROTOCOLS, sensitivity_table

FLAG = {"freeze": "--freeze", "prefetch": "--prefetch", "grid": "--grid", "eps": "--eps"}


def commands(root: str, n: int, seed: int) -> list[list[str]]:
    out = []
    for name, (pre, over, _) in SENSITIVITY_PROTOCOLS.items():
        flags = []
        for k, v in over.items():
            if k == "leaves":
                flags.append("--leaves" if v else "--no-leaves")
            else:
                flags += [FLAG[k], str(v)]
        for rule, cells in SENSITIVITY_CELLS.items():
            out.append([sys.executable, "-m", "speccheck.cli", "sweep", "--target", pre, "--verifiers", rule,
                        "--cells", *[f"{k}x{l}" for k, l in cells], "--trajectories", str(n), "--seed", str(seed),
                        "--out", root, "--name", name, *flags])
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default="results/protocol-sensitivity")
    ap.add_argument("--trajectories", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    cmds = commands(args.root, args.trajectories, args.seed)
    # the two rules of one protocol write the same folder: run them one after the other
    pairs = [cmds[i:i + len(SENSITIVITY_CELLS)] for i in range(0, len(cmds), len(SENSITIVITY_CELLS))]

    def run(group):
        for c in group:
            subprocess.run(c, check=True, stdout=subprocess.DEVNULL, env={**os.environ, "OMP_NUM_THREADS": "1"})
        return group[0][group[0].index("--name") + 1]

    with ThreadPoolExecutor(args.jobs) as ex:
        for name in ex.map(run, pairs):
            print("done", name, flush=True)
    here = os.path.dirname(os.path.abspath(__file__))
    sensitivity_table(args.root, os.path.join(here, "gmm_protocol_sensitivity.csv"),
                      os.path.join(here, "gmm_protocol_sensitivity.md"))


if __name__ == "__main__":
    main()
