"""A battery report a person would rather look at: where the rule fails.

Every test is drawn where it ran, at its own K and delta: the scalar grid's points (layers
L1-L2) and the continuous layer's strata [lo, hi) (L5) on a (delta, K) map, failing cells in red;
the measured - declared acceptance and the PIT KS distance of those cells over delta, each
divided by its test's rejection threshold (beyond +-1: rejected); and every statistical test of
every layer by its Holm-adjusted p-value, so the tests without a delta or a K (the wrapper L3,
the trajectory L4, the sequence L6, pooled tests) have a place too. ``compute_report_figure``
returns the tables, ``draw_report_figure`` the figure, ``report_html`` one self-contained HTML page
(figure inlined, the failing tests and the localised regions listed).
"""

from __future__ import annotations

import base64
import html
import io
import math
from typing import TYPE_CHECKING, Any

import numpy as np

from speccheck.figures.base import FigureData
from speccheck.figures.style import OKABE_ITO, Table, new_figure, style_context

if TYPE_CHECKING:
    from matplotlib.figure import Figure

ACCEPTANCE_TEST = "acceptance=declared"
PIT_TESTS = ("ks", "pit-ks")
#: where the Holm panel draws a failed deterministic check (it has no p-value): beyond every p-value
CONTRACT_SCORE = 320.0
#: failing tests named on the Holm panel (the rest are counted)
MAX_LABELS = 5
_LAYER_ROWS = ("L0", "L1", "L2", "L3", "L4", "L5", "L6")


def _cell_key(r: Any) -> tuple[str, float, float, int] | None:
    """(layer group, delta_lo, delta_hi, K) of a test that ran at one delta point or stratum and
    one K (the grid: L1-L2, the continuous layer: L5); None for the others."""
    if r.layer not in ("L1", "L2", "L5"):
        return None
    K, lo, hi = r.where
    if K is None or not (math.isfinite(lo) and math.isfinite(hi)):
        return None
    return ("L5" if r.layer == "L5" else "L1", lo, hi, K)


def _score(r: Any, family_alpha: float, per_test_alpha: float) -> float:
    """-log10 of the test's Holm-adjusted p-value (a test fails when it reaches -log10 of the
    family-wise rate); a failed deterministic check is drawn at CONTRACT_SCORE."""
    if r.kind == "contract":
        return CONTRACT_SCORE
    p = r.extra.get("p_holm")
    if p is None:  # older reports: the raw p-value on the per-test level's scale
        p = r.p_value * family_alpha / per_test_alpha if per_test_alpha > 0 else r.p_value
    p = float(p) if p is not None and math.isfinite(float(p)) else 1.0
    return float(min(CONTRACT_SCORE, -math.log10(min(max(p, 1e-300), 1.0))))


def _label(r: Any) -> str:
    K, lo, hi = r.where
    where = []
    if K is not None and f"K={K}" not in r.cell:
        where.append(f"K={K}")
    return f"{r.layer} {r.cell} {r.test}" + (f" ({', '.join(where)})" if where else "")


def compute_report_figure(report: Any) -> FigureData:
    """The tables of the failure figure of ``report`` (a :class:`~speccheck.validation.results.BatteryReport`).

    ``main``: one row per (delta point or stratum, K) the grid (L1-L2) or the continuous layer
    (L5) ran: ``layer`` ("L1" or "L5"), ``delta`` (the point, or the stratum's geometric middle;
    0 for the atom), ``delta_lo``, ``delta_hi``, ``K``, ``acc_gap`` = measured - declared
    acceptance with its test's ``acc_threshold``, ``pit_ks`` = the PIT KS distance with its
    ``pit_threshold`` (NaN where the cell has no such test), ``failed`` when any test of the cell
    failed. ``tests``: one row per statistical test and per failed contract check of every layer:
    ``layer``, ``name``, ``K`` (-1: none), ``delta_lo``, ``delta_hi`` (NaN: none), ``score`` (-log10
    of the Holm-adjusted p-value), ``failed``. ``notes``: the failing tests."""
    rows: dict[tuple[str, float, float, int], dict] = {}
    tests = []
    for r in report.results:
        key = _cell_key(r)
        if key is not None:
            row = rows.setdefault(key, {"acc_gap": math.nan, "acc_threshold": math.nan, "pit_ks": math.nan,
                                        "pit_threshold": math.nan, "failed": False})
            row["failed"] |= not r.passed
            if r.test == ACCEPTANCE_TEST and r.n > 0 and r.kind == "stat":
                if r.layer == "L2" and "count" in r.extra and "p0" in r.extra:
                    row["acc_gap"] = float(r.extra["count"]) / r.n - float(r.extra["p0"])
                else:
                    row["acc_gap"] = float(r.statistic)
                row["acc_threshold"] = float(r.threshold)
            elif r.test in PIT_TESTS:
                row["pit_ks"], row["pit_threshold"] = float(r.statistic), float(r.threshold)
        if r.kind == "stat" or (r.kind == "contract" and not r.passed):
            K, lo, hi = r.where
            tests.append({"layer": r.layer or "?", "name": _label(r), "K": -1 if K is None else K, "delta_lo": lo,
                          "delta_hi": hi, "score": _score(r, report.family_alpha, report.per_test_alpha),
                          "failed": not r.passed})
    keys = sorted(rows)  # (layer, delta_lo, delta_hi, K)
    columns = {"layer": np.array([k[0] for k in keys], dtype=str),
               "delta": np.array([_middle(k[1], k[2]) for k in keys], float),
               "delta_lo": np.array([k[1] for k in keys], float), "delta_hi": np.array([k[2] for k in keys], float),
               "K": np.array([k[3] for k in keys], int)}
    for name in ("acc_gap", "acc_threshold", "pit_ks", "pit_threshold"):
        columns[name] = np.array([rows[k][name] for k in keys], float)
    columns["failed"] = np.array([rows[k]["failed"] for k in keys], bool)
    test_table = Table.from_rows(tests, ["layer", "name", "K", "delta_lo", "delta_hi", "score", "failed"])
    failing = [f"{r.layer} {r.cell} {r.test}" for r in report.results if not r.passed]
    return FigureData({"main": Table(columns), "tests": test_table}, notes=failing,
                      meta={"verifier": report.verifier, "suite": report.suite, "passed": bool(report.passed),
                            "family_alpha": float(report.family_alpha), "failing_K": _failing_K(report)})


def _middle(lo: float, hi: float) -> float:
    return lo if lo == hi or lo <= 0 else math.sqrt(lo * hi)


def _failing_K(report: Any) -> list[int]:
    return sorted({r.where[0] for r in report.results if not r.passed and r.where[0] is not None})


def _map_panel(ax: Any, table: Table) -> None:
    """Every (delta, K) cell the grid and the continuous layer ran: a grey mark when it passed,
    red when a test of it failed; a stratum is a horizontal bar over its [lo, hi)."""
    K, failed = table.columns["K"], table.columns["failed"]
    lo, hi, mid = table.columns["delta_lo"], table.columns["delta_hi"], table.columns["delta"]
    positive = mid > 0
    ks = sorted(set(K.tolist()))
    y = {k: i for i, k in enumerate(ks)}
    for bad in (False, True):
        sel = positive & (failed == bad)
        color = OKABE_ITO["vermillion"] if bad else "0.65"
        strata = sel & (hi > lo)
        for i in np.nonzero(strata)[0]:
            ax.plot([lo[i], hi[i]], [y[K[i]], y[K[i]]], "-", color=color, lw=5 if bad else 3, solid_capstyle="butt",
                    alpha=1.0 if bad else 0.6)
        points = sel & (hi == lo)
        ax.plot(mid[points], [y[k] for k in K[points]], "x" if bad else "o", color=color, ms=9 if bad else 5,
                mew=2.5, ls="none", label=("failed" if bad else "passed") if np.any(sel) else None)
    _log_x(ax, np.any(positive))
    ax.set_yticks(range(len(ks)))
    ax.set_yticklabels([str(k) for k in ks])
    ax.set_xlabel(r"$\delta$ (points: the grid; bars: strata of the continuous layer)")
    ax.set_ylabel("K")
    ax.set_title("where each (delta, K) test ran")
    if len(table):
        ax.legend(fontsize="small", loc="best")


def _log_x(ax: Any, any_point: bool) -> None:
    """A log delta axis, or a note where the run drew no (delta > 0, K) cell (e.g. layers L3-L6 only)."""
    if any_point:
        ax.set_xscale("log")
    else:
        ax.set_xticks([])
        ax.set_yticks([])
        ax.text(0.5, 0.5, "no (delta, K) cell in this run\n(see every test, by layer)", transform=ax.transAxes,
                ha="center", va="center", fontsize=11, color="0.4")


def _effect_panel(ax: Any, table: Table, value: str, threshold: str, ylabel: str, signed: bool) -> None:
    """``value / threshold`` of each cell over delta (beyond the dotted +-1: rejected); passing
    cells grey, failing ones red and named by their K."""
    v, t = table.columns[value], table.columns[threshold]
    mid, K, failed = table.columns["delta"], table.columns["K"], table.columns["failed"]
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = v / t
    shown = np.isfinite(ratio) & (mid > 0)
    for bad in (False, True):
        sel = shown & (failed == bad)
        ax.plot(mid[sel], ratio[sel], "x" if bad else "o", color=OKABE_ITO["vermillion"] if bad else "0.6",
                ms=9 if bad else 4, mew=2.5, ls="none", alpha=1.0 if bad else 0.7,
                label=("cell with a failed test" if bad else "passed") if np.any(sel) else None)
    for i in np.nonzero(shown & failed)[0][:12]:
        ax.annotate(f"K={K[i]}", (mid[i], ratio[i]), textcoords="offset points", xytext=(4, 4), fontsize=9)
    for level in ((1.0, -1.0) if signed else (1.0,)):
        ax.axhline(level, color="0.3", ls=":", lw=1.2)
    if signed:
        ax.axhline(0.0, color="0.5", lw=0.8)
    _log_x(ax, np.any(shown))
    ax.set_xlabel(r"$\delta$")
    ax.set_ylabel(ylabel)
    if np.any(shown):
        ax.legend(fontsize="small", loc="best")


def _tests_panel(ax: Any, table: Table, family_alpha: float) -> None:
    """Every statistical test (and failed contract check) by layer: -log10 of its Holm-adjusted
    p-value; the dashed line is the family-wise rate, beyond it a test failed (red, named)."""
    layers = [x for x in _LAYER_ROWS if x in set(table.columns["layer"].tolist())] or list(_LAYER_ROWS)
    y = {x: i for i, x in enumerate(layers)}
    score, failed, layer = table.columns["score"], table.columns["failed"], table.columns["layer"]
    rng = np.random.default_rng(0)  # a fixed jitter: the same picture every time
    jitter = rng.uniform(-0.25, 0.25, size=len(table))
    ys = np.array([y.get(x, len(layers)) for x in layer], float) + jitter
    for bad in (False, True):
        sel = failed == bad
        ax.plot(score[sel], ys[sel], "x" if bad else "o", color=OKABE_ITO["vermillion"] if bad else "0.6",
                ms=9 if bad else 4, mew=2.5, ls="none", alpha=1.0 if bad else 0.6,
                label=("failed" if bad else "passed") if np.any(sel) else None)
    ax.axvline(-math.log10(family_alpha), color="0.3", ls="--", lw=1.2)
    ax.set_xscale("symlog", linthresh=10.0)  # linear to 1e-10, then by decades of decades (p down to 1e-300)
    ax.set_xlim(left=0.0)
    order = np.argsort(-score)
    bad_rows = [i for i in order if failed[i]]
    for j, i in enumerate(bad_rows[:MAX_LABELS]):
        ax.annotate(table.columns["name"][i][:60], (score[i], ys[i]), textcoords="offset points",
                    xytext=(-6, 6 if j % 2 == 0 else -14), fontsize=8, ha="right")
    if len(bad_rows) > MAX_LABELS:
        ax.text(0.99, 0.01, f"+ {len(bad_rows) - MAX_LABELS} more failing", transform=ax.transAxes, ha="right",
                va="bottom", fontsize=9)
    ax.set_yticks(range(len(layers)))
    ax.set_yticklabels(layers)
    ax.set_ylim(-0.6, len(layers) - 0.4)
    ax.set_xlabel(r"$-\log_{10}$ Holm-adjusted p (dashed: the family-wise rate)")
    ax.set_title("every test, by layer")
    if len(table):
        ax.legend(fontsize="small", loc="upper right")


def draw_report_figure(data: FigureData) -> Figure:
    """Four panels: the (delta, K) map of the grid and strata (failing cells red); every test by
    layer and Holm-adjusted p-value; measured - declared acceptance and the PIT KS distance of each
    (delta, K) cell over delta, divided by their rejection thresholds."""
    main, tests = data.main, data.tables.get("tests")
    with style_context():
        fig, axes = new_figure(2, 2, width=14.0, height=10.0)
        _map_panel(axes[0, 0], main)
        if tests is not None:
            _tests_panel(axes[0, 1], tests, float(data.meta.get("family_alpha", 1e-3)))
        _effect_panel(axes[1, 0], main, "acc_gap", "acc_threshold", "(measured - declared acceptance) / threshold",
                      True)
        _effect_panel(axes[1, 1], main, "pit_ks", "pit_threshold", "PIT KS distance / threshold", False)
        fig.suptitle(_title(data))
        fig.tight_layout()
    return fig


def _title(data: FigureData) -> str:
    head = f"{data.meta.get('verifier', '?')} on {data.meta.get('suite', '?')}"
    if data.meta.get("passed"):
        return f"{head}: PASS"
    by_layer: dict[str, int] = {}
    for note in data.notes:
        by_layer[note.split()[0]] = by_layer.get(note.split()[0], 0) + 1
    ks = data.meta.get("failing_K") or []
    where = f"; failing K: {', '.join(map(str, ks))}" if ks else ""
    layers = ", ".join(f"{layer} {n}" for layer, n in sorted(by_layer.items()))
    n = len(data.notes)
    return f"{head}: FAIL, {n} failing test{'' if n == 1 else 's'} (by layer: {layers}){where}"


def report_png(report: Any) -> bytes:
    """The figure of ``report`` as PNG bytes."""
    return _png_bytes(draw_report_figure(compute_report_figure(report)))


def save_report_png(report: Any, path: str) -> str:
    """The figure of ``report`` as a PNG at ``path``."""
    with open(path, "wb") as handle:
        handle.write(report_png(report))
    return path


def _png_bytes(fig: Any) -> bytes:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()


def _number(x: float, digits: str = ".4g") -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, digits)


def report_html(report: Any) -> str:
    """One self-contained HTML page: verdict, the figure (inline PNG), every failing test with
    where it ran (layer, cell, K, delta range), its statistic, threshold and p-values, and every
    localised failure region in the report's own words ("delta = 0", "delta in [lo, hi)")."""
    data = compute_report_figure(report)
    image = base64.b64encode(_png_bytes(draw_report_figure(data))).decode("ascii")
    esc = html.escape

    def where(r: Any) -> tuple[str, str]:
        K, lo, hi = r.where
        delta = "-" if math.isnan(lo) else (f"{lo:.4g}" if lo == hi else f"[{lo:.4g}, {hi:.4g})")
        return ("-" if K is None else str(K)), delta

    rows = "".join(
        f"<tr><td>{esc(r.layer)}</td><td>{esc(r.cell)}</td><td>{esc(r.test)}</td><td>{where(r)[0]}</td>"
        f"<td>{esc(where(r)[1])}</td><td>{_number(r.statistic)}</td><td>{_number(r.threshold)}</td>"
        f"<td>{_number(r.p_value, '.3g')}</td><td>{_number(r.extra.get('p_holm', math.nan), '.3g')}</td>"
        f"<td>{esc(r.note)}</td></tr>"
        for r in report.results if not r.passed)
    regions = "".join(f"<li>{esc(loc.describe())}</li>" for loc in getattr(report, "localisations", []) or [])
    verdict = "PASS: no test rejected exactness" if report.passed else "FAIL: a test rejected exactness"
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>speccheck battery: {esc(report.verifier)}"
            f"</title></head><body><h1>{esc(report.verifier)} on {esc(report.suite)}</h1><p><b>{verdict}</b> "
            f"({len(report.results)} tests, family alpha {report.family_alpha:g}; {esc(_title(data))})</p>"
            f"<img alt='where the rule fails: the (delta, K) map, every test by layer, acceptance and PIT' "
            f"src='data:image/png;base64,{image}'>"
            f"<h2>Failing tests</h2><table border='1'><tr><th>layer</th><th>cell</th><th>test</th><th>K</th>"
            f"<th>delta</th><th>statistic</th><th>threshold</th><th>p</th><th>p (Holm)</th><th>note</th></tr>"
            f"{rows or ''}</table>"
            f"<h2>Localised failures</h2><ul>{regions or '<li>none</li>'}</ul></body></html>\n")
