"""The fleetflow engine's compiler and scope walker give stock TaskFlow's graph and scopes."""

from __future__ import annotations

import random

import pytest
from taskflow import engines as tf_engines
from taskflow import retry, task
from taskflow.engines.action_engine import compiler, scopes
from taskflow.patterns import graph_flow, linear_flow, unordered_flow
from taskflow.types import graph as tf_graph

from fleetflow.engine import engines
from fleetflow.plugin import compiler as fast_compiler
from fleetflow.plugin.engine import gc_paused
from fleetflow.plugin.scopes import IndexedScopeWalker, index_for


class Produce(task.Task):
    """Returns its own name, so a consumer can tell which producer it saw."""

    def execute(self, **kwargs):
        return self.name


class Echo(task.Task):
    """Returns the ``value`` it was given (from the closest visible provider)."""

    def execute(self, value):
        return value


def _task(rng: random.Random, name: str, provided: list[str]) -> Produce:
    # Optionally require something an earlier task provides, by a shared key.
    requires = [rng.choice(provided)] if provided and rng.random() < 0.5 else []
    key = f"k{rng.randrange(4)}"  # shared keys: several producers, scoping decides
    provided.append(key)
    return Produce(name, provides=key, requires=requires)


def _random_flow(rng: random.Random, prefix: str, depth: int, provided: list[str]):
    kind = rng.choice(["linear", "unordered", "graph"])
    pattern = {"linear": linear_flow, "unordered": unordered_flow, "graph": graph_flow}[kind]
    retry_controller = retry.Times(2, name=f"{prefix}-r") if rng.random() < 0.3 else None
    flow = pattern.Flow(prefix, retry=retry_controller)
    children = []
    for i in range(rng.randint(1, 4)):
        name = f"{prefix}.{i}"
        if depth < 3 and rng.random() < 0.4:
            children.append(_random_flow(rng, name, depth + 1, provided))
        else:
            children.append(_task(rng, name, provided))
    if kind == "graph":
        # No automatic producer -> consumer links (only compiled, never run);
        # link in a random acyclic order instead, so a predecessor can sit at
        # a higher child index than its successor.
        flow.add(*children, resolve_requires=False, resolve_existing=False)
        order = list(children)
        rng.shuffle(order)
        for a, b in zip(order, order[1:], strict=False):
            if rng.random() < 0.7:
                flow.link(a, b)
    else:
        flow.add(*children)
    return flow


def _reservation(n: int):
    flow = linear_flow.Flow("reservation").add(Produce("schedule", provides="placements"))
    instances = unordered_flow.Flow("instances")
    for i in range(n):
        p = f"inst-{i:04d}"
        instances.add(linear_flow.Flow(p, retry=retry.Times(2, name=f"{p}-retry")).add(
            Produce(f"{p}-claim", provides=f"{p}-claimed", requires=["placements"]),
            Produce(f"{p}-boot", provides=f"{p}-booted", requires=[f"{p}-claimed"])))
    return flow.add(instances)


def _compile(flow, compiler_cls=compiler.PatternCompiler):
    return compiler_cls(flow).compile()


def _graph_shape(compilation):
    graph = compilation.execution_graph
    nodes = [(n.name, tuple(sorted((k, getattr(v, "name", v)) for k, v in data.items())))
             for n, data in graph.nodes(data=True)]
    edges = [(u.name, v.name, tuple(sorted(data.items())))
             for u, v, data in graph.edges(data=True)]
    return nodes, edges


def _stock_walker(compilation, atom, names_only=True):
    return scopes.ScopeWalker(compilation, atom, names_only=names_only)


def _indexed_walker(compilation, atom, names_only=True):
    return IndexedScopeWalker(compilation, atom, index_for(compilation.hierarchy),
                              names_only=names_only)


def _scopes(compilation, walker_cls, names_only=True):
    graph = compilation.execution_graph
    atoms = [n for n, d in graph.nodes(data=True) if d["kind"] in compiler.ATOMS]
    result = {}
    for atom in atoms:
        walker = walker_cls(compilation, atom, names_only=names_only)
        levels = list(walker)
        assert list(walker) == levels  # a second walk (cached) agrees
        result[atom.name] = [[a if names_only else a.name for a in level] for level in levels]
    return result


FLOWS = [pytest.param(lambda: _reservation(5), id="reservation")] + [
    pytest.param(lambda seed=seed: _random_flow(random.Random(seed), "f", 0, []),
                 id=f"random-{seed}") for seed in range(25)]


@pytest.mark.parametrize("make_flow", FLOWS)
def test_compile_gives_the_stock_graph_and_scopes(make_flow):
    stock_compilation = _compile(make_flow())
    stock_shape = _graph_shape(stock_compilation)
    stock_scopes = _scopes(stock_compilation, _stock_walker)
    stock_atoms = _scopes(stock_compilation, _stock_walker, False)

    fast_compilation = _compile(make_flow(), fast_compiler.PatternCompiler)
    assert isinstance(fast_compilation.execution_graph, fast_compiler.DiGraph)
    # Same nodes and edges with the same attributes, in the same order.
    assert _graph_shape(fast_compilation) == stock_shape
    assert _scopes(fast_compilation, _indexed_walker) == stock_scopes
    assert _scopes(fast_compilation, _indexed_walker, False) == stock_atoms
    # The index agrees with the stock walk on the very same compilation too.
    assert _scopes(fast_compilation, _stock_walker) == stock_scopes


def test_predecessor_ranked_after_its_atom_is_never_visible():
    # TaskFlow's patterns add children in execution order, so a predecessor
    # normally has a lower child index; build the other case by hand: the
    # stock walker never yields such a predecessor and walks to the root.
    from taskflow.types import tree

    root_flow = linear_flow.Flow("root")
    a, b, c = Produce("a"), Produce("b"), Produce("c")
    graph = tf_graph.DiGraph(name="root")
    graph.add_node(root_flow, kind=compiler.FLOW, noop=True)
    for atom in (a, b, c):
        graph.add_node(atom, kind=compiler.TASK)
    graph.add_edge(root_flow, c)
    graph.add_edge(c, a)  # c (index 2) runs before a (index 0)
    graph.add_edge(c, b)
    graph.add_edge(a, b)
    hierarchy = tree.Node(root_flow, kind=compiler.FLOW, noop=True)
    for atom in (a, b, c):
        hierarchy.add(tree.Node(atom, kind=compiler.TASK))
    graph.freeze()
    hierarchy.freeze()
    compilation = compiler.Compilation(graph, hierarchy)
    expected = _scopes(compilation, _stock_walker)
    # "a" sees nothing ("c" is ranked after it) yet walks the level; "b" sees
    # "a" but not "c"; "c" has no predecessor atoms.
    assert expected == {"a": [[]], "b": [["a"]], "c": []}
    assert _scopes(compilation, _indexed_walker) == expected


def test_no_predecessor_and_successor_iterators_match_stock():
    edges = [("a", "b"), ("b", "c"), ("a", "c")]
    answers = []
    for graph_cls in (tf_graph.DiGraph, fast_compiler.DiGraph):
        graph = graph_cls()
        graph.add_nodes_from(["lonely", "a", "b", "c"])
        graph.add_edges_from(edges)
        answers.append((list(graph.no_predecessors_iter()), list(graph.no_successors_iter())))
    assert answers[0] == answers[1] == (["lonely", "a"], ["lonely", "c"])


def test_in_place_merge_refuses_overlaps_like_stock():
    a = tf_graph.DiGraph(name="a")
    a.add_node("x")
    b = tf_graph.DiGraph(name="b")
    b.add_edge("x", "y")
    with pytest.raises(ValueError, match="overlapping"):
        fast_compiler.merge_graphs_in_place(a, b)
    c = tf_graph.DiGraph(name="c")
    c.add_edge("y", "z", flag=True)
    merged = fast_compiler.merge_graphs_in_place(a, c)
    assert merged is a and merged.name == "a"
    assert merged.get_edge_data("y", "z") == {"flag": True}
    assert set(merged.nodes) == {"x", "y", "z"}


def test_unknown_atom_is_refused():
    compilation = _compile(_reservation(2), fast_compiler.PatternCompiler)
    with pytest.raises(ValueError, match="Unable to find atom"):
        _indexed_walker(compilation, Produce("stranger"))


@pytest.mark.parametrize("engine", ["serial", "parallel", "fleetflow-parallel"])
def test_flow_sees_the_closest_values_under_every_engine(engine):
    flow = linear_flow.Flow("root").add(
        Produce("first", provides="value"),
        unordered_flow.Flow("inner").add(
            linear_flow.Flow("a").add(Produce("a-shadow", provides="value"),
                                      Echo("a-use", provides="a-out")),
            linear_flow.Flow("b").add(Echo("b-use", provides="b-out"))))
    eng = engines.make_engine(flow, None, None, workers=4, engine=engine)
    eng.run()
    results = eng.storage.fetch_all()
    # "a-use" sees its sibling's value (closest scope), "b-use" the root one.
    assert results["a-out"] == "a-shadow"
    assert results["b-out"] == "first"


def test_missing_requirement_still_fails_validation():
    flow = linear_flow.Flow("root").add(Echo("lonely"))
    from taskflow import exceptions as tf_exc

    eng = tf_engines.load(flow, engine="fleetflow-parallel")
    eng.compile()
    eng.prepare()
    with pytest.raises(tf_exc.MissingDependencies):
        eng.validate()


def test_gc_is_paused_during_engine_compile_and_restored(monkeypatch):
    import gc

    seen = []

    class Probe(task.Task):
        def execute(self):
            seen.append(gc.isenabled())

    original = fast_compiler.PatternCompiler.compile

    def spying_compile(self):
        seen.append(gc.isenabled())
        return original(self)

    monkeypatch.setattr(fast_compiler.PatternCompiler, "compile", spying_compile)
    assert gc.isenabled()
    eng = tf_engines.load(linear_flow.Flow("f").add(Probe("p")), engine="fleetflow-parallel")
    eng.compile()
    eng.run()
    assert seen == [False, True]  # paused while compiling, back on for the run
    assert gc.isenabled()


def test_gc_pause_nests_and_survives_errors():
    import gc

    assert gc.isenabled()
    with pytest.raises(RuntimeError), gc_paused():
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the outer pause still holds
        raise RuntimeError("boom")
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()  # it was off before: left off
    finally:
        gc.enable()


class _Double(task.Task):
    default_provides = "doubled"

    def execute(self, x):
        return 2 * x


def _run_counting_saves(engine_name):
    engine = tf_engines.load(linear_flow.Flow("f").add(_Double("double")), store={"x": 21},
                             engine=engine_name)
    saves = []
    storage = engine.storage
    save = storage._save_atom_detail

    def counting(conn, original, detail):
        if detail.name == "double":
            saves.append((detail.state, detail.meta.get("progress")))
        return save(conn, original, detail)

    # This engine's own storage only: nothing global changes.
    storage._save_atom_detail = counting
    engine.run()
    detail = engine.storage._atomdetail_by_name("double")[0]
    return saves, (detail.state, detail.results, detail.meta.get("progress"))


def test_progress_is_saved_with_the_state_in_one_write():
    stock_saves, stock_end = _run_counting_saves("parallel")
    saves, end = _run_counting_saves("fleetflow-parallel")
    assert end == stock_end == ("SUCCESS", 42, 1.0)
    assert stock_saves == [("RUNNING", None), ("RUNNING", 0.0), ("SUCCESS", 0.0),
                           ("SUCCESS", 1.0)]
    assert saves == [("RUNNING", 0.0), ("SUCCESS", 1.0)]
