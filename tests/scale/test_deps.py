"""What a stored result depends on (speccheck.scale.deps): the rule's digest is stable and found
without importing, a manifest records project files, distributions and declared variables, and
``stale`` names what changed."""

from __future__ import annotations

import importlib
import sys

from speccheck.scale import deps


def test_rule_digest_of_a_builtin_is_stable_without_speccheck_on_sys_path(monkeypatch):
    import os

    import speccheck

    first = deps.rule_digest("dgrs")
    root = os.path.dirname(os.path.dirname(os.path.realpath(speccheck.__file__)))  # speccheck not findable on sys.path
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p and os.path.realpath(p) != root])
    monkeypatch.chdir("/")
    assert deps.rule_digest("dgrs") == first  # an editable install's meta-path finder: no clock fallback
    assert deps.rule_digest("rmc") != first


def test_rule_digest_follows_the_rules_bytes(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "digest37.py").write_text("X = 1\n")
    importlib.invalidate_caches()
    first = deps.rule_digest("digest37:X")
    assert first == deps.rule_digest("digest37:X")
    (tmp_path / "digest37.py").write_text("X = 2\n")
    assert deps.rule_digest("digest37:X") != first
    assert "digest37.py" in deps.verifier_source_files("digest37:X")[0]


def test_manifest_records_project_files_data_dists_and_declared_variables(tmp_path, monkeypatch):
    pkg = tmp_path / "dep37pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("V = 1\n")
    (pkg / "table.csv").write_text("a,b\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    import dep37pkg  # noqa: F401
    import numpy  # noqa: F401

    monkeypatch.setenv("SPECCHECK_DIGEST_ENV", "DEP37_VAR")
    monkeypatch.setenv("DEP37_VAR", "one")
    recorded = deps.manifest()
    assert any(p.endswith("table.csv") for p in recorded["files"]) and "numpy" in recorded["dists"]
    assert recorded["env"]["DEP37_VAR"] == "one"
    assert deps.stale(recorded) == []
    (pkg / "table.csv").write_text("a,c\n")
    monkeypatch.setenv("DEP37_VAR", "two")
    changed = deps.stale(recorded)
    assert any("table.csv" in c for c in changed) and "environment variable DEP37_VAR" in changed
    assert deps.stale({**recorded, "dists": {"numpy": "0.0"}}) != []
    assert deps.stale({**recorded, "code": "old"}) != []
    elsewhere = {**recorded, "env": deps.declared_env(), "files": {"/no/such/host/path.py": "0" * 16}}  # another host
    assert deps.stale(elsewhere) == [] and deps.unseen(elsewhere) == ["/no/such/host/path.py"]
    sys.modules.pop("dep37pkg", None)
