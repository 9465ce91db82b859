"""``PlacementClient``: what claim tasks call, over the local store or any Placement.

Two implementations share one conflict protocol (the consumer-generation
protocol of OpenStack Placement 1.28):

- a first write says "I am the first writer" (``consumer_generation: null``);
- on a ``placement.concurrent_update`` 409 the client GETs the consumer's
  current allocations and generation, merges its own resources into them and
  PUTs again, at most ``max_retries`` times;
- a capacity 409 is final: :class:`errors.CapacityExceeded` is raised at once.

:class:`LocalPlacement` calls :class:`PlacementStore` in-process (provider
generation races are retried inside the store). :class:`HttpPlacement` talks
to any Placement endpoint (ours or OpenStack's); Placement retries provider
races itself, so only consumer conflicts reach the protocol.

Every write is idempotent: ``claim`` sets amounts rather than adding them, so
a task that runs twice (TaskFlow re-runs RUNNING atoms after a crash) leaves
the same allocations as one that ran once.
"""

from __future__ import annotations

import abc
import dataclasses
import logging

from fleetflow.persistence.placement import errors
from fleetflow.persistence.placement.allocations import ConsumerWrite

LOG = logging.getLogger(__name__)

Amounts = dict[str, dict[str, int]]  # {rp_uuid: {resource_class: used}}


# Consumers per POST /allocations when releasing many at once.
RELEASE_CHUNK = 500


@dataclasses.dataclass
class ConsumerAllocations:
    """A consumer's allocations; ``generation`` is None when it has none."""

    allocations: Amounts
    generation: int | None = None
    project_id: str | None = None
    user_id: str | None = None
    consumer_type: str | None = None

    @classmethod
    def from_placement(cls, body: dict) -> ConsumerAllocations:
        return cls({rp: dict(entry["resources"])
                    for rp, entry in (body.get("allocations") or {}).items()},
                   body.get("consumer_generation"), body.get("project_id"),
                   body.get("user_id"), body.get("consumer_type"))


def merge(current: Amounts, wanted: Amounts) -> Amounts:
    """``current`` with ``wanted``'s amounts set (not added): idempotent."""
    merged = {rp: dict(resources) for rp, resources in current.items()}
    for rp, resources in wanted.items():
        merged.setdefault(rp, {}).update(resources)
    return merged


class PlacementClient(abc.ABC):
    """Allocations of consumers (instances, migrations, volumes) on providers."""

    def __init__(self, max_retries: int = 10):
        self.max_retries = max_retries

    # -- primitives each backend provides -------------------------------------------
    @abc.abstractmethod
    def get_allocations(self, consumer: str) -> ConsumerAllocations:
        """The consumer's allocations and generation (empty, None when it has none)."""

    @abc.abstractmethod
    def write(self, writes: list[ConsumerWrite], fence: dict | None = None) -> None:
        """Replace the allocations of every consumer in ``writes``, all or nothing."""

    @abc.abstractmethod
    def usages(self, provider: str | None = None, project_id: str | None = None,
               user_id: str | None = None) -> dict[str, int]:
        """``{rc: used}`` of one provider, or of one project (and user)."""

    @abc.abstractmethod
    def usages_by_provider(self) -> dict[str, dict[str, int]]:
        """``{rp_uuid: {rc: used}}`` of every provider: the scheduler's view of usage."""

    @abc.abstractmethod
    def candidates(self, resources: dict[str, int], required=(),
                   limit: int | None = None) -> dict:
        """Placement's allocation candidates body (``allocation_requests``, summaries)."""

    # -- the protocol ------------------------------------------------------------------
    def _retrying(self, attempt_fn):
        """Run ``attempt_fn(attempt)`` until it stops losing generation races."""
        for attempt in range(self.max_retries + 1):
            try:
                return attempt_fn(attempt)
            except errors.ConcurrentUpdate:
                if attempt == self.max_retries:
                    raise
                LOG.debug("placement generation conflict, attempt %d: re-reading", attempt)
        raise AssertionError("unreachable")

    def claim(self, consumer: str, allocations: Amounts, project_id: str, user_id: str,
              fence: dict | None = None, consumer_type: str | None = None) -> Amounts:
        """Make the consumer hold (at least) ``allocations``; returns all it holds.

        Amounts on providers/classes not named are kept (merge-safe: several
        claim tasks may add resources to one instance).
        """
        known = ConsumerAllocations({})

        def attempt(n):
            nonlocal known
            if n:
                known = self.get_allocations(consumer)
            merged = merge(known.allocations, allocations)
            if n and merged == known.allocations:
                return merged  # an earlier run already claimed exactly this
            self.write([ConsumerWrite(consumer, merged, project_id, user_id,
                                      known.generation, consumer_type)], fence)
            return merged
        return self._retrying(attempt)

    def claim_many(self, claims: dict[str, Amounts], project_id: str, user_id: str,
                   fence: dict | None = None, consumer_type: str | None = None) -> None:
        """Claim for many consumers in one transaction (POST /allocations).

        The fast path assumes new consumers; after a conflict (a re-run where
        some already hold their claim) every consumer is re-read and merged.
        """
        def attempt(n):
            writes = []
            for consumer, wanted in claims.items():
                known = self.get_allocations(consumer) if n else ConsumerAllocations({})
                writes.append(ConsumerWrite(consumer, merge(known.allocations, wanted),
                                            project_id, user_id, known.generation,
                                            consumer_type))
            self.write(writes, fence)
        self._retrying(attempt)

    def claim_exactly(self, consumer: str, allocations: Amounts, project_id: str,
                      user_id: str, fence: dict | None = None,
                      consumer_type: str | None = None) -> None:
        """Make the consumer hold ``allocations`` and nothing else, in one write.

        For a claim whose consumer may hold a stray allocation elsewhere (an
        earlier try that a crash cut off before it was recorded): unlike
        :meth:`claim`, which merges, the stray one is dropped in the same write.
        """
        def decide(known):
            held = known[consumer]
            if held.allocations == allocations:
                return [], None
            return [ConsumerWrite(consumer, {rp: dict(r) for rp, r in allocations.items()},
                                  project_id, user_id, held.generation, consumer_type)], None
        self.read_then_write([consumer], decide, fence)

    def read_then_write(self, consumers: list[str], decide, fence: dict | None = None):
        """Read ``consumers``, let ``decide({consumer: ConsumerAllocations})`` answer
        ``(writes, result)``, write the writes (if any) and return ``result``.

        Re-run from the read when a generation race is lost. Here the read and
        the write are separate calls, as Placement's protocol has them; the
        local store does both in one transaction (LocalPlacement).
        """
        def attempt(_n):
            writes, result = decide({c: self.get_allocations(c) for c in consumers})
            if writes:
                self.write(writes, fence)
            return result
        return self._retrying(attempt)

    def release(self, consumer: str, providers=None, fence: dict | None = None) -> bool:
        """Drop the consumer's allocations (only on ``providers`` when given).

        Uses the safe delete (``allocations: {}`` with the generation read), so
        a concurrent writer's change is never lost silently. Returns False when
        there was nothing to drop.
        """
        drop = set(providers) if providers is not None else None

        def decide(known):
            held = known[consumer]
            keep = {rp: r for rp, r in held.allocations.items()
                    if drop is not None and rp not in drop}
            if keep == held.allocations:
                return [], False
            return [ConsumerWrite(consumer, keep, held.project_id, held.user_id,
                                  held.generation, held.consumer_type)], True
        return self.read_then_write([consumer], decide, fence)

    def release_many(self, consumers: list[str], fence: dict | None = None) -> int:
        """:meth:`release` of many consumers in one POST /allocations; how many held any.

        Chunked, so one request stays a reasonable size; each chunk is all or
        nothing, and running it again drops what is left.
        """
        dropped = 0
        for start in range(0, len(consumers), RELEASE_CHUNK):
            chunk = consumers[start:start + RELEASE_CHUNK]

            def decide(known):
                writes = [ConsumerWrite(c, {}, held.project_id, held.user_id, held.generation,
                                        held.consumer_type)
                          for c, held in known.items() if held.allocations]
                return writes, len(writes)
            dropped += self.read_then_write(chunk, decide, fence)
        return dropped

    def move(self, instance: str, migration: str, destination: Amounts, project_id: str,
             user_id: str, fence: dict | None = None) -> Amounts:
        """Hand the instance's allocations to ``migration``; give it ``destination``.

        One POST /allocations, both consumer generations checked. Re-running it
        changes nothing once the instance holds ``destination``, also after
        :meth:`confirm_move` dropped the migration consumer (a re-run then must
        not hand the destination to a new migration consumer: it would count
        twice). Returns the source allocations the migration consumer holds.
        """
        def decide(known):
            inst, mig = known[instance], known[migration]
            if inst.allocations == destination:
                return [], mig.allocations
            source = mig.allocations or inst.allocations
            return [
                ConsumerWrite(migration, source, project_id, user_id, mig.generation,
                              "MIGRATION"),
                ConsumerWrite(instance, destination, project_id, user_id, inst.generation),
            ], source
        return self.read_then_write([instance, migration], decide, fence)

    def revert_move(self, instance: str, migration: str, fence: dict | None = None) -> bool:
        """Give the instance back what the migration consumer holds, in one write.

        False, writing nothing, when the migration consumer holds nothing: the
        move never claimed, was reverted already, or was confirmed.
        """
        def decide(known):
            inst, mig = known[instance], known[migration]
            if not mig.allocations:
                return [], False
            return [
                ConsumerWrite(instance, mig.allocations, mig.project_id or inst.project_id,
                              mig.user_id or inst.user_id, inst.generation,
                              inst.consumer_type),
                ConsumerWrite(migration, {}, mig.project_id, mig.user_id, mig.generation,
                              "MIGRATION"),
            ], True
        return self.read_then_write([instance, migration], decide, fence)

    def confirm_move(self, migration: str, fence: dict | None = None) -> bool:
        """Drop the source allocations the migration consumer held (the move is done)."""
        return self.release(migration, fence=fence)


class LocalPlacement(PlacementClient):
    """The placement store of the fleetflow database, in-process."""

    def __init__(self, store, max_retries: int | None = None):
        super().__init__(store.max_retries if max_retries is None else max_retries)
        self.store = store

    def get_allocations(self, consumer: str) -> ConsumerAllocations:
        return ConsumerAllocations.from_placement(self.store.get_allocations(consumer))

    def write(self, writes, fence=None) -> None:
        self.store.set_allocations(writes, fence)

    def read_then_write(self, consumers, decide, fence=None):
        # One transaction for the read and the write: a move or a release is
        # one write lock instead of two reads and a write (on PostgreSQL the
        # write's generation check still catches a concurrent writer).
        def attempt(_n):
            return self.store.read_then_write(consumers, decide, fence)
        return self._retrying(attempt)

    def usages(self, provider=None, project_id=None, user_id=None) -> dict[str, int]:
        if provider is not None:
            return self.store.provider_usages(provider)[1]
        totals: dict[str, int] = {}
        for usage in self.store.project_usages(project_id, user_id).values():
            for rc, used in usage.items():
                if rc != "consumer_count":
                    totals[rc] = totals.get(rc, 0) + used
        return totals

    def usages_by_provider(self) -> dict[str, dict[str, int]]:
        return self.store.usages_by_provider()

    def candidates(self, resources, required=(), limit=None) -> dict:
        return self.store.allocation_candidates(resources, list(required), limit)


def from_conf(conf, database=None) -> PlacementClient:
    """The client ``[placement] backend`` asks for."""
    if conf.placement.backend == "http":
        from fleetflow.persistence.placement.http_client import HttpPlacement

        return HttpPlacement(conf.placement.endpoint, conf.placement.token,
                             max_retries=conf.placement.max_retries, database=database)
    from fleetflow.persistence.db import get_database
    from fleetflow.persistence.placement.store import PlacementStore

    store = PlacementStore(database or get_database(conf), conf.placement.max_retries)
    return LocalPlacement(store)
