"""The fleetflow engine's storage, remembering injected values, fetches what stock fetches."""

from __future__ import annotations

import random

import pytest
from taskflow import engines as tf_engines
from taskflow import retry, task
from taskflow import storage as tf_storage
from taskflow.patterns import linear_flow, unordered_flow

from fleetflow.plugin import fetch

NAMES = ["p", "q", "r", "s"]


class TakesTwo(task.Task):
    def execute(self, p, q=None):
        return {"from": self.name, "p": p}

    def revert(self, p, r, **kwargs):
        return None


class PassRetry(retry.AlwaysRevert):
    def execute(self, history, p=None):
        return f"{self.name}-chosen"


def _flow(seed: int):
    """Instances with retries in an unordered flow; names provided by atoms, injected
    into the flow's store and into single atoms, at random."""
    r = random.Random(seed)

    def provides():
        return r.choice([None, *NAMES])

    def inject():
        return {r.choice(NAMES): f"atom-injected-{r.random()}"} if r.random() < 0.2 else None

    top = linear_flow.Flow("top")
    top.add(TakesTwo("first", rebind={"p": r.choice(NAMES), "q": r.choice(NAMES)},
                     provides=provides(), inject=inject()))
    instances = unordered_flow.Flow("instances")
    for i in range(r.randint(1, 4)):
        chain = linear_flow.Flow(f"i{i}", retry=PassRetry(f"i{i}-retry", provides=f"i{i}.x"))
        for step in range(r.randint(1, 3)):
            chain.add(TakesTwo(f"i{i}-{step}",
                               rebind={"p": r.choice([f"i{i}.x", *NAMES]), "q": r.choice(NAMES)},
                               revert_rebind={"r": r.choice(NAMES)}, provides=provides(),
                               inject=inject()))
        instances.add(chain)
    top.add(instances)
    return top


def _answers(storage, atoms, fetch) -> list:
    answers = []
    for atom in atoms:
        for mapping, optional in ((atom.rebind, atom.optional),
                                  (atom.revert_rebind, atom.revert_optional)):
            try:
                answers.append(fetch(storage, mapping, atom_name=atom.name,
                                     optional_args=optional))
            except Exception as exc:  # noqa: BLE001 - the error is the answer compared
                answers.append((type(exc).__name__, str(exc)))
    return answers


def _compare(storage, atoms) -> None:
    patched = _answers(storage, atoms, fetch.fetch_mapped_args)
    # Twice: the second time from what the first remembered.
    again = _answers(storage, atoms, fetch.fetch_mapped_args)
    stock = _answers(storage, atoms, tf_storage.Storage.fetch_mapped_args)
    assert patched == stock
    assert again == stock
    for mine, theirs in zip(again, stock, strict=True):
        if isinstance(theirs, dict):  # the very objects stock hands out, not copies
            assert all(mine[k] is theirs[k] for k in theirs)


@pytest.mark.parametrize("seed", range(30))
def test_fetched_arguments_are_stocks(seed):
    pick = random.Random(seed * 13)
    store = {name: {"stored": name} for name in NAMES if pick.random() < 0.6}
    engine = tf_engines.load(_flow(seed), store=store, engine="fleetflow-parallel")
    engine.compile()
    engine.prepare()
    storage = engine.storage
    atoms = [node for node in engine.compilation.execution_graph.nodes
             if hasattr(node, "rebind")]
    _compare(storage, atoms)  # before anything ran: atom providers have no results
    try:
        engine.run()
    except Exception:  # noqa: BLE001 - some seeds leave a name unprovided
        pass
    _compare(storage, atoms)
    # Values injected later win over atoms' results and replace earlier ones.
    storage.inject({name: {"injected-later": name} for name in NAMES})
    _compare(storage, atoms)
    storage.inject({"p": "transient"}, transient=True)
    _compare(storage, atoms)


def test_a_new_injection_is_seen_after_values_were_remembered():
    engine = tf_engines.load(linear_flow.Flow("f").add(TakesTwo("t", rebind={"p": "s"})),
                             store={"s": "first", "r": 1}, engine="fleetflow-parallel")
    engine.compile()
    engine.prepare()
    fetch_args = engine.storage.fetch_mapped_args
    assert fetch_args({"p": "s"}, atom_name="t") == {"p": "first"}
    engine.storage.inject({"s": "second"})
    assert fetch_args({"p": "s"}, atom_name="t") == {"p": "second"}


class Gives(task.Task):
    def execute(self):
        return f"from {self.name}"


class Uses(task.Task):
    def execute(self, v):
        return v


def test_a_name_atoms_provide_is_found_in_each_atoms_own_scope():
    # Both chains provide "v": each user must get its own chain's, every time.
    chains = [linear_flow.Flow(f"c{i}").add(Gives(f"give{i}", provides="v"), Uses(f"use{i}"))
              for i in range(2)]
    engine = tf_engines.load(linear_flow.Flow("f").add(unordered_flow.Flow("u").add(*chains)),
                             engine="fleetflow-parallel")
    engine.run()
    fetch_args = engine.storage.fetch_mapped_args
    for _ in range(2):
        assert [fetch_args({"v": "v"}, atom_name=f"use{i}") for i in range(2)] == [
            {"v": "from give0"}, {"v": "from give1"}]
