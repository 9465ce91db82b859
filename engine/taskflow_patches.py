"""Fixes for TaskFlow's quadratic compile, applied in one place with :func:`apply`.

TaskFlow 6.5 compiles a flow of N instance subflows in O(N^2) for two reasons
(1, 2); 3 and 4 cut the constant factor that remains:

1. ``FlowCompiler.compile`` merges its children's graphs with
   ``types.graph.merge_graphs``, which calls ``networkx.compose`` once per
   child: each call copies the whole graph accumulated so far. The compiler
   merges into a graph it has just created and keeps only the result, so it
   can merge in place (:func:`merge_graphs_in_place`).
2. ``scopes.ScopeWalker`` finds its atom with ``hierarchy.find`` (a depth-first
   search of the whole tree, once per atom) and, to decide which predecessors
   an atom can see at each level, walks every earlier sibling subtree of that
   level (all earlier instances, for an instance's atoms).
   :class:`IndexedScopeWalker` builds one index per compiled hierarchy (atom
   -> tree node, plus each node's rank in the order the stock walker visits
   nodes) and places each predecessor at its level with a binary search.
3. Every flow's compile asks for the graph's nodes without predecessors /
   successors; ``DiGraph.no_predecessors_iter`` builds a list of each node's
   neighbours to count them. The patched versions test the adjacency dict.
4. Compiling (and the engine's per-atom runtime set-up that follows) allocates
   tens of thousands of containers that all live as long as the engine; the
   cyclic garbage collector keeps scanning the whole heap meanwhile and finds
   nothing to free (about 40% of compile time at 4,001 atoms).
   ``ActionEngine.compile`` runs with the collector paused (:func:`gc_paused`;
   reference counting still frees everything as usual).

5. Building a flow of N instances constructs ~3N atoms, and each asks
   ``oslo_utils.reflection`` for its execute's and revert's arguments, which
   runs ``inspect.signature`` four times per atom (most of the time spent
   building a 1,000-instance flow). The answers depend only on the function,
   so :class:`MemoizedReflection` caches them per function for
   ``taskflow.atom``.

6. A task's progress (0.0 when it starts, 1.0 when it ends) is saved by a
   write of its own right after the state change it goes with: four
   checkpoints per task where two carry the same information.
   :func:`change_state_with_progress` puts the progress into the atom detail
   before the state is saved, so one write stores both.

7. The engine's selector decides whether an atom may run by walking all its
   predecessors after every completion: O(N^2) for a reservation's ``finish``
   task. :mod:`fleetflow.engine.taskflow_selector_patch` resumes each walk
   where it last stopped, unless an atom it passed has fallen back since.

8, 9, 11. The engine thread's storage reads re-take the read lock it already
   holds as writer (about 50 per atom), a flow is validated twice per run, and
   every checkpoint builds tenacity's retry state;
   :mod:`fleetflow.engine.taskflow_engine_patches` removes these costs.

10. The engine waits for completions with ``wait_for_any``, which locks and
   unlocks every outstanding future on each wait: O(N^2) with N boots running.
   :mod:`fleetflow.engine.taskflow_waiter_patch` gives each engine a queue.

12. The engine's thread pool (futurist's) starts a thread per submitted task
   until it is full, idle workers or not; :mod:`fleetflow.engine.taskflow_pool_patch`
   uses the standard library's pool, which starts one only when none is idle.

13. Every state change of every atom is committed on its own before the engine
   moves on (about 6,000 commits for 1,000 instances).
   :mod:`fleetflow.engine.taskflow_checkpoint_patch` stores them in batches,
   still before any atom they lead to starts (write-ahead).

14. ``OrderedSet`` (an atom's arguments, a flow's names) fills itself one item at
   a time in Python; :mod:`fleetflow.engine.taskflow_sets_patch` lets C do it.
15. Each atom works out its argument mappings anew, though a reservation's atoms
   of one kind differ only in the names their arguments are bound to;
   :mod:`fleetflow.engine.taskflow_argmap_patch` works each shape out once.
16. Every argument of every atom scheduled is found from scratch, though most are
   the flow's own injected values; :mod:`fleetflow.engine.taskflow_fetch_patch`
   remembers those until something is injected again.

Patches 1-3 produce the same graph and the same visible scopes, in the same order, as
stock TaskFlow (``tests/unit/test_taskflow_patches.py`` checks this); they are
shaped so that they could be proposed upstream as they are. :func:`apply` is
idempotent and is called by the engine factory (``engines.py``) and the
benchmark; :func:`remove` restores stock TaskFlow (tests use it to compare).
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import gc
import threading
import weakref

import networkx as nx
from taskflow import atom as tf_atom
from taskflow.engines.action_engine import compiler, scopes
from taskflow.engines.action_engine import engine as action_engine
from taskflow.engines.action_engine.actions import task as task_action
from taskflow.types import graph as tf_graph

from fleetflow.engine import (
    taskflow_argmap_patch,
    taskflow_checkpoint_patch,
    taskflow_compat,
    taskflow_engine_patches,
    taskflow_fetch_patch,
    taskflow_pool_patch,
    taskflow_selector_patch,
    taskflow_sets_patch,
    taskflow_waiter_patch,
)
from fleetflow.engine.taskflow_atom_patches import (
    STOCK_ATOM_REFLECTION,
    STOCK_CHANGE_STATE,
    MemoizedReflection,
    change_state_with_progress,
)

_lock = threading.Lock()
_STOCK_GRAPH_MODULE = compiler.gr
STOCK_SCOPE_WALKER = scopes.ScopeWalker
STOCK_ENGINE_COMPILE = action_engine.ActionEngine.compile
STOCK_NO_PREDECESSORS = tf_graph.DiGraph.no_predecessors_iter
STOCK_NO_SUCCESSORS = tf_graph.DiGraph.no_successors_iter


def no_predecessors_iter(self):
    """Nodes without predecessors, in node order (stock builds a list per node)."""
    for node, predecessors in self.pred.items():
        if not predecessors:
            yield node


def no_successors_iter(self):
    """Nodes without successors, in node order (stock builds a list per node)."""
    for node, successors in self.succ.items():
        if not successors:
            yield node

_gc_lock = threading.Lock()
_gc_pausers = 0
_gc_was_enabled = False


@contextlib.contextmanager
def gc_paused():
    """Pause the cyclic garbage collector for the block (nestable, thread-safe).

    The collector is enabled again when the last concurrent pauser leaves,
    and only if it was enabled when the first one came in.
    """
    global _gc_pausers, _gc_was_enabled
    with _gc_lock:
        if _gc_pausers == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_pausers += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_pausers -= 1
            if _gc_pausers == 0 and _gc_was_enabled:
                gc.enable()


@functools.wraps(STOCK_ENGINE_COMPILE)
def _compile_with_gc_paused(self):
    with gc_paused():
        return STOCK_ENGINE_COMPILE(self)


def _default_overlap_detector(to_graph, from_graph):
    # Same default as TaskFlow's merge_graphs.
    return len(to_graph.subgraph(from_graph.nodes))


def _plain_digraphs(*graphs) -> bool:
    return all(isinstance(g, nx.DiGraph) and not g.is_multigraph() for g in graphs)


def _copy_disjoint_digraph(graph, g) -> None:
    """Copy ``g``'s nodes and edges into ``graph``, given that they share no node.

    Same result as ``add_nodes_from`` + ``add_edges_from`` (fresh attribute
    dicts from the graph's factories, one data dict shared by ``succ`` and
    ``pred`` as networkx keeps it), but filling networkx's adjacency dicts
    directly: without the per-node checks it is ~3x faster, and merging is
    most of the compile. Only for disjoint graphs (the caller checks overlaps).
    """
    node_attrs, inner, edge_attrs = (graph.node_attr_dict_factory,
                                     graph.adjlist_inner_dict_factory,
                                     graph.edge_attr_dict_factory)
    nodes, succ, pred = graph._node, graph._succ, graph._pred
    for n, data in g._node.items():
        attrs = nodes[n] = node_attrs()
        attrs.update(data)
        succ[n] = inner()
        pred[n] = inner()
    for u, nbrs in g._succ.items():
        for v, data in nbrs.items():
            attrs = edge_attrs()
            attrs.update(data)
            succ[u][v] = attrs
            pred[v][u] = attrs
    clear_cache = getattr(nx, "_clear_cache", None)
    if clear_cache is not None:  # networkx >= 3.3 caches some views per graph
        clear_cache(graph)


def merge_graphs_in_place(graph, *graphs, **kwargs):
    """Merge ``graphs`` into ``graph`` itself and return it.

    Same arguments, checks and resulting nodes, edges and attributes as
    ``taskflow.types.graph.merge_graphs``, without copying ``graph`` once per
    merged graph (which made compiling a flow with many children quadratic).
    """
    allow_overlaps = kwargs.get("allow_overlaps", False)
    overlap_detector = kwargs.get("overlap_detector")
    if overlap_detector is not None and not callable(overlap_detector):
        raise ValueError("Overlap detection callback expected to be callable")
    if overlap_detector is None:
        overlap_detector = _default_overlap_detector
    name = graph.name
    for g in graphs:
        if not allow_overlaps:
            overlaps = overlap_detector(graph, g)
            if overlaps:
                raise ValueError(
                    f"Can not merge graph {g} into {graph} since there are {overlaps} "
                    "overlapping nodes (and we do not support merging nodes)")
        # networkx.compose copies graph attributes, then nodes, then edges
        # (the later graph's data winning); do the same, in place.
        graph.graph.update(g.graph)
        if _plain_digraphs(graph, g):
            _copy_disjoint_digraph(graph, g)
        else:
            graph.add_nodes_from(g.nodes(data=True))
            graph.add_edges_from(g.edges(data=True))
    if graphs:
        # Keep the first graph's name, as merge_graphs does.
        graph.name = name
    return graph


class _CompilerGraphTypes:
    """``taskflow.types.graph`` as the compiler sees it, with the in-place merge.

    Installed as ``compiler.gr`` so only the compiler (the one caller of
    ``merge_graphs`` in TaskFlow, always with a graph it has just created)
    changes; everyone else keeps the documented copying ``merge_graphs``.
    """

    merge_graphs = staticmethod(merge_graphs_in_place)

    def __getattr__(self, name):
        return getattr(tf_graph, name)


class _ScopeIndex:
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


_indexes: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _index_for(hierarchy) -> _ScopeIndex | None:
    """The (cached) index of a frozen hierarchy; None when it may still change."""
    if not getattr(hierarchy, "frozen", False):
        return None
    with _lock:
        index = _indexes.get(hierarchy)
        if index is None:
            index = _indexes[hierarchy] = _ScopeIndex(hierarchy)
        return index


class IndexedScopeWalker(STOCK_SCOPE_WALKER):
    """``ScopeWalker`` that yields the same scopes using a per-compilation index.

    Cost per atom: its graph predecessors (as stock) plus a binary search per
    predecessor, instead of a whole-tree search and a scan of every earlier
    sibling subtree. Falls back to the stock walk for an unfrozen hierarchy.
    """

    def __init__(self, compilation, atom, names_only=False):
        self._index = _index_for(compilation.hierarchy)
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


# Patches 7-16, each in a module of its own with install() / uninstall() / is_installed().
_PATCH_MODULES = (taskflow_selector_patch, taskflow_engine_patches, taskflow_waiter_patch,
                  taskflow_pool_patch, taskflow_checkpoint_patch, taskflow_sets_patch,
                  taskflow_argmap_patch, taskflow_fetch_patch)


def apply() -> bool:
    """Install the fixes into TaskFlow (idempotent, thread-safe); whether they are in.

    On a TaskFlow outside the tested series nothing is installed (see
    :mod:`fleetflow.engine.taskflow_compat`) and flows run on stock TaskFlow.
    """
    if not taskflow_compat.check():
        return False
    with _lock:
        if not isinstance(tf_atom.reflection, MemoizedReflection):
            tf_atom.reflection = MemoizedReflection(STOCK_ATOM_REFLECTION)
        task_action.TaskAction.change_state = change_state_with_progress
        if not isinstance(compiler.gr, _CompilerGraphTypes):
            compiler.gr = _CompilerGraphTypes()
        scopes.ScopeWalker = IndexedScopeWalker
        action_engine.ActionEngine.compile = _compile_with_gc_paused
        tf_graph.DiGraph.no_predecessors_iter = no_predecessors_iter
        tf_graph.DiGraph.no_successors_iter = no_successors_iter
        for module in _PATCH_MODULES:
            module.install()
    return True


def remove() -> None:
    """Restore stock TaskFlow (for tests that compare both)."""
    with _lock:
        tf_atom.reflection = STOCK_ATOM_REFLECTION
        task_action.TaskAction.change_state = STOCK_CHANGE_STATE
        compiler.gr = _STOCK_GRAPH_MODULE
        scopes.ScopeWalker = STOCK_SCOPE_WALKER
        action_engine.ActionEngine.compile = STOCK_ENGINE_COMPILE
        tf_graph.DiGraph.no_predecessors_iter = STOCK_NO_PREDECESSORS
        tf_graph.DiGraph.no_successors_iter = STOCK_NO_SUCCESSORS
        for module in _PATCH_MODULES:
            module.uninstall()


def is_applied() -> bool:
    return (isinstance(compiler.gr, _CompilerGraphTypes)
            and isinstance(tf_atom.reflection, MemoizedReflection)
            and task_action.TaskAction.change_state is change_state_with_progress
            and scopes.ScopeWalker is IndexedScopeWalker
            and action_engine.ActionEngine.compile is _compile_with_gc_paused
            and tf_graph.DiGraph.no_predecessors_iter is no_predecessors_iter
            and all(module.is_installed() for module in _PATCH_MODULES))
