"""RASS's solved-weight cache (~/.cache/speccheck): keyed so that a changed solver never reuses
weights it did not compute."""

from __future__ import annotations

from speccheck.verifiers import rass


def test_weight_cache_file_changes_with_every_solver_source(monkeypatch, tmp_path):
    # K > 16 is solved by rass_dual on exact's masses: a key over rass.py alone (as before) let a
    # changed rass_dual reuse the old solver's weights
    monkeypatch.setenv("SPECCHECK_CACHE_DIR", str(tmp_path))
    sources = rass._solver_sources()
    assert {"rass.py", "rass_dual.py", "rass_certificate.py", "exact.py", "normal.py"} <= {p.name for p in sources}
    before = rass._cache_file(64)
    assert before.parent == tmp_path and rass._cache_file(64) == before
    for name in ("rass_dual.py", "exact.py"):
        changed = tmp_path / name
        changed.write_bytes(b"# another solver\n")
        swapped = [changed if p.name == name else p for p in sources]
        monkeypatch.setattr(rass, "_solver_sources", lambda swapped=swapped: swapped)
        assert rass._cache_file(64) != before, name
