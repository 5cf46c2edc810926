"""RASS's solved-weight cache (~/.cache/speccheck): keyed so that a changed solver never reuses
weights it did not compute."""

from __future__ import annotations

from speccheck.verifiers import rass


def test_weight_cache_file_changes_with_every_solver_source(monkeypatch, tmp_path):
    # K > 16 is solved by rass/dual.py on exact's masses: a key over rass/core.py alone (as before)
    # let a changed dual solver reuse the old solver's weights
    monkeypatch.setenv("SPECCHECK_CACHE_DIR", str(tmp_path))
    sources = rass._solver_sources()
    named = {f"{p.parent.name}/{p.name}": p for p in sources}
    assert {"rass/core.py", "rass/dual.py", "rass/certificate.py", "theory/exact.py", "theory/normal.py"} <= set(named)
    before = rass._cache_file(64)
    assert before.parent == tmp_path and rass._cache_file(64) == before
    for name in ("rass/dual.py", "theory/exact.py"):
        changed = tmp_path / name.replace("/", "_")
        changed.write_bytes(b"# another solver\n")
        swapped = [changed if p == named[name] else p for p in sources]
        monkeypatch.setattr(rass, "_solver_sources", lambda swapped=swapped: swapped)
        assert rass._cache_file(64) != before, name


def test_grid_log_tables_keep_every_k_a_sampler_cycles_through(monkeypatch):
    """A sampler changes K from call to call: every K's log-B table keeps its rows (no refill,
    which four whole-grid tables did beyond four K), stored by the grid points used, and a row
    read later equals the row as first computed."""
    import numpy as np
    import torch

    monkeypatch.setattr(rass, "_GRID_TABLES", type(rass._GRID_TABLES)())
    cpu = torch.device("cpu")
    need = np.array([3, 10, 150])
    first = {K: rass.grid_log_tables(K, cpu, need) for K in range(2, 20)}
    rows = {K: tab.nodes[tab.slot[10]].clone() for K, tab in first.items()}
    for K in range(2, 20):
        tab = rass.grid_log_tables(K, cpu, need[:2])
        assert tab is first[K] and tab.used == 3 and tab.edges.shape[0] < rass.DELTA_GRID.size
        assert torch.equal(tab.nodes[tab.slot[10]], rows[K])
    tab = rass.grid_log_tables(5, cpu, np.arange(40))  # growing keeps the rows already there
    assert tab.used == 41 and torch.equal(tab.nodes[tab.slot[10]], rows[5])
