"""The compiler of the fleetflow engine: the same graph as TaskFlow's, built in linear time.

TaskFlow 6.5 compiles a flow of N instance subflows in O(N^2), and its
compile spends most of the rest in per-node overhead:

- ``FlowCompiler.compile`` merges its children's graphs with
  ``types.graph.merge_graphs``, which calls ``networkx.compose`` once per
  child: each call copies the whole graph accumulated so far. The compiler
  merges into a graph it has just created and keeps only the result, so
  :class:`FlowCompiler` merges in place (:func:`merge_graphs_in_place`).
- Every flow's compile asks for the graph's nodes without predecessors /
  successors; ``DiGraph.no_predecessors_iter`` builds a list of each node's
  neighbours to count them. :class:`DiGraph` tests the adjacency dict.

:class:`PatternCompiler` is TaskFlow's, with the two compilers above; the
graph it returns has the same nodes, edges, attributes and order as stock's
(``tests/unit/test_taskflow_compiler.py`` compares them).
"""

from __future__ import annotations

import networkx as nx
from taskflow import flow as tf_flow
from taskflow import task as tf_task
from taskflow.engines.action_engine import compiler as tf_compiler
from taskflow.types import graph as tf_graph
from taskflow.types import tree as tr


class DiGraph(tf_graph.DiGraph):
    """TaskFlow's ``DiGraph``, answering "no predecessors / successors" from the adjacency dicts."""

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


class TaskCompiler(tf_compiler.TaskCompiler):
    """TaskFlow's ``TaskCompiler`` making a :class:`DiGraph`."""

    def compile(self, task, parent=None):
        graph = DiGraph(name=task.name)
        graph.add_node(task, kind=tf_compiler.TASK)
        node = tr.Node(task, kind=tf_compiler.TASK)
        if parent is not None:
            parent.add(node)
        return graph, node


class FlowCompiler(tf_compiler.FlowCompiler):
    """TaskFlow's ``FlowCompiler.compile`` on a :class:`DiGraph`, merging in place.

    The body is TaskFlow 6.5's, line for line, except for the graph class and
    the merge; ``plugin.compat`` keeps it to the series it was copied from.
    """

    def compile(self, flow, parent=None):
        co = tf_compiler
        graph = DiGraph(name=flow.name)
        graph.add_node(flow, kind=co.FLOW, noop=True)
        tree_node = tr.Node(flow, kind=co.FLOW, noop=True)
        if parent is not None:
            parent.add(tree_node)
        if flow.retry is not None:
            tree_node.add(tr.Node(flow.retry, kind=co.RETRY))
        decomposed = {child: self._deep_compiler_func(child, parent=tree_node)[0]
                      for child in flow}
        graph = merge_graphs_in_place(graph, *decomposed.values(),
                                      overlap_detector=co._overlap_occurrence_detector)
        for u, v, attr_dict in flow.iter_links():
            co._add_update_edges(graph, decomposed[u].no_successors_iter(),
                                 list(decomposed[v].no_predecessors_iter()),
                                 attr_dict=attr_dict)
        if flow.retry is not None:
            graph.add_node(flow.retry, kind=co.RETRY)
            co._add_update_edges(graph, [flow], [flow.retry],
                                 attr_dict={tf_flow.LINK_INVARIANT: True})
            for node in graph.nodes:
                if node is not flow.retry and node is not flow:
                    graph.nodes[node].setdefault(co.RETRY, flow.retry)
            from_nodes = [flow.retry]
            attr_dict = {tf_flow.LINK_INVARIANT: True, tf_flow.LINK_RETRY: True}
        else:
            from_nodes = [flow]
            attr_dict = {tf_flow.LINK_INVARIANT: True}
        co._add_update_edges(graph, from_nodes,
                             [node for node in graph.no_predecessors_iter() if node is not flow],
                             attr_dict=attr_dict)
        flow_term = co.Terminator(flow)
        graph.add_node(flow_term, kind=co.FLOW_END, noop=True)
        co._add_update_edges(graph,
                             [node for node in graph.no_successors_iter()
                              if node is not flow_term],
                             [flow_term], attr_dict={tf_flow.LINK_INVARIANT: True})
        return graph, tree_node


class PatternCompiler(tf_compiler.PatternCompiler):
    """TaskFlow's ``PatternCompiler`` with :class:`FlowCompiler` and :class:`TaskCompiler`."""

    def __init__(self, root, freeze=True):
        super().__init__(root, freeze=freeze)
        self._matchers = [(tf_flow.Flow, FlowCompiler(self._compile)),
                          (tf_task.Task, TaskCompiler())]
