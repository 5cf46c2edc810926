"""What a stored result depends on, so that a store never reuses a verdict of other code.

Two parts (docs/exit-codes.md, "Stored results"):

- :func:`rule_digest`, computed before a run WITHOUT importing the rule: the bytes of the rule's
  source, i.e. every file under its top-level package's folder (data files included) or its single
  module file, found through the import system's finders (an editable install's too); for a
  built-in rule, speccheck's own source digest. It names the job, so a changed rule is another job.
- :func:`manifest`, taken in the process that ran a unit, AFTER it ran: every module that process
  imported from outside the standard library, as the SHA-256 of its source file (and of every file
  under its top-level package's folder) when it lives in a project tree, or as its distribution's
  version when it is installed (site-packages); speccheck's own source digest; and the values of
  the declared environment variables (every ``SPECCHECK_*`` variable that can change a result and
  those named in ``$SPECCHECK_DIGEST_ENV``, comma-separated). It is stored beside the unit;
  :func:`stale` compares it with the files, versions and variables now, so a unit whose helper
  module, data file, dependency version or declared variable changed is run again.

Not covered (cannot be seen portably from Python): files the rule reads outside its package's
folder, environment variables it reads that are not declared, and native libraries loaded without
a Python module. Declare such variables in ``$SPECCHECK_DIGEST_ENV``, keep data files inside the
rule's package, or pass another ``--store`` / ``--name``.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import sys
import sysconfig
from typing import Iterable, Optional

#: variables read by speccheck that never change a result (progress and debugging output only)
_NEUTRAL_ENV = frozenset({"SPECCHECK_DEBUG", "SPECCHECK_NO_PROGRESS", "SPECCHECK_DIGEST_ENV",
                          "SPECCHECK_WORKER_MODULES"})
#: bounds on what one top-level package contributes (a huge tree is hashed by its listing only)
MAX_FILES = 5000
MAX_BYTES = 256 * 2**20


def _speccheck_root() -> str:
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _top_files(top: str) -> list[str]:
    """The files of top-level module ``top`` (every file under a package's folder, ``__pycache__``
    and compiled files left out; a single module's file), found WITHOUT importing it: through
    ``importlib.util.find_spec`` (the meta-path finders, editable installs included), then the
    current directory (where the registry also looks)."""
    if top == "speccheck":
        folders: list = [_speccheck_root()]
        origin = None
    else:
        try:
            spec = importlib.util.find_spec(top)
        except (ImportError, ValueError):
            spec = None
        if spec is None:
            from importlib.machinery import PathFinder

            spec = PathFinder.find_spec(top, [os.getcwd()])
        if spec is None:
            return []
        folders = list(spec.submodule_search_locations or [])
        origin = spec.origin
    if not folders:
        return [origin] if origin and os.path.isfile(origin) else []
    files = []
    for folder in folders:
        for root, dirs, names in os.walk(folder):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not d.startswith("."))
            files += [os.path.join(root, n) for n in sorted(names) if not n.endswith((".pyc", ".pyo"))]
            if len(files) > MAX_FILES:
                return files
    return files


def verifier_source_files(spec: str) -> list[str]:
    """The source files behind verifier ``spec`` (a built-in name, ``package.module:attr`` or an
    entry-point name), found without importing it; [] when none is found."""
    from speccheck.verifiers.registry import source_module

    top = source_module(spec)
    return _top_files(top) if top else []


def _hash_files(files: Iterable[str], h: "hashlib._Hash") -> None:
    total = 0
    for path in files:
        h.update(path.encode() + b"\0")
        try:
            size = os.path.getsize(path)
            if total + size > MAX_BYTES:
                h.update(f"size {size} mtime {os.path.getmtime(path)}".encode())
                continue
            total += size
            with open(path, "rb") as fh:
                h.update(fh.read())
        except OSError:
            h.update(b"unreadable")


def rule_digest(spec: str) -> str:
    """SHA-256 (16 hex) of verifier ``spec``'s source (:func:`verifier_source_files`; for a
    built-in, speccheck's source digest), stable across runs and installs (editable ones too).
    Source that cannot be found hashes as the spec alone: the unit manifests then decide."""
    from speccheck.scale.store import code_version
    from speccheck.verifiers.registry import BUILTIN

    h = hashlib.sha256(spec.encode() + b"\0")
    if spec in BUILTIN:
        h.update(code_version().encode())
    else:
        _hash_files(verifier_source_files(spec), h)
    return h.hexdigest()[:16]


# ----------------------------------------------------------------------------- manifests
def declared_env() -> dict[str, Optional[str]]:
    """The environment variables a stored result depends on: ``SPECCHECK_*`` (but the ones that
    only change output) and those named in ``$SPECCHECK_DIGEST_ENV``; None for unset ones."""
    names = {k for k in os.environ if k.startswith("SPECCHECK_") and k not in _NEUTRAL_ENV}
    names |= {n.strip() for n in os.environ.get("SPECCHECK_DIGEST_ENV", "").split(",") if n.strip()}
    return {n: os.environ.get(n) for n in sorted(names)}


@functools.lru_cache(maxsize=1)
def _site_roots() -> tuple[str, ...]:
    """Where installed distributions live (site-packages and the like)."""
    paths = sysconfig.get_paths()
    roots = {paths.get(k) for k in ("purelib", "platlib")}
    roots |= {p for p in sys.path if p and os.path.basename(p.rstrip(os.sep)) in ("site-packages", "dist-packages")}
    return tuple(sorted(os.path.realpath(r) + os.sep for r in roots if r))


@functools.lru_cache(maxsize=1)
def _stdlib_roots() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    return tuple(sorted({os.path.realpath(paths[k]) + os.sep for k in ("stdlib", "platstdlib") if paths.get(k)}))


@functools.lru_cache(maxsize=1)
def _distributions() -> dict[str, list[str]]:
    from importlib import metadata

    return metadata.packages_distributions()


_SHA_CACHE: dict[tuple, str] = {}


def _file_sha(path: str) -> str:
    """SHA-256 (16 hex) of a file's bytes, cached per (path, size, mtime) within this process."""
    try:
        st = os.stat(path)
        key = (path, st.st_size, st.st_mtime_ns, st.st_ino)
        if key not in _SHA_CACHE:
            with open(path, "rb") as fh:
                _SHA_CACHE[key] = hashlib.sha256(fh.read()).hexdigest()[:16]
        return _SHA_CACHE[key]
    except OSError:
        return "unreadable"


def manifest() -> dict:
    """What this process's imported code and environment are now (see the module doc):
    ``{"code", "env", "dists": {name: version}, "files": {path: sha}}``."""
    from importlib import metadata

    from speccheck.scale.store import code_version

    stdlib, site, mine = _stdlib_roots(), _site_roots(), _speccheck_root() + os.sep
    files: dict[str, str] = {}
    dists: dict[str, str] = {}
    tops: set[str] = set()
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if not isinstance(path, str) or not os.path.isabs(path):
            continue
        real = os.path.realpath(path)
        top = name.partition(".")[0]
        installed = real.startswith(site) or f"{os.sep}site-packages{os.sep}" in real \
            or f"{os.sep}dist-packages{os.sep}" in real
        if real.startswith(mine) or (real.startswith(stdlib) and not installed):
            continue
        if installed:
            for dist in _distributions().get(top, []):
                if dist not in dists:
                    try:
                        dists[dist] = metadata.version(dist)
                    except metadata.PackageNotFoundError:
                        dists[dist] = "?"
            continue
        tops.add(top)
        files[real] = _file_sha(real)
    for top in sorted(tops):  # data files beside a project module, under its top-level package
        for path in _top_files(top) if top.isidentifier() else []:
            real = os.path.realpath(path)
            if real not in files:
                files[real] = _file_sha(real)
    return {"code": code_version(), "env": declared_env(), "dists": dict(sorted(dists.items())),
            "files": dict(sorted(files.items()))}


def merged(manifests: Iterable[dict]) -> Optional[dict]:
    """One manifest covering several (a result merged from units): the union of their files,
    distributions and variables; None when there is none."""
    manifests = list(manifests)
    if not manifests:
        return None
    out: dict = {"code": manifests[0].get("code"), "env": {}, "dists": {}, "files": {}}
    for m in manifests:
        if m.get("code") != out["code"]:
            out["code"] = "mixed"  # never equal to a code version: the merged result is stale
        for part in ("env", "dists", "files"):
            out[part].update(m.get(part) or {})
    return out


def stale(recorded: dict) -> list[str]:
    """What differs now from a recorded :func:`manifest` (a description each; [] when all holds)."""
    from importlib import metadata

    from speccheck.scale.store import code_version

    changed = []
    if recorded.get("code") != code_version():
        changed.append(f"speccheck's source ({recorded.get('code')} -> {code_version()})")
    now_env = declared_env()
    old_env = recorded.get("env") or {}
    for name in sorted(set(old_env) | set(now_env)):
        if old_env.get(name) != os.environ.get(name):
            changed.append(f"environment variable {name}")
    for dist, version in (recorded.get("dists") or {}).items():
        try:
            now = metadata.version(dist)
        except metadata.PackageNotFoundError:
            now = "not installed"
        if now != version:
            changed.append(f"{dist} {version} -> {now}")
    for path, sha in (recorded.get("files") or {}).items():
        if os.path.exists(path) and _file_sha(path) != sha:
            changed.append(f"file {path}")
    return changed


def unseen(recorded: dict) -> list[str]:
    """The recorded files this machine cannot see (a unit run on another host of a cluster):
    :func:`stale` cannot compare them, and a reuse says so."""
    return [path for path in (recorded.get("files") or {}) if not os.path.exists(path)]
