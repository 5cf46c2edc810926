"""`speccheck reproduce`: the registry of checked-in artefacts and its thin regenerators (issue 16)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from speccheck import reproduce as rp
from speccheck.errors import InputError, LoadError

ROOT = Path(__file__).resolve().parents[1]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="speccheck")
    from speccheck.cli.reproduce import add_parser

    add_parser(parser.add_subparsers(dest="command", required=True))
    return parser


def test_registry_entries_are_complete():
    assert {"golden", "paper-claims", "mcrs-gap-table", "mcrs-minmax-table", "mcrs-policies", "figures",
            "protocol-sensitivity", "mcrs-speedups", "e2e", "battery-reports", "kill-matrix",
            "calibration"} <= set(rp.REGISTRY)
    for name, artefact in rp.REGISTRY.items():
        assert artefact.name == name and artefact.writes and artefact.duration.startswith("~")
        assert callable(rp.resolve(artefact.func)), name              # the regenerator itself always exists
        assert all(":" in spec for spec in artefact.needs)
        assert artefact.summary and not artefact.summary.endswith(":"), name


def test_battery_artefacts_cover_every_built_in_rule():
    from speccheck.verifiers.registry import BUILTIN

    assert rp.BUILTIN_RULES == tuple(BUILTIN)


def test_list_names_every_artefact(capsys):
    args = _parser().parse_args(["reproduce", "--list"])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    for name, artefact in rp.REGISTRY.items():
        assert name in out and artefact.writes[0] in out


def test_bad_requests_are_refused(tmp_path):
    parser = _parser()
    with pytest.raises(InputError, match="unknown artefact 'nope'"):
        args = parser.parse_args(["reproduce", "nope"])
        args.func(args)
    with pytest.raises(InputError, match="NAME or --list"):
        args = parser.parse_args(["reproduce"])
        args.func(args)
    a_file = tmp_path / "f"
    a_file.write_text("")
    with pytest.raises(InputError, match="--out"):
        args = parser.parse_args(["reproduce", "golden", "--out", str(a_file)])
        args.func(args)
    with pytest.raises(LoadError, match="no_such_module"):
        rp.resolve("no_such_module:f")
    with pytest.raises(LoadError, match="has no function"):
        rp.resolve("speccheck.reproduce:no_such_function")


def test_paper_claims_byte_identical(tmp_path):
    """`reproduce paper-claims` rewrites theory/paper_claims.md exactly (about a minute of theory)."""
    assert not rp.missing_needs(rp.REGISTRY["paper-claims"])
    written = rp.reproduce("paper-claims", tmp_path)
    assert written == [tmp_path / "theory" / "paper_claims.md"]
    assert written[0].read_bytes() == (ROOT / "theory" / "paper_claims.md").read_bytes()


def test_mcrs_speedup_table_from_the_checked_in_sweeps(tmp_path):
    """The table logic moved out of validation/run_mcrs_speedups.py gives the committed table."""
    rows = rp.mcrs_speedup_rows(ROOT / "validation" / "mcrs_speedups")
    assert len(rows) == len(rp.MCRS_SPEEDUP_PRESETS) * len(rp.MCRS_SPEEDUP_CELLS)
    out_csv, out_md = tmp_path / "t.csv", tmp_path / "t.md"
    rp.write_mcrs_speedups(rows, out_csv, out_md, rp.MCRS_SPEEDUP_TRAJECTORIES)
    assert out_csv.read_bytes() == (ROOT / "validation" / "mcrs_speedups.csv").read_bytes()
    committed = (ROOT / "validation" / "mcrs_speedups.md").read_text().splitlines()
    ours = out_md.read_text().splitlines()
    assert len(ours) == len(committed)
    # line 3 names the command that made the file (it was the deleted script)
    assert [a for i, a in enumerate(ours) if i != 2] == [b for i, b in enumerate(committed) if i != 2]


def test_e2e_runs_match_the_checked_in_summaries():
    """Every validation/e2e/*.json is one E2E_RUNS entry, with the same cells and settings."""
    runs = {name: (fields, verifiers, Ks, Ls, epss) for name, fields, verifiers, Ks, Ls, epss in rp.E2E_RUNS}
    files = {p.stem: p for p in (ROOT / "validation" / "e2e").glob("*.json")}
    assert set(runs) == set(files)
    for name, (fields, verifiers, Ks, Ls, epss) in runs.items():
        reports = json.loads(files[name].read_text())
        configs = [r["config"] for r in reports]
        cells = {(c["verifier"], c["K"], c["L"], c["eps"]) for c in configs}
        assert cells == {(v, K, L, e) for e in epss for v in verifiers for K in Ks for L in Ls}, name
        expected = {"figures": "figures/e2e", **fields}
        for config in configs:
            assert {k: config[k] for k in expected} == expected, name


def test_no_regeneration_scripts_left_in_output_folders():
    for old in ("validation/run_gmm_protocol_sensitivity.py", "validation/run_mcrs_speedups.py",
                "validation/e2e/commands.sh"):
        assert not (ROOT / old).exists(), old


def test_cli_lists_the_registry(capsys):
    from speccheck.cli import main

    assert main(["reproduce", "--list"]) == 0
    assert "paper-claims" in capsys.readouterr().out
    assert main(["reproduce", "no-such-artefact"]) == 2
    assert "unknown artefact" in capsys.readouterr().err


def test_executor_options_only_for_unit_artefacts(tmp_path, monkeypatch):
    from speccheck import cli

    assert cli.main(["reproduce", "golden", "--workers", "2", "--out", str(tmp_path)]) == 2
    assert cli.main(["reproduce", "kill-matrix", "--workers", "0", "--out", str(tmp_path)]) == 2
    calls = []

    def fake_kill_matrix(root, executor=None):
        calls.append(type(executor).__name__)
        return [root / "validation" / "reports" / "kill_matrix.txt"]

    monkeypatch.setattr(rp, "kill_matrix", fake_kill_matrix)
    monkeypatch.setattr(rp, "resolve", lambda spec: fake_kill_matrix)
    assert cli.main(["reproduce", "kill-matrix", "--out", str(tmp_path)]) == 0
    assert calls == ["InProcessExecutor"]


def test_research_regenerators_come_from_the_source_checkout():
    """golden, paper-claims and the MCRS tables are research code (research/, not in the wheel):
    found from this checkout whatever the working directory; a wheel reports them missing."""
    assert rp.source_checkout() == ROOT
    research = sorted(n for n, a in rp.REGISTRY.items() if any(s.startswith("research.") for s in a.needs))
    assert research == ["golden", "mcrs-gap-table", "mcrs-minmax-table", "paper-claims"]
    assert not any(rp.missing_needs(rp.REGISTRY[n]) for n in research)
