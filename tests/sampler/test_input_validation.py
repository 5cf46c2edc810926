"""Sampler inputs are refused up front with InputError naming the parameter (issue 15, library side)."""

from __future__ import annotations

import time

import pytest
import torch

from speccheck.errors import InputError
from speccheck.sampler.core import SpeculativeSampler
from speccheck.sampler.experiments import MAX_STEPS, Protocol, preset, run_cells
from speccheck.sampler.tree import MAX_TREE_NODES, chain, tree_size, uniform_tree, widths_tree
from speccheck.targets.schedules import uniform
from speccheck.validation.trajectory import small_mixture


def test_huge_tree_refused_before_allocating():
    start = time.perf_counter()
    with pytest.raises(InputError, match="MAX_TREE_NODES"):
        uniform_tree(100_000, 2)
    with pytest.raises(InputError, match="MAX_TREE_NODES"):
        widths_tree([10**9, 10**9, 10**9])
    assert time.perf_counter() - start < 1.0
    assert tree_size([7] * 7) == 960_800 <= MAX_TREE_NODES
    assert uniform_tree(7, 7).n_nodes == 960_800


@pytest.mark.parametrize("K,L,name", [(0, 2, "K"), (2, 0, "L"), (2.5, 2, "K"), (True, 2, "K"), (2, -1, "L")])
def test_tree_sizes_must_be_positive_integers(K, L, name):
    with pytest.raises(InputError, match=f"^{name} must be an integer >= 1"):
        uniform_tree(K, L)


def test_chain_and_widths():
    with pytest.raises(InputError, match="L must"):
        chain(0)
    with pytest.raises(InputError, match="widths must be non-empty"):
        widths_tree([])
    with pytest.raises(InputError, match="width"):
        widths_tree([2, 0])


@pytest.mark.parametrize("overrides,name", [
    ({"eps": 0.0}, "eps"), ({"eps": 1.5}, "eps"), ({"eps": float("nan")}, "eps"), ({"steps": 0}, "steps"),
    ({"steps": MAX_STEPS + 1}, "steps"), ({"steps": 2.5}, "steps"), ({"freeze": "score"}, "freeze"),
    ({"prefetch": "oldest"}, "prefetch"), ({"grid": "shifted"}, "grid"), ({"chain_match": "nodes"}, "chain_match"),
    ({"leaves": "yes"}, "leaves"), ({"target": "gmm-1"}, "target"), ({"bogus": 1}, "bogus"),
])
def test_preset_rejects_bad_protocol(overrides, name):
    with pytest.raises(InputError, match=name):
        preset("gmm-paper", **overrides)


def test_unknown_preset_and_direct_protocol():
    with pytest.raises(InputError, match="target preset"):
        preset("gmm-1000")
    with pytest.raises(InputError, match="eps"):
        Protocol(eps=-0.1)
    assert preset("gmm-paper", eps=None).eps == 0.1            # None means "keep the preset's"


@pytest.mark.parametrize("K,Ls,n_traj,seed,name", [
    (0, [2], 2, 0, "K"), (2, [], 2, 0, "Ls"), (2, [0], 2, 0, "Ls"), (2, [2], 0, 2, "n_traj"),
    (2, [2], 10**7, 0, "n_traj"), (2, [2], 2, -1, "seed"),
])
def test_run_cells_rejects_bad_cells(K, Ls, n_traj, seed, name):
    with pytest.raises(InputError, match=name):
        run_cells(preset("gmm-paper"), "dgrs", K, Ls, n_traj, seed)


def test_run_cells_refuses_a_huge_tree_quickly():
    start = time.perf_counter()
    with pytest.raises(InputError, match="MAX_TREE_NODES"):
        run_cells(preset("gmm-paper"), "dgrs", 100_000, [2], 2, 0)
    assert time.perf_counter() - start < 5.0


def test_sampler_rejects_bad_inputs():
    target, sched = small_mixture(3), uniform(5, 0.3)
    with pytest.raises(InputError, match="target"):
        SpeculativeSampler(object(), sched, chain(2), "rmc")
    with pytest.raises(InputError, match="schedule"):
        SpeculativeSampler(target, "uniform", chain(2), "rmc")
    with pytest.raises(InputError, match="tree"):
        SpeculativeSampler(target, sched, (2, 2), "rmc")
    sampler = SpeculativeSampler(target, sched, chain(2), "rmc")
    g = torch.Generator().manual_seed(0)
    with pytest.raises(InputError, match="at least one trajectory"):
        sampler.run(torch.zeros(0, 3, dtype=torch.float64), g)
    with pytest.raises(InputError, match="floating-point"):
        sampler.run(torch.zeros(2, 3, dtype=torch.long), g)
    with pytest.raises(InputError, match="generator"):
        sampler.run(torch.zeros(2, 3, dtype=torch.float64), 0)
    with pytest.raises(InputError, match="cond"):
        sampler.run(torch.zeros(2, 3, dtype=torch.float64), g, cond=torch.zeros(3))


def test_eager_memory_is_bounded_before_allocating():
    from speccheck.sampler.core import MAX_EAGER_ELEMENTS

    target, sched = small_mixture(64), uniform(5, 0.3)
    tree = uniform_tree(7, 6)                       # 137 257 nodes
    n_traj = MAX_EAGER_ELEMENTS // (tree.n_nodes * 64) + 1
    g = torch.Generator().manual_seed(0)
    x0 = torch.zeros(1, 64, dtype=torch.float64).expand(n_traj, 64)   # no real allocation
    with pytest.raises(InputError, match="MAX_EAGER_ELEMENTS"):
        SpeculativeSampler(target, sched, tree, "dgrs", lazy=False).run(x0, g)
