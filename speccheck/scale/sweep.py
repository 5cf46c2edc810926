"""Resumable (rule, K, L) speed-up sweeps on the Gaussian-mixture presets, and their summaries.

Moved here from ``speccheck.sampler.experiments`` (which keeps the single-cell runs). A sweep is
a job of ``sweep-cell`` units (:mod:`speccheck.scale.jobs`) stored in a results store; this
module keeps the folder-based entry point (a store inside the folder), the protocol-sensitivity
table and the comparison with the paper's numbers.
"""

from __future__ import annotations

import csv
import os
from dataclasses import asdict
from typing import TYPE_CHECKING, Callable, Iterable, Optional, Sequence

import numpy as np

from speccheck.sampler.experiments import Protocol, preset

if TYPE_CHECKING:
    from speccheck.scale.executors import Executor

# ---------------------------------------------------------------------------- sweeps
STORE_FILE = "sweep.sqlite"


def sweep(proto: Protocol, verifiers: Sequence[str], Ks: Iterable[int], Ls: Iterable[int],
          n_traj: int, seed: int, out_dir: str, cells: Optional[Sequence[tuple[int, int]]] = None,
          log: Optional[Callable[[str], None]] = print, executor: Optional[Executor] = None) -> str:
    """Run every (rule, K, L) cell not yet stored in ``out_dir/sweep.sqlite`` (one unit per cell,
    see :func:`speccheck.scale.jobs.run_sweep`), then write ``summary.csv``/``summary.md`` of every
    stored cell into ``out_dir``. Returns ``out_dir``. (The CSV sweep folders of earlier versions
    are imported into the folder's store on first use.)"""
    from speccheck.scale.jobs import convert_legacy_sweep, run_sweep, sweep_units, write_summary_files

    store = os.path.join(out_dir, STORE_FILE)
    todo = list(cells) if cells is not None else [(K, L) for K in Ks for L in Ls]
    name = f"{proto.target}-{proto.key()}"
    if os.path.exists(os.path.join(out_dir, "trajectories.csv")) and not os.path.exists(store):
        # a CSV folder of an earlier speccheck: its complete cells are imported once, then resumed
        convert_legacy_sweep(out_dir, store, name, expect_spec=sweep_units(proto, verifiers, todo, n_traj, seed)[0])
    run_sweep(proto, verifiers, todo, n_traj, seed, store=store, name=name, executor=executor, log=log)
    write_summary_files(write_summary(out_dir), out_dir)
    return out_dir


def write_summary(out_dir: str) -> list[dict]:
    """Summary rows (one per stored cell) of the sweep in ``out_dir``: its store
    (``sweep.sqlite``) or, for a folder of an earlier speccheck, its ``trajectories.csv``."""
    from speccheck.scale.jobs import load_sweep

    store = os.path.join(out_dir, STORE_FILE)
    if os.path.exists(store):
        return load_sweep(store)[0]
    if os.path.exists(os.path.join(out_dir, "trajectories.csv")):
        return load_sweep(out_dir)[0]
    return []


# ---------------------------------------------------------------------------- protocol sensitivity
PAPER_NUMBERS = {  # D-GRS paper section 5.1 / appendix C.2 (Gaussian mixture, d = 500, eps = 0.1)
    ("rmc", "plateau"): "1.96-2.00",
    ("dgrs", 6, 6): 2.33,
    ("rmc", 6, 6): 1.99,
    ("dgrs", 5, 3): 2.14,   # B = 155
    ("rmc", 5, 3): 1.96,    # B = 155
    ("dgrs", 7, 6): 2.34,
    ("dgrs", "best L=2"): 1.876,
}

SENSITIVITY_PROTOCOLS = {
    # name: (preset, overrides, what changed)
    "paper": ("gmm-paper", {}, "baseline: gmm-paper preset"),
    "paper+freeze=drift": ("gmm-paper", {"freeze": "drift"}, "freeze whole drift (eq. 7)"),
    "paper+freeze=denoised": ("gmm-paper", {"freeze": "denoised"}, "freeze x0_hat"),
    "paper+prefetch=parent": ("gmm-paper", {"prefetch": "parent"}, "prefetch parent"),
    "paper+prefetch=none": ("gmm-paper", {"prefetch": "none"}, "no prefetch (+1 call/round)"),
    "paper+leaves=no": ("gmm-paper", {"leaves": False}, "leaves not evaluated"),
    "paper+grid=flow": ("gmm-paper", {"grid": "flow"}, "flow grid (deterministic ends)"),
    "d512": ("gmm-d512", {}, "baseline: gmm-d512 preset (authors' code)"),
    "d512+freeze=drift": ("gmm-d512", {"freeze": "drift"}, "freeze whole drift"),
    "d512+prefetch=parent": ("gmm-d512", {"prefetch": "parent"}, "prefetch parent"),
    "d512+leaves=yes": ("gmm-d512", {"leaves": True}, "leaves evaluated"),
    "d512+grid=uniform": ("gmm-d512", {"grid": "uniform"}, "uniform grid, all steps stochastic"),
    "d512+eps=0.1": ("gmm-d512", {"eps": 0.1}, "eps 0.1"),
}
SENSITIVITY_CELLS = {"rmc": [(2, 2), (5, 3), (6, 6)], "dgrs": [(5, 3), (6, 6), (7, 6), (7, 2)]}


def sensitivity_table(root: str, out_csv: str, out_md: str) -> list[dict]:
    """Collect ``root/<protocol name>/summary.csv`` of the sensitivity sweeps into one long
    table (csv) and a pivot (markdown: speed-up +- SE per protocol and cell, paper row first)."""
    rows = []
    for name, (pre, over, what) in SENSITIVITY_PROTOCOLS.items():
        path = os.path.join(root, name, "summary.csv")
        if not os.path.exists(path):
            continue
        proto = asdict(preset(pre, **over))
        with open(path) as f:
            for r in csv.DictReader(f):
                rows.append({"protocol": name, "changed": what, **{f"p_{k}": v for k, v in proto.items()},
                             **r})
    if not rows:
        return rows
    with open(out_csv, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    cells = sorted({(r["rule"], int(r["K"]), int(r["L"])) for r in rows}, key=lambda c: (c[0] != "rmc", c[1], c[2]))
    head = "| protocol | " + " | ".join(f"{r} ({k},{l})" for r, k, l in cells) + " |\n"
    sep = "|---" * (len(cells) + 1) + "|\n"
    with open(out_md, "w") as f:
        f.write("Speed-up = stochastic steps / target calls (warm-up included), mean +- SE over the "
                "trajectories of each cell; in brackets: without the warm-up/root calls. RMC cells "
                "run the chain matched to the (K, L) tree per the protocol's chain matching.\n\n")
        f.write(head + sep)
        paper = [PAPER_NUMBERS.get(c, "") for c in cells]
        f.write("| paper (sec. 5.1) | " + " | ".join(str(p) for p in paper) + " |\n")
        for name in SENSITIVITY_PROTOCOLS:
            by = {(r["rule"], int(r["K"]), int(r["L"])): r for r in rows if r["protocol"] == name}
            if not by:
                continue
            vals = []
            for c in cells:
                r = by.get(c)
                vals.append("" if r is None else
                            f"{float(r['speedup']):.3f} +- {float(r['speedup_se']):.3f} "
                            f"[{float(r['speedup_no_warmup']):.2f}]")
            f.write(f"| {name} | " + " | ".join(vals) + " |\n")
        zc = np.array([float(r["calibration_z"]) for r in rows])
        zn = np.array([float(r["nfe_z"]) for r in rows])
        zn = zn[np.isfinite(zn)]
        f.write(f"\nTheory vs measurement over the {len(rows)} cells: acceptance calibration |z| max "
                f"{np.abs(zc).max():.2f} (mean {zc.mean():+.2f}, sd {zc.std():.2f}); measured vs predicted "
                f"NFE (DP with the theoretical acceptance at the measured deltas; z over the bootstrap SE "
                f"of the difference) within 2 SE in {(np.abs(zn) <= 2).sum()} of {zn.size} cells "
                f"(max |z| {np.abs(zn).max():.2f}; cells with zero spread, e.g. prefetch none at L = 2, "
                f"have no z).\n")
    return rows


def paper_comparison(summary_csv: str) -> str:
    """Markdown table: the paper's Gaussian-mixture numbers (section 5.1, appendix C.2) beside
    ours from a sweep's summary.csv (mean +- SE over trajectories)."""
    rows = list(csv.DictReader(open(summary_csv)))
    get = {(r["rule"], int(r["K"]), int(r["L"])): (float(r["speedup"]), float(r["speedup_se"]), r) for r in rows}

    def cell(rule, K, L):
        v = get.get((rule, K, L))
        return "n/a" if v is None else f"{v[0]:.3f} +- {v[1]:.3f}"

    lines = ["| quantity | paper | ours | note |", "|---|---|---|---|"]
    rmc = [(k, v) for k, v in get.items() if k[0] == "rmc" and int(v[2]["B"]) >= 5]
    if rmc:
        m = np.array([v[0] for _, v in rmc])
        lo, hi = min(rmc, key=lambda kv: kv[1][0]), max(rmc, key=lambda kv: kv[1][0])
        lines.append(f"| RMC plateau (cells with B >= 5) | 1.96-2.00 | {m.min():.3f}-{m.max():.3f} "
                     f"(mean of cell means {m.mean():.3f}; typical SE {np.median([v[1] for _, v in rmc]):.3f}) | "
                     f"{len(rmc)} cells; min at {lo[0][1:]}, max at {hi[0][1:]} |")
    for K, L, p_d, p_r, note in ((6, 6, "2.33", "1.99", ""), (5, 3, "2.14", "1.96", "B = 155"),
                                 (7, 6, "2.34", "", "paper's best cell")):
        lines.append(f"| D-GRS ({K},{L}) | {p_d} | {cell('dgrs', K, L)} | {note} |")
        if p_r:
            lines.append(f"| RMC at the same B ({K},{L}) | {p_r} | {cell('rmc', K, L)} | chain matched per protocol |")
    l2 = [(k, v) for k, v in get.items() if k[0] == "dgrs" and k[2] == 2]
    if l2:
        k, v = max(l2, key=lambda kv: kv[1][0])
        lines.append(f"| best D-GRS at L = 2 | 1.876 | {v[0]:.3f} +- {v[1]:.3f} at K = {k[1]} | "
                     "max over K (biased up by selection) |")
    best = [(k, v) for k, v in get.items() if k[0] == "dgrs"]
    if best:
        k, v = max(best, key=lambda kv: kv[1][0])
        lines.append(f"| best D-GRS overall | 2.34 at (7,6) | {v[0]:.3f} +- {v[1]:.3f} at {k[1:]} | |")
    gains = []
    for (rule, K, L), (a, sa, _) in get.items():
        if rule == "rass" and ("dgrs", K, L) in get and K > 1:
            b, sb, _ = get[("dgrs", K, L)]
            r = a / b
            gains.append((r - 1, r * np.hypot(sa / a, sb / b), K, L))
    if gains:
        g = max(gains)
        lines.append(f"| RASS vs D-GRS, max gain over cells | up to +6.4% | {100 * g[0]:+.1f}% +- "
                     f"{100 * g[1]:.1f}% at ({g[2]},{g[3]}) | max over {len(gains)} cells (biased up) |")
        g66 = [x for x in gains if (x[2], x[3]) == (6, 6)]
        if g66:
            lines.append(f"| RASS vs D-GRS at (6,6) | | {100 * g66[0][0]:+.1f}% +- {100 * g66[0][1]:.1f}% | |")
        mean_gain = np.mean([x[0] for x in gains])
        lines.append(f"| RASS vs D-GRS, mean over cells | | {100 * mean_gain:+.1f}% | |")
    return "\n".join(lines) + "\n"
