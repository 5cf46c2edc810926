"""Write the API reference pages docs/api/<module>.md from the code (docstrings + signatures).

    python docs/api/_generate.py            # rewrite the pages
    python docs/api/_generate.py --check    # exit 1 (naming the stale pages) if a page is out of date

One page per public module (:data:`PAGES`): the module docstring's first paragraph, then every
public name (the module's ``__all__``, else the functions and classes it defines) with its
signature and the first paragraph of its docstring; a class also lists its public methods and
properties (first docstring line). tests/docs/test_api_pages.py checks the pages are current.
"""

from __future__ import annotations

import importlib
import inspect
import re
import sys
from pathlib import Path
from typing import Any, Optional

HERE = Path(__file__).resolve().parent

#: page file stem -> (title, modules documented on the page)
PAGES: dict[str, tuple[str, tuple[str, ...]]] = {
    "speccheck": ("speccheck (top level)", ("speccheck",)),
    "api": ("speccheck.api: battery and acceptance", ("speccheck.api",)),
    "sampler": ("speccheck.sampler", ("speccheck.sampler", "speccheck.sampler.experiments", "speccheck.sampler.calls")),
    "theory": ("speccheck.theory", ("speccheck.theory",)),
    "verifiers": ("speccheck.verifiers", ("speccheck.verifiers",)),
    "validation": ("speccheck.validation", ("speccheck.validation.stats", "speccheck.validation.mutants",
                                            "speccheck.validation.verdict", "speccheck.validation.law",
                                            "speccheck.validation.defects")),
    "targets": ("speccheck.targets", ("speccheck.targets",)),
    "reports": ("Battery reports: results, formats and the failure figure",
                ("speccheck.validation.results", "speccheck.validation.report", "speccheck.figures.report_fig")),
    "tables": ("Tables: theory and the results store", ("speccheck.theory.table", "speccheck.scale.results")),
}


def first_paragraph(doc: Optional[str]) -> str:
    """The first paragraph of a docstring, joined into one line ('' if none)."""
    text = inspect.cleandoc(doc or "").strip()
    return " ".join(text.split("\n\n")[0].split())


def _annotation(value: Any) -> str:
    if isinstance(value, str):
        return value.strip("'\"")
    return inspect.formatannotation(value)


def _default(value: Any) -> str:
    return re.sub(r" at 0x[0-9a-fA-F]+", "", repr(value))


def signature(obj: Any) -> str:
    """``(params) -> return`` of a callable with annotations unquoted and stable defaults; '' if none."""
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return ""
    parts, star_done = [], False
    params = list(sig.parameters.values())
    if params and params[0].name in ("self", "cls"):
        params = params[1:]
    for p in params:
        if p.kind is p.KEYWORD_ONLY and not star_done:
            parts.append("*")
            star_done = True
        if p.kind is p.VAR_POSITIONAL:
            star_done = True
        text = {p.VAR_POSITIONAL: "*", p.VAR_KEYWORD: "**"}.get(p.kind, "") + p.name
        if p.annotation is not p.empty:
            text += f": {_annotation(p.annotation)}"
        if p.default is not p.empty:
            text += f" = {_default(p.default)}" if p.annotation is not p.empty else f"={_default(p.default)}"
        parts.append(text)
    out = f"({', '.join(parts)})"
    if sig.return_annotation is not sig.empty:
        out += f" -> {_annotation(sig.return_annotation)}"
    return out


def public_names(module: Any) -> list[str]:
    """``__all__``, else the functions and classes defined in the module (no leading underscore)."""
    names = getattr(module, "__all__", None)
    if names is not None:
        return list(names)
    return [name for name, obj in vars(module).items() if not name.startswith("_")
            and (inspect.isfunction(obj) or inspect.isclass(obj)) and obj.__module__ == module.__name__]


def _members(cls: type) -> list[str]:
    lines = []
    for name, member in vars(cls).items():
        if name.startswith("_"):
            continue
        if isinstance(member, property):
            summary = first_paragraph(member.__doc__).split(". ")[0]
            lines.append(f"- `.{name}` (property)" + (f": {summary}" if summary else ""))
        elif inspect.isfunction(member) or isinstance(member, (staticmethod, classmethod)):
            func = member.__func__ if isinstance(member, (staticmethod, classmethod)) else member
            summary = first_paragraph(func.__doc__).split(". ")[0]
            lines.append(f"- `.{name}{signature(func)}`" + (f": {summary}" if summary else ""))
    return lines


def entry(module: Any, name: str) -> str:
    """The markdown of one public name."""
    obj = getattr(module, name)
    if inspect.isclass(obj):
        doc = first_paragraph(obj.__doc__) or "(no docstring)"
        lines = [f"### class `{name}{signature(obj).removesuffix(' -> None')}`", "", doc]
        members = _members(obj)
        if members:
            lines += [""] + members
    elif callable(obj) and (inspect.isfunction(obj) or inspect.isbuiltin(obj)):
        lines = [f"### `{name}{signature(obj)}`", "", first_paragraph(obj.__doc__) or "(no docstring)"]
    else:
        value = _default(obj)
        value = value if len(value) <= 100 else value[:97] + "..."
        lines = [f"### `{name}`", "", f"Constant: `{value}`"]
    return "\n".join(lines)


def render(stem: str) -> str:
    """The whole page ``stem`` as markdown."""
    title, modules = PAGES[stem]
    out = [f"# {title}", "", "<!-- generated by docs/api/_generate.py from the code: edit the docstrings, "
                             "then run it -->", ""]
    for name in modules:
        module = importlib.import_module(name)
        out += [f"## `{name}`", "", first_paragraph(module.__doc__), ""]
        for public in public_names(module):
            out += [entry(module, public), ""]
    return "\n".join(out).rstrip() + "\n"


def main(argv: Optional[list[str]] = None) -> int:
    """Write the pages (or with --check, report the stale ones); the exit code says which."""
    argv = sys.argv[1:] if argv is None else argv
    check = "--check" in argv
    stale = []
    for stem in PAGES:
        path = HERE / f"{stem}.md"
        text = render(stem)
        if path.exists() and path.read_text() == text:
            continue
        stale.append(path.name)
        if not check:
            path.write_text(text)
    if check and stale:
        print(f"stale API pages: {', '.join(stale)} (run python docs/api/_generate.py)")
        return 1
    print(("checked" if check else "written") + f": {len(PAGES)} pages, {len(stale)} " +
          ("stale" if check else "changed"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
