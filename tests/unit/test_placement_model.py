"""The placement store against a pure-Python model of its rules (hypothesis).

The model knows capacity ((total - reserved) * allocation_ratio), min_unit /
max_unit / step_size, consumer generations (null = first writer; an emptied
consumer keeps its row and generation), provider generations (bumped by every
inventory or allocation change), and which 409 each failure must raise. After
every step the store's visible state must equal the model's.
"""

from __future__ import annotations

import copy
import uuid

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from fleetflow.persistence.db import Database
from fleetflow.persistence.placement import errors
from fleetflow.persistence.placement.allocations import ConsumerWrite
from fleetflow.persistence.placement.models import (
    Allocation,
    Consumer,
    Inventory,
    ProviderTrait,
    ResourceProvider,
)
from fleetflow.persistence.placement.store import PlacementStore

RPS = [str(uuid.UUID(int=i + 1)) for i in range(2)]
CONSUMERS = [str(uuid.UUID(int=100 + i)) for i in range(4)]
CLASSES = ["VCPU", "DISK_GB"]
INITIAL = {
    # Small capacities so that two or three consumers reach them: (4 - 1) * 1.5 = 4.5
    # truncates to 4, as Placement's int() does.
    RPS[0]: {"VCPU": dict(total=4, reserved=1, min_unit=1, max_unit=3, step_size=1,
                          allocation_ratio=1.5),
             "DISK_GB": dict(total=30, reserved=0, min_unit=10, max_unit=30,
                             step_size=10, allocation_ratio=1.0)},
    RPS[1]: {"VCPU": dict(total=4, reserved=0, min_unit=1, max_unit=4, step_size=2,
                          allocation_ratio=1.0),
             "DISK_GB": dict(total=20, reserved=5, min_unit=5, max_unit=15, step_size=5,
                             allocation_ratio=2.0)},
}

_database = None


def database() -> Database:
    """One in-memory database for every example; each example empties it first."""
    global _database
    if _database is None:
        _database = Database("sqlite://")
        _database.upgrade()
    return _database


def capacity(inv) -> int:
    return int((inv["total"] - inv["reserved"]) * inv["allocation_ratio"])


class Model:
    """What the store must do, in plain Python."""

    def __init__(self):
        self.inventories = copy.deepcopy(INITIAL)
        self.rp_generation = {rp: 1 for rp in RPS}
        self.consumer_generation: dict[str, int] = {}  # rows, emptied ones included
        self.allocations: dict[str, dict] = {}  # consumer -> {rp: {rc: n}}

    def usage(self, rp, rc, without=()) -> int:
        return sum(a.get(rp, {}).get(rc, 0) for c, a in self.allocations.items()
                   if c not in without)

    def expected_error(self, writes):
        """The exception class the store must raise for ``writes``, or None."""
        for w in writes:
            has = bool(self.allocations.get(w.consumer_uuid))
            row = self.consumer_generation.get(w.consumer_uuid)
            if w.generation is None:
                if has:
                    return errors.ConsumerGenerationConflict
            elif row is None or row != w.generation:
                return errors.ConsumerGenerationConflict
        for w in writes:
            for rp, resources in w.allocations.items():
                for rc, used in resources.items():
                    inv = self.inventories[rp].get(rc)
                    if inv is None:
                        return errors.CapacityExceeded
                    if used < inv["min_unit"] or used > inv["max_unit"] \
                            or used % inv["step_size"]:
                        return errors.ConstraintViolated
        replaced = {w.consumer_uuid for w in writes}
        for w in writes:
            for rp, resources in w.allocations.items():
                for rc in resources:
                    total = self.usage(rp, rc, replaced) + sum(
                        x.allocations.get(rp, {}).get(rc, 0) for x in writes)
                    if total > capacity(self.inventories[rp][rc]):
                        return errors.CapacityExceeded
        return None

    def apply(self, writes, delete: bool = False):
        # As Placement: the providers the new allocations name gain a generation, and
        # so do those of a consumer written empty; a DELETE bumps none, and a provider
        # a consumer only moves away from keeps its own.
        gaining = set()
        for w in writes:
            gaining |= set(w.allocations)
            if not w.allocations and not delete:
                gaining |= set(self.allocations.get(w.consumer_uuid, {}))
            if w.consumer_uuid in self.consumer_generation:
                self.consumer_generation[w.consumer_uuid] += 1
            elif w.allocations:
                self.consumer_generation[w.consumer_uuid] = 1
            self.allocations[w.consumer_uuid] = copy.deepcopy(w.allocations)
        for rp in gaining:
            self.rp_generation[rp] += 1


# Mostly valid amounts (so capacity is what decides), some that break a unit rule.
AMOUNTS = {"VCPU": st.sampled_from([1, 2, 2, 3, 4]),
           "DISK_GB": st.sampled_from([5, 10, 10, 15, 20, 30])}
amounts = st.sets(st.sampled_from(CLASSES), min_size=1).flatmap(
    lambda rcs: st.fixed_dictionaries({rc: AMOUNTS[rc] for rc in sorted(rcs)}))
allocation_sets = st.dictionaries(st.sampled_from(RPS), amounts, max_size=2)
# Mostly the right generation, so that writes get far enough to test capacity.
generation_choices = st.sampled_from(["current", "current", "current", "null", "stale"])


class PlacementMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.db = database()
        with self.db.session() as session:
            for model in (Allocation, Consumer, ProviderTrait, Inventory, ResourceProvider):
                session.execute(sa.delete(model))
        self.store = PlacementStore(self.db, max_retries=3)
        for i, rp in enumerate(RPS):
            self.store.create_provider(f"rp-{i}", rp)
            self.store.set_inventories(rp, 0, INITIAL[rp])
        self.model = Model()

    def _generation(self, consumer, choice, stale_by):
        row = self.model.consumer_generation.get(consumer)
        if choice == "null":
            return None
        if choice == "current":
            return row
        return (row or 0) + stale_by

    def _attempt(self, writes):
        expected = self.model.expected_error(writes)
        try:
            self.store.set_allocations(copy.deepcopy(writes))
        except errors.PlacementConflict as exc:
            assert expected is not None and isinstance(exc, expected), (expected, exc)
            assert exc.status == 409
            assert exc.code == expected.code
            return
        assert expected is None, f"store accepted a write the model refuses: {expected}"
        self.model.apply(writes)
        self._check_visible(w.consumer_uuid for w in writes)

    @initialize(first=st.lists(allocation_sets, min_size=1, max_size=3))
    def prefill(self, first):
        """Start most examples with allocations, so capacity limits are near."""
        for consumer, allocations in zip(CONSUMERS, first, strict=False):
            self._attempt([ConsumerWrite(consumer, allocations, "p", "u", None)])

    @rule(consumer=st.sampled_from(CONSUMERS), allocations=allocation_sets,
          choice=generation_choices, stale_by=st.sampled_from([-1, 1, 2]))
    def put(self, consumer, allocations, choice, stale_by):
        generation = self._generation(consumer, choice, stale_by)
        self._attempt([ConsumerWrite(consumer, allocations, "p", "u", generation)])

    @rule(pair=st.lists(st.sampled_from(CONSUMERS), min_size=2, max_size=2, unique=True),
          first=allocation_sets, second=allocation_sets,
          choices=st.tuples(generation_choices, generation_choices))
    def post(self, pair, first, second, choices):
        writes = [ConsumerWrite(c, a, "p", "u", self._generation(c, ch, 1))
                  for c, a, ch in zip(pair, (first, second), choices, strict=True)]
        self._attempt(writes)

    @rule(consumer=st.sampled_from(CONSUMERS))
    def delete(self, consumer):
        if not self.model.allocations.get(consumer):
            with pytest.raises(errors.ConsumerNotFound):
                self.store.delete_allocations(consumer)
            return
        self.store.delete_allocations(consumer)
        self.model.apply([ConsumerWrite(consumer, {}, "p", "u", None)], delete=True)
        self._check_visible([consumer])

    @rule(rp=st.sampled_from(RPS), rc=st.sampled_from(CLASSES),
          total=st.sampled_from([None, 2, 4, 20, 30]), stale=st.booleans())
    def set_inventory(self, rp, rc, total, stale):
        wanted = copy.deepcopy(self.model.inventories[rp])
        if total is None:
            wanted.pop(rc, None)
        else:
            wanted[rc] = dict(total=total, reserved=0, min_unit=1, max_unit=total,
                              step_size=1, allocation_ratio=1.0)
        generation = self.model.rp_generation[rp] - (1 if stale else 0)
        try:
            self.store.set_inventories(rp, generation, wanted)
        except errors.ProviderGenerationConflict:
            assert stale
            return
        except errors.InventoryInUse as exc:
            assert not stale and exc.code == "placement.inventory.inuse"
            assert total is None and self.model.usage(rp, rc) > 0
            return
        assert not stale and not (total is None and self.model.usage(rp, rc) > 0)
        self.model.inventories[rp] = wanted
        self.model.rp_generation[rp] += 1

    def _check_visible(self, consumers):
        """What GET /allocations/{consumer} would show equals the model."""
        for consumer in consumers:
            body = self.store.get_allocations(consumer)
            wanted = self.model.allocations.get(consumer) or {}
            assert {rp: e["resources"] for rp, e in body["allocations"].items()} == wanted
            if wanted:
                assert body["consumer_generation"] == self.model.consumer_generation[consumer]
                assert {e["generation"] for e in body["allocations"].values()} <= set(
                    self.model.rp_generation.values())
            else:
                assert "consumer_generation" not in body

    @invariant()
    def tables_match_model(self):
        # Raw rows in one read transaction: cheap enough to run after every step.
        with self.db.session() as session:
            rows = session.execute(sa.select(
                Allocation.consumer_uuid, Allocation.resource_provider_uuid,
                Allocation.resource_class, Allocation.used)).all()
            consumers = dict(session.execute(sa.select(Consumer.uuid,
                                                       Consumer.generation)).all())
            generations = dict(session.execute(sa.select(
                ResourceProvider.uuid, ResourceProvider.generation)).all())
        held: dict = {}
        for consumer, rp, rc, used in rows:
            held.setdefault(consumer, {}).setdefault(rp, {})[rc] = used
        assert held == {c: a for c, a in self.model.allocations.items() if a}
        assert consumers == self.model.consumer_generation
        assert generations == self.model.rp_generation


PlacementMachine.TestCase.settings = settings(
    max_examples=200, stateful_step_count=12, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
TestPlacementModel = pytest.mark.slow(PlacementMachine.TestCase)
