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


def _umask() -> int:
    """The process's umask, read without changing it where Linux says it (/proc), else set and
    put back at once."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_text(path: str, text: str | bytes, option: str) -> None:
    """Write atomically (temporary file + rename); an OSError becomes exit 2 naming ``option``.

    The file gets the mode ``open`` would give it: an existing file keeps its mode, a new one
    is 0o666 less the umask (the temporary file is created 0o600, which a rename would keep)."""
    folder = os.path.dirname(os.path.abspath(path))
    tmp = None
    try:
        mode = "wb" if isinstance(text, bytes) else "w"
        try:
            perms = os.stat(path).st_mode & 0o7777
        except FileNotFoundError:
            perms = 0o666 & ~_umask()
        with tempfile.NamedTemporaryFile(mode, dir=folder, prefix=".speccheck-", delete=False) as fh:
            tmp = fh.name
            fh.write(text)
            os.chmod(tmp, perms)
        os.replace(tmp, path)
    except OSError as exc:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
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


def progress_wanted(quiet: bool = False, *, terminal_only: bool = True) -> bool:
    """Progress may be shown: no ``--quiet``, no $SPECCHECK_NO_PROGRESS=1, and (``terminal_only``,
    for a bar redrawn in place) stderr is a terminal. Without a terminal the units of work report
    in plain lines instead (:class:`speccheck.scale.executors.Progress`)."""
    if quiet or os.environ.get(NO_PROGRESS_ENV, "") not in ("", "0"):
        return False
    if not terminal_only:
        return True
    isatty = getattr(sys.stderr, "isatty", None)
    return bool(isatty and isatty())
