"""Jobs for :func:`speccheck.isolation.run_isolated` tests: each misbehaves in one way."""

from __future__ import annotations

import os
import sys
import time

from speccheck.errors import LoadError


def ok(heartbeat, value=1):
    heartbeat("first unit")
    return {"value": value}


def beats(heartbeat, units=3, seconds=0.3):
    """Many short units: the per-unit timeout must not add them up."""
    for i in range(units):
        heartbeat(f"unit {i}")
        time.sleep(seconds)
    return {"units": units}


def hang_in_unit(heartbeat):
    heartbeat("unit a")
    heartbeat("unit b (hangs)")
    time.sleep(3600)


def sys_exit(heartbeat, code=0):
    sys.exit(code)


def os_exit(heartbeat, code=0):
    os._exit(code)


def raise_load_error(heartbeat):
    raise LoadError("cannot load verifier 'x:y' (test)")


def raise_runtime(heartbeat):
    raise RuntimeError("boom")


def memory(heartbeat):
    import numpy as np

    blocks = []
    while True:
        blocks.append(np.empty(1 << 30, dtype=np.uint8))  # untouched: address space only


def not_a_dict(heartbeat):
    return [1, 2, 3]


def kill_self(heartbeat):
    import signal

    os.kill(os.getpid(), signal.SIGKILL)


def emits_arrays(heartbeat, emit, n=5):
    """Streams values holding numpy arrays of every frame dtype, then a result."""
    import numpy as np

    heartbeat("emitting")
    for dtype in ("<f8", "<f4", "<i8", "<i4", "|i1", "|u1", "|b1"):
        emit({"dtype": dtype, "a": (np.arange(n * 2).reshape(2, n) % 2).astype(dtype), "nested": [{"x": np.zeros(0)}]})
    return {"emitted": 7}


def emits_then_dies(heartbeat, emit):
    import numpy as np

    heartbeat("emitting")
    emit({"a": np.ones(3)})
    os._exit(0)
