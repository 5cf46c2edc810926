"""The command line's layout rules (issue 28): short functions, one module per command, thin
commands over the library, nothing outside the package importing it."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CLI = ROOT / "speccheck" / "cli"
MAX_FUNCTION_LINES = 40
# verdict logic lives in the library: a command maps a verdict to an exit code, never computes one
VERDICT_NAMES = {"calibration_contradictions", "judge", "holm", "grid_exit_code", "resource_failures"}


def _modules() -> list[Path]:
    return sorted(CLI.glob("*.py"))


def _functions(path: Path):
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


def test_cli_is_a_package_of_command_modules():
    names = {p.stem for p in _modules()}
    assert {"__init__", "__main__", "main", "_options", "_output", "_executor"} <= names
    assert {"theory", "train_digits", "speedup", "battery", "mutants", "e2e", "figures", "verifiers", "sweep",
            "calibrate", "results", "reproduce"} <= names
    assert not (ROOT / "speccheck" / "cli.py").exists()
    assert not (ROOT / "speccheck" / "scale" / "commands.py").exists()  # its commands are modules here


def test_no_function_over_40_lines():
    long = [f"{p.name}:{fn.lineno} {fn.name} ({fn.end_lineno - fn.lineno + 1} lines)"
            for p in _modules() for fn in _functions(p) if fn.end_lineno - fn.lineno + 1 > MAX_FUNCTION_LINES]
    assert not long, "functions over 40 lines in speccheck/cli/:\n" + "\n".join(long)


def test_every_command_module_has_add_parser_and_run():
    """Every module in COMMANDS adds its sub-parser and runs it; every sub-command comes from one."""
    import argparse

    from speccheck.cli import build_parser
    from speccheck.cli.main import COMMANDS

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert set(sub.choices) == {name.replace("_", "-") for name in COMMANDS}

    for name in COMMANDS:
        tree = ast.parse((CLI / f"{name}.py").read_text())
        defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
        assert {"add_parser", "run"} <= defined, name


def test_no_verdict_logic_in_the_cli():
    """No command calls the library's verdict rules itself; it reads ``outcome.exit_code``."""
    calls = []
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                if name in VERDICT_NAMES:
                    calls.append(f"{path.name}:{node.lineno} {name}")
            if isinstance(node, ast.ImportFrom) and any(a.name in VERDICT_NAMES for a in node.names):
                calls.append(f"{path.name}:{node.lineno} imports {[a.name for a in node.names]}")
    assert not calls, "verdict logic in speccheck/cli/:\n" + "\n".join(calls)


def _imports_cli(tree: ast.AST) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name == "speccheck.cli" or a.name.startswith("speccheck.cli.")
                                                for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "speccheck.cli" or node.module.startswith("speccheck.cli."):
                return True
            if node.module == "speccheck" and any(a.name == "cli" for a in node.names):
                return True
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("speccheck.cli"):
            return True
    return False


def test_nothing_outside_the_package_imports_it():
    outside = [p for p in (ROOT / "speccheck").rglob("*.py") if CLI not in p.parents]
    offenders = [str(p.relative_to(ROOT)) for p in outside if _imports_cli(ast.parse(p.read_text()))]
    assert not offenders, f"library modules importing speccheck.cli: {offenders}"


def test_console_script_and_module_entry_points():
    """``speccheck = "speccheck.cli:main"`` resolves, and ``python -m speccheck.cli --version`` runs."""
    import re

    script = re.search(r'^speccheck = "([\w.]+):(\w+)"', (ROOT / "pyproject.toml").read_text(), re.M)
    assert script is not None and script.groups() == ("speccheck.cli", "main")
    from speccheck import __version__, cli

    assert callable(cli.main)
    done = subprocess.run([sys.executable, "-m", "speccheck.cli", "--version"], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert done.returncode == 0 and done.stdout.strip() == f"speccheck {__version__}", done


def test_version_in_process(capsys):
    from speccheck import __version__
    from speccheck.cli import main

    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"speccheck {__version__}"


def test_the_command_and_the_library_cap_draft_trees_alike():
    """One tree-size limit (issue 28.1: 400,000 in the command vs 1,000,000 in the sampler)."""
    from speccheck.cli._options import MAX_TREE_NODES as command_cap
    from speccheck.sampler.tree import MAX_TREE_NODES as library_cap

    assert command_cap == library_cap
