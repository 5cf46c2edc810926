"""The hostile cases of issue 37 (items 9-14), one test each, with the outcome each must get:
stored verdicts keyed by what the run depended on, outputs that would overwrite an input, no
verdict for the code under test's escapes and for resources, a verifier's forked grandchild,
bounded suites, and inputs reported as what they are. In-process calls of ``speccheck.cli.main``
unless a test needs a process of its own."""

from __future__ import annotations

import os

import pytest

from tests.cli_support import run_cli, tiny_suite_text, write_suite


@pytest.fixture(scope="module")
def tiny_suite(tmp_path_factory):
    return write_suite(tmp_path_factory.mktemp("suite"), tiny_suite_text("tiny-37"))


# ----------------------------------------------------------------------------- item 10: outputs on inputs
@pytest.mark.parametrize("option", ["--json", "--html", "--plot", "--junit"])
@pytest.mark.parametrize("how", ["same", "symlink", "hardlink", "dotted"])
def test_an_output_naming_the_suite_is_refused_and_the_suite_kept(option, how, tmp_path, capsys):
    suite = write_suite(tmp_path, tiny_suite_text("kept"))
    before = open(suite).read()
    target = suite
    if how == "symlink":
        target = str(tmp_path / "link.toml")
        os.symlink(suite, target)
    elif how == "hardlink":
        target = str(tmp_path / "hard.toml")
        os.link(suite, target)
    elif how == "dotted":
        os.mkdir(tmp_path / "sub")
        target = str(tmp_path / "sub" / ".." / "tiny.toml")
    code, out, err = run_cli(["battery", "--verifier", "dgrs", "--suite", suite, option, target, "--no-progress"],
                             capsys)
    assert code == 2, (out, err)
    assert option in err and "--suite" in err, err
    assert open(suite).read() == before


def test_an_output_naming_the_verifiers_source_is_refused(tmp_path, capsys, monkeypatch):
    (tmp_path / "myrule37.py").write_text("from speccheck.verifiers.dgrs import DGRS as Rule\n")
    monkeypatch.chdir(tmp_path)
    before = (tmp_path / "myrule37.py").read_text()
    code, out, err = run_cli(["battery", "--verifier", "myrule37:Rule", "--suite", "smoke", "--json",
                              str(tmp_path / "myrule37.py"), "--no-progress"], capsys)
    assert code == 2 and "--json" in err and "--verifier" in err, (out, err)
    assert (tmp_path / "myrule37.py").read_text() == before


def test_an_output_naming_the_store_is_refused(tmp_path, tiny_suite, capsys):
    store = str(tmp_path / "s.sqlite")
    code, out, err = run_cli(["battery", "--verifier", "dgrs", "--suite", tiny_suite, "--store", store,
                              "--html", store, "--no-progress"], capsys)
    assert code == 2 and "--store" in err and "--html" in err, (out, err)
