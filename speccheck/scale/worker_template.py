"""Imported in the local workers' template process, and in no other.

:func:`speccheck.scale.executors.launch_worker_template` starts a ``forkserver`` that imports this
module; the local Dask workers are forked from it. Here the template imports the modules named in
``$SPECCHECK_WORKER_MODULES`` (Dask, torch, the units' modules), each one that fails left to the
workers (which import it again when a unit needs it, and report its error there).

When the client exits, the template is told so and ends; left to Python, it would spend about a
second tearing down torch while it still holds the client's stdout and stderr, so whoever reads
them through a pipe (CI, ``| tee``) would wait for it. Here it ends at once (``os._exit`` at exit;
it has nothing to flush). The forked workers end with ``os._exit`` anyway. Imported anywhere else
(by a tool that imports every module), it does nothing.
"""

from __future__ import annotations

import atexit
import os
import sys

MODULES_VARIABLE = "SPECCHECK_WORKER_MODULES"


def in_template() -> bool:
    """Whether this is the forkserver's ``main`` importing its preload modules."""
    from multiprocessing import forkserver

    frame = sys._getframe()
    while frame is not None:
        if frame.f_code is forkserver.main.__code__:
            return True
        frame = frame.f_back
    return False


def import_modules(names: str) -> list[str]:
    """Import the comma-separated ``names``; the ones that failed (left to the workers)."""
    import importlib

    failed = []
    for name in filter(None, (n.strip() for n in names.split(","))):
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - any error: the worker meets it again, in the unit that needs it
            failed.append(name)
    return failed


if in_template():
    atexit.register(os._exit, 0)
    # read once, then dropped: the processes forked from here (the code under test) inherit no
    # variable of speccheck's
    import_modules(os.environ.pop(MODULES_VARIABLE, ""))
