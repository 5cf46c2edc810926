"""Options of the commands whose units may run on Dask (``--workers``, ``--scheduler``,
``--store``, ``--no-progress``, ``--quiet``) and the store and output-path checks."""

from __future__ import annotations

import argparse
import os
import re
from typing import Optional

from speccheck.errors import InputError

DEFAULT_STORE = os.path.join("results", "speccheck.sqlite")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


def add_executor_args(parser: argparse.ArgumentParser, *, store_default: Optional[str] = DEFAULT_STORE,
                      workers_default: str = "one per core", progress_option: bool = True) -> None:
    """``--workers``, ``--scheduler``, ``--store``, ``--no-progress`` (shared by the heavy commands).
    ``store_default`` None: no store unless ``--store`` is given; ``progress_option`` False when
    the command already has ``--no-progress``."""
    parser.add_argument("--workers", type=int, default=None,
                        help=f"local worker processes (default: {workers_default}; 1 = in this process, no Dask)")
    parser.add_argument("--scheduler", default=None, metavar="tcp://HOST:PORT",
                        help="run on an existing Dask cluster (default: $DASK_SCHEDULER_ADDRESS if set)")
    if store_default is None:
        parser.add_argument("--store", default=None, metavar="PATH",
                            help="SQLite results store of the units (resume: units already stored are skipped); "
                                 "default: none")
    else:
        parser.add_argument("--store", default=store_default, metavar="PATH",
                            help=f"SQLite results store; units already stored are skipped (default {store_default})")
    if progress_option:
        parser.add_argument("--no-progress", action="store_true",
                            help="no progress on stderr (a bar on a terminal, else a line every 10 s)")
        parser.add_argument("--quiet", action="store_true", help="no progress on stderr (as --no-progress)")


def show_progress(args: argparse.Namespace) -> bool:
    """Progress on stderr (not --no-progress / --quiet, $SPECCHECK_NO_PROGRESS unset): a bar on a
    terminal, else plain lines, at most one every ``PROGRESS_LINE_S`` seconds (a CI log, a notebook)."""
    from speccheck.cli._output import progress_wanted

    return not getattr(args, "no_progress", False) and progress_wanted(getattr(args, "quiet", False),
                                                                       terminal_only=False)


def battery_progress(args: argparse.Namespace) -> bool:
    """A battery's progress bar: a suite bigger than smoke, and progress wanted (:func:`show_progress`)."""
    return args.suite != "smoke" and show_progress(args)


def wants_dask(args: argparse.Namespace, default_workers: int = 1) -> bool:
    """Whether ``--workers``/``--scheduler`` (or ``$DASK_SCHEDULER_ADDRESS`` when ``--workers`` is
    not given) ask for Dask, for a command whose default is ``default_workers`` local processes."""
    if args.scheduler:
        return True
    if args.workers is None:
        return bool(os.environ.get("DASK_SCHEDULER_ADDRESS")) or default_workers > 1
    if args.workers < 1:
        raise InputError(f"--workers must be >= 1, got {args.workers}")
    return args.workers > 1


def check_store(path: Optional[str], option: str = "--store") -> Optional[str]:
    """A results store that persists: a file path, never empty or SQLite's in-memory database
    (``:memory:``, a ``file:`` URI), where a job would run and save nothing."""
    if path is None:
        return None
    if not path.strip() or path == ":memory:" or path.startswith("file:"):
        raise InputError(f"{option} {path!r} is not a file path (an empty name or ':memory:' stores nothing: the "
                         "job's units would be lost); give a file such as results/speccheck.sqlite")
    return path


def check_distinct_outputs(paths: dict[str, Optional[str]], inputs: Optional[dict[str, list[str]]] = None) -> None:
    """Two options naming the same file (after resolving links and ``..``; hard links too) would
    overwrite each other, e.g. ``--json`` replacing the ``--store`` database, and an output naming
    a file the job reads (``inputs``: option -> its files, e.g. ``--suite``, the verifier's
    source) would destroy it: InputError naming both options, before any work."""
    seen: dict[str, str] = {}
    for option, path in paths.items():
        if not isinstance(path, str) or not path:
            continue
        resolved = os.path.realpath(path)
        if resolved in seen:
            raise InputError(f"{seen[resolved]} and {option} name the same file {path!r}; the second would overwrite "
                             "the first: give them different paths")
        seen[resolved] = option
        for source, files in (inputs or {}).items():
            if any(_same_file(resolved, f) for f in files):
                raise InputError(f"{option} {path!r} names the file that {source} reads; writing {option} would "
                                 f"overwrite it: give {option} another path")


def _same_file(resolved: str, other: str) -> bool:
    """``resolved`` (a realpath) and ``other`` are one file: the same real path, or the same inode."""
    if os.path.realpath(other) == resolved:
        return True
    try:
        return os.path.samefile(resolved, other)
    except OSError:
        return False


def input_files(args: argparse.Namespace) -> dict[str, list[str]]:
    """The files a command reads that an output option must never overwrite: ``--suite`` /
    ``--battery-suite`` files, a ``--sweep`` store and the verifiers' source files."""
    from speccheck.scale.deps import verifier_source_files

    found: dict[str, list[str]] = {}
    for dest, option in (("suite", "--suite"), ("battery_suite", "--battery-suite"), ("sweep", "--sweep")):
        value = getattr(args, dest, None)
        if isinstance(value, str) and value and os.path.isfile(value):
            found[option] = [value]
    verifiers = getattr(args, "verifier", None)
    for spec in [verifiers] if isinstance(verifiers, str) else (verifiers or []):
        if isinstance(spec, str):
            found.setdefault("--verifier", []).extend(verifier_source_files(spec))
    return found


def check_name(name: str, option: str = "--name") -> str:
    """A job name is a plain token (letters, digits, ``._-``): never a path."""
    if not _NAME_RE.match(name) or ".." in name:
        raise InputError(f"{option} must be 1-100 letters, digits, '.', '_' or '-' (no '/' or '..'), got {name!r}")
    return name
