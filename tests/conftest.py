import os
import shutil
import tempfile

import pytest
import torch

_CACHE_ENV = "SPECCHECK_CACHE_DIR"
_saved_cache: list = []


def pytest_configure(config):
    """The suite never reads or writes the user's cache (~/.cache/speccheck): every run solves into
    a fresh folder of its own (subprocesses inherit it), so a stale or foreign table cannot
    change a result. What ships as package data is still used."""
    _saved_cache.append((os.environ.get(_CACHE_ENV), tempfile.mkdtemp(prefix="speccheck-test-cache-")))
    os.environ[_CACHE_ENV] = _saved_cache[-1][1]


def pytest_unconfigure(config):
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
