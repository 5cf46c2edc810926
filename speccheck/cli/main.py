"""The parser and :func:`main`: parse, check the options every command shares, run the
command, map what it raised to the exit code (see :mod:`speccheck.cli`)."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Sequence

from speccheck.errors import EXIT_CANNOT_RUN, EXIT_DEFECT, EXIT_OK, SpeccheckError, UsageError

# the command modules, in --help order: each has add_parser(subparsers)
COMMANDS = ("theory", "train_digits", "speedup", "battery", "e2e", "figures", "verifiers", "sweep", "calibrate",
            "results", "reproduce")
# options naming files or folders a command writes: no two may name the same path
OUTPUT_OPTIONS = {"json": "--json", "junit": "--junit", "store": "--store", "out": "--out", "figures": "--figures",
                  "battery_json": "--battery-json", "html": "--html", "plot": "--plot"}
DESCRIPTION = "The ``speccheck`` command. Each subcommand is a thin layer over package functions."
EPILOG = "exit codes: 0 ran and positive, 1 defect found, 2 could not run as asked (docs/exit-codes.md)"


def build_parser() -> argparse.ArgumentParser:
    """The full parser: every command module's sub-parser, in --help order."""
    from speccheck._version import __version__

    parser = argparse.ArgumentParser(prog="speccheck", description=DESCRIPTION, epilog=EPILOG)
    parser.add_argument("--version", action="version", version=f"speccheck {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in COMMANDS:
        importlib.import_module(f"speccheck.cli.{name}").add_parser(sub)
    return parser


def _check_parsed(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """argparse lets ``--opt=--`` through as an empty list: refuse a list where one value is
    expected and an empty list where values are expected, naming the option."""
    sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
    command_parser = sub.choices.get(getattr(args, "command", None)) if sub is not None else None
    for action in command_parser._actions if command_parser is not None else []:
        if not action.option_strings or action.dest not in vars(args):
            continue
        value = getattr(args, action.dest)
        option = action.option_strings[0]
        if action.nargs is None and isinstance(value, list) and action.type is not None:
            raise UsageError(f"{option} takes one value, got {value!r}")
        if action.nargs in ("+", "*") and isinstance(value, list) and not value:
            raise UsageError(f"{option} needs at least one value")


def _check_outputs(args: argparse.Namespace) -> None:
    """Before any work: ``--store`` is a file that persists (not '' or ':memory:'), no two
    output options name the same file (``--json`` would replace the ``--store`` database) and no
    output names a file the command reads (the ``--suite``, the verifier's source)."""
    from speccheck.cli._executor import check_distinct_outputs, check_store, input_files

    if isinstance(getattr(args, "store", None), str):
        check_store(args.store)
    check_distinct_outputs({option: getattr(args, dest) for dest, option in OUTPUT_OPTIONS.items()
                            if isinstance(getattr(args, dest, None), str)}, input_files(args))


def _error(command: str, message: str) -> None:
    print(f"speccheck {command}: error: {message}", file=sys.stderr, flush=True)


def _debug() -> bool:
    return os.environ.get("SPECCHECK_DEBUG") == "1"


def _parse(argv: Sequence[str] | None) -> tuple[argparse.ArgumentParser, argparse.Namespace] | int:
    """(parser, args), or the exit code when parsing ended the run (--help, --version, a bad option)."""
    try:
        parser = build_parser()
        return parser, parser.parse_args(argv)
    except SystemExit as exc:  # argparse: --help (0) or a bad option (2, message printed)
        return EXIT_OK if exc.code in (0, None) else EXIT_CANNOT_RUN
    except Exception as exc:  # noqa: BLE001 - a registered command module failed to import
        if _debug():
            raise
        _error("?", f"internal error {type(exc).__name__}: {exc} (please report it)")
        return EXIT_CANNOT_RUN


def _run(parser: argparse.ArgumentParser, args: argparse.Namespace, command: str) -> int:
    """The command's exit code; every exception becomes exit 2 with one line on stderr."""
    try:
        _check_parsed(parser, args)
        _check_outputs(args)
        return args.func(args)
    except SpeccheckError as exc:
        _error(command, str(exc))
        return exc.exit_code
    except ValueError as exc:  # library domain checks that predate speccheck.errors
        _error(command, str(exc))
    except MemoryError:
        _error(command, "out of memory; reduce the sizes asked for")
    except OSError as exc:
        where = f" {exc.filename!r}" if getattr(exc, "filename", None) else ""
        _error(command, f"file error{where}: {exc.strerror or exc}")
    except KeyboardInterrupt:
        _error(command, "interrupted; no verdict")
    except Exception as exc:  # noqa: BLE001 - never a raw traceback, never exit 0
        if _debug():
            raise
        _error(command, f"internal error {type(exc).__name__}: {exc} (please report it; SPECCHECK_DEBUG=1 shows "
                        "the traceback)")
    return EXIT_CANNOT_RUN


#: standard-library names that are no module anyone imports (a test/ folder is common)
_NOT_SHADOWING = frozenset({"test", "this", "antigravity", "idlelib", "turtledemo", "__future__", "__main__"})


def shadowing_files() -> list[tuple[str, str]]:
    """(module, file) for each file or package in a sys.path folder searched BEFORE the standard
    library that bears the name of a standard module not already loaded from the standard
    library: Python would import it in that module's place (``python -m`` puts the working
    folder first, so a ``random.py`` there replaces ``random``)."""
    import sysconfig

    names = set(getattr(sys, "stdlib_module_names", ())) - _NOT_SHADOWING
    stdlib = os.path.realpath(sysconfig.get_paths()["stdlib"])
    found = []
    for entry in sys.path:
        folder = os.path.realpath(entry or os.getcwd())
        if folder == stdlib or folder.startswith(stdlib + os.sep) or folder.endswith(".zip"):
            break  # the standard library itself: nothing after it shadows it
        try:
            listing = sorted(os.listdir(folder))
        except OSError:
            continue
        for item in listing:
            path = os.path.join(folder, item)
            name = item[:-3] if item.endswith(".py") else item if os.path.isfile(os.path.join(path, "__init__.py")) \
                else None
            loaded = getattr(sys.modules.get(name or ""), "__file__", None) or ""
            if name in names and not os.path.realpath(loaded).startswith(stdlib + os.sep):
                found.append((name, path))
    return found


def _check_shadowing() -> None:
    found = shadowing_files()
    if found:
        name, path = found[0]
        raise UsageError(f"{path} has the name of the standard library's module {name!r} and comes first on "
                         f"sys.path (the working folder, with `python -m`): Python would import it in place of "
                         f"{name!r}. Rename it, or run speccheck from another folder (or as the `speccheck` "
                         "command)")


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; return its exit code (0, 1 or 2; see :mod:`speccheck.cli`)."""
    try:
        _check_shadowing()
    except UsageError as exc:
        _error("?", str(exc))
        return EXIT_CANNOT_RUN
    parsed = _parse(argv)
    if isinstance(parsed, int):
        return parsed
    parser, args = parsed
    command = getattr(args, "command", "?")
    code = _run(parser, args, command)
    if code not in (EXIT_OK, EXIT_DEFECT, EXIT_CANNOT_RUN):
        _error(command, f"internal error: command returned {code!r} (please report it)")
        return EXIT_CANNOT_RUN
    return int(code)
