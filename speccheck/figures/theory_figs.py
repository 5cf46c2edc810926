"""The theory figures (1-3 and the theory curves of 4): closed forms of ``speccheck.theory`` only.

Each ``compute_*`` is a pure function of the :class:`FigureConfig` (only ``quick`` matters)
returning :class:`FigureData`; each ``draw_*`` turns that data into a matplotlib figure.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from matplotlib.figure import Figure

from speccheck import theory as T
from speccheck.figures.base import FigureConfig, FigureData
from speccheck.figures.style import (
    DELTA,
    DELTA_LONG,
    OKABE_ITO,
    ORDERED_CMAP,
    RULE_COLORS,
    RULE_LABELS,
    Table,
    new_figure,
)

# delta grids: the D-GRS paper's Fig. 6 spans 0..4.5
DELTAS_FULL = np.round(np.linspace(0.0, 4.5, 91), 12)   # step 0.05
DELTAS_QUICK = np.round(np.linspace(0.0, 4.5, 10), 12)  # step 0.5
ACCEPTANCE_KS = (1, 2, 4, 8)
BOUNDS_KS = (2, 4, 8)
WEIGHT_KS = (4, 8)
WEIGHT_DELTA_MAX = 3.5  # beyond, all weight is on the top rank
TOP_RANK_LEVEL = 0.99  # "almost all weight on the top rank"

# MCRS (issue 7) in figure 2: evaluated on a coarser delta grid, within a time budget
MCRS_DELTAS_FULL = np.round(np.arange(0.25, 4.5001, 0.25), 12)
MCRS_DELTAS_QUICK = np.array([0.5, 1.0, 2.0])
MCRS_BUDGET_S = {False: 240.0, True: 10.0}  # CPU seconds (full, quick)
MCRS_G = {False: None, True: 40}  # None: the module's default number of policy cells


def delta_grid(quick: bool) -> np.ndarray:
    return (DELTAS_QUICK if quick else DELTAS_FULL).copy()


# ----------------------------------------------------------------------------- figure 1
def compute_acceptance(cfg: FigureConfig) -> FigureData:
    """Per-step acceptance P(accept) vs delta for K in {1, 2, 4, 8}: D-GRS closed form and RASS
    with optimal rank weights. Table rows: (rule, K, delta, acceptance)."""
    deltas = delta_grid(cfg.quick)
    rows = []
    for K in ACCEPTANCE_KS:
        dg = T.acceptance_dgrs(deltas, K)
        ra = np.asarray(T.acceptance_rass(deltas, K), dtype=np.float64)
        for rule, acc in (("dgrs", dg), ("rass", ra)):
            rows += [{"rule": rule, "K": K, "delta": float(d), "acceptance": float(a)} for d, a in zip(deltas, acc)]
    return FigureData({"main": Table.from_rows(rows)}, meta={"Ks": list(ACCEPTANCE_KS)})


def draw_acceptance(data: FigureData) -> Figure:
    t = data.main
    fig, ax = new_figure(width=7.5, height=5.0)
    Ks = sorted(set(int(k) for k in t["K"]))
    colors = [OKABE_ITO[c] for c in ("black", "blue", "orange", "green", "vermillion", "purple")]
    for i, K in enumerate(Ks):
        c = colors[i % len(colors)]
        d = t.where(rule="dgrs", K=K)
        ax.plot(d["delta"], d["acceptance"], color=c, ls="-", label=f"$K={K}$")
        r = t.where(rule="rass", K=K)
        if K > 1:
            ax.plot(r["delta"], r["acceptance"], color=c, ls="--", lw=1.8)
    ax.plot([], [], color="grey", ls="-", label="D-GRS")
    ax.plot([], [], color="grey", ls="--", lw=1.8, label="RASS")
    ax.set_xlabel(DELTA_LONG)
    ax.set_ylabel("per-step acceptance probability")
    ax.set_ylim(0, 1.02)
    ax.set_xlim(0, float(t["delta"].max()))
    ax.set_title("Per-step acceptance of K i.i.d. drafts (K = 1: RMC)")
    ax.legend(ncol=2, loc="upper right")
    return fig


# ----------------------------------------------------------------------------- figure 2
def _mcrs_rows(cfg: FigureConfig, Ks, notes: list[str]) -> list[dict]:
    try:
        from speccheck.theory.mcrs import acceptance_mcrs  # issue 7
    except Exception as exc:  # module absent or broken: the figure is drawn without MCRS
        notes.append(f"MCRS skipped: speccheck.theory.mcrs.acceptance_mcrs not importable ({exc!r})")
        return []
    deltas = MCRS_DELTAS_QUICK if cfg.quick else MCRS_DELTAS_FULL
    Ks_m = (4,) if cfg.quick else tuple(Ks)
    G = MCRS_G[cfg.quick]
    budget = MCRS_BUDGET_S[cfg.quick]
    rows, failed, skipped = [], [], 0
    t0 = time.process_time()  # CPU seconds: the same points get drawn on a busy machine
    for K in Ks_m:
        for d in deltas:
            if time.process_time() - t0 > budget:
                skipped += 1
                continue
            t1 = time.perf_counter()
            try:
                a = float(acceptance_mcrs(float(d), K) if G is None else acceptance_mcrs(float(d), K, G=G))
            except Exception as exc:
                failed.append(f"K={K}, delta={d:g}: {type(exc).__name__}")
                continue
            if not np.isfinite(a):
                failed.append(f"K={K}, delta={d:g}: non-finite")
                continue
            rows.append({"K": K, "delta": float(d), "G": -1 if G is None else G, "mcrs": a,
                         "bound_iid": float(T.list_bound_iid(float(d), K)),
                         "rass": float(T.acceptance_rass(float(d), K)),
                         "seconds": time.perf_counter() - t1})
    if rows:
        notes.append(f"MCRS (issue 7) drawn at {len(rows)} (K, delta) points"
                     + (f" with G = {G} policy cells" if G else "") + ".")
    if failed:
        notes.append(f"MCRS failed at {len(failed)} points (left out): " + "; ".join(failed[:6])
                     + (" ..." if len(failed) > 6 else ""))
    if skipped:
        notes.append(f"MCRS: {skipped} points skipped (budget {budget:.0f} CPU seconds).")
    return rows


def compute_bounds(cfg: FigureConfig) -> FigureData:
    """RMC, D-GRS, RASS, the i.i.d.-list bound and the dependent-drafts bound vs delta for
    K in {2, 4, 8}; MCRS where available. Main table: one row per (K, delta)."""
    deltas = delta_grid(cfg.quick)
    rows = []
    for K in BOUNDS_KS:
        rmc = T.acceptance_rmc(deltas)
        dg = T.acceptance_dgrs(deltas, K)
        ra = np.asarray(T.acceptance_rass(deltas, K), dtype=np.float64)
        bi = T.list_bound_iid(deltas, K)
        bd = T.list_bound_dependent(deltas, K)
        for i, d in enumerate(deltas):
            rows.append({"K": K, "delta": float(d), "rmc": float(rmc[i]), "dgrs": float(dg[i]),
                         "rass": float(ra[i]), "bound_iid": float(bi[i]), "bound_dependent": float(bd[i])})
    notes: list[str] = []
    tables = {"main": Table.from_rows(rows)}
    mrows = _mcrs_rows(cfg, BOUNDS_KS, notes)
    if mrows:
        tables["mcrs"] = Table.from_rows(mrows)
    return FigureData(tables, notes=notes, meta={"Ks": list(BOUNDS_KS)})


def draw_bounds(data: FigureData) -> Figure:
    t = data.main
    Ks = sorted(set(int(k) for k in t["K"]))
    m = data.tables.get("mcrs")
    fig, axes = new_figure(2, len(Ks), width=5.0 * len(Ks), height=8.0, sharex=True, squeeze=False,
                           gridspec_kw={"height_ratios": [3, 2]})
    rules = ("rmc", "dgrs", "rass")
    for j, K in enumerate(Ks):
        s = t.where(K=K)
        top, bot = axes[0, j], axes[1, j]
        d = s["delta"]
        for b, ls in (("bound_dependent", ":"), ("bound_iid", "-")):
            top.plot(d, s[b], color=RULE_COLORS[b], ls=ls, lw=1.6, label=RULE_LABELS[b])
        for r in rules:
            top.plot(d, s[r], color=RULE_COLORS[r], label=RULE_LABELS[r])
            bot.plot(d, s[r] - s["bound_iid"], color=RULE_COLORS[r])
        bot.plot(d, s["bound_dependent"] - s["bound_iid"], color=RULE_COLORS["bound_dependent"], ls=":", lw=1.6)
        bot.axhline(0.0, color=RULE_COLORS["bound_iid"], lw=1.6)
        if m is not None and len(m.where(K=K)):
            mk = m.where(K=K)
            top.plot(mk["delta"], mk["mcrs"], ls="none", marker="^", ms=7, color=RULE_COLORS["mcrs"],
                     label=RULE_LABELS["mcrs"])
            bot.plot(mk["delta"], mk["mcrs"] - mk["bound_iid"], ls="none", marker="^", ms=7,
                     color=RULE_COLORS["mcrs"])
        top.set_title(f"$K = {K}$")
        top.set_ylim(0, 1.02)
        bot.set_xlabel(DELTA + r" (normalised mean mismatch)")
        bot.set_xlim(0, float(d.max()))
        lo = float(np.min([s[r] - s["bound_iid"] for r in ("dgrs", "rass")])) * 1.25  # RMC may leave the axes
        hi = float(np.max(s["bound_dependent"] - s["bound_iid"]))
        bot.set_ylim(min(lo, -0.01), max(hi * 1.25, 0.01))
    axes[0, 0].set_ylabel("P(accept)")
    axes[1, 0].set_ylabel("P(accept) $-$ i.i.d.-list bound")
    from matplotlib.lines import Line2D

    proxies = [Line2D([], [], color=RULE_COLORS[b], ls=ls, lw=1.6, label=RULE_LABELS[b])
               for b, ls in (("bound_dependent", ":"), ("bound_iid", "-"))]
    proxies += [Line2D([], [], color=RULE_COLORS[r], label=RULE_LABELS[r]) for r in rules]
    if m is not None and len(m):
        proxies.append(Line2D([], [], ls="none", marker="^", ms=8, color=RULE_COLORS["mcrs"],
                              label=RULE_LABELS["mcrs"]))
    axes[0, 0].legend(handles=proxies, loc="lower left")
    fig.suptitle("Acceptance of exact verifiers vs the i.i.d.-list and dependent-drafts bounds")
    return fig


# ----------------------------------------------------------------------------- figure 3
def top_rank_delta(deltas: np.ndarray, omega_top: np.ndarray, level: float = TOP_RANK_LEVEL) -> float:
    """Smallest grid delta from which omega_K >= level at every larger grid delta (nan if none)."""
    ok = omega_top >= level
    if not ok[-1]:
        return float("nan")
    i = len(ok) - 1
    while i > 0 and ok[i - 1]:
        i -= 1
    return float(deltas[i])


def compute_rank_weights(cfg: FigureConfig) -> FigureData:
    """Optimal RASS rank weights omega_r (r = 1..K, r = K the largest draft) vs delta for
    K in {4, 8}. Table rows: (K, delta, rank, omega)."""
    deltas = delta_grid(cfg.quick)
    deltas = deltas[deltas <= WEIGHT_DELTA_MAX]
    rows = []
    meta = {"Ks": list(WEIGHT_KS), "top_rank_level": TOP_RANK_LEVEL}
    for K in WEIGHT_KS:
        W = np.array([T.rank_weights(float(d), K) for d in deltas])  # (n, K)
        for i, d in enumerate(deltas):
            rows += [{"K": K, "delta": float(d), "rank": r + 1, "omega": float(W[i, r])} for r in range(K)]
        meta[f"top_rank_delta_K{K}"] = top_rank_delta(deltas, W[:, -1])
    return FigureData({"main": Table.from_rows(rows)}, meta=meta,
                      notes=[f"omega_K >= {TOP_RANK_LEVEL} from delta = {meta[f'top_rank_delta_K{K}']:g} "
                             f"(K = {K}; paper: ~2 for K = 4, ~2.5 for K = 8)" for K in WEIGHT_KS])


def draw_rank_weights(data: FigureData) -> Figure:
    import matplotlib

    t = data.main
    Ks = sorted(set(int(k) for k in t["K"]))
    fig, axes = new_figure(1, len(Ks), width=6.5 * len(Ks), height=5.0, squeeze=False, constrained_layout=True)
    cmap = matplotlib.colormaps[ORDERED_CMAP]
    for j, K in enumerate(Ks):
        ax = axes[0, j]
        s = t.where(K=K)
        deltas = np.unique(s["delta"])
        W = np.zeros((deltas.size, K))
        for r in range(1, K + 1):
            sr = s.where(rank=r)
            W[np.searchsorted(deltas, sr["delta"]), r - 1] = sr["omega"]
        cols = [cmap(x) for x in np.linspace(0.0, 1.0, K)]
        labels = [f"$r = {r}$" + (" (top)" if r == K else "") for r in range(1, K + 1)]
        ax.stackplot(deltas, W.T, colors=cols, labels=labels, edgecolor="white", linewidth=0.3)
        thr = data.meta.get(f"top_rank_delta_K{K}", float("nan"))
        if np.isfinite(thr):
            ax.axvline(thr, color="black", ls=":", lw=1.6)
            ax.annotate(rf"$\omega_{{{K}}} \geq {TOP_RANK_LEVEL}$ from $\delta$ = {thr:g}", (thr, 0.92),
                        xytext=(6, 0), textcoords="offset points", fontsize=12, color="black")
        ax.set_xlim(deltas.min(), deltas.max())
        ax.set_ylim(0, 1)
        ax.grid(False)
        ax.set_title(f"$K = {K}$")
        ax.set_xlabel(DELTA + " (normalised mean mismatch)")
        ax.set_ylabel(r"optimal rank weight $\omega_r$ (stacked)")
        h, lab = ax.get_legend_handles_labels()
        ax.legend(h[::-1], lab[::-1], loc="center right", fontsize=10, frameon=True, framealpha=0.9)
    fig.suptitle("Optimal RASS rank weights: uniform as $\\delta \\to 0$, top rank for large $\\delta$")
    return fig


# ----------------------------------------------------------------------------- figure 4 (theory)
# 1.287 = 2 Phibar^{-1}(0.26): RMC acceptance a = 0.52, the paper's mixture (section 5.1)
FRONTIER_DELTAS = (0.5, 1.0, 1.287)
FRONTIER_N = 30          # stochastic steps, as in the mixture setting (paper section 5.1)
FRONTIER_WARMUP = 1      # one warm-up target call per trajectory
FRONTIER_B_MAX = 10**6  # the (7, 7) tree has B = 960799
FRONTIER_KS = tuple(range(1, 9))
FRONTIER_LS = tuple(range(1, FRONTIER_N + 1))


def tree_budget(K: int, L: int) -> int:
    """B = |V| - 1 = K + K^2 + ... + K^L drafted states of a uniform (K, L) tree."""
    return int(sum(K**l for l in range(1, L + 1)))


def compute_frontier_theory(quick: bool) -> Table:
    """Expected speed-up N / E[NFE] (finite horizon N = 30, one warm-up call) with constant
    per-level acceptance a(delta, K), for chains (K = 1, B = L) and uniform (K, L) trees with
    D-GRS and RASS, B <= 1e6; plus steps per round, the chain ceiling 1/(1 - a) and a frontier
    flag (best speed-up at budget <= B among that rule's trees, chains included)."""
    Ks = FRONTIER_KS[:4] if quick else FRONTIER_KS
    rows = []
    for delta in FRONTIER_DELTAS:
        for rule in ("rmc", "dgrs", "rass"):
            for K in ((1,) if rule == "rmc" else Ks):
                if rule == "rmc" or K == 1:
                    a = float(T.acceptance_rmc(delta))
                elif rule == "dgrs":
                    a = float(T.acceptance_dgrs(delta, K))
                else:
                    a = float(T.acceptance_rass(delta, K))
                for L in FRONTIER_LS:
                    B = tree_budget(K, L)
                    if B > FRONTIER_B_MAX:
                        break
                    sp = T.predicted_speedup(a, FRONTIER_N, L, FRONTIER_WARMUP)
                    rows.append({"delta": delta, "rule": rule, "K": K, "L": L, "B": B, "a": a,
                                 "speedup": float(sp),
                                 "steps_per_round": float(T.expected_steps_per_round(np.full(L, a))),
                                 "ceiling": float(T.chain_ceiling(a)), "frontier": 0})
    t = Table.from_rows(rows)
    # frontier: running max of speed-up over increasing B within (delta, rule)
    fr = np.zeros(len(t), dtype=np.int64)
    for delta in FRONTIER_DELTAS:
        for rule in ("rmc", "dgrs", "rass"):
            idx = np.flatnonzero((t["delta"] == delta) & (t["rule"] == rule))
            order = idx[np.lexsort((-t["speedup"][idx], t["B"][idx]))]
            best = -np.inf
            for i in order:
                if t["speedup"][i] > best + 1e-12:
                    fr[i] = 1
                    best = t["speedup"][i]
    t.columns["frontier"] = fr
    return t
