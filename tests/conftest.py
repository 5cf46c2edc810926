import os
import shutil
import tempfile

import pytest
import torch

_CACHE_ENV = "SPECCHECK_CACHE_DIR"
_saved_cache: list = []
_blas_limits: list = []


def pytest_configure(config):
    """The suite never reads or writes the user's cache (~/.cache/speccheck): every run solves into
    a fresh folder of its own (subprocesses inherit it), so a stale or foreign table cannot
    change a result. What ships as package data is still used.

    The suite runs on one pytest-xdist worker per available core (:func:`pytest_xdist_auto_num_workers`),
    so each worker computes on one thread (torch and BLAS): their tensors (<= 2^21 rows) gain
    little from a second thread, and on a 2-core box shared with the tests' own children (or
    anything else) an intra-op thread pool waits on descheduled threads, 10-20x slower (RASS's L6
    on the smoke suite: 22 s on two threads, 1.2 s on one). Children keep their own settings (the
    isolation and the Dask workers' thread settings stay tested)."""
    _saved_cache.append((os.environ.get(_CACHE_ENV), tempfile.mkdtemp(prefix="speccheck-test-cache-")))
    os.environ[_CACHE_ENV] = _saved_cache[-1][1]
    torch.set_num_threads(1)
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # scikit-learn's dependency; without it BLAS keeps its threads
        return
    import scipy.linalg  # noqa: F401  (loads scipy's own BLAS, so the limit reaches it too)

    _blas_limits.append(threadpool_limits(limits=1, user_api="blas"))


def pytest_xdist_auto_num_workers(config):
    """``-n auto``: the cores this process may run on (its affinity, not the host's count, which a
    container can exceed many times over), at most 8 (each worker holds torch, ~0.5 GB)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # no affinity API (macOS, Windows)
        cores = os.cpu_count() or 1
    return max(1, min(cores, 8))


def pytest_unconfigure(config):
    while _blas_limits:
        _blas_limits.pop().restore_original_limits()
    if not _saved_cache:
        return
    old, folder = _saved_cache.pop()
    if old is None:
        os.environ.pop(_CACHE_ENV, None)
    else:
        os.environ[_CACHE_ENV] = old
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def one_torch_thread():
    """Small models: one torch thread is faster on the 2-core CI box (no oversubscription)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
