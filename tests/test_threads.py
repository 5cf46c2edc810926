"""Issue 37.4: the in-process helpers run torch on one thread by default (``threads=`` otherwise),
and the caller's thread count is back afterwards, also after an error."""

from __future__ import annotations

import pytest
import torch

import speccheck
from speccheck.errors import InputError
from speccheck.seeding import torch_threads
from speccheck.targets.gaussian import GaussianData
from speccheck.targets.schedules import make_schedule
from speccheck.verifiers.dgrs import DGRS

SEEN: list[int] = []  # thread counts observed inside the calls (module level: the battery deep-copies rules)


class Watching(DGRS):
    """D-GRS that records torch's thread count at every call."""

    name = "dgrs-watching"

    def verify(self, delta, s, generator=None):
        SEEN.append(torch.get_num_threads())
        return super().verify(delta, s, generator)


class WatchingTarget(GaussianData):
    def velocity(self, x, t, cond=None):
        SEEN.append(torch.get_num_threads())
        return super().velocity(x, t, cond)


def _schedule():
    return make_schedule("uniform", 6, 0.5)


def _sampler_run(**kw):
    from speccheck.sampler.core import SpeculativeSampler
    from speccheck.sampler.tree import chain

    target = WatchingTarget([0.0, 0.0], 1.0)
    g = torch.Generator().manual_seed(0)
    SpeculativeSampler(target, _schedule(), chain(2), "dgrs").run(torch.randn(4, 2, generator=g), g, **kw)


def _run_cells(**kw):
    from speccheck.sampler.experiments import preset, run_cells

    run_cells(preset("gmm-paper", steps=4), Watching(), 2, [2], 2, 0, **kw)


CALLS = {
    "sample": lambda **kw: speccheck.sample(WatchingTarget([0.0, 0.0], 1.0), _schedule(), 8, generator=0, **kw),
    "SpeculativeSampler.run": _sampler_run,
    "run_cells": _run_cells,
    "measure_acceptance": lambda **kw: speccheck.measure_acceptance(Watching(), [1.0], [2], n=64, **kw),
    "battery": lambda **kw: speccheck.battery(Watching(), _tiny_suite(), isolate=False, **kw),
}


def _tiny_suite() -> str:
    """A one-cell suite file (written once per process)."""
    import os
    import tempfile

    path = os.path.join(tempfile.gettempdir(), f"speccheck-threads-{os.getpid()}.toml")
    if not os.path.exists(path):
        with open(path, "w") as fh:
            fh.write('name = "threads"\nseed = 3\nfamily_alpha = 1e-3\n[scalar]\ndeltas = [1.0]\nK = [2]\n'
                     'n = 256\n[contract]\nn = 16\n')
    return path


@pytest.fixture
def caller_threads():
    """The caller runs on 3 torch threads (whatever the machine has); restored after the test."""
    before = torch.get_num_threads()
    torch.set_num_threads(3)
    SEEN.clear()
    yield 3
    torch.set_num_threads(before)


@pytest.mark.parametrize("name", sorted(CALLS))
def test_one_thread_by_default_and_the_callers_count_restored(name, caller_threads):
    CALLS[name]()
    assert SEEN and set(SEEN) == {1}, (name, SEEN)
    assert torch.get_num_threads() == caller_threads


@pytest.mark.parametrize("name", sorted(CALLS))
def test_threads_option_sets_the_count_during_the_call(name, caller_threads):
    CALLS[name](threads=2)
    assert SEEN and set(SEEN) == {2}, (name, SEEN)
    assert torch.get_num_threads() == caller_threads
    SEEN.clear()
    CALLS[name](threads=None)  # None: the caller's own setting
    assert set(SEEN) == {caller_threads}, (name, SEEN)


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "2"])
def test_bad_threads_is_an_input_error(bad, caller_threads):
    for name in ("sample", "measure_acceptance", "battery"):
        with pytest.raises(InputError, match="threads"):
            CALLS[name](threads=bad)
    assert torch.get_num_threads() == caller_threads


def test_the_count_is_restored_after_an_error(caller_threads):
    with pytest.raises(RuntimeError, match="boom"):
        with torch_threads(1):
            assert torch.get_num_threads() == 1
            raise RuntimeError("boom")
    assert torch.get_num_threads() == caller_threads
