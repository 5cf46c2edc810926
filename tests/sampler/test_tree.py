"""Draft trees: sizes, layers, truncation, constructors, validation."""

import numpy as np
import pytest

from speccheck.sampler.tree import DraftTree, chain, chain_matched, pruned_tree, uniform_tree, widths_tree


@pytest.mark.parametrize("K,L", [(1, 1), (1, 5), (2, 3), (3, 4), (6, 2)])
def test_uniform_sizes(K, L):
    t = uniform_tree(K, L)
    V = sum(K**l for l in range(L + 1))
    I = sum(K**l for l in range(L))
    assert (t.n_nodes, t.n_internal, t.budget, t.L) == (V, I, V - 1, L)
    assert t.rows(True) == V and t.rows(False) == I
    assert [len(x) for x in t.layers] == [K**l for l in range(L + 1)]
    # children contiguous and of the right parent
    for u in range(I):
        ch = t.children(u)
        assert len(ch) == K and np.all(t.parent[ch] == u) and np.all(t.depth[ch] == t.depth[u] + 1)


def test_paper_budget_155():
    assert uniform_tree(5, 3).budget == 155
    assert chain_matched(uniform_tree(5, 3), "budget", leaves=False).L == 155
    assert chain_matched(uniform_tree(5, 3), "rows", leaves=False).L == 31      # |I| rows
    assert chain_matched(uniform_tree(5, 3), "rows", leaves=True).L == 155      # |V| rows


def test_truncate_widths_pruned_and_canonical_order():
    t = uniform_tree(2, 4)
    tr = t.truncate(2)
    assert tr.n_nodes == 7 and tr.L == 2 and t.truncate(9) is t
    w = widths_tree([3, 1, 2])
    assert [len(x) for x in w.layers] == [1, 3, 3, 6] and w.widths() == [1, 2, 3]
    p = pruned_tree(uniform_tree(3, 2), [5, 12])
    assert p.n_nodes == 5 and p.L == 2 and p.n_internal == 3
    # a shuffled parent map is re-ordered into layers with contiguous children
    shuffled = DraftTree(np.array([-1, 3, 0, 0, 2]))
    assert list(shuffled.depth) == [0, 1, 1, 2, 2]
    assert chain(4).n_nodes == 5 and chain(4).max_K == 1


@pytest.mark.parametrize("parent", [[0, 0], [-1, 2, 1], [-1, 5], [[-1]]])
def test_bad_parent_maps(parent):
    with pytest.raises(ValueError):
        DraftTree(np.array(parent))


def test_bad_constructor_args():
    for bad in (lambda: uniform_tree(0, 2), lambda: uniform_tree(2, 0), lambda: widths_tree([2, 0]),
                lambda: chain_matched(uniform_tree(2, 2), "same", True), lambda: uniform_tree(2, 2).truncate(-1)):
        with pytest.raises(ValueError):
            bad()
