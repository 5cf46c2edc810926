"""Draft trees (D-GRS paper section 3.1): a rooted tree given by a parent map.

Nodes are stored in layer order (depth non-decreasing) with the children of each node
contiguous, root = node 0, parent[0] = -1. |V| nodes, |I| internal nodes, B = |V| - 1 drafted
states. Uniform (K, L) trees, chains (K = 1), per-depth widths and pruned trees are all trees.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Sequence

import numpy as np

from speccheck.errors import InputError

MAX_TREE_NODES = 1_000_000
"""Largest tree (|V|, root included) built; larger ones are refused before any allocation
(a (K, L) tree has sum_{l <= L} K^l nodes: K = 7, L = 7 has 960 800)."""


@dataclass(frozen=True, eq=False)
class DraftTree:
    """parent: int array (|V|,), parent[0] = -1 (validated, re-ordered canonically).

    Attributes (arrays over nodes): depth, n_children, first_child (index of the first child,
    -1 for leaves); layers[l] = node ids of depth l; L = max depth.
    """

    parent: np.ndarray
    name: str = "tree"
    depth: np.ndarray = field(init=False, repr=False)
    n_children: np.ndarray = field(init=False, repr=False)
    first_child: np.ndarray = field(init=False, repr=False)
    layers: tuple = field(init=False, repr=False)

    def __post_init__(self) -> None:
        par = np.asarray(self.parent, dtype=np.int64)
        if par.size > MAX_TREE_NODES:
            raise InputError(f"parent: a tree of {par.size} nodes exceeds MAX_TREE_NODES = {MAX_TREE_NODES}")
        if par.ndim != 1 or par.size < 1 or par[0] != -1:
            raise InputError("parent must be a 1-d int array with parent[0] = -1 (the root)")
        V = par.size
        if np.any(par[1:] < 0) or np.any(par[1:] >= V):
            raise InputError(f"parent entries must be node ids in [0, {V}), got {par.tolist()}")
        depth = np.full(V, -1, dtype=np.int64)
        depth[0] = 0
        # depth by repeated relaxation; a cycle leaves depth -1
        for _ in range(V):
            known = depth[par[1:]] >= 0
            upd = np.where(known & (depth[1:] < 0))[0] + 1
            if upd.size == 0:
                break
            depth[upd] = depth[par[upd]] + 1
        if np.any(depth < 0):
            raise InputError("parent map is not a rooted tree (cycle or unreachable node)")
        # canonical order: by (depth, parent's new index, old index)
        new_of = np.full(V, -1, dtype=np.int64)
        new_of[0] = 0
        order_parts = [np.zeros(1, dtype=np.int64)]
        count = 1
        for l in range(1, int(depth.max()) + 1):
            nodes = np.where(depth == l)[0]
            nodes = nodes[np.lexsort((nodes, new_of[par[nodes]]))]
            new_of[nodes] = count + np.arange(nodes.size)
            count += nodes.size
            order_parts.append(nodes)
        order = np.concatenate(order_parts)
        new_par = np.where(par[order] >= 0, new_of[np.maximum(par[order], 0)], -1)
        new_par[0] = -1
        depth = depth[order]
        n_children = np.bincount(new_par[1:], minlength=V).astype(np.int64)
        first_child = np.full(V, -1, dtype=np.int64)
        if V > 1:
            uniq, first = np.unique(new_par[1:], return_index=True)   # children are contiguous
            first_child[uniq] = first + 1
        layers = tuple(np.where(depth == l)[0] for l in range(int(depth.max()) + 1))
        object.__setattr__(self, "parent", new_par)
        object.__setattr__(self, "depth", depth)
        object.__setattr__(self, "n_children", n_children)
        object.__setattr__(self, "first_child", first_child)
        object.__setattr__(self, "layers", layers)

    # ------------------------------------------------------------------ sizes
    @property
    def L(self) -> int:
        """Depth of the tree (the deepest layer)."""
        return len(self.layers) - 1

    @property
    def n_nodes(self) -> int:
        """|V| (root included)."""
        return int(self.parent.size)

    @property
    def n_internal(self) -> int:
        """|I|: nodes with at least one child."""
        return int((self.n_children > 0).sum())

    @property
    def budget(self) -> int:
        """B = |V| - 1 drafted states."""
        return self.n_nodes - 1

    def rows(self, leaves: bool) -> int:
        """Verification rows per round: |V| if leaves are evaluated, else |I|."""
        return self.n_nodes if leaves else self.n_internal

    def widths(self) -> list[int]:
        """Distinct child counts of internal nodes (sorted)."""
        return sorted(set(self.n_children[self.n_children > 0].tolist()))

    @property
    def max_K(self) -> int:
        """Largest number of children of a node (0 for the root alone)."""
        return int(self.n_children.max()) if self.n_nodes > 1 else 0

    # ------------------------------------------------------------------ operations
    def truncate(self, m: int) -> "DraftTree":
        """T|_m: the subtree induced by nodes of depth <= m (cached)."""
        if m < 0:
            raise InputError(f"truncation depth must be >= 0, got {m}")
        if m >= self.L:
            return self
        return _truncate_cached(self, int(m))

    def children(self, u: int) -> np.ndarray:
        """Node ids of the children of node u (contiguous)."""
        f = self.first_child[u]
        return np.arange(f, f + self.n_children[u]) if f >= 0 else np.empty(0, dtype=np.int64)

    def describe(self) -> dict:
        """Name and sizes (recorded with results)."""
        return {"tree": self.name, "L": self.L, "V": self.n_nodes, "I": self.n_internal,
                "B": self.budget, "widths": self.widths()}


@lru_cache(maxsize=256)
def _truncate_cached(tree: DraftTree, m: int) -> DraftTree:
    keep = int(sum(layer.size for layer in tree.layers[: m + 1]))
    return DraftTree(tree.parent[:keep], name=f"{tree.name}|{m}")


def tree_size(widths: Sequence[int]) -> int:
    """|V| of the tree whose depth-l nodes each have widths[l - 1] children: 1 + w_1 + w_1 w_2 + ...
    (stops counting once past MAX_TREE_NODES, so it is cheap for any input)."""
    total, layer = 1, 1
    for width in widths:
        layer *= int(width)
        total += layer
        if total > MAX_TREE_NODES:
            return total
    return total


def _check_count(value: object, name: str) -> int:
    """An integer >= 1 (bools and non-integral floats refused), named in the message."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or int(value) < 1:
        raise InputError(f"{name} must be an integer >= 1, got {value!r}")
    return int(value)


def _from_widths(widths: Sequence[int], name: str) -> DraftTree:
    for width in widths:
        _check_count(width, "every tree width")
    nodes = tree_size(widths)
    if nodes > MAX_TREE_NODES:
        raise InputError(f"tree {name} has more than {MAX_TREE_NODES} nodes (MAX_TREE_NODES); choose a smaller "
                         "K or L")
    parts = [np.array([-1], dtype=np.int64)]
    n_prev, off_prev, count = 1, 0, 1
    for w in widths:
        n_cur = n_prev * int(w)
        parts.append(off_prev + np.arange(n_cur, dtype=np.int64) // int(w))
        off_prev, n_prev = count, n_cur
        count += n_cur
    return DraftTree(np.concatenate(parts), name=name)


@lru_cache(maxsize=64, typed=True)  # typed: True must not hit the entry of 1
def uniform_tree(K: int, L: int) -> DraftTree:
    """Every node of depth < L has K children: |I| = sum_{l<L} K^l, |V| = sum_{l<=L} K^l."""
    K, L = _check_count(K, "K"), _check_count(L, "L")
    return _from_widths([K] * L, f"uniform(K={K},L={L})")


@lru_cache(maxsize=64, typed=True)  # typed: True must not hit the entry of 1
def chain(L: int) -> DraftTree:
    """A chain of L drafted states (K = 1)."""
    L = _check_count(L, "L")
    return _from_widths([1] * L, f"chain(L={L})")


def widths_tree(widths: Sequence[int]) -> DraftTree:
    """Depth-dependent widths: every node of depth l - 1 has widths[l - 1] children."""
    if len(widths) < 1:
        raise InputError("widths must be non-empty")
    return _from_widths(widths, f"widths({','.join(map(str, widths))})")


def pruned_tree(tree: DraftTree, keep: Sequence[int] | np.ndarray | int) -> DraftTree:
    """Keep the nodes in ``keep`` (ids of ``tree``; the root and each kept node's ancestors
    are added), dropping the rest."""
    keep = set(int(v) for v in np.atleast_1d(keep)) | {0}
    for v in list(keep):
        if v < 0 or v >= tree.n_nodes:
            raise InputError(f"node id {v} out of range [0, {tree.n_nodes})")
        while v > 0:
            v = int(tree.parent[v])
            keep.add(v)
    ids = np.asarray(sorted(keep))
    remap = {int(v): i for i, v in enumerate(ids)}
    parent = np.asarray([-1] + [remap[int(tree.parent[v])] for v in ids[1:]])
    return DraftTree(parent, name=f"pruned({tree.name},{ids.size})")


def chain_matched(tree: DraftTree, match: str, leaves: bool) -> DraftTree:
    """The chain compared with ``tree``: match='budget' -> same drafted budget B (chain length
    B); match='rows' -> same verification rows (|V| rows if leaves else |I|)."""
    if match == "budget":
        return chain(tree.budget)
    if match == "rows":
        r = tree.rows(leaves)
        return chain(max(r - 1, 1) if leaves else max(r, 1))
    raise InputError(f"chain match must be 'budget' or 'rows', got {match!r}")
