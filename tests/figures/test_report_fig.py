"""The battery's failure report (issue 28.4): measured vs declared acceptance and the PIT deviation
over (delta, K), failing cells marked, as a table, a PNG and one self-contained HTML page."""

from __future__ import annotations

import base64
import html.parser

import numpy as np

from speccheck.figures.report_fig import compute_report_figure, report_html, save_report_png
from speccheck.validation.results import BatteryReport, TestResult


def _report() -> BatteryReport:
    results = []
    for d in (0.05, 1.0):
        for K in (1, 4):
            biased = d == 1.0 and K == 4
            cell = f"delta={d:g},K={K}"
            results.append(TestResult(cell, "ks", 0.03 if biased else 0.004, 0.01, 1e-9 if biased else 0.4, 0.012,
                                      16384, passed=not biased, layer="L1"))
            results.append(TestResult(cell, "acceptance=declared", 0.002, 0.005, 0.5, 0.006, 16384, layer="L2",
                                      extra={"count": 16384 * 0.6, "p0": 0.598}))
    results.append(TestResult("calls<=16", "ks", 0.01, 0.02, 0.3, 0.02, 500, layer="L6"))  # not a (delta, K) cell
    return BatteryReport(verifier="tests.api_rules:Biased <script>", suite="tiny", seed=5, family_alpha=1e-3,
                         per_test_alpha=1e-4, device="cpu", results=results)


def test_the_table_has_one_row_per_cell_with_failures_marked():
    data = compute_report_figure(_report())
    cols = data.main.columns
    assert list(zip(cols["delta"], cols["K"])) == [(0.05, 1), (0.05, 4), (1.0, 1), (1.0, 4)]
    assert cols["failed"].tolist() == [False, False, False, True]
    np.testing.assert_allclose(cols["acc_gap"], 0.6 - 0.598)
    np.testing.assert_allclose(cols["pit_ks"], [0.004, 0.004, 0.004, 0.03])
    assert data.notes == ["L1 delta=1,K=4 ks"] and data.meta["passed"] is False


def test_png_and_html_are_written_and_the_html_is_self_contained(tmp_path):
    path = save_report_png(_report(), str(tmp_path / "r.png"))
    assert open(path, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    page = report_html(_report())
    assert "<script>" not in page and "&lt;script&gt;" in page  # names are escaped
    assert "FAIL" in page and "delta=1,K=4" in page

    class Images(html.parser.HTMLParser):
        sources: list = []

        def handle_starttag(self, tag, attrs):
            if tag == "img":
                self.sources.append(dict(attrs)["src"])

    parser = Images()
    parser.feed(page)
    (src,) = parser.sources
    assert src.startswith("data:image/png;base64,")
    assert base64.b64decode(src.split(",", 1)[1])[:4] == b"\x89PNG"


def test_the_battery_command_writes_the_html_page_and_the_plot(tmp_path, capsys):
    """``speccheck battery --html PATH --plot PATH``: a biased rule's page lists its failing tests
    and inlines the figure; the exit code is the verdict's (1), whatever is drawn."""
    from tests.cli_support import run_cli, tiny_suite_text, write_suite

    suite = write_suite(tmp_path, tiny_suite_text("fig"))
    page, png = tmp_path / "r.html", tmp_path / "r.png"
    code, _, err = run_cli(["battery", "--verifier", "tests.api_rules:Biased", "--suite", suite, "--html", str(page),
                            "--plot", str(png), "--no-progress"], capsys)
    assert code == 1, err
    text = page.read_text()
    assert "FAIL" in text and "data:image/png;base64," in text and "<td>L1</td>" in text
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    (tmp_path / "a-file").write_text("")
    code, _, err = run_cli(["battery", "--verifier", "dgrs", "--suite", suite, "--html",
                            str(tmp_path / "a-file" / "r.html"), "--no-progress"], capsys)
    assert code == 2 and "--html" in err  # checked before any work
    code, _, err = run_cli(["battery", "--verifier", "dgrs", "--suite", suite, "--html", str(page), "--plot",
                            str(page)], capsys)
    assert code == 2 and "--plot" in err and "--html" in err
