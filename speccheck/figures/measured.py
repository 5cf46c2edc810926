"""Measured speed-up figures (4 overlay, 5, 6) from a sampler sweep on the Gaussian mixture.

The data come from a sweep job in a results store (:func:`speccheck.scale.jobs.run_sweep`;
resumable: a store or folder can be reused with ``--sweep``); the tables here are per-cell summaries of that sweep: mean
speed-up over trajectories, its standard error, the B of the tree (or matched chain) that ran,
and the sampler's own theory prediction (DP with measured acceptance).
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from speccheck.figures.base import FigureConfig, FigureData
from speccheck.figures.style import (
    OKABE_ITO,
    ORDERED_CMAP,
    ORDERED_LINES_CMAP,
    RULE_COLORS,
    RULE_LABELS,
    RULE_MARKERS,
    Table,
    new_figure,
)
from speccheck.figures.theory_figs import (
    FRONTIER_DELTAS,
    FRONTIER_N,
    FRONTIER_WARMUP,
    compute_frontier_theory,
)

if TYPE_CHECKING:
    from matplotlib.figure import Figure


@dataclass(frozen=True)
class SweepSpec:
    """Which sweep the measured figures use (the D-GRS paper's section 5.1 grid by default)."""

    target: str = "gmm-paper"
    rules: tuple[str, ...] = ("rmc", "dgrs", "rass")
    Ks: tuple[int, ...] = tuple(range(1, 8))
    Ls: tuple[int, ...] = tuple(range(2, 8))
    n_traj: int = 100
    seed: int = 0


SWEEP_FULL = SweepSpec()
SWEEP_QUICK = SweepSpec(Ks=(1, 2), Ls=(2, 3), n_traj=3)

CELL_COLUMNS = ("rule", "K", "L", "tree", "B", "trajectories", "speedup", "speedup_se",
                "predicted_speedup", "acceptance", "calibration_z")


def sweep_spec(cfg: FigureConfig) -> SweepSpec:
    spec = SWEEP_QUICK if cfg.quick else SWEEP_FULL
    if cfg.seed:
        from dataclasses import replace

        spec = replace(spec, seed=int(cfg.seed))
    return spec


def measured_cells(cfg: FigureConfig) -> tuple[Table, dict]:
    """Run (or resume) the sweep and return its per-cell summary as a Table, plus the protocol.

    ``cfg.sweep_dir``: a results-store file, a folder (its ``sweep.sqlite`` store is created or
    resumed) or a CSV sweep folder of an earlier speccheck (read only). Cached in ``cfg.cache`` so
    figures 4-6 share one sweep per run."""
    spec = sweep_spec(cfg)
    key = ("sweep", spec)
    if key in cfg.cache:
        return cfg.cache[key]
    from dataclasses import asdict

    from speccheck.errors import FileFormatError
    from speccheck.sampler.experiments import preset
    from speccheck.scale.jobs import export_trajectories, load_sweep, run_sweep

    proto = preset(spec.target)
    where = cfg.sweep_dir
    if where is None:  # removed by render() at the end of the run
        where = tempfile.mkdtemp(prefix="speccheck-figures-sweep-")
        cfg.cache.setdefault("_tmp_dirs", []).append(where)
    legacy = (os.path.isdir(where) and os.path.exists(os.path.join(where, "trajectories.csv"))
              and not os.path.exists(os.path.join(where, "sweep.sqlite")))
    store = where if os.path.isfile(where) or legacy else os.path.join(where, "sweep.sqlite")
    job = f"{spec.target}-{proto.key()}-n{spec.n_traj}-seed{spec.seed}"
    if not cfg.sweep_run and not os.path.exists(store):
        raise FileFormatError(f"--sweep {where}: no sweep there (a results store file, a folder with sweep.sqlite, "
                              "or a CSV sweep folder); drop --no-sweep-run to run it")
    if cfg.sweep_run and not legacy:
        cfg.log(f"[figures] sweep {spec.rules} K={list(spec.Ks)} L={list(spec.Ls)} x {spec.n_traj} trajectories "
                f"on {spec.target} -> {store}")
        cells = [(K, L) for K in spec.Ks for L in spec.Ls]
        run_sweep(proto, list(spec.rules), cells, spec.n_traj, spec.seed, store=store, name=job,
                  log=lambda m: cfg.log(f"  {m}"))
        if os.path.isdir(where):  # the per-trajectory CSV behind the figures, beside the store
            export_trajectories(store, job, os.path.join(where, "trajectories.csv"))
    elif legacy and cfg.sweep_run:
        cfg.log(f"[figures] {where} is a CSV sweep folder of an earlier speccheck: read only (missing cells are "
                "not run; import it with `speccheck sweep --convert`)")
    summary, stored_spec = load_sweep(store, None if legacy else job)
    _check_protocol(where, proto, spec, stored_spec)
    want = {(r, K, L) for r in spec.rules for K in spec.Ks for L in spec.Ls}
    rows = []
    for s in summary:
        # rules are named by the verifier objects; match on the spec's names
        key_ = (str(s["rule"]).lower(), int(s["K"]), int(s["L"]))
        if key_ in want:
            rows.append({c: s[c] for c in CELL_COLUMNS} | {"rule": key_[0]})
    rows = [r for r in rows if r["trajectories"] >= spec.n_traj]  # complete cells only
    missing = sorted(want - {(r["rule"], r["K"], r["L"]) for r in rows})
    if missing and ((cfg.sweep_run and not legacy) or not rows):
        raise FileFormatError(f"sweep {store} lacks cells {missing[:5]} (rule names: "
                              f"{sorted({str(s['rule']) for s in summary})})")
    rows.sort(key=lambda r: (spec.rules.index(r["rule"]), r["K"], r["L"]))
    table = Table.from_rows(rows, CELL_COLUMNS)
    info = {"protocol": asdict(proto), "sweep": asdict(spec), "sweep_dir": where, "sweep_store": store,
            "sweep_job": job, "schedule": proto.schedule().describe(), "missing": [list(m) for m in missing]}
    cfg.cache[key] = (table, info)
    return table, info


def _check_protocol(where: str, proto, spec: SweepSpec, stored: dict) -> None:  # noqa: ANN001
    """The stored sweep must hold this protocol and seed."""
    from dataclasses import asdict

    from speccheck.errors import FileFormatError

    mine = {**asdict(proto), "seed": spec.seed}
    theirs = {**stored.get("protocol", {}), "seed": stored.get("seed")}
    diff = {k: (theirs.get(k), v) for k, v in mine.items() if k != "d" and theirs.get(k) != v}
    if diff:
        raise FileFormatError(f"--sweep {where} holds a sweep with another protocol (theirs, ours): {diff}")


def _protocol_note(info: dict) -> str:
    p, s = info["protocol"], info["sweep"]
    miss = info.get("missing") or []
    tail = (f"; {len(miss)} cells missing from the sweep folder (not drawn): "
            + ", ".join(f"{r} ({K},{L})" for r, K, L in miss[:8]) + (" ..." if len(miss) > 8 else "")) if miss else ""
    return (f"measured: {p['target']}, {info['schedule']['n_stochastic']} stochastic steps ({p['grid']} grid), "
            f"eps = {p['eps']}, freeze = {p['freeze']}, prefetch = {p['prefetch']}, leaves evaluated = "
            f"{p['leaves']}, chains matched on {p['chain_match']}, {s['n_traj']} trajectories per cell, "
            f"seed {s['seed']}; speed-up = stochastic steps / target calls (warm-up included)" + tail)


# ----------------------------------------------------------------------------- figure 4
def compute_frontier(cfg: FigureConfig) -> FigureData:
    """Theory speed-up vs B (chains, D-GRS and RASS trees at a few deltas; finite horizon N = 30,
    one warm-up call) and the measured mixture cells overlaid."""
    theory = compute_frontier_theory(cfg.quick)
    notes = [f"theory: constant per-level acceptance a(delta, K), N = {FRONTIER_N} steps, "
             f"{FRONTIER_WARMUP} warm-up call; ceiling = 1/(1 - a) of the RMC chain (N -> infinity)"]
    tables = {"main": theory}
    try:
        cells, info = measured_cells(cfg)
        tables["measured"] = cells
        notes.append(_protocol_note(info))
    except Exception as exc:  # the sampler is optional for the theory part
        notes.append(f"measured points skipped: {type(exc).__name__}: {exc}")
    return FigureData(tables, notes=notes, meta={"deltas": list(FRONTIER_DELTAS), "N": FRONTIER_N})


def draw_frontier(data: FigureData) -> Figure:
    t = data.main
    fig, ax = new_figure(width=9.0, height=6.0)
    delta_colors = [OKABE_ITO[c] for c in ("orange", "green", "purple", "yellow")]
    theory_handles = []
    for i, delta in enumerate(sorted(set(float(x) for x in t["delta"]))):
        c = delta_colors[i % len(delta_colors)]
        for rule, ls, lw in (("rmc", "--", 1.8), ("dgrs", "-", 2.4), ("rass", "-.", 1.8)):
            s = t.where(delta=delta, rule=rule)
            f = s.where(frontier=1)
            if not len(f):
                continue
            o = np.argsort(f["B"], kind="stable")
            f = Table({k: v[o] for k, v in f.columns.items()})
            # a staircase: the best speed-up reachable with budget <= B
            B = np.append(f["B"], t["B"].max())
            sp = np.append(f["speedup"], f["speedup"][-1])
            ax.step(B, sp, where="post", color=c, ls=ls, lw=lw)
        rm = t.where(delta=delta, rule="rmc")
        ceil, a = float(rm["ceiling"][0]), float(rm["a"][0])
        ax.axhline(ceil, color=c, ls=":", lw=1.4)
        theory_handles.append(ax.plot([], [], color=c, lw=6, alpha=0.8,
                                      label=rf"$\delta = {delta:g}$: $a_{{RMC}}$ = {a:.2f}, $1/(1-a)$ = {ceil:.2f}")[0])
    style_handles = [
        ax.plot([], [], color="grey", ls="--", lw=1.8, label="RMC chain ($B = L$)")[0],
        ax.plot([], [], color="grey", ls="-", lw=2.4, label="D-GRS trees (frontier)")[0],
        ax.plot([], [], color="grey", ls="-.", lw=1.8, label="RASS trees (frontier)")[0],
        ax.plot([], [], color="grey", ls=":", lw=1.4, label="chain ceiling $1/(1-a)$")[0],
    ]
    meas_handles = []
    m = data.tables.get("measured")
    if m is not None and len(m):
        for rule in ("rmc", "dgrs", "rass"):
            s = m.where(rule=rule)
            if not len(s):
                continue
            h = ax.errorbar(s["B"], s["speedup"], yerr=s["speedup_se"], ls="none", marker=RULE_MARKERS[rule],
                            ms=6, mfc=RULE_COLORS[rule], mec="black", mew=0.6, ecolor="black", elinewidth=1,
                            capsize=0, alpha=0.9, label=f"measured {RULE_LABELS[rule].split(' (')[0]}")
            meas_handles.append(h)
    ax.set_xscale("log")
    ax.set_xlim(1.0, None)
    ax.set_xlabel("drafted budget $B$ (states per round; chain: $B = L$)")
    ax.set_ylabel(f"speed-up (N = {FRONTIER_N} steps / target calls)")
    ax.set_ylim(1.0, None)
    ax.set_title("Speed-up frontier vs budget: theory at fixed $\\delta$, measured on the mixture")
    leg1 = ax.legend(handles=theory_handles + style_handles, loc="upper left", fontsize=10)
    ax.add_artist(leg1)
    if meas_handles:
        ax.legend(handles=meas_handles, loc="lower right", fontsize=10, frameon=True, framealpha=0.9,
                  title="mixture, mean $\\pm$ SE", title_fontsize=10)
    return fig


# ----------------------------------------------------------------------------- figure 5
# D-GRS paper section 5.1 / Fig. 3 (Gaussian mixture, d = 500, eps = 0.1, 100 trajectories)
PAPER_CELLS = {("dgrs", 6, 6): 2.33, ("rmc", 6, 6): 1.99, ("dgrs", 5, 3): 2.14, ("rmc", 5, 3): 1.96,
               ("dgrs", 7, 6): 2.34}


def paper_comparison(cells: Table) -> list[str]:
    """One line per paper-quoted cell present in ``cells``, plus the best cells and RASS's gain."""
    out = []
    for (rule, K, L), paper in PAPER_CELLS.items():
        c = cells.where(rule=rule, K=K, L=L)
        if len(c):
            out.append(f"{RULE_LABELS[rule].split(' (')[0]} (K, L) = ({K}, {L}), B = {int(c['B'][0])}: "
                       f"{float(c['speedup'][0]):.3f} +- {float(c['speedup_se'][0]):.3f} (paper {paper:.2f})")
    for rule in ("rmc", "dgrs", "rass"):
        s = cells.where(rule=rule)
        if len(s):
            i = int(np.argmax(s["speedup"]))
            out.append(f"best {RULE_LABELS[rule].split(' (')[0]}: {float(s['speedup'][i]):.3f} +- "
                       f"{float(s['speedup_se'][i]):.3f} at (K, L) = ({int(s['K'][i])}, {int(s['L'][i])})"
                       + (f"; range over cells {float(s['speedup'].min()):.2f}-{float(s['speedup'].max()):.2f}"
                          if rule == "rmc" else ""))
    d, r = cells.where(rule="dgrs"), cells.where(rule="rass")
    if len(d) and len(r) and len(d) == len(r):
        gain = r["speedup"] / d["speedup"] - 1.0  # rows sorted by (K, L) in both
        i = int(np.argmax(gain))
        out.append(f"RASS over D-GRS: {100 * float(np.median(gain)):+.1f}% median, {100 * float(gain[i]):+.1f}% max "
                   f"at (K, L) = ({int(r['K'][i])}, {int(r['L'][i])}) (paper: up to +6.4%)")
    return out


def compute_heatmaps(cfg: FigureConfig) -> FigureData:
    cells, info = measured_cells(cfg)
    return FigureData({"main": cells}, notes=[_protocol_note(info)] + paper_comparison(cells),
                      meta={"sweep": info["sweep"]})


def _grid(s: Table, col: str, Ks, Ls) -> np.ndarray:
    G = np.full((len(Ks), len(Ls)), np.nan)
    for i, K in enumerate(Ks):
        for j, L in enumerate(Ls):
            c = s.where(K=K, L=L)
            if len(c):
                G[i, j] = float(c[col][0])
    return G


def draw_heatmaps(data: FigureData) -> Figure:
    import matplotlib

    t = data.main
    rules = [r for r in ("rmc", "dgrs", "rass") if r in set(t["rule"])]
    Ks = sorted(set(int(k) for k in t["K"]))
    Ls = sorted(set(int(x) for x in t["L"]))
    vmin, vmax = float(np.nanmin(t["speedup"])), float(np.nanmax(t["speedup"]))
    cmap = matplotlib.colormaps[ORDERED_CMAP]
    w = 1.0 + 0.75 * len(Ls)
    fig, axes = new_figure(1, len(rules), width=w * len(rules) + 1.5, height=1.2 + 0.6 * len(Ks), squeeze=False,
                           constrained_layout=True)
    im = None
    for a, rule in enumerate(rules):
        ax = axes[0, a]
        s = t.where(rule=rule)
        G = _grid(s, "speedup", Ks, Ls)
        im = ax.imshow(G, origin="lower", cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto")
        for i in range(len(Ks)):
            for j in range(len(Ls)):
                if np.isfinite(G[i, j]):
                    r, g, b, _ = cmap((G[i, j] - vmin) / max(vmax - vmin, 1e-12))
                    lum = 0.299 * r + 0.587 * g + 0.114 * b
                    ax.text(j, i, f"{G[i, j]:.2f}", ha="center", va="center", fontsize=10,
                            color="black" if lum > 0.5 else "white")
        ax.set_xticks(range(len(Ls)), [str(x) for x in Ls])
        ax.set_yticks(range(len(Ks)), [str(k) for k in Ks])
        ax.set_xlabel("depth $L$")
        ax.set_ylabel("width $K$" + (" (chain matched on $B$)" if rule == "rmc" else ""))
        ax.set_title(RULE_LABELS[rule].split(" (")[0])
        ax.grid(False)
    cb = fig.colorbar(im, ax=list(axes[0]), shrink=0.9)
    cb.set_label("mean speed-up (steps / target calls)")
    fig.suptitle("Measured speed-up on the Gaussian mixture across $(K, L)$")
    return fig


# ----------------------------------------------------------------------------- figure 6
def compute_speedup_vs_K(cfg: FigureConfig) -> FigureData:
    cells, info = measured_cells(cfg)
    return FigureData({"main": cells}, notes=[_protocol_note(info)], meta={"sweep": info["sweep"]})


def draw_speedup_vs_K(data: FigureData) -> Figure:
    import matplotlib

    t = data.main
    rules = [r for r in ("dgrs", "rass") if r in set(t["rule"])]
    Ls = sorted(set(int(x) for x in t["L"]))
    cmap = matplotlib.colormaps[ORDERED_LINES_CMAP]
    cols = {L: cmap(x) for L, x in zip(Ls, np.linspace(0.0, 0.85, len(Ls)))}
    fig, axes = new_figure(1, len(rules), width=6.5 * len(rules), height=5.0, squeeze=False, sharey=True)
    rmc = t.where(rule="rmc")
    for a, rule in enumerate(rules):
        ax = axes[0, a]
        for L in Ls:
            s = t.where(rule=rule, L=L)
            o = np.argsort(s["K"])
            K, sp, se = s["K"][o], s["speedup"][o], s["speedup_se"][o]
            ax.fill_between(K, sp - se, sp + se, color=cols[L], alpha=0.25, lw=0)
            ax.plot(K, sp, color=cols[L], marker="o", ms=5, label=f"$L = {L}$")
        if len(rmc):
            ax.axhline(float(np.mean(rmc["speedup"])), color=RULE_COLORS["rmc"], ls="--", lw=1.8,
                       label="RMC (mean over cells)")
        ax.set_xlabel("width $K$ (children per node)")
        ax.set_title(RULE_LABELS[rule].split(" (")[0])
        ax.set_xticks(sorted(set(int(k) for k in t["K"])))
    axes[0, 0].set_ylabel("mean speed-up $\\pm$ 1 SE")
    axes[0, 0].legend(loc="upper left", fontsize=10, ncol=2)
    fig.suptitle("Measured speed-up vs tree width $K$, one line per depth $L$ (Gaussian mixture)")
    return fig
