"""Repository-wide code-health rules (issue 16): typed public API, no code in output folders."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "speccheck"


def _public_functions(tree: ast.Module):
    """Module-level public functions and public methods of public classes."""
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_"):
            yield node.name, node
        elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and not item.name.startswith("_"):
                    yield f"{node.name}.{item.name}", item


def _missing_annotations(fn: ast.FunctionDef) -> list[str]:
    args = fn.args
    params = [*args.posonlyargs, *args.args, *args.kwonlyargs]
    if args.vararg is not None:
        params.append(args.vararg)
    if args.kwarg is not None:
        params.append(args.kwarg)
    missing = [p.arg for p in params if p.annotation is None and p.arg not in ("self", "cls")]
    if fn.returns is None:
        missing.append("return")
    return missing


def test_every_public_function_is_fully_annotated():
    problems = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for name, fn in _public_functions(tree):
            missing = _missing_annotations(fn)
            if missing:
                problems.append(f"{path.relative_to(ROOT)}:{fn.lineno} {name}: {', '.join(missing)}")
    assert not problems, "public functions without type hints:\n" + "\n".join(problems)


def test_output_folders_hold_no_code():
    code = [p for folder in ("theory", "validation", "figures") for p in (ROOT / folder).rglob("*")
            if p.suffix in (".py", ".sh")]
    assert not code, f"code in generated-artefact folders: {code}"
