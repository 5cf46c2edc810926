"""Figure 7: the exactness battery (issue 4) -- which tests kill which mutant, and the power of
the battery's two workhorse tests (smallest detectable KS distance / acceptance shift vs the
number of draws at the gate and full suites' per-test error rates)."""

from __future__ import annotations

import math
import os
import re
import time
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from matplotlib.figure import Figure

from speccheck.errors import FileFormatError, InputError
from speccheck.figures.base import FigureConfig, FigureData
from speccheck.figures.style import OKABE_ITO, Table, new_figure

# the kill matrix of the quick run uses this small suite (not a built-in one; CI-sized)
QUICK_SUITE = {
    "name": "figures-quick", "description": "tiny suite for the --quick figure", "seed": 20261129,
    "family_alpha": 1e-3, "power": 0.99,
    "scalar": {"deltas": [0.5, 2.0], "K": [1, 2], "n": 8192, "tail_q": 0.01},
    "contract": {"n": 64},
    "wrapper": {"dims": [2], "n": 2048, "K": 3, "deltas": [0.5, 1.0]},
}
# the quick run's kill matrix covers one mutant per rule (and two exact references)
QUICK_VERIFIERS = ("rmc-fresh", "claims-accept", "dgrs-stale_lambda", "rass-weights_Km1", "wrapper-drop_zperp",
                   "ref-rmc", "ref-dgrs")
FULL_SUITE = "smoke"  # default suite of the full run's kill matrix (``battery_suite`` overrides)
POWER_SUITES = ("gate", "full")
POWER_P0 = 0.5  # acceptance MDD at the binomial's largest variance
POWER_N = np.unique(np.round(np.logspace(10, 26, 33, base=2.0)).astype(np.int64))


def _suite(cfg: FigureConfig):
    from speccheck.validation.suites import load_suite, parse_suite

    if cfg.battery_suite:
        return load_suite(cfg.battery_suite)
    return parse_suite(dict(QUICK_SUITE), QUICK_SUITE["name"]) if cfg.quick else load_suite(FULL_SUITE)


def per_test_alpha(suite: Any, verifier: str = "dgrs") -> float:
    """The binding per-test level family_alpha / m of ``suite`` for a built-in verifier
    (m = the number of statistical tests the battery plans before layer L4, whose count depends
    on the draws; an upper bound on Holm's smallest threshold)."""
    from speccheck.validation import battery

    m = battery.planned_tests(verifier, suite)
    return suite.family_alpha / max(m, 1)


def load_reports(path: str) -> dict:
    """{verifier: BatteryReport} from the JSON of ``speccheck battery --mutants --json PATH``
    ({name: report_dict}) or of a single report."""
    import json

    from speccheck.validation.results import BatteryReport

    try:
        with open(path) as f:
            raw = json.load(f)
    except (OSError, ValueError) as exc:
        raise FileFormatError(f"battery JSON {path!r} is unreadable ({exc})") from None
    if isinstance(raw, dict) and "results" in raw and "verifier" in raw:
        raw = {raw["verifier"]: raw}
    if not isinstance(raw, dict) or not raw:
        raise FileFormatError(f"battery JSON {path!r} holds no reports (expected {{name: report}} from "
                              "`speccheck battery --mutants --json`)")
    out = {}
    for name, d in raw.items():
        if not isinstance(d, dict) or not isinstance(d.get("results"), list) or not d["results"]:
            raise FileFormatError(f"battery JSON {path!r}: report {name!r} has no test results")
        try:
            out[name] = BatteryReport.from_dict({"verifier": name, **d})
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise FileFormatError(f"battery JSON {path!r}: report {name!r} is malformed ({exc})") from None
    return out


def compute_kill_matrix(cfg: FigureConfig) -> tuple[Table, list[str]]:
    """Rows (verifier, kind, family, killed, n_tests, n_failed) over the scalar/wrapper mutants
    and the exact references (which must not be killed). With ``cfg.battery_json`` the reports
    are read from that file instead of being run."""
    from speccheck.validation.battery import run_battery
    from speccheck.validation.mutants import REFERENCES, mutant_factories
    from speccheck.validation.report import kill_matrix, test_family

    if cfg.battery_json and os.path.exists(cfg.battery_json):
        reports = load_reports(cfg.battery_json)
        kinds = {n: ("reference" if n in REFERENCES or n.startswith("ref") else "mutant") for n in reports}
        suites = sorted({r.suite for r in reports.values()})
        notes = [f"kill matrix read from {os.path.basename(cfg.battery_json)} (suite {', '.join(suites)})"]
        return _kill_table(reports, kinds, kill_matrix, test_family), notes
    st = _suite(cfg)
    notes = [f"kill matrix: suite {st.name!r} (family-wise false-failure rate {st.family_alpha:g}, Holm)"]
    facts = [(n, "mutant", f) for n, f in mutant_factories(include_sampler=False, include_zoo=False).items()]
    facts += [(n, "reference", f) for n, f in REFERENCES.items()]
    if cfg.quick:
        facts = [x for x in facts if x[0] in QUICK_VERIFIERS]
        notes.append(f"quick run: {len(facts)} of the verifiers only")
    reports, kinds = {}, {}
    t0 = time.perf_counter()
    for name, kind, f in facts:
        try:
            reports[name] = run_battery(f(), st)
            kinds[name] = kind
        except Exception as exc:  # a factory that cannot be built is reported, not drawn
            notes.append(f"{name}: not run ({type(exc).__name__}: {exc})")
    notes.append(f"battery runs took {time.perf_counter() - t0:.0f} s")
    if cfg.battery_json:  # save for the next run (a cache: read when the file exists)
        from speccheck.strict_json import dumps
        from speccheck.validation.report import report_dict

        with open(cfg.battery_json, "w") as f:
            f.write(dumps({k: report_dict(r) for k, r in reports.items()}))
    return _kill_table(reports, kinds, kill_matrix, test_family), notes


def family_label(family: str) -> str:
    """Test families for the figure: per-step trajectory tests collapse to one column each."""
    return re.sub(r"step \d+", "step n", family)


def _kill_table(reports, kinds, kill_matrix, test_family) -> Table:
    fams, _ = kill_matrix(reports)  # the battery's order of test families
    labels = list(dict.fromkeys(family_label(f) for f in fams))
    rows = []
    for name, rep in reports.items():
        for lab in labels:
            rs = [r for r in rep.results if family_label(test_family(r)) == lab]
            nf = sum(not r.passed for r in rs)
            rows.append({"verifier": name, "kind": kinds[name], "family": lab, "killed": int(nf > 0),
                         "n_tests": len(rs), "n_failed": nf})
    return Table.from_rows(rows, ["verifier", "kind", "family", "killed", "n_tests", "n_failed"])


def compute_power() -> Table:
    """Minimum detectable deviation with probability >= power at the suites' per-test level:
    KS distance (DKW-Massart: t_alpha + t_{1-power}) and two-sided acceptance shift (exact
    binomial at p0 = 0.5), vs the number of draws n; plus the suites' own n per scalar cell."""
    from speccheck.validation.stats import binom_test, dkw_threshold
    from speccheck.validation.suites import load_suite

    rows = []
    for name in POWER_SUITES:
        st = load_suite(name)
        a = per_test_alpha(st)
        pw = st.power
        n_suite = st.scalar.n if st.scalar is not None else -1
        pts = [(int(n), 0) for n in POWER_N] + ([(int(n_suite), 1)] if n_suite > 0 else [])
        for n, flag in pts:
            ks = dkw_threshold(n, a) + dkw_threshold(n, 1.0 - pw)
            acc = binom_test(int(round(n * POWER_P0)), n, POWER_P0, a, power=pw).mdd
            rows.append({"suite": name, "alpha_test": a, "power": pw, "n": n, "is_suite_n": flag,
                         "ks_mdd": ks, "acceptance_mdd": float(acc)})
    return Table.from_rows(rows)


def compute_battery(cfg: FigureConfig) -> FigureData:
    km, notes = compute_kill_matrix(cfg)
    if len(km["verifier"]) == 0 or not any(k == "mutant" for k in km["kind"]):
        raise InputError("figure 7: no mutant report to draw (0 of 0 mutants is no kill matrix); "
                         + "; ".join(notes))
    killed = {n: False for n in km["verifier"]}
    kind = dict(zip(km["verifier"], km["kind"]))
    for n, k in zip(km["verifier"], km["killed"]):
        killed[n] |= bool(k)
    survivors = [n for n, k in killed.items() if kind[n] == "mutant" and not k]
    false_kills = [n for n, k in killed.items() if kind[n] == "reference" and k]
    notes.append(f"{sum(kind[n] == 'mutant' for n in killed) - len(survivors)} of "
                 f"{sum(kind[n] == 'mutant' for n in killed)} mutants killed"
                 + (f"; not killed by this suite: {', '.join(survivors)}" if survivors else "")
                 + (f"; exact references failed (false kills): {', '.join(false_kills)}" if false_kills
                    else "; no exact reference failed"))
    return FigureData({"main": km, "power": compute_power()}, notes=notes)


def draw_battery(data: FigureData) -> Figure:
    from matplotlib.colors import ListedColormap

    km = data.main
    pw = data.tables["power"]
    names = list(dict.fromkeys(km["verifier"]))
    fams = list(dict.fromkeys(km["family"]))
    M = np.full((len(names), len(fams)), np.nan)
    kind = {}
    for r in km.rows():
        i, j = names.index(r["verifier"]), fams.index(r["family"])
        M[i, j] = r["killed"] if r["n_tests"] > 0 else np.nan
        kind[r["verifier"]] = r["kind"]
    h = max(5.5, 0.33 * len(names) + 2.5)
    fig = None
    fig, axes = new_figure(1, 3, width=18.0, height=h, gridspec_kw={"width_ratios": [1.6, 1, 1]},
                           constrained_layout=True)
    ax = axes[0]
    cmap = ListedColormap(["#ffffff", OKABE_ITO["vermillion"]]).with_extremes(bad="#d9d9d9")
    ax.imshow(np.ma.masked_invalid(M), cmap=cmap, vmin=0, vmax=1, aspect="auto")
    for i in range(len(names)):
        for j in range(len(fams)):
            if np.isfinite(M[i, j]):
                ax.text(j, i, "x" if M[i, j] else "", ha="center", va="center", fontsize=11, color="white",
                        fontweight="bold")
    ax.set_xticks(range(len(fams)), fams, rotation=60, ha="right", fontsize=10)
    ax.set_yticks(range(len(names)), [n + ("  (exact)" if kind[n] == "reference" else "") for n in names],
                  fontsize=10)
    ax.grid(False)
    ax.set_xticks(np.arange(len(fams) + 1) - 0.5, minor=True)
    ax.set_yticks(np.arange(len(names) + 1) - 0.5, minor=True)
    ax.grid(which="minor", color="#bbbbbb", lw=0.8)
    ax.tick_params(which="minor", length=0)
    killed = {n: bool(np.nansum(M[i]) > 0) for i, n in enumerate(names)}
    for lab in ax.get_yticklabels():
        n = lab.get_text().split("  (")[0]
        lab.set_color("black" if killed[n] == (kind[n] == "mutant") else OKABE_ITO["vermillion"])
    nm = sum(kind[n] == "mutant" for n in names)
    nk = sum(killed[n] for n in names if kind[n] == "mutant")
    nr = sum(killed[n] for n in names if kind[n] == "reference")
    ax.set_title(f"Kill matrix: {nk}/{nm} mutants killed, {nr} false kills\n"
                 "(red x: a test family failed; grey: not run)",
                 fontsize=12)
    for a, (col, lab) in zip(axes[1:], (("ks_mdd", "smallest detectable KS distance"),
                                        ("acceptance_mdd", "smallest detectable acceptance shift"))):
        for suite, c, ls in zip(POWER_SUITES, (OKABE_ITO["blue"], OKABE_ITO["orange"]), ("-", "--")):
            s = pw.where(suite=suite)
            grid = s.where(is_suite_n=0)
            o = np.argsort(grid["n"])
            a.plot(grid["n"][o], grid[col][o], color=c, ls=ls,
                   label=f"{suite}: per-test $\\alpha$ = {float(s['alpha_test'][0]):.1e}")
            pt = s.where(is_suite_n=1)
            if len(pt):
                a.plot(pt["n"], pt[col], marker="o", ms=8, color=c, ls="none")
                first = suite == POWER_SUITES[0]
                a.annotate(f"{suite} n = 2^{int(round(math.log2(int(pt['n'][0]))))}: {float(pt[col][0]):.1e}",
                           (float(pt["n"][0]), float(pt[col][0])), xytext=(10, 4) if first else (-10, -4),
                           textcoords="offset points", fontsize=10, color=c, ha="left" if first else "right",
                           va="bottom" if first else "top")
        a.set_xscale("log", base=2)
        a.set_yscale("log")
        a.set_xlabel("draws per cell $n$")
        a.set_ylabel(lab)
        a.set_title(f"power {float(pw['power'][0]):.2f}" + (" (binomial at $p_0 = 0.5$)" if col == "acceptance_mdd" else
                                                            " (DKW-Massart)"), fontsize=12)
        a.legend(loc="upper right", fontsize=10)
    fig.suptitle("Exactness battery: what it kills, and the smallest defect it detects")
    return fig
