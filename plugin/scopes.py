"""The scope walker of the fleetflow engine: an atom's visible scopes from one index.

``scopes.ScopeWalker`` finds its atom with ``hierarchy.find`` (a depth-first
search of the whole tree, once per atom) and, to decide which predecessors
an atom can see at each level, walks every earlier sibling subtree of that
level (all earlier instances, for an instance's atoms): O(N^2) for a flow of
N instances. :class:`IndexedScopeWalker` uses one :class:`ScopeIndex` per
compiled hierarchy (atom -> tree node, plus each node's rank in the order the
stock walker visits nodes) and places each predecessor at its level with a
binary search. It yields the same scopes, in the same order, as stock
(``tests/unit/test_taskflow_compiler.py`` compares them).
"""

from __future__ import annotations

import bisect

from taskflow.engines.action_engine import compiler, scopes


class ScopeIndex:
    """Positions of every node of one frozen compilation hierarchy.

    ``rank`` numbers nodes in pre-order, visiting a node's children from the
    last to the first: exactly the order in which the stock walker's
    ``depth_first_reverse_iterate`` yields the atoms of earlier siblings. So
    the atoms a walker sees at the level of ancestor ``A`` (below its own
    ancestor-or-self ``B``, a child of ``A``) are precisely the nodes ranked
    in ``(last[B], last[A]]``, where ``last`` is the highest rank inside a
    node's subtree; and within that range rank order is the stock order.
    """

    def __init__(self, root):
        self.node_of = {}
        self.rank = {}
        self.last = {}
        order = []
        stack = [root]
        while stack:
            node = stack.pop()
            self.rank[node] = len(order)
            order.append(node)
            self.node_of.setdefault(node.item, node)
            # Pushing children first-to-last pops them last-to-first.
            stack.extend(node)
        sizes = dict.fromkeys(order, 1)
        for node in reversed(order):
            if node.parent is not None and node is not root:
                sizes[node.parent] += sizes[node]
        for node in order:
            self.last[node] = self.rank[node] + sizes[node] - 1




def index_for(hierarchy) -> ScopeIndex | None:
    """The index of a frozen hierarchy; None when it may still change."""
    return ScopeIndex(hierarchy) if getattr(hierarchy, "frozen", False) else None


class IndexedScopeWalker(scopes.ScopeWalker):
    """``ScopeWalker`` that yields the same scopes using a per-compilation index.

    Cost per atom: its graph predecessors (as stock) plus a binary search per
    predecessor, instead of a whole-tree search and a scan of every earlier
    sibling subtree. Without an index (an unfrozen hierarchy) it is stock's walk.
    """

    def __init__(self, compilation, atom, index: ScopeIndex | None, names_only=False):
        self._index = index
        if self._index is None:
            super().__init__(compilation, atom, names_only=names_only)
            return
        self._node = self._index.node_of.get(atom)
        if self._node is None:
            raise ValueError(f"Unable to find atom '{atom}' in compilation hierarchy")
        self._atom = atom
        self._execution_graph = compilation.execution_graph
        self._names_only = names_only
        self._predecessors = None
        self._level_cache = {}
        self._levels = None

    def _compute_levels(self):
        graph = self._execution_graph
        predecessors = [node for node in graph.bfs_predecessors_iter(self._atom)
                        if graph.nodes[node]["kind"] in compiler.ATOMS]
        index = self._index
        path = list(self._node.path_iter(include_self=True))
        # bounds[j] is the last rank inside the j-th node of the path (the
        # atom itself is j = 0); a predecessor ranked in
        # (bounds[lvl], bounds[lvl + 1]] is visible at level ``lvl``.
        bounds = [index.last[node] for node in path]
        levels = [[] for _ in range(len(path) - 1)]
        invisible = 0
        deepest = -1
        for atom in predecessors:
            rank = index.rank[index.node_of[atom]]
            j = bisect.bisect_left(bounds, rank)
            if j == 0 or j >= len(bounds):
                # A later sibling's atom (possible in graph flows): the stock
                # walker never yields it, and so keeps walking to the root.
                invisible += 1
                continue
            levels[j - 1].append((rank, atom))
            deepest = max(deepest, j - 1)
        if not predecessors:
            count = 0
        elif invisible:
            count = len(levels)
        else:
            # Stock stops once every predecessor has been placed.
            count = deepest + 1
        return [[atom for _rank, atom in sorted(level, key=lambda p: p[0])]
                for level in levels[:count]]

    def __iter__(self):
        if self._index is None:
            yield from super().__iter__()
            return
        if self._levels is None:
            self._levels = self._compute_levels()
        for visible in self._levels:
            if self._names_only:
                yield [a.name for a in visible]
            else:
                yield list(visible)


