"""The fleetflow engine's resuming selector answers exactly as stock TaskFlow's does."""

from __future__ import annotations

import random

import pytest
from taskflow import engines as tf_engines
from taskflow import retry, task
from taskflow import states as st
from taskflow.engines.action_engine.selector import Selector as STOCK_SELECTOR
from taskflow.patterns import graph_flow, linear_flow, unordered_flow

from fleetflow.plugin.selector import CursorSelector

STATES = [st.PENDING, st.RUNNING, st.SUCCESS, st.FAILURE, st.REVERTING, st.REVERTED,
          st.IGNORE, st.RETRYING]
INTENTIONS = [st.EXECUTE, st.REVERT, st.RETRY, st.IGNORE]


class Noop(task.Task):
    def execute(self):
        return None


class Fails(task.Task):
    def execute(self):
        raise RuntimeError("boot failed")


def reservation_shaped(instances: int) -> linear_flow.Flow:
    """schedule -> claim-all -> N x (retry: claim -> boot) -> finish, like provision."""
    chains = unordered_flow.Flow("instances")
    for i in range(instances):
        chain = linear_flow.Flow(f"inst-{i}", retry=retry.Times(2, name=f"inst-{i}-retry"))
        chain.add(Noop(f"inst-{i}-claim"), Noop(f"inst-{i}-boot"))
        chains.add(chain)
    return linear_flow.Flow("provision").add(Noop("schedule"), Noop("claim-all"), chains,
                                             Noop("finish"))


def random_flow(rng: random.Random, prefix: str = "f", depth: int = 0):
    kind = rng.choice([linear_flow, unordered_flow, graph_flow])
    controller = retry.Times(2, name=f"{prefix}-r") if rng.random() < 0.3 else None
    flow = kind.Flow(prefix, retry=controller)
    children = []
    for i in range(rng.randint(1, 4)):
        name = f"{prefix}.{i}"
        if depth < 3 and rng.random() < 0.4:
            children.append(random_flow(rng, name, depth + 1))
        else:
            children.append(Noop(name))
    flow.add(*children)
    if kind is graph_flow:
        for a, b in zip(children, children[1:], strict=False):
            if rng.random() < 0.6:
                flow.link(a, b)
    return flow


def prepared(flow):
    # Both selectors are asked about this engine's runtime and storage (which
    # counts setbacks for the cursor selector).
    engine = tf_engines.load(flow, engine="fleetflow-parallel")
    engine.compile()
    engine.prepare()
    return engine


def answers(selector, atoms) -> list[tuple[str, bool, bool]]:
    return [(atom.name, selector._get_maybe_ready_for_execute(atom)[0],
             selector._get_maybe_ready_for_revert(atom)[0]) for atom in atoms]


def walk_states(engine, rng: random.Random, steps: int, ask=answers) -> list:
    """Mostly forward progress with setbacks mixed in; after each step ``ask`` the
    patched and the stock selector and compare. Returns the patched answers."""
    runtime = engine._runtime
    atoms = list(runtime.iterate_nodes(("task", "retry")))
    stock, patched_selector = STOCK_SELECTOR(runtime), CursorSelector(runtime)
    storage = engine.storage
    seen = []
    for _ in range(steps):
        atom = rng.choice(atoms)
        if rng.random() < 0.7:
            storage.set_atom_intention(atom.name, st.EXECUTE)
            storage.set_atom_state(atom.name, rng.choice([st.SUCCESS, st.SUCCESS, st.IGNORE]))
        elif rng.random() < 0.5:
            storage.set_atom_state(atom.name, rng.choice(STATES))
        else:
            storage.set_atom_intention(atom.name, rng.choice(INTENTIONS))
        patched = ask(patched_selector, atoms)
        assert patched == ask(stock, atoms)
        seen.append(patched)
    return seen


@pytest.mark.parametrize("seed", range(6))
def test_same_answers_as_stock_on_reservation_shaped_flows(seed):
    rng = random.Random(seed)
    assert len(walk_states(prepared(reservation_shaped(rng.randint(2, 12))), rng, 400)) == 400


@pytest.mark.parametrize("seed", range(12))
def test_same_answers_as_stock_on_random_flows(seed):
    rng = random.Random(1000 + seed)
    assert len(walk_states(prepared(random_flow(rng)), rng, 400)) == 400


def count_state_reads(storage) -> dict:
    """``{"calls": n}``, n counting the calls of ``storage.get_atoms_states`` from now on."""
    counted = {"calls": 0}
    real_get = storage.get_atoms_states

    def counting(names):
        counted["calls"] += 1
        return real_get(names)

    storage.get_atoms_states = counting
    return counted


def test_forward_progress_checks_are_linear():
    """Completing N chains asks storage O(N) times, not O(N^2) as stock does.

    Stock walks ``finish``'s predecessors from the last chain backwards, so
    chains completing from the last to the first make every walk pass all the
    chains completed so far.
    """
    engine = prepared(reservation_shaped(300))
    runtime, storage = engine._runtime, engine.storage
    finish = next(a for a in runtime.iterate_nodes(("task",)) if a.name == "finish")
    counted = count_state_reads(storage)
    calls = {}
    for selector_class in (STOCK_SELECTOR, CursorSelector):
        for atom in runtime.iterate_nodes(("task", "retry")):
            storage.set_atom_intention(atom.name, st.EXECUTE)
            storage.set_atom_state(atom.name, st.PENDING)
        selector = selector_class(runtime)
        counted["calls"] = 0
        for name in ["schedule", "claim-all"] + [f"inst-{i}-{step}" for i in reversed(range(300))
                                                 for step in ("retry", "claim", "boot")]:
            storage.set_atom_state(name, st.SUCCESS)
            if name.endswith("boot"):
                ready = selector._get_maybe_ready_for_execute(finish)[0]
                assert ready == (name == "inst-0-boot")
        calls[selector_class.__name__] = counted["calls"]
    atoms = 2 + 3 * 300
    assert calls["CursorSelector"] <= 2 * atoms
    assert calls["Selector"] > 50 * atoms


def test_a_lane_of_chains_is_checked_in_linear_time():
    """Chains one after another (an evacuation's lane): running them in order asks
    storage O(N) times, not O(N^2): a walk stops at the chain before, whose atoms
    were all found finished behind it."""
    chains = 200
    lane = linear_flow.Flow("lane")
    for i in range(chains):
        chain = linear_flow.Flow(f"srv-{i}", retry=retry.Times(2, name=f"srv-{i}-retry"))
        chain.add(Noop(f"srv-{i}-claim"), Noop(f"srv-{i}-move"))
        lane.add(chain)
    engine = prepared(linear_flow.Flow("evacuate").add(Noop("schedule"), lane))
    runtime, storage = engine._runtime, engine.storage
    by_name = {a.name: a for a in runtime.iterate_nodes(("task", "retry"))}
    counted = count_state_reads(storage)
    calls = {}
    for selector_class in (STOCK_SELECTOR, CursorSelector):
        for name in by_name:
            storage.set_atom_intention(name, st.EXECUTE)
            storage.set_atom_state(name, st.PENDING)
        selector = selector_class(runtime)
        counted["calls"] = 0
        for name in ["schedule"] + [f"srv-{i}-{step}" for i in range(chains)
                                    for step in ("retry", "claim", "move")]:
            assert selector._get_maybe_ready_for_execute(by_name[name])[0]
            storage.set_atom_state(name, st.SUCCESS)
        calls[selector_class.__name__] = counted["calls"]
    atoms = 1 + 3 * chains
    assert calls["CursorSelector"] <= 4 * atoms
    assert calls["Selector"] > 50 * atoms


def test_failed_chain_retries_and_flow_finishes():
    """A whole run on the patched selector: a failing chain reverts, retries, then succeeds."""
    attempts = {"n": 0}

    class FlakyBoot(task.Task):
        def execute(self):
            attempts["n"] += 1
            if attempts["n"] == 1:
                raise RuntimeError("first boot fails")

    flow = reservation_shaped(5)
    flaky = linear_flow.Flow("flaky", retry=retry.Times(3, name="flaky-retry"))
    flaky.add(Noop("flaky-claim"), FlakyBoot("flaky-boot"))
    flow = linear_flow.Flow("outer").add(flow, flaky, Noop("after"))
    engine = tf_engines.load(flow, engine="fleetflow-parallel", max_workers=4)
    engine.run()
    assert attempts["n"] == 2
    assert engine.storage.get_atom_state("after") == st.SUCCESS
    assert engine.storage.get_atom_state("flaky-claim") == st.SUCCESS


def test_all_chains_revert_when_one_fails_for_good():
    flow = reservation_shaped(6)
    flow.add(Fails("explode"))
    engine = tf_engines.load(flow, engine="fleetflow-parallel", max_workers=4)
    with pytest.raises(RuntimeError):
        engine.run()
    states = engine.storage.get_atoms_states(
        [f"inst-{i}-boot" for i in range(6)] + ["schedule", "finish"])
    assert {state for state, _intention in states.values()} == {st.REVERTED}


def test_a_setback_behind_the_cursor_is_seen():
    """finish waits on the last chain; meanwhile a chain it already passed reverts."""
    engine = prepared(reservation_shaped(3))
    runtime, storage = engine._runtime, engine.storage
    finish = next(a for a in runtime.iterate_nodes(("task",)) if a.name == "finish")
    selector = CursorSelector(runtime)
    for atom in runtime.iterate_nodes(("task", "retry")):
        if atom.name not in ("inst-0-boot", "finish"):
            storage.set_atom_state(atom.name, st.SUCCESS)
    assert not selector._get_maybe_ready_for_execute(finish)[0]  # walk stops at inst-0
    storage.set_atom_state("inst-2-claim", st.REVERTED)  # already passed over
    storage.set_atom_state("inst-0-boot", st.SUCCESS)
    assert not selector._get_maybe_ready_for_execute(finish)[0]
    storage.set_atom_state("inst-2-claim", st.SUCCESS)
    assert selector._get_maybe_ready_for_execute(finish)[0]


def next_atoms(selector, atoms) -> list[tuple[str | None, list[str]]]:
    return [(atom and atom.name, [a.name for a, _decider in selector.iter_next_atoms(atom=atom)])
            for atom in [None, *atoms]]


def ready_seen(seen) -> int:
    """How many atoms were answered ready over a walk of :func:`next_atoms` answers."""
    return sum(len(names) for step in seen for _name, names in step)


@pytest.mark.parametrize("seed", range(6))
def test_next_atoms_as_stock_on_reservation_shaped_flows(seed):
    rng = random.Random(2000 + seed)
    flow = prepared(reservation_shaped(rng.randint(2, 10)))
    assert ready_seen(walk_states(flow, rng, 150, ask=next_atoms)) > 0


@pytest.mark.parametrize("seed", range(12))
def test_next_atoms_as_stock_on_random_flows(seed):
    rng = random.Random(3000 + seed)
    assert ready_seen(walk_states(prepared(random_flow(rng)), rng, 150, ask=next_atoms)) > 0


def test_next_atoms_as_stock_with_edge_deciders():
    """A flow whose links carry deciders keeps stock's whole walk."""
    first, second, third = Noop("a"), Noop("b"), Noop("c")
    flow = graph_flow.Flow("g").add(first, second, third)
    flow.link(first, second, decider=lambda history: False)
    flow.link(second, third)
    engine = prepared(flow)
    selector = CursorSelector(engine._runtime)
    engine.storage.set_atom_state("a", st.SUCCESS)
    patched = [a.name for a, _d in selector.iter_next_atoms(atom=first)]
    stock = [a.name for a, _d in STOCK_SELECTOR(engine._runtime).iter_next_atoms(atom=first)]
    assert patched == stock == ["b"]
    assert selector._has_edge_deciders


def test_the_forward_walk_stops_at_unfinished_atoms():
    engine = prepared(reservation_shaped(50))
    runtime, storage = engine._runtime, engine.storage
    claim_all = next(a for a in runtime.iterate_nodes(("task",)) if a.name == "claim-all")
    for name in ("schedule", "claim-all"):
        storage.set_atom_state(name, st.SUCCESS)
    asked = {}
    for selector_class in (STOCK_SELECTOR, CursorSelector):
        selector = selector_class(runtime)
        real = selector._get_maybe_ready_for_execute
        asked[selector_class.__name__] = []

        def counting(atom, real=real, seen=asked[selector_class.__name__]):
            seen.append(atom.name)
            return real(atom)

        selector._get_maybe_ready_for_execute = counting
        ready = [a.name for a, _d in selector.iter_next_atoms(atom=claim_all)]
        assert ready == [f"inst-{i}-retry" for i in range(50)]
    # Stock asks about every atom after claim-all; the patched walk only about
    # the retries (each one's claim is behind it, unfinished).
    assert len(asked["Selector"]) == 3 * 50 + 1
    assert sorted(asked["CursorSelector"]) == sorted(f"inst-{i}-retry" for i in range(50))


def test_a_starting_engine_asks_only_about_atoms_nothing_unfinished_precedes():
    engine = prepared(reservation_shaped(50))
    runtime, storage = engine._runtime, engine.storage
    asked = {}
    for done in ((), ("schedule", "claim-all")):
        for name in done:
            storage.set_atom_state(name, st.SUCCESS)
        for selector_class in (STOCK_SELECTOR, CursorSelector):
            selector = selector_class(runtime)
            real = selector._get_maybe_ready_for_execute
            seen = asked[selector_class.__name__, done] = []

            def counting(atom, real=real, seen=seen):
                seen.append(atom.name)
                return real(atom)

            selector._get_maybe_ready_for_execute = counting
            expected = ["schedule"] if not done else [f"inst-{i}-retry" for i in range(50)]
            assert [a.name for a, _d in selector.iter_next_atoms()] == expected
    assert len(asked["Selector", ()]) == 3 * 50 + 3
    assert asked["CursorSelector", ()] == ["schedule"]
    assert sorted(asked["CursorSelector", ("schedule", "claim-all")]) == sorted(
        ["schedule", "claim-all", *(f"inst-{i}-retry" for i in range(50))])
