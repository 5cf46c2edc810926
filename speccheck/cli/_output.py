"""What every command shares on the way out: strict JSON text, atomic writes, and whether a
progress bar may be drawn."""

from __future__ import annotations

import os
import sys
import tempfile
from typing import Any

from speccheck.errors import UsageError

#: environment variable that turns every progress bar off (as ``--quiet`` does)
NO_PROGRESS_ENV = "SPECCHECK_NO_PROGRESS"
#: seconds a job runs before its bar is drawn: quick jobs draw none
PROGRESS_DELAY_S = 2.0


def json_text(obj: Any) -> str:
    """``obj`` as indented strict JSON (no bare NaN / Infinity: they become null; numpy scalars
    and other numbers through ``float``)."""
    from speccheck.strict_json import dumps

    return dumps(obj, default=float, indent=2)


def write_text(path: str, text: str | bytes, option: str) -> None:
    """Write atomically (temporary file + rename); an OSError becomes exit 2 naming ``option``."""
    folder = os.path.dirname(os.path.abspath(path))
    try:
        mode = "wb" if isinstance(text, bytes) else "w"
        with tempfile.NamedTemporaryFile(mode, dir=folder, prefix=".speccheck-", delete=False) as fh:
            fh.write(text)
            tmp = fh.name
        os.replace(tmp, path)
    except OSError as exc:
        raise UsageError(f"{option} {path!r} could not be written ({exc.strerror or exc})") from None


def write_json(path: str, obj: Any, option: str) -> None:
    """``obj`` as strict JSON at ``path`` (atomic; exit 2 naming ``option`` if it cannot be written)."""
    write_text(path, json_text(obj), option)


def progress_bar(total: int, desc: str, enabled: bool) -> Any:
    """A tqdm bar on stderr, drawn only when ``enabled`` and once the job has run ~2 s (``delay``);
    disabled, its ``update``/``close`` do nothing. Never writes to stdout."""
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, file=sys.stderr, delay=PROGRESS_DELAY_S, leave=False,
                disable=not enabled)


def progress_wanted(quiet: bool = False) -> bool:
    """A progress bar may be drawn: stderr is a terminal, no ``--quiet``, no $SPECCHECK_NO_PROGRESS=1."""
    if quiet or os.environ.get(NO_PROGRESS_ENV, "") not in ("", "0"):
        return False
    isatty = getattr(sys.stderr, "isatty", None)
    return bool(isatty and isatty())
