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


def test_grid_log_table_rows_do_not_depend_on_what_was_filled_before(monkeypatch):
    """A row of the log-B grid tables holds the same bits whether its grid point was filled alone,
    with others, or after a grid point whose log-ratio is wide (K = 41, grid point 185: |log
    B_(g+1) - log B_g| > WIDE_LOG_RATIO, which used to switch the whole table's form), and a read
    of the other rows gives the same values: the replay of a call on a fresh instance is bit-identical."""
    import numpy as np
    import torch

    cpu = torch.device("cpu")
    K, others = 41, np.array([10, 100, 150])
    monkeypatch.setattr(rass, "_GRID_TABLES", type(rass._GRID_TABLES)())
    fresh = rass.grid_log_tables(K, cpu, others)
    rows = {g: (fresh.edges[fresh.slot[g]].clone(), fresh.nodes[fresh.slot[g]].clone()) for g in others}
    d = np.array([0.205, 2.01, 3.05])  # between grid points 10-11, 100-101, 150-151
    k0 = torch.as_tensor(np.floor((d - 12.0) * 32.0))
    read_fresh = rass.grid_log_b_fn(d, K, cpu).edges(k0, torch.arange(3))
    monkeypatch.setattr(rass, "_GRID_TABLES", type(rass._GRID_TABLES)())
    for g in (185, 150, 10, 100):  # the wide one first, then one at a time
        warm = rass.grid_log_tables(K, cpu, np.array([g]))
    assert warm.wide[185] and not warm.wide[others].any()
    for g in others:
        assert torch.equal(warm.edges[warm.slot[g]], rows[g][0]) and torch.equal(warm.nodes[warm.slot[g]], rows[g][1])
    assert torch.equal(rass.grid_log_b_fn(d, K, cpu).edges(k0, torch.arange(3)), read_fresh)
