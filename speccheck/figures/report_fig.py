"""A battery report a person would rather look at (issue 28.4): per (delta, K) cell, the measured
acceptance against the declared one (layer L2) and the PIT deviation, the KS distance of
u = Phi(s_out - delta) from U(0, 1) (layer L1), each against the threshold its test used, with
failing cells marked. ``compute_report_figure`` returns the table, ``draw_report_figure`` the
figure, ``write_report_html`` one self-contained HTML page (figure inlined, failing tests listed).
"""

from __future__ import annotations

import base64
import html
import io
import math
import re
from typing import TYPE_CHECKING, Any

import numpy as np

from speccheck.figures.base import FigureData
from speccheck.figures.style import CYCLE, OKABE_ITO, Table, new_figure, style_context

if TYPE_CHECKING:
    from matplotlib.figure import Figure

_CELL = re.compile(r"delta=([^,]+),K=(\d+)$")
ACCEPTANCE_TEST = "acceptance=declared"
PIT_TEST = "ks"


def _cell(name: str) -> tuple[float, int] | None:
    match = _CELL.match(name)
    return (float(match.group(1)), int(match.group(2))) if match else None


def compute_report_figure(report: Any) -> FigureData:
    """One row per (delta, K) cell of ``report`` (a :class:`~speccheck.validation.results.BatteryReport`)
    with an L1 PIT test or an L2 acceptance test: ``acc_gap`` = measured - declared acceptance
    and its test's threshold, ``pit_ks`` = the KS distance and its threshold, ``failed`` when
    either test (or any other test of the cell) failed. NaN where a cell has no such test."""
    rows: dict[tuple[float, int], dict] = {}
    for res in report.results:
        key = _cell(res.cell)
        if key is None:
            continue
        row = rows.setdefault(key, {"acc_gap": math.nan, "acc_threshold": math.nan, "pit_ks": math.nan,
                                    "pit_threshold": math.nan, "failed": False})
        row["failed"] |= not res.passed
        if res.layer == "L2" and res.test == ACCEPTANCE_TEST and res.n > 0:
            measured = float(res.extra.get("count", math.nan)) / res.n
            row["acc_gap"] = measured - float(res.extra.get("p0", math.nan))
            row["acc_threshold"] = res.threshold
        elif res.layer == "L1" and res.test == PIT_TEST:
            row["pit_ks"], row["pit_threshold"] = res.statistic, res.threshold
    keys = sorted(rows)
    columns = {"delta": np.array([k[0] for k in keys], float), "K": np.array([k[1] for k in keys], int)}
    for name in ("acc_gap", "acc_threshold", "pit_ks", "pit_threshold"):
        columns[name] = np.array([rows[k][name] for k in keys], float)
    columns["failed"] = np.array([rows[k]["failed"] for k in keys], bool)
    failing = [f"{r.layer} {r.cell} {r.test}" for r in report.results if not r.passed]
    return FigureData({"main": Table(columns)}, notes=failing,
                      meta={"verifier": report.verifier, "suite": report.suite, "passed": bool(report.passed)})


def _panel(ax: Any, table: Table, value: str, threshold: str, ylabel: str, signed: bool) -> None:
    delta, K, failed = table.columns["delta"], table.columns["K"], table.columns["failed"]
    shown = np.isfinite(table.columns[value]) & (delta > 0)
    for i, k in enumerate(np.unique(K[shown])):
        sel = shown & (K == k)
        order = np.argsort(delta[sel])
        x, y, t = delta[sel][order], table.columns[value][sel][order], table.columns[threshold][sel][order]
        color = CYCLE[i % len(CYCLE)]
        ax.plot(x, y, "o-", color=color, ms=4, lw=1.5, label=f"K = {k}")
        ax.plot(x, t, ":", color=color, lw=1.0)
        if signed:
            ax.plot(x, -t, ":", color=color, lw=1.0)
        bad = failed[sel][order]
        ax.plot(x[bad], y[bad], "x", color=OKABE_ITO["vermillion"], ms=10, mew=2.5)
    ax.set_xscale("log")
    ax.set_xlabel(r"$\delta$")
    ax.set_ylabel(ylabel)
    if signed:
        ax.axhline(0.0, color="0.5", lw=0.8)
    if np.any(shown):
        ax.legend(fontsize="small", ncol=2)


def draw_report_figure(data: FigureData) -> Figure:
    """Left: measured - declared acceptance per K over delta; right: PIT KS distance. Dotted:
    each test's rejection threshold; a red cross: a cell with a failing test."""
    with style_context():
        fig, (left, right) = new_figure(1, 2, width=12.0, height=4.8)
        _panel(left, data.main, "acc_gap", "acc_threshold", "measured - declared acceptance", True)
        _panel(right, data.main, "pit_ks", "pit_threshold", "PIT KS distance", False)
        verdict = "PASS" if data.meta.get("passed") else "FAIL"
        fig.suptitle(f"{data.meta.get('verifier', '?')} on {data.meta.get('suite', '?')}: {verdict}")
        fig.tight_layout()
    return fig


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
    fig.savefig(buf, format="png", dpi=110, metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()


def report_html(report: Any) -> str:
    """One self-contained HTML page: verdict, the figure (inline PNG), every failing test with its
    statistic, threshold and p-value, and every localised failure region."""
    data = compute_report_figure(report)
    image = base64.b64encode(_png_bytes(draw_report_figure(data))).decode("ascii")
    esc = html.escape
    rows = "".join(
        f"<tr><td>{esc(r.layer)}</td><td>{esc(r.cell)}</td><td>{esc(r.test)}</td><td>{r.statistic:.4g}</td>"
        f"<td>{r.threshold:.4g}</td><td>{r.p_value:.3g}</td><td>{esc(r.note)}</td></tr>"
        for r in report.results if not r.passed)
    regions = "".join(
        f"<li>K = {loc.K}, delta in [{loc.delta_lo:.4g}, {loc.delta_hi:.4g}): p = {loc.p_value:.3g}"
        f"{' (confirmed)' if loc.confirmed else ''}</li>" for loc in getattr(report, "localisations", []) or [])
    verdict = "PASS: no test rejected exactness" if report.passed else "FAIL: a test rejected exactness"
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>speccheck battery: {esc(report.verifier)}"
            f"</title></head><body><h1>{esc(report.verifier)} on {esc(report.suite)}</h1><p><b>{verdict}</b> "
            f"({len(report.results)} tests, family alpha {report.family_alpha:g})</p>"
            f"<img alt='measured vs declared acceptance and PIT deviation' src='data:image/png;base64,{image}'>"
            f"<h2>Failing tests</h2><table border='1'><tr><th>layer</th><th>cell</th><th>test</th><th>statistic"
            f"</th><th>threshold</th><th>p</th><th>note</th></tr>{rows or ''}</table>"
            f"<h2>Localised failures</h2><ul>{regions or '<li>none</li>'}</ul></body></html>\n")
