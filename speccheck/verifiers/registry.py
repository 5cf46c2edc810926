"""Finding verifiers by name: built-ins, ``package.module:attr`` paths and entry points.

An installed package adds a rule by declaring, in its pyproject.toml,

    [project.entry-points."speccheck.verifiers"]
    myrule = "mypkg.rules:MyRule"

The attribute may be a verifier instance, a class (instantiated with no arguments) or a
factory function returning a verifier. A verifier is any object with ``verify``
(``docs/contract.md``); ``name`` is taken from the object, else from how it was requested.
A ``module:attr`` path whose module is not importable is also looked up in the current
directory (no PYTHONPATH needed for a ``rule.py`` next to you). Every failure raises
:class:`speccheck.errors.LoadError` (a ValueError) naming the spec and the reason.
"""

from __future__ import annotations

import importlib
import os
import sys
from importlib import metadata
from typing import Any

from speccheck.errors import LoadError

ENTRY_POINT_GROUP = "speccheck.verifiers"

# name -> ("module:attr", one-line description). Add a rule with one line.
BUILTIN: dict[str, tuple[str, str]] = {
    "rmc": ("speccheck.verifiers.rmc:RMC", "reflection maximal coupling (K = 1 only)"),
    "dgrs": ("speccheck.verifiers.dgrs:DGRS", "greedy rejection sampling in drafting order (D-GRS)"),
    "rass": ("speccheck.verifiers.rass:RASS",
             "rank-aware selection, optimal rank weights, rejection-sampled residual"),
    "rass-icdf": ("speccheck.verifiers.rass:RASSInverseCDF",
                  "rank-aware selection, optimal rank weights, inverse-CDF residual"),
    "mcrs": ("speccheck.verifiers.mcrs:MCRS",
             "max-conditioned rank selection (policy in the largest draft), rejection-sampled residual"),
    "mcrs2": ("speccheck.verifiers.mcrs2:MCRS2",
              "min-max conditioned rank selection (policy in the smallest and largest draft)"),
}


def _entry_points() -> dict[str, metadata.EntryPoint]:
    eps = metadata.entry_points(group=ENTRY_POINT_GROUP)
    return {ep.name: ep for ep in eps}


def _import_here(mod_name: str):  # noqa: ANN202 - a module
    """Import ``mod_name``; if its top-level package is not found, also look in the current
    directory (appended to sys.path, so it never shadows an installed module)."""
    try:
        return importlib.import_module(mod_name)
    except ModuleNotFoundError as exc:
        top = mod_name.split(".")[0]
        cwd = os.getcwd()
        if exc.name != top or cwd in sys.path or "" in sys.path:
            raise
        sys.path.append(cwd)
        importlib.invalidate_caches()
        return importlib.import_module(mod_name)


def _resolve_path(path: str):
    """Import ``package.module:attr`` (attr may be dotted). LoadError with the reason otherwise."""
    mod_name, _, attr = path.partition(":")
    if not mod_name or not attr:
        raise LoadError(f"verifier path must look like 'package.module:attr', got {path!r}")
    try:
        obj = _import_here(mod_name)
    except ImportError as exc:
        raise LoadError(f"cannot import module {mod_name!r} for verifier {path!r}: {exc}") from exc
    except Exception as exc:  # noqa: BLE001 - the user's module raised while importing
        raise LoadError(f"importing module {mod_name!r} for verifier {path!r} raised "
                        f"{type(exc).__name__}: {exc}") from exc
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise LoadError(f"module {mod_name!r} has no attribute {attr!r} (verifier {path!r})") from None
    return obj


def _instantiate(obj, label: str):
    """Turn an instance / class / factory into a verifier object with ``verify`` and ``name``."""
    if isinstance(obj, type):
        try:
            obj = obj()
        except TypeError as exc:
            raise LoadError(f"verifier class {label!r} must be constructible with no arguments: {exc}") from exc
    elif not hasattr(obj, "verify") and callable(obj):
        obj = obj()
    if not callable(getattr(obj, "verify", None)):
        raise LoadError(f"{label!r} resolved to {type(obj).__name__} object without a callable 'verify' method")
    if not isinstance(getattr(obj, "name", None), str):
        try:
            obj.name = label
        except AttributeError:
            pass
    return obj


def get(spec: Any, **kwargs: Any) -> Any:
    """A verifier from a name ("rmc", "dgrs", "rass", "rass-icdf", an entry-point name), a
    "package.module:attr" path, or an object that already has ``verify`` (returned as is).
    ``kwargs`` go to the constructor of a built-in class. Raises LoadError (a ValueError) when unresolvable.
    """
    if not isinstance(spec, str):
        if callable(getattr(spec, "verify", None)):
            return spec
        raise LoadError(f"verifier must be a name, a 'module:attr' path or an object with verify(); got {spec!r}")
    if spec in BUILTIN:
        cls = _resolve_path(BUILTIN[spec][0])
        return _instantiate(cls(**kwargs) if kwargs else cls, spec)
    if ":" in spec:
        return _instantiate(_resolve_path(spec), spec)
    eps = _entry_points()
    if spec in eps:
        try:
            obj = eps[spec].load()
        except Exception as exc:  # a broken plug-in must not look like an unknown name
            raise LoadError(f"entry point {spec!r} ({eps[spec].value}) failed to load: {exc}") from exc
        return _instantiate(obj, spec)
    names = sorted(set(BUILTIN) | set(eps))
    raise LoadError(f"unknown verifier {spec!r}; available: {', '.join(names)} (or 'package.module:attr')")


def check_spec(spec: str) -> None:
    """Whether ``spec`` can name a verifier, importing no code outside speccheck: a built-in or
    entry-point name, or a path of the form ``package.module:attr``. LoadError otherwise (the
    message of :func:`get`). Whether the path imports and yields a verifier is left to the
    process that runs it."""
    if not isinstance(spec, str):
        raise LoadError(f"verifier must be a name or a 'module:attr' path; got {spec!r}")
    if spec in BUILTIN:
        return
    if ":" in spec:
        mod_name, _, attr = spec.partition(":")
        if not mod_name or not attr:
            raise LoadError(f"verifier path must look like 'package.module:attr', got {spec!r}")
        return
    eps = _entry_points()
    if spec not in eps:
        names = sorted(set(BUILTIN) | set(eps))
        raise LoadError(f"unknown verifier {spec!r}; available: {', '.join(names)} (or 'package.module:attr')")


def source_module(spec: str) -> str:
    """The top-level module whose source is verifier ``spec``, found without importing it:
    "speccheck" for a built-in name, the first component of a ``package.module:attr`` path or of
    an entry point's value; "" when ``spec`` names neither."""
    if spec in BUILTIN:
        return "speccheck"
    target = spec
    if ":" not in spec:
        ep = _entry_points().get(spec)
        target = ep.value if ep is not None else spec
    top = target.partition(":")[0].split(".")[0]
    return top if top.isidentifier() else ""


def _describe(obj) -> str:
    desc = getattr(obj, "description", None)
    if isinstance(desc, str) and desc:
        return desc
    doc = (getattr(obj, "__doc__", None) or "").strip()
    return doc.splitlines()[0] if doc else ""


def available() -> dict[str, str]:
    """name -> one-line description, for the built-ins and the ``speccheck.verifiers`` entry points."""
    out = {name: desc for name, (_, desc) in BUILTIN.items()}
    for name, ep in sorted(_entry_points().items()):
        if name in out:
            continue
        try:
            out[name] = _describe(ep.load()) or f"(entry point {ep.value})"
        except Exception as exc:  # report, don't crash the listing
            out[name] = f"(entry point {ep.value} failed to load: {exc})"
    return out
