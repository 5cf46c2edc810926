"""The SQLite results store: one row per unit, resume, refusals of other specs, schemas and damaged files."""

import os
import sqlite3

import pytest

from speccheck.errors import FileFormatError, InputError
from speccheck.scale.store import SCHEMA_VERSION, ResultsStore, canonical_json, spec_hash

SPEC = {"protocol": {"steps": 6, "eps": 0.1}, "trajectories": 3, "seed": 0}


def _fill(path, n=3):
    with ResultsStore(path) as st:
        digest = st.open_job("j", "sweep", SPEC)
        for i in range(n):
            st.put("j", f"u/{i}", identity=["u", i], seed=100 + i, spec_hash=digest, wall_s=0.5, worker="w",
                   result={"value": i / 7, "nan": float("nan")})
    return path


def test_roundtrip_and_once_per_unit(tmp_path):
    path = _fill(str(tmp_path / "s.sqlite"))
    with ResultsStore(path) as st:
        assert st.stored_keys("j") == {"u/0", "u/1", "u/2"}
        digest = st.open_job("j", "sweep", SPEC)
        # a unit that ran twice (a retried worker, a second client) is stored once: the first copy stays
        assert st.put("j", "u/1", identity=["u", 1], seed=101, spec_hash=digest, wall_s=9.0, worker="w2",
                      result={"value": -1.0}) is False
        units = st.units("j")
        assert [u.unit_key for u in units] == ["u/0", "u/1", "u/2"]
        assert units[1].result["value"] == 1 / 7 and units[1].worker == "w" and units[1].seed == 101
        assert units[1].identity == ["u", 1] and units[1].spec_hash == spec_hash(SPEC)
        assert units[1].result["nan"] != units[1].result["nan"]  # NaN survives as NaN, not as a string
        assert st.jobs()[0]["units"] == 3 and st.job("j")["spec"] == SPEC
    assert sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_canonical_json_is_order_free():
    assert canonical_json({"b": 1, "a": [1.5, "x"]}) == canonical_json({"a": [1.5, "x"], "b": 1})
    assert spec_hash({"a": 1, "b": 2}) == spec_hash({"b": 2, "a": 1}) != spec_hash({"a": 1, "b": 3})


def test_another_spec_is_refused_naming_the_difference(tmp_path):
    path = _fill(str(tmp_path / "s.sqlite"))
    with ResultsStore(path) as st:
        with pytest.raises(FileFormatError, match=r"another spec.*trajectories': \(3, 5\).*--name"):
            st.open_job("j", "sweep", {**SPEC, "trajectories": 5})
        with pytest.raises(FileFormatError, match=r"protocol.steps': \(6, 30\)"):
            st.open_job("j", "sweep", {**SPEC, "protocol": {"steps": 30, "eps": 0.1}})
        with pytest.raises(FileFormatError, match="kind"):
            st.open_job("j", "calibration", SPEC)
        with pytest.raises(InputError, match="no job 'nope'"):
            st.job("nope")


def test_other_schema_version_is_refused(tmp_path):
    path = _fill(str(tmp_path / "s.sqlite"))
    db = sqlite3.connect(path)
    db.execute("UPDATE meta SET value='0' WHERE key='schema_version'")
    db.commit()
    db.close()
    with pytest.raises(FileFormatError, match=rf"s.sqlite has schema version 0; this speccheck reads version "
                                              rf"{SCHEMA_VERSION}"):
        ResultsStore(path)


def test_foreign_sqlite_and_non_sqlite_files_are_refused(tmp_path):
    other = tmp_path / "other.sqlite"
    db = sqlite3.connect(other)
    db.execute("CREATE TABLE t (x)")
    db.commit()
    db.close()
    with pytest.raises(FileFormatError, match="not a speccheck results store"):
        ResultsStore(str(other))
    text = tmp_path / "notes.sqlite"
    text.write_text("rule,K,L\n")
    with pytest.raises(FileFormatError, match=r"notes.sqlite: is not a SQLite file.*mv "):
        ResultsStore(str(text))
    with pytest.raises(InputError, match="is a folder"):
        ResultsStore(str(tmp_path))


def test_empty_file_is_a_new_store(tmp_path):
    """A client killed right after creating the file leaves 0 bytes: a valid, empty store."""
    path = tmp_path / "s.sqlite"
    path.write_bytes(b"")
    _fill(str(path), n=1)
    with ResultsStore(str(path)) as st:
        assert st.stored_keys("j") == {"u/0"}


def _checkpointed(tmp_path, n=200):
    path = _fill(str(tmp_path / "s.sqlite"), n=n)
    db = sqlite3.connect(path)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.execute("PRAGMA journal_mode=DELETE")
    db.close()
    assert not os.path.exists(path + "-wal")
    return path


def test_truncated_store_is_refused(tmp_path):
    path = _checkpointed(tmp_path)
    size = os.path.getsize(path)
    with open(path, "r+b") as fh:
        fh.truncate(size // 2)
    with pytest.raises(FileFormatError, match=r"s.sqlite: is truncated .* and rerun"):
        ResultsStore(path)


def test_corrupted_store_is_refused(tmp_path):
    path = _checkpointed(tmp_path)
    size = os.path.getsize(path)
    with open(path, "r+b") as fh:  # overwrite pages after the first one with garbage
        fh.seek(4096)
        fh.write(b"\xa5" * (size - 4096))
    with pytest.raises(FileFormatError, match=r"s.sqlite: (is corrupt|cannot be read as SQLite)"):
        ResultsStore(path)


def test_missing_store_for_reading(tmp_path):
    with pytest.raises(FileFormatError, match="does not exist"):
        ResultsStore(str(tmp_path / "none.sqlite"), create=False)
