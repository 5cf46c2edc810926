"""Executors: run units in this process, on a local Dask cluster, or on an existing one.

``make_executor(workers=1)`` is the in-process path (no Dask import). ``workers=N > 1`` starts a
``dask.distributed.LocalCluster`` of N worker processes with one thread each;
``scheduler="tcp://HOST:PORT"`` (or ``$DASK_SCHEDULER_ADDRESS``) connects to a running cluster.
Units on ``cuda`` ask a remote cluster for the worker resource ``GPU=1`` (start such workers with
``dask worker --resources GPU=1``). Every executor calls ``on_result(unit, outcome)`` in the
client as each unit finishes (the caller stores it at once) and counts units done on stderr.
A worker that dies mid-unit is replaced by Dask and its unit re-run elsewhere (same seed, same
result); the store keeps one copy.
"""

from __future__ import annotations

import os
import sys
import time
from typing import TYPE_CHECKING, Callable, Iterator, Optional, Protocol, Sequence

from speccheck.errors import InputError, IsolatedCodeError, LoadError
from speccheck.scale.units import Unit, run_unit

if TYPE_CHECKING:  # dask is imported only when a Dask executor runs
    from distributed import Client

OnResult = Callable[[Unit, dict], None]
_CONNECT_TIMEOUT_S = 20
_STARTUP_S = 120.0  # starting the workers and importing torch there, before the first unit can finish
# Units are CPU-bound Python: the workers' statistical profiler (a stack sample every 10 ms) and
# GIL monitor (every 1 ms) would compete with them for the GIL; local clusters run without them.
_QUIET_WORKERS = {"distributed.worker.profile.enabled": False, "distributed.admin.system-monitor.gil.enabled": False}
# Battery units allocate and free tensors of tens of MB many times a second. Dask's default
# pre-spawn MALLOC_TRIM_THRESHOLD_ (64 KiB) hands that memory back to the kernel after every
# free, so each new tensor page-faults again (half the CPU went to the kernel on 2 workers);
# glibc's largest mmap threshold keeps freed blocks in the heap for reuse.
_WORKER_MALLOC = {"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": 1 << 30,
                  "distributed.nanny.pre-spawn-environ.MALLOC_MMAP_THRESHOLD_": 1 << 25}


class Executor(Protocol):
    """Runs units and reports each outcome to ``on_result`` in the calling process."""

    name: str

    def run(self, units: Sequence[Unit], on_result: OnResult) -> None: ...

    def close(self) -> None: ...


class Progress:
    """``[speccheck] units done/total`` on stderr (one line, rewritten), or nothing."""

    def __init__(self, total: int, label: str, enabled: bool = True) -> None:
        self.total, self.label, self.done = total, label, 0
        self.enabled = enabled and total > 0
        self.start = time.perf_counter()

    def step(self) -> None:
        self.done += 1
        if not self.enabled:
            return
        line = f"[{self.label}] units {self.done}/{self.total} done ({time.perf_counter() - self.start:.0f} s)"
        if sys.stderr.isatty():
            print("\r" + line, end="\n" if self.done == self.total else "", file=sys.stderr, flush=True)
        elif self.done == self.total or self.done % max(1, self.total // 10) == 0:  # a log: about ten lines
            print(line, file=sys.stderr, flush=True)


class InProcessExecutor:
    """Units one after another in this process (``--workers 1``)."""

    name = "in-process"

    def __init__(self, progress: bool = False, on_start: Optional[Callable[[Unit], None]] = None,
                 heartbeat: Optional[Callable[[str], None]] = None) -> None:
        self.progress = progress
        self.on_start = on_start
        # the isolated child's heartbeat: called as each unit starts and at each battery cell inside
        # a unit (a mutant's run), so its --timeout bounds a cell
        self.heartbeat = heartbeat

    def run(self, units: Sequence[Unit], on_result: OnResult) -> None:
        from speccheck.scale.units import heartbeat_to

        bar = Progress(len(units), self.name, self.progress)
        for unit in units:
            if self.on_start is not None:
                self.on_start(unit)
            if self.heartbeat is not None:
                self.heartbeat(f"{unit.kind} {unit.key}")
            with heartbeat_to(self.heartbeat):
                outcome = run_unit(unit)
            on_result(unit, outcome)
            bar.step()

    def close(self) -> None:
        return None


class DaskExecutor:
    """Units as Dask tasks: a local cluster of ``workers`` processes, or the cluster at ``scheduler``."""

    def __init__(self, workers: Optional[int] = None, scheduler: Optional[str] = None, progress: bool = False,
                 timeout: Optional[float] = None) -> None:
        self.workers, self.scheduler, self.progress = workers, scheduler, progress
        self.timeout = timeout  # seconds a unit may run: no unit finishing for this long stops the job
        self.name = f"dask {scheduler}" if scheduler else f"dask local x{workers}"
        self._client = None
        self._cluster = None

    def client(self) -> Client:
        """The Dask client (started on first use)."""
        if self._client is not None:
            return self._client
        import logging

        from distributed import Client, LocalCluster

        if self.scheduler:
            try:
                self._client = Client(self.scheduler, timeout=_CONNECT_TIMEOUT_S)
            except (OSError, TimeoutError) as exc:
                raise LoadError(f"--scheduler {self.scheduler}: cannot reach a Dask scheduler there within "
                                f"{_CONNECT_TIMEOUT_S} s ({type(exc).__name__}); start one with `dask scheduler` "
                                "and workers with `dask worker tcp://HOST:8786`") from None
        else:
            import dask

            with dask.config.set({**_QUIET_WORKERS, **_WORKER_MALLOC}):  # handed to the worker processes as they start
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
                on_result(unit, outcome)
                bar.step()
        finally:
            for future in futures:
                future.cancel()

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


def make_executor(workers: Optional[int] = None, scheduler: Optional[str] = None,
                  progress: bool = False, timeout: Optional[float] = None) -> Executor:
    """The executor for ``--workers``/``--scheduler``: an existing cluster if ``scheduler`` (or
    ``$DASK_SCHEDULER_ADDRESS``), else in-process when ``workers`` is 1 (or the machine has one
    core), else a local cluster of ``workers`` processes (default: one per core). ``timeout``
    bounds each unit on a Dask executor (the in-process one is bounded by its caller)."""
    if workers is not None and workers < 1:
        raise InputError(f"--workers must be >= 1, got {workers}")
    if scheduler and workers is not None:
        raise InputError("--workers and --scheduler exclude each other (the cluster at --scheduler has its "
                         "own workers)")
    if workers is None:  # an explicit --workers wins over $DASK_SCHEDULER_ADDRESS
        scheduler = scheduler or os.environ.get("DASK_SCHEDULER_ADDRESS") or None
    if scheduler:
        if "://" not in scheduler:
            raise InputError(f"--scheduler takes an address like tcp://HOST:8786, got {scheduler!r}")
        return DaskExecutor(scheduler=scheduler, progress=progress, timeout=timeout)
    workers = workers if workers is not None else (os.cpu_count() or 1)
    if workers == 1:
        return InProcessExecutor(progress=progress)
    return DaskExecutor(workers=workers, progress=progress, timeout=timeout)
