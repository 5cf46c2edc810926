"""One durable results store: a SQLite file (WAL journal) holding one row per unit of work.

Layout (``SCHEMA_VERSION`` 1):

- ``meta(key, value)``: ``schema_version``, ``created_with`` (code version);
- ``jobs(name, kind, spec, spec_hash, created_at)``: a job is a named set of units sharing one
  spec (a sweep's protocol, a calibration's suite); reopening a job with another spec is refused;
- ``units(job, unit_key, identity, seed, spec_hash, code_version, wall_s, worker, stored_at,
  result)``: primary key (job, unit_key); each row is written once, in one transaction, with
  ``INSERT OR IGNORE``, so a unit that ran twice (a retried worker, two clients) is stored once;
- ``unit_deps(job, unit_key, manifest)``: what the unit's run depended on
  (:func:`speccheck.scale.deps.manifest`), written with its row; a store without it (older) has
  none recorded, and the table is added on the next write.

Durability: SQLite commits are atomic, so a client killed at any point leaves either the whole
row or nothing; a rerun skips the stored units. A file that is not SQLite, is truncated or fails
``PRAGMA quick_check`` is refused with :class:`~speccheck.errors.FileFormatError` naming the file
and what to do; so is a store of another schema version. Only the client writes the store
(workers return records to it), so the file need not be visible to the workers.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import sqlite3
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any, Iterable, Optional

from speccheck.errors import FileFormatError, InputError

SCHEMA_VERSION = 1
_SQLITE_MAGIC = b"SQLite format 3\x00"
_BUSY_TIMEOUT_S = 120.0

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS jobs (name TEXT PRIMARY KEY, kind TEXT NOT NULL, spec TEXT NOT NULL, "
    "spec_hash TEXT NOT NULL, created_at REAL NOT NULL)",
    "CREATE TABLE IF NOT EXISTS units (job TEXT NOT NULL REFERENCES jobs(name), unit_key TEXT NOT NULL, "
    "identity TEXT NOT NULL, seed INTEGER NOT NULL, spec_hash TEXT NOT NULL, code_version TEXT NOT NULL, "
    "wall_s REAL NOT NULL, worker TEXT NOT NULL, stored_at REAL NOT NULL, result TEXT NOT NULL, "
    "PRIMARY KEY (job, unit_key))",
    "CREATE TABLE IF NOT EXISTS unit_deps (job TEXT NOT NULL, unit_key TEXT NOT NULL, manifest TEXT NOT NULL, "
    "PRIMARY KEY (job, unit_key))",
)


def canonical_json(value: Any) -> str:
    """Deterministic JSON (sorted keys, no spaces); floats as Python's shortest round-trip repr."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=True)


def spec_hash(spec: dict) -> str:
    """First 16 hex digits of SHA-256 of the spec's canonical JSON."""
    return hashlib.sha256(canonical_json(spec).encode()).hexdigest()[:16]


@functools.lru_cache(maxsize=1)
def code_version() -> str:
    """``speccheck.__version__`` plus a hash of the package's Python sources (no git needed)."""
    from speccheck._version import __version__

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the speccheck package folder
    digest = hashlib.sha256()
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        for fname in sorted(files):
            if fname.endswith(".py"):
                path = os.path.join(folder, fname)
                digest.update(os.path.relpath(path, root).encode())
                with open(path, "rb") as fh:
                    digest.update(fh.read())
    return f"{__version__}+{digest.hexdigest()[:12]}"


@dataclass(frozen=True)
class StoredUnit:
    """One stored row; ``result`` is the unit's record (decoded JSON)."""

    job: str
    unit_key: str
    identity: list
    seed: int
    spec_hash: str
    code_version: str
    wall_s: float
    worker: str
    stored_at: float
    result: dict


def _refuse(path: str, problem: str) -> FileFormatError:
    return FileFormatError(
        f"results store {path}: {problem}. Move it aside (e.g. `mv {path} {path}.bad`) and rerun to recompute "
        "its units into a new store, or pass another --store")


class ResultsStore:
    """A results store at ``path`` (created if missing, with its folder)."""

    def __init__(self, path: str, *, create: bool = True, readonly: bool = False) -> None:
        self.path = str(path)
        self.readonly = readonly
        if not self.path.strip() or self.path == ":memory:" or self.path.startswith("file:"):
            raise InputError(f"--store {self.path!r} is not a file path (an empty name or ':memory:' stores nothing); "
                             "give a file such as results/speccheck.sqlite")
        if os.path.isdir(self.path):
            raise InputError(f"--store {self.path} is a folder; give a file path such as {self.path}/results.sqlite")
        if os.path.exists(self.path) and not os.path.isfile(self.path):
            raise InputError(f"--store {self.path} is not a regular file (a FIFO, device or socket); give a file path")
        exists = os.path.exists(self.path) and os.path.getsize(self.path) > 0
        if not exists and (readonly or not create):
            if os.path.exists(self.path):
                raise FileFormatError(f"results store {self.path} is empty (0 bytes): it holds no results (run the "
                                      "job first, or check --store)")
            raise FileFormatError(f"results store {self.path} does not exist (run the job first, or check --store)")
        if exists:
            self._check_header()
            if not readonly:
                self._check_writable()
        else:  # missing or 0 bytes: a new, empty store
            os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        try:
            if readonly:
                self._db = self._connect_readonly()
            else:
                self._db = sqlite3.connect(self.path, timeout=_BUSY_TIMEOUT_S, isolation_level=None)
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=NORMAL")
            if exists:
                self._check_integrity()
            if readonly:
                self._check_schema()
            else:
                self._init_schema()
        except sqlite3.OperationalError as exc:
            if "readonly" in str(exc) or "read-only" in str(exc):
                raise self._read_only(str(exc)) from None
            raise _refuse(self.path, f"cannot be read as SQLite ({exc})") from None
        except sqlite3.DatabaseError as exc:
            raise _refuse(self.path, f"cannot be read as SQLite ({exc})") from None

    def _read_only(self, detail: str) -> InputError:
        return InputError(f"results store {self.path} cannot be written ({detail}): the file or its folder is "
                          "read-only or immutable. `speccheck results list|show|export` can read it; to run a job, "
                          "give a writable --store (or copy this one)")

    def _check_writable(self) -> None:
        """A store a job will write: the file and its folder (SQLite's journal files) writable."""
        folder = os.path.dirname(os.path.abspath(self.path))
        if not os.access(self.path, os.W_OK):
            raise self._read_only("no write permission on the file, or it is immutable")
        if not os.access(folder, os.W_OK):
            raise self._read_only(f"no write permission on its folder {folder}, or it is immutable")

    def _connect_readonly(self) -> sqlite3.Connection:
        """Open for reading only (``mode=ro``): a store in a read-only file or folder can be listed,
        shown and exported. A WAL store whose folder is read-only and whose ``-shm`` file is absent
        cannot be opened so (SQLite would create the ``-shm``): then it is opened ``immutable``,
        which is sound because nobody can write in that folder either."""
        uri = "file:" + urllib.parse.quote(os.path.abspath(self.path)) + "?mode=ro"
        try:
            db = sqlite3.connect(uri, uri=True, timeout=_BUSY_TIMEOUT_S, isolation_level=None)
            db.execute("SELECT count(*) FROM sqlite_master").fetchone()
            return db
        except sqlite3.OperationalError:
            if os.access(os.path.dirname(os.path.abspath(self.path)), os.W_OK):
                raise
        return sqlite3.connect(uri + "&immutable=1", uri=True, isolation_level=None)

    # ------------------------------------------------------------------ opening
    def _check_header(self) -> None:
        with open(self.path, "rb") as fh:
            head = fh.read(100)
        if not head.startswith(_SQLITE_MAGIC):
            raise _refuse(self.path, "is not a SQLite file (bad header)")
        if len(head) < 100:
            raise _refuse(self.path, "is truncated (shorter than a SQLite header)")
        page_size = int.from_bytes(head[16:18], "big")
        page_size = 65536 if page_size == 1 else page_size
        n_pages = int.from_bytes(head[28:32], "big")
        if head[24:28] != head[92:96]:
            n_pages = 0  # the in-header size is stale (written by an old SQLite): not usable
        size = os.path.getsize(self.path)
        if page_size and n_pages and size < page_size * n_pages and not os.path.exists(self.path + "-wal"):
            raise _refuse(self.path, f"is truncated ({size} bytes, header says {page_size * n_pages})")

    def _check_integrity(self) -> None:
        rows = self._db.execute("PRAGMA quick_check").fetchall()
        if rows != [("ok",)]:
            detail = "; ".join(str(r[0]) for r in rows[:3])
            raise _refuse(self.path, f"is corrupt (quick_check: {detail})")

    def _check_schema(self) -> None:
        """Read-only: the file is a speccheck store of this schema version (nothing is written)."""
        tables = {r[0] for r in self._db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if not {"meta", "jobs", "units"} <= tables:
            raise _refuse(self.path, f"is a SQLite file but not a speccheck results store (tables {sorted(tables)})")
        found = self._db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        self._check_version(found[0] if found else None)

    def _check_version(self, found: Optional[str]) -> None:
        if found != str(SCHEMA_VERSION):
            raise FileFormatError(
                f"results store {self.path} has schema version {found}; this speccheck reads version "
                f"{SCHEMA_VERSION}. Export it with the speccheck that wrote it (`speccheck results export`), "
                "or pass another --store")

    def _init_schema(self) -> None:
        with self._transaction():
            tables = {r[0] for r in self._db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            if tables and "meta" not in tables:
                raise _refuse(self.path, "is a SQLite file but not a speccheck results store "
                                         f"(tables {sorted(tables)})")
            for statement in _SCHEMA:
                self._db.execute(statement)
            self._db.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
            self._db.execute("INSERT OR IGNORE INTO meta VALUES ('created_with', ?)", (code_version(),))
            found = self._db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0]
        self._check_version(found)

    class _Tx:
        def __init__(self, db: sqlite3.Connection) -> None:
            self.db = db

        def __enter__(self) -> sqlite3.Connection:
            self.db.execute("BEGIN IMMEDIATE")
            return self.db

        def __exit__(self, exc_type, exc, tb) -> None:  # noqa: ANN001
            self.db.execute("ROLLBACK" if exc_type else "COMMIT")

    def _transaction(self) -> ResultsStore._Tx:
        return ResultsStore._Tx(self._db)

    def close(self) -> None:
        """Close the connection (the file stays consistent at any point anyway)."""
        self._db.close()

    def __enter__(self) -> ResultsStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ jobs
    def open_job(self, name: str, kind: str, spec: dict) -> str:
        """Register job ``name`` with ``spec`` or check that the stored one is the same; returns the
        spec hash. Another spec under the same name raises ``FileFormatError`` naming the differences."""
        digest = spec_hash(spec)
        with self._transaction() as db:
            row = db.execute("SELECT kind, spec, spec_hash FROM jobs WHERE name=?", (name,)).fetchone()
            if row is None:
                db.execute("INSERT INTO jobs VALUES (?, ?, ?, ?, ?)", (name, kind, canonical_json(spec), digest,
                                                                       time.time()))
                return digest
        self._check_spec(name, row, kind, spec, digest)
        return digest

    def check_job(self, name: str, kind: str, spec: dict) -> bool:
        """Read-only :meth:`open_job`: False when job ``name`` is absent; True when it holds ``spec``;
        ``FileFormatError`` naming the differences when it holds another."""
        row = self._db.execute("SELECT kind, spec, spec_hash FROM jobs WHERE name=?", (name,)).fetchone()
        if row is None:
            return False
        self._check_spec(name, row, kind, spec, spec_hash(spec))
        return True

    def _check_spec(self, name: str, row: tuple, kind: str, spec: dict, digest: str) -> None:
        old_kind, old_spec, old_hash = row
        if old_kind != kind or old_hash != digest:
            diff = _spec_diff(json.loads(old_spec), spec) if old_kind == kind else {"kind": (old_kind, kind)}
            raise FileFormatError(
                f"results store {self.path} holds {old_kind} job {name!r} with another spec (stored, asked): "
                f"{diff}; use another --name (or --store) for the new spec, or rerun with the stored one")

    def job(self, name: str) -> dict:
        """``{name, kind, spec, spec_hash, created_at, units}``; ``LoadError``-like ``InputError`` if absent."""
        row = self._db.execute("SELECT name, kind, spec, spec_hash, created_at FROM jobs WHERE name=?",
                               (name,)).fetchone()
        if row is None:
            known = [r[0] for r in self._db.execute("SELECT name FROM jobs ORDER BY name")]
            raise InputError(f"results store {self.path} has no job {name!r}; jobs: {known}")
        return self._job_dict(row)

    def jobs(self) -> list[dict]:
        """Every job with its unit count, by name."""
        rows = self._db.execute("SELECT name, kind, spec, spec_hash, created_at FROM jobs ORDER BY name").fetchall()
        return [self._job_dict(r) for r in rows]

    def _job_dict(self, row: tuple) -> dict:
        name, kind, spec, digest, created = row
        n_units = self._db.execute("SELECT COUNT(*) FROM units WHERE job=?", (name,)).fetchone()[0]
        return {"name": name, "kind": kind, "spec": json.loads(spec), "spec_hash": digest, "created_at": created,
                "units": n_units}

    # ------------------------------------------------------------------ units
    def stored_keys(self, job: str) -> set[str]:
        """Unit keys already stored for ``job``."""
        return {r[0] for r in self._db.execute("SELECT unit_key FROM units WHERE job=?", (job,))}

    def put(self, job: str, unit_key: str, *, identity: Iterable, seed: int, spec_hash: str, wall_s: float,
            worker: str, result: dict, code: Optional[str] = None, deps: Optional[dict] = None) -> bool:
        """Store one unit in one transaction (with ``deps``, the manifest of what its run depended
        on); False if it was already stored (the first copy is kept)."""
        if not math.isfinite(wall_s):
            raise InputError(f"wall_s must be finite, got {wall_s}")
        with self._transaction() as db:
            cursor = db.execute(
                "INSERT OR IGNORE INTO units VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (job, unit_key, canonical_json(list(identity)), int(seed), spec_hash, code or code_version(),
                 float(wall_s), worker, time.time(), canonical_json(result)))
            if cursor.rowcount == 1 and deps is not None:
                db.execute("INSERT OR REPLACE INTO unit_deps VALUES (?, ?, ?)", (job, unit_key, canonical_json(deps)))
            return cursor.rowcount == 1

    def manifests(self, job: str) -> dict[str, dict]:
        """``{unit key: manifest}`` of the units of ``job`` stored with one."""
        try:
            rows = self._db.execute("SELECT unit_key, manifest FROM unit_deps WHERE job=?", (job,)).fetchall()
        except sqlite3.OperationalError:  # a store written before manifests (read-only: table not added)
            return {}
        out = {}
        for key, text in rows:
            try:
                out[key] = json.loads(text)
            except json.JSONDecodeError as exc:
                raise _refuse(self.path, f"the manifest of unit {key!r} of job {job!r} is unreadable ({exc})") from None
        return out

    def discard(self, job: str, keys: Iterable[str]) -> int:
        """Remove units of ``job`` (stale: what they depended on changed) so they run again; how many."""
        keys = list(keys)
        with self._transaction() as db:
            n = 0
            for key in keys:
                n += db.execute("DELETE FROM units WHERE job=? AND unit_key=?", (job, key)).rowcount
                db.execute("DELETE FROM unit_deps WHERE job=? AND unit_key=?", (job, key))
        return n

    def units(self, job: str, keys: Optional[Iterable[str]] = None) -> list[StoredUnit]:
        """Stored units of ``job`` (all, or those in ``keys``), ordered by unit key."""
        rows = self._db.execute("SELECT job, unit_key, identity, seed, spec_hash, code_version, wall_s, worker, "
                                "stored_at, result FROM units WHERE job=? ORDER BY unit_key", (job,)).fetchall()
        wanted = None if keys is None else set(keys)
        out = []
        for row in rows:
            if wanted is not None and row[1] not in wanted:
                continue
            try:
                result = json.loads(row[9])
                identity = json.loads(row[2])
            except json.JSONDecodeError as exc:
                raise _refuse(self.path, f"unit {row[1]!r} of job {job!r} holds unreadable JSON ({exc})") from None
            out.append(StoredUnit(job=row[0], unit_key=row[1], identity=identity, seed=row[3], spec_hash=row[4],
                                  code_version=row[5], wall_s=row[6], worker=row[7], stored_at=row[8],
                                  result=result))
        return out


def _spec_diff(old: dict, new: dict) -> dict:
    """Top-level (and one nested level of) keys whose values differ: {key: (old, new)}."""
    diff = {}
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if a == b:
            continue
        if isinstance(a, dict) and isinstance(b, dict):
            for sub in sorted(set(a) | set(b)):
                if a.get(sub) != b.get(sub):
                    diff[f"{key}.{sub}"] = (a.get(sub), b.get(sub))
        else:
            diff[key] = (a, b)
    return diff
