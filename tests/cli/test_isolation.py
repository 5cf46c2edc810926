"""speccheck.isolation: the parent turns every way a job can end into a result or a
SpeccheckError naming what happened (it never exits 0 without a result)."""

from __future__ import annotations

import pytest

from speccheck import errors
from speccheck.isolation import memory_limit_bytes, run_isolated

J = "tests.cli.jobs"


def run(name, timeout=20.0, **kw):
    return run_isolated(f"{J}:{name}", kw, timeout=timeout, what="test job", memory_fraction=0.5)


def test_result_and_heartbeats_reset_the_unit_clock():
    assert run("ok", value=7) == {"value": 7}
    seen = []
    out = run_isolated(f"{J}:beats", {"units": 4, "seconds": 0.4}, timeout=1.0, on_beat=seen.append)
    assert out == {"units": 4} and seen == [f"unit {i}" for i in range(4)]  # 1.6 s in all, 0.4 s per unit


def test_hung_unit_is_stopped_and_named():
    with pytest.raises(errors.IsolatedCodeError, match=r"unit 'unit b \(hangs\)' ran longer than the timeout \(1 s"):
        run("hang_in_unit", timeout=1.0)


@pytest.mark.parametrize("name, kw, pattern", [
    ("sys_exit", {"code": 0}, r"called sys.exit\(0\).*no verdict"),
    ("sys_exit", {"code": 3}, r"called sys.exit\(3\)"),
    ("os_exit", {"code": 0}, r"os._exit\(0\)\) before the job finished.*no verdict"),
    ("os_exit", {"code": 5}, r"exited the process with status 5"),
    ("kill_self", {}, r"SIGKILL \(out of memory\?\)"),
    ("memory", {}, r"ran out of memory"),
    ("raise_runtime", {}, r"raised RuntimeError: boom"),
    ("not_a_dict", {}, r"returned list, not a result"),
])
def test_every_bad_ending_is_exit_2(name, kw, pattern):
    with pytest.raises(errors.IsolatedCodeError, match=pattern) as info:
        run(name, **kw)
    assert info.value.exit_code == 2


def test_speccheck_errors_keep_their_class():
    with pytest.raises(errors.LoadError, match="cannot load verifier 'x:y'"):
        run("raise_load_error")


def test_bad_arguments():
    with pytest.raises(errors.InputError, match="timeout"):
        run_isolated(f"{J}:ok", {}, timeout=0)
    with pytest.raises(errors.InputError, match="timeout"):
        run_isolated(f"{J}:ok", {}, timeout=float("nan"))
    with pytest.raises(errors.InputError, match="memory fraction"):
        memory_limit_bytes(1.5)
    assert memory_limit_bytes(None) is None and memory_limit_bytes(0.5) > 0


def test_script_without_main_guard_does_not_recurse(tmp_path):
    """spawn re-imports the caller's __main__; run_isolated hides it, so a plain script that calls
    the command (no ``if __name__ == "__main__"``) runs once."""
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    script = tmp_path / "plain.py"
    script.write_text("import sys\nfrom speccheck.isolation import run_isolated\n"
                      "print('top-level ran', flush=True)\n"
                      f"print(run_isolated('{J}:ok', {{'value': 3}}, timeout=60))\n")
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, str(script)], env=env, cwd=root, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.count("top-level ran") == 1 and "{'value': 3}" in r.stdout


def test_emitted_values_bring_their_arrays_as_numbers():
    import numpy as np

    seen = []
    out = run_isolated(f"{J}:emits_arrays", {"n": 5}, timeout=20.0, on_value=seen.append)
    assert out == {"emitted": 7} and len(seen) == 7
    for value in seen:
        a = value["a"]
        assert isinstance(a, np.ndarray) and a.dtype.str == value["dtype"] and a.shape == (2, 5)
        assert np.array_equal(a, (np.arange(10).reshape(2, 5) % 2).astype(value["dtype"]))
        assert a.flags.writeable and value["nested"][0]["x"].shape == (0,)
    seen.clear()
    with pytest.raises(errors.IsolatedCodeError, match=r"os._exit\(0\)"):  # values so far, never a result
        run_isolated(f"{J}:emits_then_dies", {}, timeout=20.0, on_value=seen.append)
    assert len(seen) == 1


@pytest.mark.parametrize("header, message, frames, pattern", [
    ({"frames": 1}, {"a": {"__frame__": 0, "dtype": "|O", "shape": [1]}}, [b"\0" * 8], "bad array frame"),
    ({"frames": 1}, {"a": {"__frame__": 0, "dtype": "<f8", "shape": [2]}}, [b"\0" * 8], "1 values for shape"),
    ({"frames": 1}, {"a": {"__frame__": 1, "dtype": "<f8", "shape": [1]}}, [b"\0" * 8], "bad array frame"),
    ({"frames": 1}, {"a": {"__frame__": 0, "dtype": "<f8", "shape": [1]},
                     "b": {"__frame__": 0, "dtype": "<f8", "shape": [1]}}, [b"\0" * 8], "bad array frame"),
    ({"frames": 1}, {"a": {"__frame__": 0, "dtype": "<f8", "shape": [-1]}}, [b"\0" * 8], "bad array frame"),
    ({"frames": -3}, {}, [], "bad frame count"),
    ({"frames": 2}, {}, [b""], "stopped mid-message"),
])
def test_a_malformed_message_is_refused_never_interpreted(monkeypatch, header, message, frames, pattern):
    import json
    import multiprocessing

    from speccheck import isolation

    monkeypatch.setattr(isolation, "_FRAME_WAIT_S", 0.2)
    receive, send = multiprocessing.Pipe(duplex=False)
    for part in [json.dumps(header).encode(), json.dumps(message).encode(), *frames]:
        send.send_bytes(part)
    with pytest.raises(ValueError, match=pattern):
        isolation._recv(receive)


@pytest.mark.parametrize("message, pattern", [([1, 2], "a list, not a message"),
                                              ("text", "a str, not a message")])
def test_a_message_that_is_not_a_table_is_refused(monkeypatch, message, pattern):
    """Whatever the worker's first message decodes to, anything but a table is no result."""
    from speccheck import isolation

    monkeypatch.setattr(isolation, "_recv", lambda conn: message)
    with pytest.raises(errors.IsolatedCodeError, match=f"unreadable message.*{pattern}"):
        run_isolated(f"{J}:ok", {}, timeout=20.0)


def test_a_deeply_nested_message_is_refused(monkeypatch):
    from speccheck import isolation

    def deep(conn):
        raise RecursionError("maximum recursion depth exceeded while decoding a JSON array")
    monkeypatch.setattr(isolation, "_recv", deep)
    with pytest.raises(errors.IsolatedCodeError, match="unreadable message.*recursion"):
        run_isolated(f"{J}:ok", {}, timeout=20.0)
