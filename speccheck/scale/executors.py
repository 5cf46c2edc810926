"""Executors: run units in this process, on a local Dask cluster, or on an existing one.

``make_executor(workers=1)`` is the in-process path (no Dask import). ``workers=N > 1`` starts a
``dask.distributed.LocalCluster`` of N worker processes with one thread each, forked from one
template process (a ``forkserver``) that imported torch and the units' modules once:
:meth:`DaskExecutor.start` launches it at once, so it imports while the client plans, and the
workers start ready to run units (spawned workers would each import them, on the cores the units
need). ``scheduler="tcp://HOST:PORT"`` (or ``$DASK_SCHEDULER_ADDRESS``) connects to a running cluster.
Units on ``cuda`` ask a remote cluster for the worker resource ``GPU=1`` (start such workers with
``dask worker --resources GPU=1``). Every executor calls ``on_result(unit, outcome)`` in the
client as each unit finishes (the caller stores it at once) and counts units done on stderr.
A worker that dies mid-unit is replaced by Dask and its unit re-run elsewhere (same seed, same
result); the store keeps one copy.
"""

from __future__ import annotations

import math
import os
import sys
import time
from typing import TYPE_CHECKING, Callable, Iterator, Optional, Protocol, Sequence

from speccheck.errors import InputError, IsolatedCodeError, LoadError

if TYPE_CHECKING:  # dask (and torch, through the units) are imported only when units run
    from distributed import Client

    from speccheck.scale.units import Unit

OnResult = Callable[["Unit", dict], None]
# --scheduler: the whole connection (TCP connect, Dask handshake, identity reply) must finish within
# this many seconds; a port that accepts but does not speak Dask is refused after it (exit 2)
_CONNECT_TIMEOUT_S = 20
# --workers bound: local worker processes per core, and the memory one worker holds once it has
# imported torch and the units' modules (measured ~170 MB resident; 512 MiB leaves room for a unit),
# of which at most WORKER_MEMORY_SHARE of physical memory may go to the workers together
WORKERS_PER_CORE = 4
WORKER_MEMORY_BYTES = 512 * 2**20
WORKER_MEMORY_SHARE = 0.5
_STARTUP_S = 120.0  # starting the workers and importing torch there, before the first unit can finish
# Units are CPU-bound Python: each wake-up of a worker's event-loop thread takes the GIL from the
# unit. Local clusters run without the statistical profiler (a stack sample every 10 ms) and the
# GIL monitor (every 1 ms), with the event-loop health tick at 1 s (not 20 ms), the system and
# memory monitors at 2 s and 1 s (not 0.5 s and 0.1 s).
_QUIET_WORKERS = {"distributed.worker.profile.enabled": False, "distributed.admin.system-monitor.gil.enabled": False,
                  "distributed.admin.tick.interval": "1s", "distributed.admin.system-monitor.interval": "2s",
                  "distributed.worker.memory.monitor-interval": "1s"}
# Battery units allocate and free tensors of tens of MB many times a second. Dask's default
# pre-spawn MALLOC_TRIM_THRESHOLD_ (64 KiB) hands that memory back to the kernel after every
# free, so each new tensor page-faults again (half the CPU went to the kernel on 2 workers);
# glibc's largest mmap threshold keeps freed blocks in the heap for reuse.
_MALLOC = {"MALLOC_TRIM_THRESHOLD_": str(1 << 30), "MALLOC_MMAP_THRESHOLD_": str(1 << 25)}
_WORKER_MALLOC = {f"distributed.nanny.pre-spawn-environ.{name}": int(value) for name, value in _MALLOC.items()}
# The template's environment (glibc reads the malloc variables when a process starts; forked
# workers inherit the template's allocator and thread settings).
# PYTHONSAFEPATH: the template's interpreter does not put the working folder first on sys.path, so
# a random.py or numbers.py there never replaces the standard library's module in the workers
_TEMPLATE_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "PYTHONSAFEPATH": "1",
                 **_MALLOC}
# What local workers import before their first unit: every unit kind's modules (the sampler and
# the theory for sweeps, the battery for calibrations, mutants and battery cells).
SWEEP_MODULES = ("speccheck.scale.units", "speccheck.sampler.experiments", "speccheck.theory")
BATTERY_MODULES = ("speccheck.scale.units", "speccheck.validation.battery", "speccheck.validation.mutants")
ALL_MODULES = tuple(dict.fromkeys(SWEEP_MODULES + BATTERY_MODULES))
#: unit kinds the isolated executor runs in a spawned child that imports torch only (no template)
CLEAN_UNIT_KINDS = ("battery-law",)


class Executor(Protocol):
    """Runs units and reports each outcome to ``on_result`` in the calling process. ``cpu_s``: the
    process CPU seconds spent so far by the processes it ran units in other than the caller's
    (a child's whole life, imports included; a Dask worker's units), so that a job's CPU figure is
    the caller's own CPU time plus this."""

    name: str
    cpu_s: float

    def start(self) -> Executor: ...

    def run(self, units: Sequence[Unit], on_result: OnResult) -> None: ...

    def close(self) -> None: ...


def launch_worker_template(modules: Sequence[str] = ALL_MODULES) -> bool:
    """Start this process's ``forkserver`` (once) with ``distributed``, torch and ``modules``
    imported, and the workers' thread and allocator settings; local Dask workers are then forked
    from it, ready to run units. Returns at once (the template imports in its own process, in
    parallel with the caller); False where the platform has no forkserver (workers are spawned
    and import for themselves). A template already running keeps the modules it started with."""
    import multiprocessing
    from multiprocessing import forkserver

    from speccheck.scale.worker_template import MODULES_VARIABLE

    if "forkserver" not in multiprocessing.get_all_start_methods():
        return False
    multiprocessing.get_context("forkserver").set_forkserver_preload(["speccheck.scale.worker_template"])
    environment = {**_TEMPLATE_ENV, MODULES_VARIABLE: ",".join(["distributed", "torch", *modules])}
    saved = {name: os.environ.get(name) for name in environment}
    os.environ.update(environment)  # the template inherits the environment as it starts
    try:
        forkserver.ensure_running()
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    return True


def _keep_template_modules() -> None:
    """distributed, told to fork workers, would set its own forkserver preload list (importing
    pandas and others into this process only to name them); the template already runs with ours."""
    import distributed.utils

    if hasattr(distributed.utils, "_forkserver_preload_set"):
        distributed.utils._forkserver_preload_set = True


#: seconds between two progress lines where stderr is not a terminal (a CI log, a notebook)
PROGRESS_LINE_S = 10.0


class Progress:
    """Units done on stderr: a tqdm bar on a terminal (shown once the job has run ~2 s), else
    plain ``[label] units done/total`` lines, at most one every :data:`PROGRESS_LINE_S` seconds
    (and the last one when the job ran that long), or nothing when not ``enabled``."""

    def __init__(self, total: int, label: str, enabled: bool = True) -> None:
        self.total, self.label, self.done = total, label, 0
        self.enabled = enabled and total > 0
        self.start = self._last = time.perf_counter()
        self._printed = False
        self._bar = None
        isatty = getattr(sys.stderr, "isatty", None)
        if self.enabled and isatty is not None and isatty():
            from tqdm import tqdm

            self._bar = tqdm(total=total, desc=f"[{label}] units", unit="unit", file=sys.stderr, delay=2.0,
                             leave=False)

    def step(self) -> None:
        self.done += 1
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.update(1)
            if self.done == self.total:
                self._bar.close()
            return
        now = time.perf_counter()
        last = self.done == self.total and (self._printed or now - self.start >= PROGRESS_LINE_S)
        if last or now - self._last >= PROGRESS_LINE_S:
            print(f"[{self.label}] units {self.done}/{self.total} done ({now - self.start:.0f} s)", file=sys.stderr,
                  flush=True)
            self._last, self._printed = now, True


class InProcessExecutor:
    """Units one after another in this process (``--workers 1``)."""

    name = "in-process"

    def __init__(self, progress: bool = False, on_start: Optional[Callable[[Unit], None]] = None,
                 heartbeat: Optional[Callable[[str], None]] = None) -> None:
        self.progress = progress
        self.on_start = on_start
        self.cpu_s = 0.0  # the units run in the caller's process: their CPU time is the caller's
        # the isolated child's heartbeat: called as each unit starts and at each battery cell inside
        # a unit (a mutant's run), so its --timeout bounds a cell
        self.heartbeat = heartbeat

    def start(self) -> InProcessExecutor:
        """Nothing to start: units run here."""
        return self

    def run(self, units: Sequence[Unit], on_result: OnResult) -> None:
        from speccheck.isolation import exits_guarded
        from speccheck.scale.units import heartbeat_to, run_unit

        bar = Progress(len(units), self.name, self.progress)
        for unit in units:
            if self.on_start is not None:
                self.on_start(unit)
            if self.heartbeat is not None:
                self.heartbeat(f"{unit.kind} {unit.key}")
            # the unit's code runs in this process: its os._exit must not end it (sys.exit is run_unit's)
            with heartbeat_to(self.heartbeat), exits_guarded(f"unit {unit.kind} {unit.key}"):
                outcome = run_unit(unit)
            on_result(unit, outcome)
            bar.step()

    def close(self) -> None:
        return None


class IsolatedExecutor:
    """Units one after another in a child process (:func:`speccheck.isolation.run_isolated`), one
    child per :meth:`run`, forked from the worker template (:func:`launch_worker_template`) where
    the platform has a forkserver, else spawned: the units' code (a verifier's) runs there, and this process only
    receives each unit's outcome as it finishes (JSON, arrays as raw bytes; never a pickle). A unit
    that crashes the child, exits it, runs out of its memory cap or runs past ``timeout`` seconds is
    an :class:`~speccheck.errors.IsolatedCodeError` here, naming the unit."""

    name = "isolated"

    def __init__(self, *, timeout: float, what: str = "user code", progress: bool = False,
                 memory_fraction: Optional[float] = 0.8,
                 preload: Sequence[str] = ("torch", "speccheck.validation.battery")) -> None:
        self.timeout, self.what, self.progress = timeout, what, progress
        self.memory_fraction, self.preload = memory_fraction, tuple(preload)
        self.cpu_s = 0.0  # the children's CPU time, each reported by the child at its end

    def start(self) -> IsolatedExecutor:
        """Nothing to start: each run starts its own child."""
        return self

    def run(self, units: Sequence[Unit], on_result: OnResult) -> None:
        from speccheck.isolation import run_isolated

        if not units:
            return
        waiting = {u.key: u for u in units}
        bar = Progress(len(units), self.name, self.progress)

        def arrived(value: dict) -> None:
            unit, outcome = waiting.pop(str(value.get("key")), None), value.get("outcome")
            if unit is None or not isinstance(outcome, dict) or not isinstance(outcome.get("result"), dict):
                raise IsolatedCodeError(f"{self.what}: the worker sent an outcome for no unit it was given, or a "
                                        "malformed one; no verdict")
            on_result(unit, {"result": outcome["result"], "worker": str(outcome.get("worker", "?")),
                             "code": str(outcome.get("code", "?")),
                             "deps": outcome["deps"] if isinstance(outcome.get("deps"), dict) else None,
                             "wall_s": _seconds(outcome.get("wall_s")), "cpu_s": _seconds(outcome.get("cpu_s"))})
            bar.step()

        # children forked from the worker template (torch and speccheck imported once, no user code
        # ever): a run's rounds then start in milliseconds instead of an interpreter and torch each;
        # the battery's law units in a spawned child of their own, which imports torch only (the rule
        # meets no module of the battery there: speccheck.scale.units.battery_law)
        clean = [u for u in units if u.kind in CLEAN_UNIT_KINDS]
        others = [u for u in units if u.kind not in CLEAN_UNIT_KINDS]
        for group, method, preload in ((others, "forkserver" if others and launch_worker_template() else "spawn",
                                        self.preload), (clean, "spawn", ("torch",))):
            if group:
                done = run_isolated("speccheck.scale.executors:isolated_units", {"units": [u.to_dict() for u in group]},
                                    timeout=self.timeout, what=self.what, preload=preload,
                                    memory_fraction=self.memory_fraction, on_value=arrived, start_method=method)
                self.cpu_s += _seconds(done.get("cpu_s") if isinstance(done, dict) else None)
        if waiting:
            raise IsolatedCodeError(f"{self.what}: the worker finished without running units {sorted(waiting)[:3]}; "
                                    "no verdict")

    def close(self) -> None:
        return None


def _seconds(value: object) -> float:
    """A duration a worker reported: a finite number >= 0, else 0 (a worker's word is not trusted further)."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) \
        and value >= 0 else 0.0


def isolated_units(heartbeat: Callable[[str], None], emit: Callable[[dict], None], *, units: list[dict]) -> dict:
    """Child side of :class:`IsolatedExecutor`: run the units here, emitting each outcome; returns
    the count and this process's whole CPU time (its start and imports included; a forked child's
    count starts at its fork)."""
    import time

    from speccheck.scale.units import Unit

    executor = InProcessExecutor(heartbeat=heartbeat)
    executor.run([Unit.from_dict(u) for u in units],
                 lambda unit, outcome: emit({"key": unit.key, "outcome": outcome}))
    return {"units": len(units), "cpu_s": time.process_time()}


class DaskExecutor:
    """Units as Dask tasks: a local cluster of ``workers`` processes, or the cluster at ``scheduler``."""

    def __init__(self, workers: Optional[int] = None, scheduler: Optional[str] = None, progress: bool = False,
                 timeout: Optional[float] = None, modules: Sequence[str] = ALL_MODULES) -> None:
        self.workers, self.scheduler, self.progress = workers, scheduler, progress
        self.timeout = timeout  # seconds a unit may run: no unit finishing for this long stops the job
        self.modules = tuple(modules)  # what local workers import before their first unit
        self.name = f"dask {scheduler}" if scheduler else f"dask local x{workers}"
        self._client = None
        self._cluster = None
        self._forked: Optional[bool] = None
        self.cpu_s = 0.0  # the workers' CPU time in the units they ran (each unit reports its own)

    def start(self) -> DaskExecutor:
        """Begin starting a local cluster without waiting: launch the workers' template process, which
        imports torch and ``modules`` while the caller goes on (call it before the client's own
        imports and planning). Nothing for a remote cluster. :meth:`client` finishes the start."""
        if not self.scheduler and self._forked is None:
            self._forked = launch_worker_template(self.modules)
        return self

    def client(self) -> Client:
        """The Dask client (started on first use)."""
        if self._client is not None:
            return self._client
        import logging

        from distributed import Client, LocalCluster

        if self.scheduler:
            check_scheduler(self.scheduler, _CONNECT_TIMEOUT_S)
            try:
                self._client = Client(self.scheduler, timeout=_CONNECT_TIMEOUT_S)
            except (OSError, TimeoutError) as exc:
                raise LoadError(f"--scheduler {self.scheduler}: cannot reach a Dask scheduler there within "
                                f"{_CONNECT_TIMEOUT_S} s ({type(exc).__name__}); start one with `dask scheduler` "
                                "and workers with `dask worker tcp://HOST:8786`") from None
        else:
            import dask

            self.start()
            method = {"distributed.worker.multiprocessing-method": "forkserver" if self._forked else "spawn"}
            if self._forked:
                _keep_template_modules()
            # handed to the worker processes as they start (the malloc variables matter to spawned ones only)
            with dask.config.set({**_QUIET_WORKERS, **_WORKER_MALLOC, **method}):
                self._cluster = LocalCluster(n_workers=self.workers, threads_per_worker=1, processes=True,
                                             dashboard_address=":0", silence_logs=logging.CRITICAL,
                                             env={"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"})
            self._client = Client(self._cluster)
        return self._client

    def _check_gpu_workers(self, client) -> None:  # noqa: ANN001
        workers = client.scheduler_info().get("workers", {})
        if not any(w.get("resources", {}).get("GPU", 0) >= 1 for w in workers.values()):
            raise InputError(f"units on cuda need a Dask worker with the resource GPU=1, and none of the "
                             f"{len(workers)} workers at {self.scheduler} has it; start GPU workers with "
                             "`dask worker SCHEDULER --resources GPU=1`, or use --device cpu")

    def run(self, units: Sequence[Unit], on_result: OnResult) -> None:
        if not units:
            return
        from speccheck.scale.units import run_unit

        client = self.client()
        remote_gpu = bool(self.scheduler) and any(u.needs_gpu for u in units)
        if remote_gpu:
            self._check_gpu_workers(client)
        futures = {}
        for unit in units:
            resources = {"GPU": 1} if (unit.needs_gpu and self.scheduler) else None
            key = f"speccheck-{unit.kind}-{unit.key}-{unit.seed:x}-{time.time_ns():x}"
            futures[client.submit(run_unit, unit, key=key, pure=False, resources=resources)] = unit
        bar = Progress(len(units), self.name, self.progress)
        from distributed import KilledWorker

        try:
            for future in self._finished(futures):
                unit = futures[future]
                try:
                    outcome = future.result()
                except KilledWorker:
                    raise IsolatedCodeError(
                        f"unit {unit.kind} {unit.key} killed every worker that ran it (out of memory, or a crash in "
                        "native code); the units finished so far are stored: fix the cause and rerun to resume"
                    ) from None
                except (OSError, TimeoutError) as exc:  # the scheduler or the connection went away
                    raise LoadError(f"{self.name}: lost the Dask cluster ({type(exc).__name__}: {exc}); the units "
                                    "finished so far are stored: rerun to resume") from None
                self.cpu_s += _seconds(outcome.get("cpu_s") if isinstance(outcome, dict) else None)
                on_result(unit, outcome)
                bar.step()
        finally:  # units still pending after an error: one message (a finished unit's result goes with its future)
            pending = [future for future in futures if not future.done()]
            if pending:
                client.cancel(pending)

    def _finished(self, futures: dict) -> Iterator:
        """The futures as they finish. With ``timeout``: if no unit finishes for ``timeout``
        seconds (plus a start-up allowance before the first), some unit has run longer than
        ``timeout`` (each worker runs one unit at a time), and the job stops with exit 2."""
        from distributed import as_completed, wait

        if self.timeout is None:
            yield from as_completed(futures)
            return
        pending, limit = set(futures), self.timeout + _STARTUP_S
        while pending:
            try:
                done, pending = wait(pending, timeout=limit, return_when="FIRST_COMPLETED")
            except TimeoutError:
                running = sorted(f"{futures[f].kind} {futures[f].key}" for f in pending)
                raise IsolatedCodeError(f"{self.name}: a unit ran longer than the timeout (--timeout "
                                        f"{self.timeout:g} s) or its worker died; unfinished: {', '.join(running[:3])}"
                                        f"{' ...' if len(running) > 3 else ''}); no verdict") from None
            yield from done
            limit = self.timeout

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
        if self._cluster is not None:
            self._cluster.close()
        self._client = self._cluster = None


def max_workers(cores: Optional[int] = None, memory: Optional[int] = None) -> int:
    """The most local worker processes ``--workers`` may ask for: ``WORKERS_PER_CORE`` per core,
    and no more than fit ``WORKER_MEMORY_BYTES`` each into ``WORKER_MEMORY_SHARE`` of physical
    memory (defaults: this machine's; at least 1)."""
    from speccheck.isolation import physical_memory_bytes

    cores = cores or os.cpu_count() or 1
    memory = memory or physical_memory_bytes() or 8 * 2**30
    return max(1, min(WORKERS_PER_CORE * cores, int(WORKER_MEMORY_SHARE * memory // WORKER_MEMORY_BYTES)))


def check_workers(workers: int) -> int:
    """``workers`` in [1, :func:`max_workers`]; else InputError naming ``--workers`` and the range."""
    high = max_workers()
    if not 1 <= workers <= high:
        raise InputError(f"--workers must be >= 1 and <= {high} on this machine ({WORKERS_PER_CORE} per core x "
                         f"{os.cpu_count() or 1} cores, and {WORKER_MEMORY_BYTES // 2**20} MiB per worker within "
                         f"{WORKER_MEMORY_SHARE:.0%} of memory), got {workers}")
    return workers


async def _identify(address: str, connect_s: float) -> dict:
    from distributed.comm import connect

    comm = await connect(address, timeout=connect_s)
    try:
        await comm.write({"op": "identity", "reply": True})
        return await comm.read()
    finally:
        comm.abort()


def check_scheduler(address: str, timeout: float) -> None:
    """Ask ``address`` who it is, all within ``timeout`` seconds (the TCP connection within half of
    it): LoadError naming ``--scheduler`` when nothing answers, when what answers does not speak
    Dask (distributed's own connect waits for the handshake without a bound), or when it is not a
    scheduler."""
    import asyncio

    try:
        reply = asyncio.run(asyncio.wait_for(_identify(address, timeout / 2), timeout))
    except (asyncio.TimeoutError, TimeoutError):
        raise LoadError(f"--scheduler {address}: no Dask scheduler answered there within {timeout:g} s (the port "
                        "accepts connections but did not complete a Dask handshake); check the address, start one "
                        "with `dask scheduler`") from None
    except OSError as exc:
        raise LoadError(f"--scheduler {address}: cannot reach a Dask scheduler there within {timeout / 2:g} s "
                        f"({type(exc).__name__}); start one with `dask scheduler` and workers with "
                        "`dask worker tcp://HOST:8786`") from None
    except Exception as exc:  # noqa: BLE001 - whatever a non-Dask server's bytes make the decoder raise
        raise LoadError(f"--scheduler {address}: what answers there is not a Dask scheduler (its reply could "
                        f"not be read: {type(exc).__name__})") from None
    kind = reply.get("type") if isinstance(reply, dict) else None
    if kind != "Scheduler":
        raise LoadError(f"--scheduler {address}: what answers there is not a Dask scheduler (identity "
                        f"{kind or type(reply).__name__!r}); give the scheduler's address, not a worker's")


def make_executor(workers: Optional[int] = None, scheduler: Optional[str] = None,
                  progress: bool = False, timeout: Optional[float] = None,
                  modules: Sequence[str] = ALL_MODULES) -> Executor:
    """The executor for ``--workers``/``--scheduler``: an existing cluster if ``scheduler`` (or
    ``$DASK_SCHEDULER_ADDRESS``), else in-process when ``workers`` is 1 (or the machine has one
    core), else a local cluster of ``workers`` processes (default: one per core). ``timeout``
    bounds each unit on a Dask executor (the in-process one is bounded by its caller);
    ``modules``: what local workers import before their first unit (:data:`SWEEP_MODULES`,
    :data:`BATTERY_MODULES`, default both). Nothing starts until ``start()`` or the first run."""
    if workers is not None:
        check_workers(workers)
    if scheduler and workers is not None:
        raise InputError("--workers and --scheduler exclude each other (the cluster at --scheduler has its "
                         "own workers)")
    if workers is None:  # an explicit --workers wins over $DASK_SCHEDULER_ADDRESS
        scheduler = scheduler or os.environ.get("DASK_SCHEDULER_ADDRESS") or None
    if scheduler:
        if "://" not in scheduler:
            raise InputError(f"--scheduler takes an address like tcp://HOST:8786, got {scheduler!r}")
        return DaskExecutor(scheduler=scheduler, progress=progress, timeout=timeout, modules=modules)
    workers = workers if workers is not None else min(os.cpu_count() or 1, max_workers())
    if workers == 1:
        return InProcessExecutor(progress=progress)
    return DaskExecutor(workers=workers, progress=progress, timeout=timeout, modules=modules)
