"""Run user-supplied code in a child process that cannot decide the parent's exit code.

A job is a function ``job(heartbeat, **kwargs) -> dict`` named by ``"package.module:function"``.
:func:`run_isolated` starts it in a fresh ``spawn`` process and waits. The parent runs none of
the user's code: it receives only JSON bytes over a pipe, numpy arrays as raw bytes of a few
numeric dtypes (it never unpickles what the child sends), so whatever the child does, the parent's outcome is one of

- the job's JSON result (the only way to a verdict);
- a :class:`~speccheck.errors.SpeccheckError` the job raised (re-raised with the same class
  and message: a bad option, an unloadable verifier, ...);
- :class:`~speccheck.errors.IsolatedCodeError` naming what happened: ``sys.exit`` /
  ``os._exit`` before a result (even with status 0), death by a signal (segfault, OOM killer),
  ``MemoryError`` (the child's address space is capped at a stated fraction of physical
  memory), any other exception, or a *unit* that ran longer than ``timeout`` seconds.

Processes: the child starts its own session (``os.setsid``), so it and every process it forks
form one process group, which the parent kills (SIGKILL) when the child ends, times out or the
parent is interrupted: a forked grandchild neither outlives the run nor holds the parent's
output pipe open. A descendant that starts a session of its own leaves the group and is not
seen; neither is anything left if the parent itself is killed with SIGKILL.

Units: the job calls ``heartbeat(label)`` when it starts a unit of work (a battery cell, a
grid cell); each unit, and the stretch before the first heartbeat, must finish within
``timeout`` seconds, else the child is killed and the error names the unit. Starting the
interpreter and importing ``preload`` modules has its own allowance (``startup_s``), so a
small ``timeout`` is not eaten by ``import torch``.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import math
import multiprocessing
import os
import signal
import sys
import time
import traceback
from typing import Any, Callable, Iterator, Optional, Sequence

from speccheck import errors

DEFAULT_MEMORY_FRACTION = 0.8
_POLL_S = 0.25
_FRAME_WAIT_S = 60.0


def physical_memory_bytes() -> Optional[int]:
    """Total physical memory (``os.sysconf``), or None where the platform does not say."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        return None


def memory_limit_bytes(fraction: Optional[float] = DEFAULT_MEMORY_FRACTION) -> Optional[int]:
    """``fraction`` of physical memory as a byte limit; None for no limit (``fraction`` None or 0)."""
    if not fraction:
        return None
    if not (0 < fraction <= 1):
        raise errors.InputError(f"memory fraction must be in (0, 1], got {fraction}")
    total = physical_memory_bytes()
    return None if total is None else int(fraction * total)


#: the array dtypes a child may send as raw bytes (anything else is refused, never interpreted)
FRAME_DTYPES = ("<f8", "<f4", "<i8", "<i4", "|i1", "|u1", "|b1")


def _send(conn: Any, message: dict) -> None:
    """One message: its JSON, then the bytes of each numpy array in it (arrays travel as
    ``{"__frame__": i, "dtype", "shape"}`` in the JSON, their bytes as frame i)."""
    frames: list = []
    text = json.dumps(_with_frames(message, frames), default=_json_default, allow_nan=True)
    conn.send_bytes(json.dumps({"frames": len(frames)}).encode() if frames else b"{}")
    conn.send_bytes(text.encode())
    for frame in frames:
        conn.send_bytes(frame)


def _with_frames(value: Any, frames: list) -> Any:
    import numpy as np

    if isinstance(value, dict):
        return {str(k): _with_frames(v, frames) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_with_frames(v, frames) for v in value]
    if isinstance(value, np.ndarray) and value.dtype.str in FRAME_DTYPES:
        frames.append(np.ascontiguousarray(value).tobytes())
        return {"__frame__": len(frames) - 1, "dtype": value.dtype.str, "shape": list(value.shape)}
    return value


def _recv(conn: Any) -> dict:
    """The message :func:`_send` sent, arrays rebuilt from their frames (dtype and size checked:
    raw bytes are read as numbers, never unpickled). ValueError if it is malformed."""
    import numpy as np

    def next_bytes() -> bytes:  # the rest of a message follows at once from a live child
        if not conn.poll(_FRAME_WAIT_S):
            raise ValueError(f"the worker stopped mid-message (nothing for {_FRAME_WAIT_S:g} s)")
        return conn.recv_bytes()

    header = json.loads(conn.recv_bytes().decode())
    n_frames = header.get("frames", 0) if isinstance(header, dict) else -1
    if not isinstance(n_frames, int) or not 0 <= n_frames <= 1_000_000:
        raise ValueError(f"bad frame count {n_frames!r}")
    message = json.loads(next_bytes().decode())
    frames = [next_bytes() for _ in range(n_frames)]
    used: set[int] = set()

    def rebuild(value: Any) -> Any:
        if isinstance(value, list):
            return [rebuild(v) for v in value]
        if not isinstance(value, dict):
            return value
        if "__frame__" not in value:
            return {k: rebuild(v) for k, v in value.items()}
        index, dtype, shape = value.get("__frame__"), value.get("dtype"), value.get("shape")
        if (not isinstance(index, int) or not 0 <= index < n_frames or index in used or dtype not in FRAME_DTYPES
                or not isinstance(shape, list) or not all(isinstance(n, int) and n >= 0 for n in shape)):
            raise ValueError(f"bad array frame {value!r}")
        used.add(index)
        array = np.frombuffer(frames[index], dtype=np.dtype(dtype))
        if array.size != math.prod(shape):
            raise ValueError(f"array frame {index}: {array.size} values for shape {shape}")
        return array.reshape(shape).copy()  # writable, owning its memory

    return rebuild(message)


def _json_default(obj: Any) -> Any:
    try:
        return float(obj)
    except (TypeError, ValueError):
        return repr(obj)


def _import_job(job: str) -> Callable[..., dict]:
    module_name, _, attr = job.partition(":")
    return getattr(importlib.import_module(module_name), attr)


def _child_main(conn: Any, job: str, kwargs: dict, preload: Sequence[str], memory_limit: Optional[int],
                streams: bool = False) -> None:
    """The child's entry point: every way out sends one message or dies (the parent sees EOF)."""
    with contextlib.suppress(OSError):  # already a group leader: cannot happen for a fresh child
        os.setsid()  # its own session and process group: the parent ends it with every descendant
    try:
        if memory_limit:
            import resource

            resource.setrlimit(resource.RLIMIT_AS, (memory_limit, memory_limit))
        for name in preload:
            importlib.import_module(name)
        _send(conn, {"kind": "started"})
        func = _import_job(job)
        if streams:
            kwargs = {**kwargs, "emit": lambda value: _send(conn, {"kind": "value", "value": value})}
        value = func(lambda label: _send(conn, {"kind": "beat", "label": str(label)}), **kwargs)
        _send(conn, {"kind": "result", "value": value})
    except SystemExit as exc:
        _send(conn, {"kind": "exit", "code": repr(exc.code)})
    except MemoryError as exc:
        _send(conn, {"kind": "memory", "message": str(exc)[:500]})
    except errors.SpeccheckError as exc:
        _send(conn, {"kind": "error", "type": type(exc).__name__, "speccheck": True, "message": str(exc)})
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, never re-raised here
        tail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        _send(conn, {"kind": "error", "type": type(exc).__name__, "speccheck": False,
                     "is_value_error": isinstance(exc, ValueError), "message": str(exc)[:2000],
                     "traceback": tail[:2000]})
    finally:
        conn.close()


def _stop(proc: Any) -> None:
    """End the child, then every process left in its process group (a verifier's forked
    grandchild would otherwise outlive the run and hold the parent's stdout pipe open)."""
    if proc.is_alive():
        proc.terminate()
        proc.join(2.0)
    if proc.is_alive():
        proc.kill()
        proc.join(2.0)
    _end_group(proc.pid)


def _end_group(pid: Optional[int]) -> None:
    """SIGKILL the process group ``pid`` leads (the child's, see :func:`_child_main`), never ours."""
    if not pid or not hasattr(os, "killpg"):
        return
    with contextlib.suppress(OSError):
        if pid == os.getpgrp():
            return
        os.killpg(pid, signal.SIGKILL)


def _death_message(exitcode: Optional[int], what: str) -> str:
    """Why a child that sent no result ended, from its exit status."""
    if exitcode is None:
        return f"{what} left the worker process in an unknown state before the job finished; no verdict"
    if exitcode == 0:
        return (f"{what} exited the process (sys.exit(0) or os._exit(0)) before the job finished; "
                "no result was produced, so there is no verdict")
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        hint = " (out of memory?)" if name == "SIGKILL" else " (a crash in native code?)" if name == "SIGSEGV" else ""
        return f"{what} killed the worker process with {name}{hint} before the job finished; no verdict"
    return (f"{what} exited the process with status {exitcode} (sys.exit/os._exit) before the job finished; "
            "no verdict")


def _raise_from_message(message: dict, what: str) -> None:
    kind = message.get("kind")
    if kind == "exit":
        raise errors.IsolatedCodeError(f"{what} called sys.exit({message.get('code')}) before the job finished; "
                                       "no result was produced, so there is no verdict")
    if kind == "memory":
        raise errors.IsolatedCodeError(f"{what} ran out of memory (MemoryError: {message.get('message', '')}); "
                                       "the worker's memory is capped at a fraction of physical memory")
    type_name = str(message.get("type", "Exception"))
    text = str(message.get("message", ""))
    if message.get("speccheck"):
        cls = getattr(errors, type_name, None)
        if isinstance(cls, type) and issubclass(cls, errors.SpeccheckError):
            raise cls(text)
        raise errors.SpeccheckError(text)
    if message.get("is_value_error"):
        raise errors.InputError(text)
    raise errors.IsolatedCodeError(f"{what} raised {type_name}: {text}")


class _ExitCalled(BaseException):
    """``os._exit(code)`` called by user code running in this process under :func:`exits_guarded`."""

    def __init__(self, code: object) -> None:
        super().__init__(code)
        self.code = code


@contextlib.contextmanager
def exits_guarded(what: str) -> Iterator[None]:
    """Run user code IN THIS PROCESS (a verifier object: ``battery(obj, isolate=False)``, the pytest
    fixture) so that its exits cannot end the process with a status it chose: ``sys.exit`` /
    ``SystemExit`` and ``os._exit`` (replaced for the duration, in this process only: a child it
    forks exits as usual) become :class:`~speccheck.errors.IsolatedCodeError` (no verdict, exit
    code 2). ``KeyboardInterrupt`` passes through. What cannot be caught in a process: an exit from
    native code (``posix._exit``, ``ctypes``' ``exit``, a C extension), a crash or a signal; run the
    verifier by its spec string (isolated) for those."""
    real_exit, owner = os._exit, os.getpid()

    def trapped(code: int = 0) -> None:  # noqa: ANN001 - os._exit's signature
        if os.getpid() != owner:  # a process the user code forked: exit as asked
            real_exit(code)
        raise _ExitCalled(code)

    os._exit = trapped
    try:
        yield
    except SystemExit as exc:
        raise errors.IsolatedCodeError(f"{what} called sys.exit({exc.code!r}) before the job finished; no result was "
                                       "produced, so there is no verdict") from None
    except _ExitCalled as exc:
        raise errors.IsolatedCodeError(f"{what} called os._exit({exc.code!r}) before the job finished (caught: it ran "
                                       "in this process); no verdict") from None
    finally:
        os._exit = real_exit


@contextlib.contextmanager
def _main_hidden() -> Iterator[None]:
    """Start the child without re-running the caller's ``__main__`` (spawn would import it
    again, so a script that calls :func:`run_isolated` without a ``__main__`` guard would
    recurse). The job is named by module path and needs nothing from ``__main__``."""
    main = sys.modules.get("__main__")
    saved = {k: main.__dict__[k] for k in ("__file__", "__spec__") if main is not None and k in main.__dict__}
    safe_path = os.environ.get("PYTHONSAFEPATH")
    try:
        if main is not None:
            main.__dict__.pop("__file__", None)
            main.__dict__["__spec__"] = None
        # the child's interpreter must not put the working folder first on sys.path (a random.py
        # there would replace the standard library's module before the job starts)
        os.environ["PYTHONSAFEPATH"] = "1"
        yield
    finally:
        if safe_path is None:
            os.environ.pop("PYTHONSAFEPATH", None)
        else:
            os.environ["PYTHONSAFEPATH"] = safe_path
        if main is not None:
            main.__dict__.update(saved)
            if "__spec__" not in saved:
                main.__dict__.pop("__spec__", None)


def run_isolated(job: str, kwargs: Optional[dict] = None, *, timeout: float, what: str = "user code",
                 preload: Sequence[str] = (), startup_s: float = 180.0,
                 memory_fraction: Optional[float] = DEFAULT_MEMORY_FRACTION,
                 on_beat: Optional[Callable[[str], None]] = None,
                 on_value: Optional[Callable[[dict], None]] = None, start_method: str = "spawn") -> dict:
    """Run ``job(heartbeat, **kwargs)`` in a spawned child and return its JSON result.

    ``on_value``: the job is called with ``emit`` too (``job(heartbeat, emit=..., **kwargs)``)
    and each ``emit(value)`` reaches ``on_value(value)`` here as it happens, numpy arrays in it
    as arrays (sent as raw bytes of a few numeric dtypes, :data:`FRAME_DTYPES`; never pickled).
    ``start_method``: "spawn" (a fresh interpreter) or "forkserver" (forked from this process's
    forkserver, which must import no user code: see ``speccheck.scale.executors``).

    ``timeout`` (seconds, > 0) bounds every unit between heartbeats; ``startup_s`` bounds the
    interpreter start plus ``preload`` imports; ``memory_fraction`` caps the child's address
    space (``RLIMIT_AS``) at that fraction of physical memory (None: no cap; use None for CUDA,
    whose driver maps large virtual ranges). ``what`` names the code in messages ("verifier
    'pkg.mod:Rule'"). Raises the job's own SpeccheckError, or IsolatedCodeError (exit code 2).
    """
    if not (isinstance(timeout, (int, float)) and timeout > 0 and timeout == timeout and timeout != float("inf")):
        raise errors.InputError(f"timeout must be a finite number of seconds > 0, got {timeout!r}")
    limit = memory_limit_bytes(memory_fraction)
    if start_method not in ("spawn", "forkserver"):
        raise errors.InputError(f"start_method must be 'spawn' or 'forkserver', got {start_method!r}")
    ctx = multiprocessing.get_context(start_method)
    parent_conn, child_conn = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child_main,
                       args=(child_conn, job, dict(kwargs or {}), tuple(preload), limit, on_value is not None),
                       daemon=True, name=f"speccheck-isolated-{job}")
    with _main_hidden():
        proc.start()
    child_conn.close()
    label, budget = "starting the worker process", startup_s
    unit_start = time.monotonic()
    try:
        with _group_ended_on_sigterm(proc):
            return _wait(proc, parent_conn, what=what, timeout=timeout, label=label, budget=budget,
                         unit_start=unit_start, on_beat=on_beat, on_value=on_value)
    finally:
        _stop(proc)
        parent_conn.close()


@contextlib.contextmanager
def _group_ended_on_sigterm(proc: Any) -> Iterator[None]:
    """While waiting, a SIGTERM to this process (a CI job cancelled, ``kill``) first ends the
    child's process group, then takes its usual course: the child's session would otherwise
    outlive this process. Only from the main thread (where handlers can be set)."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGTERM)

    def on_term(signum: int, frame: Any) -> None:
        with contextlib.suppress(Exception):
            proc.kill()
        _end_group(proc.pid)
        signal.signal(signal.SIGTERM, previous)
        if callable(previous):
            previous(signum, frame)
        elif previous != signal.SIG_IGN:
            os.kill(os.getpid(), signal.SIGTERM)  # the default action, now restored

    signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _wait(proc: Any, parent_conn: Any, *, what: str, timeout: float, label: str, budget: float, unit_start: float,
          on_beat: Optional[Callable[[str], None]], on_value: Optional[Callable[[dict], None]]) -> dict:
    """The parent's side of :func:`run_isolated`: messages until the result, an error or the child's end."""
    while True:
        remaining = unit_start + budget - time.monotonic()
        if remaining <= 0:
            _stop(proc)
            which = "the timeout" if budget == timeout else "the worker's start-up allowance"
            raise errors.IsolatedCodeError(
                f"{what}: unit '{label}' ran longer than {which} ({budget:g} s; --timeout sets the timeout) "
                "and was stopped; no verdict")
        if not parent_conn.poll(min(remaining, _POLL_S)):
            if not proc.is_alive() and not parent_conn.poll(0):
                break
            continue
        try:
            message = _recv(parent_conn)
            if not isinstance(message, dict):
                raise TypeError(f"a {type(message).__name__}, not a message")
        except (EOFError, OSError):
            break
        except (ValueError, TypeError, AttributeError, RecursionError) as exc:
            _stop(proc)
            raise errors.IsolatedCodeError(f"{what}: the worker sent an unreadable message ({exc})") from None
        kind = message.get("kind")
        if kind == "started":
            label, budget, unit_start = "loading", timeout, time.monotonic()
        elif kind == "beat":
            label, budget, unit_start = str(message.get("label", "?")), timeout, time.monotonic()
            if on_beat is not None:
                on_beat(label)
        elif kind == "value" and on_value is not None:
            value = message.get("value")
            if not isinstance(value, dict):
                _stop(proc)
                raise errors.IsolatedCodeError(f"{what}: the worker emitted {type(value).__name__}, not a value")
            on_value(value)
        elif kind == "result":
            proc.join(5.0)
            _stop(proc)
            value = message.get("value")
            if not isinstance(value, dict):
                raise errors.IsolatedCodeError(f"{what}: the worker returned {type(value).__name__}, not a result")
            return value
        else:
            proc.join(5.0)
            _stop(proc)
            _raise_from_message(message, what)
    proc.join(5.0)
    exitcode = proc.exitcode
    _stop(proc)
    raise errors.IsolatedCodeError(_death_message(exitcode, what))
