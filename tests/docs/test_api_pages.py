"""docs/api/*.md are generated from the code (docs/api/_generate.py): they must be up to date."""

import importlib.util
import subprocess
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs" / "api"


def _generator():
    spec = importlib.util.spec_from_file_location("_generate_api_docs", DOCS / "_generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_api_pages_are_up_to_date_with_the_code():
    # a fresh process: the pages show module constants, which other tests in this process may
    # have patched or filled (one did: a stale 'targets' page under xdist)
    done = subprocess.run([sys.executable, str(DOCS / "_generate.py"), "--check"], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, f"{done.stdout}{done.stderr}: run python docs/api/_generate.py"


def test_every_public_module_has_a_page_listing_its_names():
    gen = _generator()
    assert set(gen.PAGES) == {"speccheck", "api", "sampler", "theory", "verifiers", "validation", "targets",
                              "reports", "tables"}
    sampler = (DOCS / "sampler.md").read_text()
    for name in ("SpeculativeSampler", "sample", "PlainResult", "run_cells"):
        assert f"`{name}(" in sampler
    top = (DOCS / "speccheck.md").read_text()
    assert "### `sample(target: object, schedule: Schedule, n: int, *, generator:" in top
    for name in ("speedup", "sweep", "theory_table", "export_table", "calibrate"):  # issue 37.3
        assert f"### `{name}(" in top, name
    reports = (DOCS / "reports.md").read_text()
    for name in ("class `BatteryReport(", "class `TestResult(", "class `Localisation(", "`format_report(",
                 "`junit_xml(", "`compute_report_figure(", "`draw_report_figure(", "`report_html(", "`report_png("):
        assert name in reports, name
    tables = (DOCS / "tables.md").read_text()
    assert "### `theory_table(" in tables and "### `export_table(" in tables


def test_top_level_names_resolve():
    import speccheck

    for name in speccheck.__all__:
        assert getattr(speccheck, name) is not None, name
    assert speccheck.sweep.__module__ == "speccheck.api" and speccheck.speedup.__module__ == "speccheck.api"
