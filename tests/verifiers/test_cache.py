"""The user cache of solved tables is never trusted as it stands (issue 27.8): a file must carry
the checksum of its table, and every cached row passes a certificate before a kernel uses it. A
valid-looking file with poor weights or policies (acceptance 0.975 -> 0.13, exit 0 before) is
solved again."""

from __future__ import annotations

import numpy as np
import pytest

from speccheck.verifiers import _cache
from speccheck.verifiers import mcrs as mcrs_mod
from speccheck.verifiers import rass as rass_mod

K_RASS = 20  # solved by the dual solver above K = 16 (as K = 65 is); shipped, so the tests hide the package table
DELTA = 1.0


def test_a_table_round_trips_and_anything_else_is_ignored(tmp_path):
    table = np.random.default_rng(0).random((5, 3))
    path = tmp_path / "t.npz"
    _cache.save(path, table)
    np.testing.assert_array_equal(_cache.load(path, (5, 3)), table)
    assert _cache.load(path, (5, 4)) is None  # another shape
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    (tmp_path / "flipped.npz").write_bytes(bytes(raw))
    assert _cache.load(tmp_path / "flipped.npz", (5, 3)) is None
    np.savez(tmp_path / "forged.npz", table=table * 0.5, sha256=np.array(_cache.checksum(table)))
    assert _cache.load(tmp_path / "forged.npz", (5, 3)) is None  # the checksum is not the table's
    np.save(tmp_path / "old.npy", table)  # the format before checksums
    assert _cache.load(tmp_path / "old.npy", (5, 3)) is None
    (tmp_path / "empty.npz").write_bytes(b"")
    assert _cache.load(tmp_path / "empty.npz", (5, 3)) is None
    assert not list(tmp_path.glob("*.tmp"))


@pytest.fixture
def fresh_rass(monkeypatch, tmp_path):
    """RASS at K_RASS with no package table, no weights in memory, the cache in tmp_path; the
    number of solves made."""
    monkeypatch.setenv("SPECCHECK_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(rass_mod, "_shipped", lambda K: None)
    monkeypatch.setattr(rass_mod, "_OMEGA", {})
    monkeypatch.setattr(rass_mod, "_UNCHECKED", {})
    from speccheck import theory

    solves = []
    real = theory.rank_weights
    monkeypatch.setattr(theory, "rank_weights", lambda d, K: solves.append((d, K)) or real(d, K))
    return solves


def _forge_rass(row: np.ndarray) -> int:
    gi = int(np.searchsorted(rass_mod.DELTA_GRID, DELTA))
    table = np.full((rass_mod.DELTA_GRID.size, K_RASS), np.nan)
    table[gi] = row
    _cache.save(rass_mod._cache_file(K_RASS), table)
    return gi


def test_rass_reuses_certified_cached_weights_without_solving(fresh_rass, monkeypatch):
    gi = int(np.searchsorted(rass_mod.DELTA_GRID, DELTA))
    solved = rass_mod.grid_weights(np.array([gi]), K_RASS)
    assert len(fresh_rass) == 1
    monkeypatch.setattr(rass_mod, "_OMEGA", {})  # a new process: the weights come from the file
    monkeypatch.setattr(rass_mod, "_UNCHECKED", {})
    np.testing.assert_array_equal(rass_mod.grid_weights(np.array([gi]), K_RASS), solved)
    assert len(fresh_rass) == 1


def test_rass_solves_again_where_cached_weights_fail_their_certificate(fresh_rass):
    from speccheck.theory import acceptance_rass
    from speccheck.verifiers import RASS

    last_rank = np.zeros(K_RASS)
    last_rank[-1] = 1.0  # a probability vector: the kernel would stay exact, its acceptance would fall
    _forge_rass(last_rank)
    used = rass_mod.rass_weights(np.array([DELTA]), K_RASS)[0]
    assert len(fresh_rass) == 1 and not np.array_equal(used, last_rank)
    declared = float(RASS().acceptance(np.array([DELTA]), K_RASS)[0])
    assert declared == pytest.approx(float(acceptance_rass(DELTA, K_RASS)), abs=1e-9)
    assert declared > float(acceptance_rass(DELTA, K_RASS, last_rank)) + 0.1


def test_rass_refuses_cached_weights_outside_the_simplex(fresh_rass):
    bad = np.full(K_RASS, 2.0 / K_RASS)
    bad[0] = -1.0 + 2.0 / K_RASS + 1.0  # sums to 1, one weight negative
    bad[1] = -0.5
    _forge_rass(bad / bad.sum())
    used = rass_mod.rass_weights(np.array([DELTA]), K_RASS)[0]
    assert len(fresh_rass) == 1 and (used >= 0).all()


def test_mcrs_solves_again_where_a_cached_policy_fails_its_check(monkeypatch, tmp_path):
    """G = 8 is not shipped: its policies come from the user cache. A forged file (valid checksum,
    every cell choosing the last rank) is checked by exact acceptance and replaced by a solve."""
    from speccheck.verifiers.mcrs import grid_index

    theory_mcrs = mcrs_mod._theory  # the module the kernel solves with

    monkeypatch.setenv("SPECCHECK_CACHE_DIR", str(tmp_path))
    K, G = 2, 8
    gi = int(grid_index(np.array([DELTA]))[0])
    forged = np.full((mcrs_mod.TOP_INDEX, G, K), np.nan)
    forged[gi] = 0.0
    forged[gi, :, -1] = 1.0
    _cache.save(mcrs_mod._cache_file(K, G), forged)
    solves = []
    real = theory_mcrs.mcrs_policy
    monkeypatch.setattr(theory_mcrs, "mcrs_policy", lambda *a, **k: solves.append(a) or real(*a, **k))
    pol = mcrs_mod._PolicyTable(K, G).policy(gi)
    d = float(mcrs_mod.DELTA_GRID[gi])
    assert len(solves) == 1 and not np.array_equal(pol.pi, forged[gi])
    assert theory_mcrs.acceptance_of_policy(d, pol) >= theory_mcrs.check_level(d, K, G)
