"""The hostile inputs of issue 29 (item 4), one test each, with the verdict each must get: a hang,
a port that is not Dask, too many workers, a store that saves nothing or is read-only, two
outputs on one file, no evidence, control characters in JUnit, and measurements that contradict
theory (exit 1). In-process calls of ``speccheck.cli.main`` unless a test needs a process of its
own (the read-only store: a process without the power to override file permissions)."""

from __future__ import annotations

import ctypes
import json
import os
import socket
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET

import pytest

from speccheck.errors import LoadError
from speccheck.scale import executors
from speccheck.scale.store import ResultsStore
from tests.cli_support import run_cli, tiny_suite_text, write_suite

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY_SWEEP = ["--cells", "2x2", "--trajectories", "2", "--steps", "10", "--workers", "1", "--no-progress"]


@pytest.fixture(scope="module")
def tiny_suite(tmp_path_factory):
    return write_suite(tmp_path_factory.mktemp("suite"), tiny_suite_text("tiny-29"))


# ----------------------------------------------------------------------------- a hang
def test_calibrate_on_a_hanging_verifier_stops_at_its_timeout(tmp_path, tiny_suite, capsys):
    code, out, err = run_cli(["calibrate", "--suite", tiny_suite, "--verifier", "tests.cli.hostile:Hang", "--seeds",
                              "1", "--workers", "1", "--timeout", "3", "--store", str(tmp_path / "c.sqlite"),
                              "--no-progress"], capsys)
    assert code == 2, (out, err)
    assert "--timeout" in err and "ran longer than the timeout (3 s" in err and "no verdict" in err, err


def test_calibrate_timeout_is_checked(tiny_suite, capsys):
    for bad in ("0", "-1", "nan", "inf"):
        code, _, err = run_cli(["calibrate", "--suite", tiny_suite, "--verifier", "dgrs", "--timeout", bad,
                                "--workers", "1"], capsys)
        assert code == 2 and "--timeout" in err, (bad, err)


# ----------------------------------------------------------------------------- a port that is not Dask
class _Server:
    """A TCP server on 127.0.0.1 that accepts and then says nothing, or answers garbage."""

    def __init__(self, reply: bytes) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.reply, self.conns = reply, []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)
            if self.reply:
                conn.sendall(self.reply)

    def close(self) -> None:
        for conn in self.conns:
            conn.close()
        self.sock.close()


@pytest.mark.parametrize("reply", [b"", b"HTTP/1.0 200 OK\r\n\r\nnot dask\n" * 4], ids=["silent", "garbage"])
def test_scheduler_port_that_is_not_dask_is_exit_2_within_the_bound(reply, tmp_path, monkeypatch, capsys):
    bound = 3
    monkeypatch.setattr(executors, "_CONNECT_TIMEOUT_S", bound)
    server = _Server(reply)
    address = f"tcp://127.0.0.1:{server.port}"
    try:
        code, out, err = run_cli(["sweep", "--verifiers", "dgrs", "--cells", "1x2", "--trajectories", "2", "--steps",
                                  "4", "--no-progress", "--scheduler", address, "--store", str(tmp_path / "s.sqlite")],
                                 capsys)
        start = time.monotonic()
        with pytest.raises(LoadError, match="--scheduler"):
            executors.check_scheduler(address, bound)
        seconds = time.monotonic() - start
    finally:
        server.close()
    assert code == 2, (out, err)
    assert f"--scheduler {address}" in err and "Dask" in err, err
    assert reply or f"within {bound} s" in err, err
    assert seconds < 5 * bound  # the bound holds, not distributed's unbounded handshake wait (360 s and more before)


# ----------------------------------------------------------------------------- too many workers
@pytest.mark.parametrize("command", [
    ["sweep", "--cells", "1x2"],
    ["calibrate", "--verifier", "dgrs", "--seeds", "1"],
    ["battery", "--verifier", "dgrs"],
])
def test_workers_beyond_the_machine_is_exit_2_naming_the_range(command, tmp_path, capsys):
    code, out, err = run_cli(command + ["--workers", "1000", "--store", str(tmp_path / "s.sqlite")], capsys)
    assert code == 2, (out, err)
    assert f"--workers must be >= 1 and <= {executors.max_workers()}" in err and "got 1000" in err, err
    assert not (tmp_path / "s.sqlite").exists()  # refused before any work


def test_max_workers_is_bounded_by_cores_and_memory():
    per = executors.WORKER_MEMORY_BYTES / executors.WORKER_MEMORY_SHARE
    assert executors.max_workers(cores=2, memory=64 * 2**30) == 2 * executors.WORKERS_PER_CORE
    assert executors.max_workers(cores=256, memory=int(10 * per)) == 10
    assert executors.max_workers(cores=1, memory=2**20) == 1  # always one, in this process


# ----------------------------------------------------------------------------- contradicting theory
def test_speedup_whose_calibration_contradicts_theory_is_exit_1(capsys):
    base = ["speedup", "--K", "2", "--L", "2", "--trajectories", "2", "--steps", "10"]
    code, out, err = run_cli(base + ["--verifier", "tests.cli.hostile29:AlwaysFirst"], capsys)
    assert code == 1, (out, err)
    assert "THEORY CONTRADICTED" in out and "dgrs-always-first K=2 L=2" in out and "|z| > 3.29" in out, out
    code, out, err = run_cli(base + ["--verifier", "dgrs"], capsys)  # the exact rule, same sizes
    assert code == 0 and "CONTRADICTED" not in out, (out, err)


def test_sweep_names_the_cell_that_contradicts_theory(tmp_path, capsys):
    code, out, err = run_cli(["sweep", "--verifiers", "dgrs", "tests.cli.hostile29:AlwaysFirst", *TINY_SWEEP,
                              "--store", str(tmp_path / "s.sqlite")], capsys)
    assert code == 1, (out, err)
    verdict = out.split("THEORY CONTRADICTED", 1)[1]
    assert "1 of 2 cell(s)" in verdict and "dgrs-always-first K=2 L=2" in verdict, out
    assert "\n  dgrs K=2 L=2" not in verdict  # the exact rule's cell is not blamed
    code, out, _ = run_cli(["sweep", "--verifiers", "dgrs", *TINY_SWEEP, "--store", str(tmp_path / "t.sqlite")],
                           capsys)
    assert code == 0 and "CONTRADICTED" not in out


def test_holm_threshold_comes_from_the_stated_rate():
    """One cell at alpha = 1e-3: |z| > Phi^-1(1 - 5e-4) = 3.2905; m cells: Holm's step-down."""
    from speccheck.scale.jobs import calibration_contradictions

    cell = {"rule": "r", "K": 1, "L": 1, "acceptance": 0.5}
    assert calibration_contradictions([{**cell, "calibration_z": 3.28}], 1e-3) == []
    assert len(calibration_contradictions([{**cell, "calibration_z": -3.30}], 1e-3)) == 1
    assert calibration_contradictions([{**cell, "calibration_z": float("nan")}], 1e-3) == []  # no events: no test
    # two cells: the smaller p is compared with alpha / 2, then the other with alpha
    two = [{**cell, "K": 1, "calibration_z": 3.4}, {**cell, "K": 2, "calibration_z": 3.0}]
    assert calibration_contradictions(two, 1e-3) == []  # 3.4 < Phi^-1(1 - 2.5e-4) = 3.48: Holm stops at once
    two[0]["calibration_z"] = float("inf")
    got = calibration_contradictions(two, 1e-2)  # inf: p = 0 < 5e-3; then 3.0: p = 2.7e-3 < 1e-2
    assert [r["K"] for r in got] == [1, 2]


# ----------------------------------------------------------------------------- stores
@pytest.mark.parametrize("store", ["", ":memory:"])
@pytest.mark.parametrize("command", [
    ["sweep", *TINY_SWEEP],
    ["calibrate", "--verifier", "dgrs", "--seeds", "1", "--workers", "1"],
    ["battery", "--verifier", "dgrs"],
    ["results", "list"],
])
def test_store_that_saves_nothing_is_exit_2(command, store, tiny_suite, capsys):
    extra = ["--suite", tiny_suite] if command[0] in ("calibrate", "battery") else []
    code, out, err = run_cli(command + extra + ["--store", store], capsys)
    assert code == 2, (out, err)
    assert "--store" in err and "RESULT" not in out and "speedup" not in out, err


@pytest.mark.parametrize("argv, first, second", [
    (["calibrate", "--verifier", "dgrs", "--seeds", "1", "--workers", "1", "--store", "r.db", "--json", "./r.db"],
     "--json", "--store"),
    (["battery", "--verifier", "dgrs", "--store", "r.db", "--json", "sub/../r.db"], "--json", "--store"),
    (["battery", "--verifier", "dgrs", "--json", "r.json", "--junit", "r.json"], "--json", "--junit"),
])
def test_two_outputs_on_one_file_is_exit_2_before_any_work(argv, first, second, tmp_path, tiny_suite, monkeypatch,
                                                          capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    code, out, err = run_cli(argv + ["--suite", tiny_suite], capsys)
    assert code == 2, (out, err)
    assert first in err and second in err and "same file" in err, err
    assert sorted(os.listdir(tmp_path)) == ["sub"]  # nothing run, nothing written


def _store_with_a_job(path) -> None:
    with ResultsStore(str(path)) as st:
        digest = st.open_job("j", "other", {"x": 1})
        st.put("j", "u1", identity=["u1"], seed=1, spec_hash=digest, wall_s=0.1, worker="w", result={"v": 1})


def test_results_export_onto_its_own_store_is_exit_2(tmp_path, capsys):
    store = tmp_path / "s.sqlite"
    _store_with_a_job(store)
    before = store.read_bytes()
    code, _, err = run_cli(["results", "export", "--store", str(store), "--out", str(store)], capsys)
    assert code == 2 and "--store and --out name the same file" in err, err
    assert store.read_bytes() == before


_READ_ONLY_SCRIPT = """
import json, sys
from speccheck.cli import main
try:
    open(sys.argv[1], "ab").close()
    writable = True
except OSError:
    writable = False
codes = [main(["results", "list", "--store", sys.argv[1]]), main(["results", "show", "j", "--store", sys.argv[1]]),
         main(["results", "export", "--store", sys.argv[1], "--format", "json"])]
print("@@" + json.dumps({"writable": writable, "codes": codes}))
"""


def _without_dac_override() -> None:
    """A root child without CAP_DAC_OVERRIDE / CAP_DAC_READ_SEARCH: file permissions bind it."""
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (1, 2):
        libc.prctl(24, cap, 0, 0, 0)  # PR_CAPBSET_DROP: gone from the bounding set, so after exec


@pytest.mark.parametrize("folder_read_only", [False, True], ids=["file-444", "folder-555"])
def test_read_only_store_can_be_listed_shown_and_exported(folder_read_only, tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    store = folder / "s.sqlite"
    _store_with_a_job(store)
    store.chmod(0o444)
    if folder_read_only:
        folder.chmod(0o555)
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    try:
        done = subprocess.run([sys.executable, "-c", _READ_ONLY_SCRIPT, str(store)], env=env, cwd=ROOT,
                              capture_output=True, text=True, timeout=120,
                              preexec_fn=_without_dac_override if os.geteuid() == 0 else None)
    finally:
        folder.chmod(0o755)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.rsplit("@@", 1)[1])
    if result["writable"]:
        pytest.skip("cannot make a read-only file here (root with its capabilities)")
    assert result["codes"] == [0, 0, 0], done.stderr[-2000:]
    assert "u1" in done.stdout and "Traceback" not in done.stderr
    if folder_read_only:
        assert os.listdir(folder) == ["s.sqlite"]  # nothing could be created there (no -wal / -shm)


def test_summarise_only_on_a_store_without_runs_is_exit_2(tmp_path, tiny_suite, capsys):
    empty = tmp_path / "empty.sqlite"
    ResultsStore(str(empty)).close()
    code, out, err = run_cli(["calibrate", "--suite", tiny_suite, "--verifier", "dgrs", "--summarise-only", "--store",
                              str(empty)], capsys)
    assert code == 2 and "no verdict from no evidence" in err and str(empty) in err, (out, err)
    with ResultsStore(str(empty)) as st:
        assert st.jobs() == []  # summarising wrote nothing
    store = tmp_path / "c.sqlite"  # runs of dgrs only: rmc has none
    assert run_cli(["calibrate", "--suite", tiny_suite, "--verifier", "dgrs", "--seeds", "1", "--workers", "1",
                    "--store", str(store), "--no-progress"], capsys)[0] == 0
    code, out, err = run_cli(["calibrate", "--suite", tiny_suite, "--verifier", "dgrs", "rmc", "--summarise-only",
                              "--seeds", "1", "--store", str(store)], capsys)
    assert code == 2 and "no runs of ['rmc']" in err, (out, err)


# ----------------------------------------------------------------------------- JUnit
def test_control_characters_in_a_name_make_valid_junit(tmp_path, tiny_suite, capsys):
    junit = tmp_path / "r.xml"
    code, out, err = run_cli(["battery", "--verifier", "tests.cli.hostile29:ControlCharName", "--suite", tiny_suite,
                              "--junit", str(junit), "--no-progress"], capsys)
    assert code == 0, (out, err)
    root = ET.parse(junit).getroot()  # raised ParseError before: NUL, ESC and form feed are not XML 1.0
    assert root.get("name").endswith(r"dgrs\x00\x1b[31m-ctl\x0c")


def test_every_character_xml_forbids_is_escaped():
    from speccheck.validation.report import _xml_legal

    forbidden = "".join(map(chr, [*range(0x00, 0x09), 0x0B, 0x0C, *range(0x0E, 0x20), 0xD800, 0xDFFF, 0xFFFE, 0xFFFF]))
    element = ET.fromstring(f"<a b='{_xml_legal(forbidden + 'ok')}'>{_xml_legal(forbidden)}</a>".encode("utf-8"))
    assert element.get("b").endswith(r"\x1f\ud800\udfff\ufffe\uffffok") and element.text.startswith(r"\x00\x01")
    assert _xml_legal("tab\tnewline\nreturn\r é ✓") == "tab\tnewline\nreturn\r é ✓"  # legal characters stay
