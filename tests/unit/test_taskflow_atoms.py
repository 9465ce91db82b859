"""fleetflow atoms' argument mappings, worked out once per shape, are exactly stock's."""

from __future__ import annotations

import random

import pytest
from taskflow import retry, task

from fleetflow.plugin import atoms as fast_atoms
from fleetflow.plugin.atoms import FastAtom


class Plain(task.Task):
    def execute(self, a, b, c=None):
        return a

    def revert(self, a, d, **kwargs):
        return None


class TakesAnything(task.Task):
    def execute(self, a, *args, **kwargs):
        return a


class NoArgs(task.Task):
    def execute(self):
        return 1


class Candidates(retry.AlwaysRevert):
    def execute(self, history, a, e=None):
        return a


FAST = {kind: type(f"Fast{kind.__name__}", (FastAtom, kind), {})
        for kind in (Plain, TakesAnything, NoArgs, Candidates)}
FastPlain = FAST[Plain]

# Rebind values drawn from the arguments' own names, injected names, each
# other, and fresh per-instance names: every way a value can meet another name.
POOL = ["a", "b", "c", "d", "e", "x", "y", "inst-0001.host", "inst-0002.host"]


def _random_atom(rng: random.Random, index: int):
    kind = rng.choice([Plain, TakesAnything, NoArgs, Candidates])
    kwargs = {}
    if rng.random() < 0.7:
        keys = rng.sample(["a", "b", "c", "d", "e", "z"], rng.randint(1, 3))
        if rng.random() < 0.5:
            kwargs["rebind"] = {k: f"inst-{index:04d}.{k}" for k in keys}
        else:
            kwargs["rebind"] = {k: rng.choice(POOL) for k in keys}
    elif rng.random() < 0.2:
        kwargs["rebind"] = rng.sample(POOL, rng.randint(1, 3))
    if rng.random() < 0.4:
        kwargs["requires"] = (rng.choice(POOL) if rng.random() < 0.3
                              else rng.sample(POOL, rng.randint(1, 3)))
    if rng.random() < 0.4:
        kwargs["inject"] = {name: 1 for name in rng.sample(POOL, rng.randint(0, 3))}
    if rng.random() < 0.2:
        kwargs["auto_extract"] = False
    if rng.random() < 0.2:
        kwargs["ignore_list"] = rng.sample(["a", "b", "c", "e"], rng.randint(1, 2))
    if rng.random() < 0.2:
        kwargs["revert_rebind"] = {"d": rng.choice(POOL + ["inst-0009.d"])}
    if kind is Candidates:  # a retry takes none of these
        for key in ("revert_rebind", "ignore_list", "inject"):
            kwargs.pop(key, None)
    return kind, kwargs


def _answer(kind, kwargs) -> tuple:
    try:
        atom = kind(name="atom", **kwargs)
    except (ValueError, TypeError) as exc:
        return ("error", type(exc).__name__, str(exc))
    return (list(atom.rebind.items()), list(atom.requires), list(atom.optional),
            list(atom.revert_rebind.items()), list(atom.revert_optional),
            list(atom.provides))


@pytest.mark.parametrize("seed", range(30))
def test_mappings_are_stock_mappings(seed):
    rng = random.Random(seed)
    cases = [_random_atom(rng, i) for i in range(60)]
    fast = [_answer(FAST[kind], kwargs) for kind, kwargs in cases]
    # The same shapes again, now answered from what was remembered.
    again = [_answer(FAST[kind], kwargs) for kind, kwargs in cases]
    stock = [_answer(kind, kwargs) for kind, kwargs in cases]
    assert fast == stock
    assert again == stock


def test_instances_of_one_shape_share_one_answer():
    fast_atoms._shapes.clear()
    atoms = [FastPlain(f"t{i}", rebind={"a": f"inst-{i:04d}.host"}, inject={"b": 2})
             for i in range(50)]
    assert len(fast_atoms._shapes) == 2  # execute's and revert's
    assert [list(t.requires) for t in atoms[:2]] == [["inst-0000.host", "d"],
                                                     ["inst-0001.host", "d"]]
    assert atoms[7].rebind["a"] == "inst-0007.host"


def test_a_value_that_meets_another_name_is_worked_out_by_stock():
    # "b" is injected: stock drops it from the requirements; a shared answer
    # made with a stand-in for it would keep the stand-in's replacement.
    t = FastPlain("t", rebind={"a": "b"}, inject={"b": 2})
    assert "b" not in t.requires
    u = FastPlain("u", rebind={"a": "x", "c": "x"})
    assert list(u.requires).count("x") == 1


@pytest.mark.parametrize("rebind", [None, {"a": "inst-1.host"}])
def test_answers_are_copies(rebind):
    first = FastPlain("t1", rebind=rebind)
    first.rebind["a"] = "changed"
    second = FastPlain("t2", rebind=rebind)
    assert second.rebind["a"] == (rebind or {"a": "a"})["a"]


def test_a_name_that_looks_like_a_stand_in_is_worked_out_by_stock():
    fast_atoms._shapes.clear()
    odd = fast_atoms._stand_in(0)
    t = FastPlain("t", rebind={"a": "inst-0001.host"}, inject={odd: 1})
    assert "inst-0001.host" in t.requires


def test_fleetflow_tasks_and_retries_are_fast_atoms():
    from fleetflow.flows.tasks.base import FleetRetry, FleetTask

    assert issubclass(FleetTask, FastAtom) and issubclass(FleetRetry, FastAtom)
    t = FastPlain("t", rebind={"a": "inst-0001.host"})
    assert all(isinstance(s, fast_atoms.OrderedSet)
               for s in (t.requires, t.optional, t.revert_optional, t.provides))
