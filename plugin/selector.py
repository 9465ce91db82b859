"""The selector of the fleetflow engine: linear readiness checks.

After every completion the engine asks its selector which atoms may now run.
To decide whether atom X may execute, stock ``Selector`` walks X's
predecessors (all of them, transitively) and stops at the first that has not
finished; for X may revert, it walks X's successors the same way. The
``finish`` task of a reservation of N instances has ~3N predecessors, and it
is asked again after every instance's last task completes: the walk stops at
the first unfinished instance, so a reservation costs O(N^2) checks (156,000
for 1,000 instances, 3.9 million for 5,000). Reverting ``claim-primaries``
has the same shape in the other direction.

:class:`CursorSelector` keeps the walk where it stopped. The next time the same
question is asked it checks the atom that stopped the walk and, if that one is
now finished, goes on from there instead of from the start. The answer is the
same as a walk from the start as long as no atom that was passed over has
since fallen back (a retry resetting its subflow, a revert): every change of
an atom's state or intention goes through ``Storage._save_atom_detail``, which
the engine's storage (:class:`fleetflow.plugin.storage.Storage`) extends
to count such setbacks per direction; a cursor taken before a setback is
thrown away and the walk starts again, as stock does.

After an atom completes, stock asks about every atom after it, all the way
down: completing ``claim-primaries`` asks about all 3N atoms of the instances,
though only the N retries can run. :func:`_successors_past_done` walks the same
way but does not go past an atom that has not finished, since nothing behind
it can be ready (a 1,000-instance reservation asked 21,014 readiness questions,
then 10,010). When the engine starts, stock asks about every atom of the
graph; :func:`_atoms_past_done` finds the few nothing unfinished stands
before. A flow whose links carry deciders keeps stock's walks: a decider may
mark atoms IGNORE while the walk goes on.

Whether X may execute asks about every atom before X, transitively: in a
linear flow of K chains (an evacuation's lanes), the atoms of the last chain
each walk back through all K-1 chains before them, O(K^2) checks per lane
(about 200,000 for 1,000 moves in 64 lanes). Once a walk from X found every
atom before X finished, X is *closed*: until the next setback, nothing
before X can fall back, so a later walk that reaches X (and finds X itself
finished) need not go past it (:func:`_walk_unless_closed`). A setback
throws the closed atoms away, as it throws the cursors away.

The graph walked and the per-atom checks are stock TaskFlow's own
(``traversal.depth_first_iterate``'s walk, ``Storage.get_atoms_states``); only
the bookkeeping between two questions is new. ``tests/unit/test_taskflow_selector.py``
checks the answers equal stock's after every step of random state changes.
"""

from __future__ import annotations

import collections

from taskflow import states as st
from taskflow.engines.action_engine import compiler, deciders, traversal
from taskflow.engines.action_engine import selector as tf_selector
from taskflow.flow import LINK_DECIDER

EXECUTE = "execute"
REVERT = "revert"
_EXECUTED_STATES = (st.SUCCESS, st.IGNORE)
_EXECUTED_INTENTIONS = (st.EXECUTE, st.IGNORE)
_REVERTED_STATES = (st.PENDING, st.REVERTED, st.IGNORE)


def _lets_successors_execute(state: str, intention: str) -> bool:
    return state in _EXECUTED_STATES and intention in _EXECUTED_INTENTIONS


def _lets_predecessors_revert(state: str, intention: str) -> bool:
    return state in _REVERTED_STATES


SATISFIES = {EXECUTE: _lets_successors_execute, REVERT: _lets_predecessors_revert}


class _Cursor:
    __slots__ = ("setbacks", "remaining", "blocker")

    def __init__(self, setbacks: int, remaining):
        self.setbacks = setbacks
        self.remaining = remaining
        self.blocker = None


def _walk_past_done(graph, starts, atom_done):
    """Stock's forward breadth-first walk from ``starts``, not going past unfinished atoms.

    An atom can only be ready once every atom before it has finished, so the
    successors of an atom that has not are not worth asking about. Whether an
    atom has finished is asked when the walk is about to go past it: after the
    caller has handled the atom itself, as stock's walk would.
    """
    queue = collections.deque(starts)
    visited = set()
    nodes = graph.nodes
    while queue:
        node = queue.popleft()
        if node in visited:
            continue
        visited.add(node)
        if nodes[node].get("noop"):
            queue.extend(graph.successors(node))
            continue
        yield node
        if atom_done(node):
            queue.extend(graph.successors(node))


def _walk_unless_closed(graph, start, neighbours, closed):
    """``traversal.depth_first_iterate``'s walk from ``start`` along ``neighbours`` (through
    flows, retries and tasks, yielding atoms only, in the same order), not going past an
    atom in ``closed`` (every atom beyond it is known finished). Whether it is closed is
    asked when the walk is about to go past it, once the caller has handled it."""
    nodes = graph.nodes
    stack = list(neighbours(start))
    visited = set()
    while stack:
        node = stack.pop()
        if node in visited:
            continue
        visited.add(node)
        if not nodes[node].get("noop"):
            yield node
            if node in closed:
                continue
        stack.extend(neighbours(node))


def _successors_past_done(graph, atom, atom_done):
    """The atoms after ``atom`` that may have become ready, in stock's order."""
    return _walk_past_done(graph, graph.successors(atom), atom_done)


def _atoms_past_done(graph, atom_done) -> set:
    """The atoms a walk from the graph's roots reaches without passing an unfinished
    atom: the only ones that may be ready when the engine (re)starts."""
    return set(_walk_past_done(graph, [n for n, before in graph.pred.items() if not before],
                               atom_done))


class CursorSelector(tf_selector.Selector):
    """``Selector`` whose readiness walks resume where they last stopped and whose
    walk forward from a finished atom stops at atoms that have not finished."""

    def __init__(self, runtime):
        super().__init__(runtime)
        self._cursors: dict = {}
        # Per direction: (setbacks when they were found, the closed atoms).
        self._closed: dict = {}
        self._has_edge_deciders: bool | None = None

    def _atom_done(self, atom) -> bool:
        states = self._storage.get_atoms_states([atom.name])[atom.name]
        return _lets_successors_execute(*states)

    def _browse_atoms_for_execute(self, atom=None):
        if self._has_edge_deciders is None:
            self._has_edge_deciders = any(
                LINK_DECIDER in data for _u, _v, data in self._execution_graph.edges(data=True))
        if self._has_edge_deciders:
            # An edge decider may ignore atoms while the walk goes on, so the
            # walk cannot tell ahead which atoms stay unfinished.
            yield from super()._browse_atoms_for_execute(atom)
            return
        if atom is None:
            # Stock's order (every atom of the graph), asking only about the
            # atoms nothing unfinished stands before.
            candidates = _atoms_past_done(self._execution_graph, self._atom_done)
            for node in self._runtime.iterate_nodes(compiler.ATOMS):
                if node in candidates:
                    is_ready, late_decider = self._get_maybe_ready_for_execute(node)
                    if is_ready:
                        yield (node, late_decider)
            return
        for node in _successors_past_done(self._execution_graph, atom, self._atom_done):
            is_ready, late_decider = self._get_maybe_ready_for_execute(node)
            if is_ready:
                yield (node, late_decider)

    def _neighbours_done(self, atom, direction: str, walk_direction) -> bool:
        satisfied = SATISFIES[direction]
        setbacks = self._storage.setbacks[direction]
        key = (direction, atom.name)
        found_at, closed = self._closed.get(direction, (None, None))
        if found_at != setbacks:
            closed = set()
            self._closed[direction] = (setbacks, closed)
        cursor = self._cursors.get(key)
        if cursor is None or cursor.setbacks != setbacks:
            graph = self._execution_graph
            neighbours = (graph.predecessors if walk_direction is traversal.Direction.BACKWARD
                          else graph.successors)
            cursor = _Cursor(setbacks, _walk_unless_closed(graph, atom, neighbours, closed))
        get_states = self._storage.get_atoms_states
        if cursor.blocker is not None:
            if not satisfied(*get_states([cursor.blocker])[cursor.blocker]):
                self._cursors[key] = cursor
                return False
            cursor.blocker = None
        for neighbour in cursor.remaining:
            if not satisfied(*get_states([neighbour.name])[neighbour.name]):
                cursor.blocker = neighbour.name
                self._cursors[key] = cursor
                return False
        self._cursors.pop(key, None)
        closed.add(atom)
        return True

    def _get_maybe_ready_for_execute(self, atom):
        return self._get_maybe_ready(
            atom, st.RUNNING, [st.EXECUTE],
            connected_fetcher=lambda: (),
            ready_checker=lambda _nothing: self._neighbours_done(
                atom, EXECUTE, traversal.Direction.BACKWARD),
            decider_fetcher=lambda: deciders.IgnoreDecider(
                atom, self._runtime.fetch_edge_deciders(atom)),
            for_what="execute")

    def _get_maybe_ready_for_revert(self, atom):
        noop_decider = deciders.NoOpDecider()
        return self._get_maybe_ready(
            atom, st.REVERTING, [st.REVERT, st.RETRY],
            connected_fetcher=lambda: (),
            ready_checker=lambda _nothing: self._neighbours_done(
                atom, REVERT, traversal.Direction.FORWARD),
            decider_fetcher=lambda: noop_decider,
            for_what="revert")
