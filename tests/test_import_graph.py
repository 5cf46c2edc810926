"""The import graph of speccheck (issue 28.7d): no cycles, nothing imports the CLI, nothing imports research.

Every module under ``speccheck/`` is parsed with :mod:`ast`; an edge A -> B is any ``import`` of
B inside A, at module level or inside a function (``TYPE_CHECKING`` blocks included: they are
imports too). ``from pkg import name`` is an edge to ``pkg.name`` when that is a module, else to
``pkg``. Importing a submodule is not counted as an edge to its parent package (Python runs the
parent's ``__init__`` first, but that is the package's own business); a package ``__init__``
importing its own submodules is therefore an ordinary edge, and a cycle through it is a cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "speccheck"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    """Every module under speccheck/, by dotted name."""
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _absolute(module: str, path: Path, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for _ in range(node.level - 1):
        package = package.rpartition(".")[0]
    return f"{package}.{node.module}" if node.module else package


def imported(module: str, path: Path, known: set[str]) -> set[str]:
    """The dotted names ``module`` imports anywhere in its source (external ones included)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(module, path, node)
            for alias in node.names:
                full = f"{base}.{alias.name}"
                out.add(full if full in known else base)
    return out


def graph() -> dict[str, set[str]]:
    """Edges between speccheck's own modules."""
    mods = modules()
    known = set(mods)
    return {m: {t for t in imported(m, p, known) if t in known and t != m} for m, p in mods.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_the_graph_sees_function_level_imports():
    edges = graph()
    assert "speccheck.validation.battery" in edges  # the package itself is a node
    assert "speccheck.verifiers" in edges["speccheck.validation.battery.plan"]  # imported inside load_verifier


def test_no_import_cycles():
    assert cycles(graph()) == []


def test_cycle_finder_finds_one():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_only_the_cli_imports_the_cli():
    edges = graph()
    cli = {m for m in edges if m == "speccheck.cli" or m.startswith("speccheck.cli.")}
    offenders = sorted(m for m, targets in edges.items() if m not in cli and targets & cli)
    assert offenders == []


def test_nothing_imports_research():
    mods = modules()
    known = set(mods)
    offenders = sorted(m for m, p in mods.items()
                       if any(t == "research" or t.startswith("research.") for t in imported(m, p, known)))
    assert offenders == []
