"""``PlacementStore``: the placement database API, one transaction per call.

Each method opens its own transaction (``Database.session()``); a write that
lost a provider-generation race is retried from scratch (a fresh transaction
reads fresh generations), up to ``max_retries`` times. Consumer-generation
conflicts are the caller's to resolve and are raised at once.
"""

from __future__ import annotations

import logging
import time

import sqlalchemy as sa

from fleetflow.persistence.placement import allocation_reads, candidates, providers
from fleetflow.persistence.placement import allocations as allocs
from fleetflow.persistence.placement.allocations import ConsumerWrite
from fleetflow.persistence.placement.snapshot import SnapshotCache

LOG = logging.getLogger(__name__)

# PostgreSQL's deadlock and serialization failures; SQLite's busy database.
RETRYABLE_SQLSTATES = {"40P01", "40001"}


def _retryable(exc: sa.exc.DBAPIError) -> bool:
    """True for a database error that a fresh transaction may not meet again."""
    sqlstate = getattr(exc.orig, "sqlstate", None)
    return sqlstate in RETRYABLE_SQLSTATES or "database is locked" in str(exc.orig)


class PlacementStore:
    """Resource providers, inventories, traits and allocations in ``database``."""

    def __init__(self, database, max_retries: int = 10):
        self.database = database
        self.max_retries = max_retries
        self.snapshots = SnapshotCache()

    # -- helpers -------------------------------------------------------------
    def _read(self, fn, *args, **kwargs):
        with self.database.session() as session:
            return fn(session, *args, **kwargs)

    def _write(self, fn, *args, **kwargs):
        """Run ``fn`` in a transaction, retrying lost provider races."""
        for attempt in range(self.max_retries + 1):
            try:
                with self.database.session() as session:
                    return fn(session, *args, **kwargs)
            except allocs.LostRace as race:
                if attempt == self.max_retries:
                    raise race.error from None
                LOG.debug("placement write lost a race (attempt %d): %s", attempt, race)
            except sa.exc.DBAPIError as exc:
                if attempt == self.max_retries or not _retryable(exc):
                    raise
                LOG.warning("placement write retried after %s", exc.orig)
            # A tiny, growing pause lets the winner finish before we re-read.
            time.sleep(0.001 * (attempt + 1))
        raise AssertionError("unreachable")

    def read_only(self, fn, *args, **kwargs):
        """``fn(session, *args, **kwargs)`` in a read-only transaction that blocks no writer."""
        with self.database.read_session() as session:
            return fn(session, *args, **kwargs)

    def in_transaction(self, fn, *args, **kwargs):
        """``fn(session, *args, **kwargs)`` in one transaction (catalogue reads and writes)."""
        return self._read(fn, *args, **kwargs)

    # -- providers -------------------------------------------------------------
    def create_provider(self, name: str, uuid: str | None = None,
                        parent_provider_uuid: str | None = None) -> dict:
        return providers.provider_dict(self._read(
            providers.create_provider, name, uuid, parent_provider_uuid))

    def get_provider(self, uuid: str) -> dict:
        return providers.provider_dict(self._read(providers.get_provider, uuid))

    def list_providers(self, *, name=None, uuid=None, in_tree=None, resources=None,
                       required=None) -> list[dict]:
        """Providers, optionally only those with room for ``resources`` and traits."""
        def query(session):
            rows = providers.list_providers(session, name=name, uuid=uuid, in_tree=in_tree)
            if resources or required:
                any_of, forbidden = candidates.parse_required(required or ())
                fit, *_ = candidates.matching_providers(session, resources or {}, any_of,
                                                        forbidden)
                keep = {row.uuid for row in fit}
                rows = [row for row in rows if row.uuid in keep]
            return [providers.provider_dict(row) for row in rows]
        return self._read(query)

    def update_provider(self, uuid: str, name: str, parent_provider_uuid=None,
                        allow_reparenting: bool = False) -> dict:
        return providers.provider_dict(self._read(
            providers.update_provider, uuid, name, parent_provider_uuid, allow_reparenting))

    def delete_provider(self, uuid: str) -> None:
        self._read(providers.delete_provider, uuid)

    # -- inventories and traits --------------------------------------------------
    def get_inventories(self, uuid: str) -> tuple[int, dict]:
        return self._read(providers.get_inventories, uuid)

    def set_inventories(self, uuid: str, generation: int, inventories: dict,
                        fence: dict | None = None) -> tuple[int, dict]:
        def write(session):
            allocs.fences.check(session, fence)
            return providers.set_inventories(session, uuid, generation, inventories)
        return self._read(write)

    def list_traits(self) -> list[str]:
        return self._read(providers.list_traits)

    def ensure_traits(self, names) -> None:
        self._read(providers.ensure_traits, names)

    def get_traits(self, uuid: str) -> tuple[int, list[str]]:
        return self._read(providers.get_traits, uuid)

    def set_traits(self, uuid: str, generation: int, traits,
                   fence: dict | None = None) -> tuple[int, list[str]]:
        def write(session):
            allocs.fences.check(session, fence)
            return providers.set_traits(session, uuid, generation, traits)
        return self._read(write)

    # -- allocations -------------------------------------------------------------
    def get_allocations(self, consumer_uuid: str) -> dict:
        """Placement's GET /allocations/{consumer} body (no generation when empty)."""
        return self._read(allocation_reads.get_allocations, consumer_uuid)

    def put_allocations(self, consumer_uuid: str, allocations: dict, project_id: str,
                        user_id: str, generation=None, consumer_type: str | None = None,
                        fence: dict | None = None) -> None:
        """Replace one consumer's allocations ``{rp: {rc: used}}``.

        ``generation``: None = "first writer", an int = the one last read,
        ``ANY_GENERATION`` = no check. ``{}`` empties the consumer.
        """
        self.set_allocations([ConsumerWrite(consumer_uuid, allocations, project_id, user_id,
                                            generation, consumer_type)], fence)

    def read_then_write(self, consumers: list[str], decide, fence: dict | None = None):
        """In one transaction: read ``consumers``' allocations, let ``decide`` answer
        ``(writes, result)``, write them; returns ``result`` (PlacementClient's moves)."""
        from fleetflow.persistence.placement.client import ConsumerAllocations

        def write(session):
            known = {c: ConsumerAllocations.from_placement(body)
                     for c, body in allocation_reads.get_many(session, consumers).items()}
            writes, result = decide(known)
            if writes:
                allocs.replace_allocations(session, writes, fence)
            return result
        return self._write(write)

    def set_allocations(self, writes: list[ConsumerWrite], fence: dict | None = None) -> None:
        """Replace several consumers' allocations in one transaction (POST /allocations)."""
        self._write(allocs.replace_allocations, writes, fence)

    def claim_many(self, claims, project_id: str, user_id: str,
                   fence: dict | None = None, consumer_type: str | None = None) -> None:
        """Fast path: first allocations of many new consumers, all or nothing.

        ``claims`` maps consumer uuid -> ``{rp: {rc: used}}``. Any consumer that
        already has allocations fails the whole call (ConsumerGenerationConflict).
        """
        self.set_allocations([ConsumerWrite(c, a, project_id, user_id, None, consumer_type)
                              for c, a in claims.items()], fence)

    def reshape(self, inventories: dict[str, tuple[int, dict]], writes: list[ConsumerWrite],
                fence: dict | None = None) -> None:
        """Replace inventories and allocations of several providers in one transaction."""
        from fleetflow.persistence.placement import reshaper

        self._write(reshaper.reshape, inventories, writes, fence)

    def delete_allocations(self, consumer_uuid: str, fence: dict | None = None) -> None:
        """Drop every allocation of a consumer; ConsumerNotFound when it has none."""
        self._write(allocs.release_allocations, consumer_uuid, fence)

    def provider_allocations(self, uuid: str) -> tuple[int, dict]:
        def query(session):
            row = providers.get_provider(session, uuid)
            return row.generation, allocation_reads.provider_allocations(session, uuid)
        return self._read(query)

    # -- usages and candidates -------------------------------------------------------
    def usages_by_provider(self) -> dict[str, dict[str, int]]:
        """``{rp_uuid: {rc: used}}`` of every provider with allocations, in one query."""
        return self._read(allocs.usages_by_provider)

    def provider_usages(self, uuid: str) -> tuple[int, dict[str, int]]:
        """(generation, ``{rc: used}``), every inventoried class included."""
        def query(session):
            generation, inventories = providers.get_inventories(session, uuid)
            used = allocs.usages_by_provider(session, [uuid]).get(uuid, {})
            return generation, {rc: used.get(rc, 0) for rc in sorted(set(inventories) | set(used))}
        return self._read(query)

    def project_usages(self, project_id: str, user_id: str | None = None,
                       consumer_type: str | None = None) -> dict:
        return self._read(allocation_reads.project_usages, project_id, user_id, consumer_type)

    def allocation_candidates(self, resources: dict[str, int], required=(),
                              limit: int | None = None) -> dict:
        any_of, forbidden = candidates.parse_required(required)
        return self._read(candidates.allocation_candidates, resources, any_of, forbidden,
                          limit)
