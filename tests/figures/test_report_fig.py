"""The battery's failure report (issue 28.4): measured vs declared acceptance and the PIT deviation
over (delta, K), failing cells marked, as a table, a PNG and one self-contained HTML page."""

from __future__ import annotations

import base64
import html.parser

import numpy as np
import pytest

from speccheck.figures.report_fig import compute_report_figure, report_html, save_report_png
from speccheck.validation.results import BatteryReport, Localisation, TestResult


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


# ----------------------------------------------------------------------------- issue 37.2: where the rule fails
@pytest.fixture(scope="module")
def wrong_at_k3():
    """A rule wrong only at K = 3 on the smoke suite (its grid has K = 1, 2, 4: the failures are in
    the continuous layer's K = 3 strata, the wrapper at K = 3 and the sequence layer)."""
    import speccheck
    from tests.biased_rules import WrongAtK3

    outcome = speccheck.battery(WrongAtK3(), "smoke", isolate=False)
    assert outcome.verdict == "defect", outcome.reason
    return outcome.report


def test_a_rule_wrong_only_at_K3_fails_at_K3_in_the_figure(wrong_at_k3):
    data = compute_report_figure(wrong_at_k3)
    cols = data.main.columns
    failing = cols["failed"]
    assert failing.any() and set(cols["K"][failing].tolist()) == {3}  # drawn where it failed, nowhere else
    assert not cols["failed"][cols["K"] != 3].any()
    assert {1, 2, 4} <= set(cols["K"].tolist())  # the grid's K, all passing
    tests = data.tables["tests"].columns
    assert int(tests["failed"].sum()) == len(wrong_at_k3.failures)  # every failing test has a place
    assert set(tests["K"][tests["failed"]].tolist()) <= {3, -1}  # at K = 3, or a test without a K
    assert data.meta["failing_K"] == [3]
    assert report_png_bytes(wrong_at_k3)[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_failures_table_names_K_and_delta_range(wrong_at_k3):
    import pandas as pd

    frame = wrong_at_k3.to_frame()
    assert len(frame) == len(wrong_at_k3.results)
    assert list(frame.columns)[:7] == ["layer", "cell", "test", "kind", "K", "delta_lo", "delta_hi"]
    assert pd.api.types.is_integer_dtype(frame["K"]) and pd.api.types.is_float_dtype(frame["delta_lo"])
    failed = wrong_at_k3.to_frame(failures_only=True)
    assert len(failed) == len(wrong_at_k3.failures) and not failed["passed"].any()
    assert set(failed["K"].dropna().tolist()) == {3}
    strata = failed[(failed["layer"] == "L5") & failed["delta_lo"].notna()]
    assert len(strata) and (strata["delta_hi"] > strata["delta_lo"]).all()
    assert (failed["p_holm"] <= wrong_at_k3.family_alpha).all()  # the column the verdict reads
    grid = frame[frame["layer"] == "L1"]
    assert (grid["delta_lo"] == grid["delta_hi"]).all() and grid["K"].notna().all()


def test_localised_regions_are_where_the_rule_is_wrong(wrong_at_k3):
    assert wrong_at_k3.localisations
    for loc in wrong_at_k3.localisations:
        assert loc.K == 3 and loc.delta_hi > 0.3  # the rule is exact below delta = 0.3 and at other K
    page = report_html(wrong_at_k3)
    assert "<td>3</td>" in page and "failing K: 3" in page


def test_a_rule_wrong_only_in_small_calls_has_its_failing_test_drawn():
    import speccheck
    from tests.biased_rules import WrongInSmallCalls

    outcome = speccheck.battery(WrongInSmallCalls(), "gate", layers=["L6"], isolate=False)
    assert outcome.verdict == "defect", outcome.reason
    data = compute_report_figure(outcome.report)
    tests = data.tables["tests"].columns
    names = tests["name"][tests["failed"]].tolist()
    assert names and any("B <= 16" in name for name in names)
    assert (tests["score"][tests["failed"]] >= -np.log10(outcome.report.family_alpha)).all()
    assert len(data.main) == 0  # no (delta, K) cell ran: the figure still draws (a note in those panels)
    assert report_png_bytes(outcome.report)[:8] == b"\x89PNG\r\n\x1a\n"


def report_png_bytes(report):
    from speccheck.figures.report_fig import report_png

    return report_png(report)


def test_the_delta_zero_atom_reads_delta_equals_0():
    rep = _report()
    rep.localisations.append(Localisation(0.0, 0.0, 2, True, 4096, 1e-12, 1e-4, 1.0, 0.9, "declared", 0.2, "L5"))
    page = report_html(rep)
    assert "delta = 0, K = 2" in page and "[0, 0)" not in page
