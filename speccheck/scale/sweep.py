"""Resumable (rule, K, L) speed-up sweeps on the Gaussian-mixture presets, and their summaries.

Moved here from ``speccheck.sampler.experiments`` (which keeps the single-cell runs): sweeps are
heavy, multi-cell jobs and belong with the scale-out machinery.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
from dataclasses import asdict
from typing import Iterable, Optional, Sequence

import numpy as np

from speccheck.sampler.core import resolve_verifier, verifier_name
from speccheck.sampler.experiments import Protocol, preset, run_cells
from speccheck.targets.gmm import gmm_preset

# ---------------------------------------------------------------------------- sweeps
TRAJ_FIELDS = ["rule", "K", "L", "tree", "B", "rows_per_round", "seed", "traj", "nfe", "root_calls",
               "det_calls", "rounds", "accepted", "verified", "stochastic_steps", "speedup"]


def _cell_seed(seed: int, rule: str, K: int) -> int:
    h = hashlib.sha1(f"{seed}/{rule}/{K}".encode()).hexdigest()
    return int(h[:8], 16)


def sweep(proto: Protocol, verifiers: Sequence[str], Ks: Iterable[int], Ls: Iterable[int],
          n_traj: int, seed: int, out_dir: str, cells: Optional[Sequence[tuple[int, int]]] = None,
          log=print) -> str:
    """Run every (rule, K, L) cell not yet complete in ``out_dir``; append one row per trajectory
    to trajectories.csv (resumable), then rewrite summary.csv / summary.md. Returns out_dir."""
    os.makedirs(out_dir, exist_ok=True)
    ppath = os.path.join(out_dir, "protocol.json")
    if os.path.exists(ppath):
        old = json.load(open(ppath))
        mine = {**asdict(proto), "seed": seed}
        diff = {k: (old.get(k), v) for k, v in mine.items() if old.get(k) != v}
        if diff:
            raise ValueError(f"{out_dir} holds a sweep with another protocol (old, new): {diff}; "
                             "use another --name or --out")
    with open(ppath, "w") as f:
        json.dump({**asdict(proto), "seed": seed, "trajectories": n_traj,
                   "schedule": proto.schedule().describe(),
                   "mixture_seed": gmm_preset(proto.target).seed}, f, indent=2)
    path = os.path.join(out_dir, "trajectories.csv")
    done = _done_cells(path, n_traj)
    todo = list(cells) if cells is not None else [(K, L) for K in Ks for L in Ls]
    summ_path = os.path.join(out_dir, "cells.jsonl")
    for rule in verifiers:
        ver = resolve_verifier(rule)
        name = verifier_name(ver)
        byK: dict[int, list[int]] = {}
        for K, L in todo:
            if (name, K, L) not in done:
                byK.setdefault(K, []).append(L)
        for K, Lrem in sorted(byK.items()):
            rows, summaries = run_cells(proto, ver, K, sorted(Lrem), n_traj, _cell_seed(seed, name, K))
            # a crash mid-write leaves an incomplete cell, which is re-run (and de-duplicated)
            new = not os.path.exists(path)
            with open(path, "a", newline="") as f:
                w = csv.DictWriter(f, fieldnames=TRAJ_FIELDS)
                if new:
                    w.writeheader()
                w.writerows(rows)
            with open(summ_path, "a") as f:
                for s in summaries:
                    f.write(json.dumps(s) + "\n")
            for s in summaries:
                log(f"{name} K={K} L={s['L']}: speedup {s['speedup']:.3f} +- {s['speedup_se']:.3f} "
                    f"(predicted {s['predicted_speedup']:.3f}, z_cal {s['calibration_z']:+.2f})")
    write_summary(out_dir)
    return out_dir


def _done_cells(path: str, n_traj: int) -> set:
    if not os.path.exists(path):
        return set()
    counts: dict = {}
    with open(path) as f:
        for r in csv.DictReader(f):
            key = (r["rule"], int(r["K"]), int(r["L"]))
            counts.setdefault(key, set()).add(int(r["traj"]))
    return {k for k, v in counts.items() if len(v) >= n_traj}


def write_summary(out_dir: str) -> list[dict]:
    """summary.csv/.md: per cell, from trajectories.csv (speed-up mean and SE) and the latest
    theory record in cells.jsonl (prediction, calibration)."""
    path = os.path.join(out_dir, "trajectories.csv")
    if not os.path.exists(path):
        return []
    cells: dict = {}
    with open(path) as f:
        for r in csv.DictReader(f):
            key = (r["rule"], int(r["K"]), int(r["L"]))
            cells.setdefault(key, {})[int(r["traj"])] = (float(r["speedup"]), float(r["nfe"]), r)
    theory = {}
    sp = os.path.join(out_dir, "cells.jsonl")
    if os.path.exists(sp):
        with open(sp) as f:
            for line in f:
                s = json.loads(line)
                theory[(s["rule"], s["K"], s["L"])] = s
    out = []
    for key in sorted(cells):
        vals = np.array([v[0] for v in cells[key].values()])
        nfe = np.array([v[1] for v in cells[key].values()])
        r0 = next(iter(cells[key].values()))[2]
        th = theory.get(key, {})
        out.append({"rule": key[0], "K": key[1], "L": key[2], "tree": r0["tree"], "B": int(r0["B"]),
                    "trajectories": vals.size, "speedup": vals.mean(),
                    "speedup_se": vals.std(ddof=1) / np.sqrt(vals.size) if vals.size > 1 else float("nan"),
                    "nfe_mean": nfe.mean(),
                    "predicted_nfe": th.get("predicted_nfe", float("nan")),
                    "predicted_speedup": th.get("predicted_speedup", float("nan")),
                    "speedup_no_warmup": th.get("speedup_no_warmup", float("nan")),
                    "acceptance": th.get("acceptance", float("nan")),
                    "calibration_z": th.get("calibration_z", float("nan")),
                    "nfe_z": th.get("nfe_z", float("nan")),
                    "nfe_gap_se": th.get("nfe_gap_se", float("nan"))})
    if out:
        with open(os.path.join(out_dir, "summary.csv"), "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(out[0]))
            w.writeheader()
            w.writerows(out)
        with open(os.path.join(out_dir, "summary.md"), "w") as f:
            f.write("speed-up = stochastic steps / target calls (warm-up included); mean +- SE over "
                    "trajectories; predicted = DP of speccheck.theory.expected_nfe with measured "
                    "per-(step, depth) acceptance\n\n")
            f.write("| rule | K | L | tree | B | speed-up | SE | predicted | no warm-up | acceptance | z_cal | z_nfe |\n")
            f.write("|---|---|---|---|---|---|---|---|---|---|---|---|\n")
            for r in out:
                f.write(f"| {r['rule']} | {r['K']} | {r['L']} | {r['tree']} | {r['B']} | {r['speedup']:.3f} | "
                        f"{r['speedup_se']:.3f} | {r['predicted_speedup']:.3f} | {r['speedup_no_warmup']:.3f} | "
                        f"{r['acceptance']:.3f} | {r['calibration_z']:+.2f} | {r['nfe_z']:+.2f} |\n")
    return out


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
        lines.append(f"| best D-GRS at L = 2 | 1.876 | {v[0]:.3f} +- {v[1]:.3f} at K = {k[1]} | max over K (biased up by selection) |")
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
        lines.append(f"| RASS vs D-GRS, max gain over cells | up to +6.4% | {100 * g[0]:+.1f}% +- {100 * g[1]:.1f}% at ({g[2]},{g[3]}) | max over {len(gains)} cells (biased up) |")
        g66 = [x for x in gains if (x[2], x[3]) == (6, 6)]
        if g66:
            lines.append(f"| RASS vs D-GRS at (6,6) | | {100 * g66[0][0]:+.1f}% +- {100 * g66[0][1]:.1f}% | |")
        mean_gain = np.mean([x[0] for x in gains])
        lines.append(f"| RASS vs D-GRS, mean over cells | | {100 * mean_gain:+.1f}% | |")
    return "\n".join(lines) + "\n"
