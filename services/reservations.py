"""Reservations (and the deletion of one server), turned into rows and flow jobs.

The API and the CLI call :class:`ReservationOps` (the API's service
``reservations``); it validates a request against the database, writes the
domain rows and the intent to run their flow in one transaction, and the flow
is posted once it commits (engine/submit.py). It never waits for a flow:
status is read back from the rows (:func:`list_page`, :func:`show`).

A request is a :class:`ReservationRequest`; its ``on_error`` is one of
``ON_ERROR_CHOICES`` (``ON_ERROR_REVERT`` by default), which the API's schema
offers as they are.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa

from fleetflow.common import ids, states
from fleetflow.common.exceptions import Conflict, InvalidInput, NotFound
from fleetflow.flows import keys
from fleetflow.persistence import evacuations as evac_rows
from fleetflow.persistence import groups as group_rows
from fleetflow.persistence import intents, paging
from fleetflow.persistence import queue as queue_rows
from fleetflow.persistence import reservations as rows
from fleetflow.persistence.models import Flavor, Image, Instance, Reservation
from fleetflow.plugin.flow_meta import ON_ERROR_CHOICES, ON_ERROR_PAUSE, ON_ERROR_REVERT
from fleetflow.services import servers, volumes
from fleetflow.services.final_progress import FinalProgress
from fleetflow.services.queue import limits as queue_limits

PROVISION = "provision"
TEARDOWN = "reservation-teardown"

# submit(flow_name, flow_kwargs, store=, tenant_id=, on_error=, flow_id=, session=) -> flow id
Submitter = Callable[..., str]


@dataclasses.dataclass
class ReservationRequest:
    """A validated reservation body (the API's schema made it; this checks the cloud)."""

    tenant_id: str
    user_id: str | None
    flavor_ref: str
    image_ref: str
    min_count: int
    max_count: int
    name: str | None = None
    capabilities: dict[str, str] = dataclasses.field(default_factory=dict)
    group_id: str | None = None
    policy: str = states.ALL_OR_NOTHING
    volume_gb: int | None = None
    # The provision flow's on_error: revert, or pause for an operator.
    on_error: str = ON_ERROR_REVERT
    # Not fitting now: fail (NO_VALID_HOST) or wait in the queue (docs/queue.md).
    when_full: str = states.WHEN_FULL_FAIL
    queue_timeout: float | None = None
    priority: int = 0
    # Metadata of each of its servers (docs/recovery.md reads ha, recovery ...).
    metadata: dict[str, str] = dataclasses.field(default_factory=dict)


def resolve_flavor(session, ref: str) -> Flavor:
    flavor = session.get(Flavor, str(ref)) or session.execute(
        sa.select(Flavor).where(Flavor.name == ref)).scalar_one_or_none()
    if flavor is None:
        raise InvalidInput(f"flavor_ref: no flavor named or numbered {ref!r}",
                           field="flavor_ref")
    return flavor


def resolve_image(session, ref: str) -> Image:
    image = session.get(Image, str(ref)) or session.execute(
        sa.select(Image).where(Image.name == ref)).scalar_one_or_none()
    if image is None:
        raise InvalidInput(f"image_ref: no image named or with id {ref!r}", field="image_ref")
    return image


def list_page(database, tenant_id: str, *, limit: int, marker: str | None = None,
              status: str | None = None) -> tuple[list[tuple[Reservation, dict]], bool]:
    """``(page, more)``: the project's reservations newest first, each with its progress.

    ``status`` filters; the marker must be a reservation of the project
    (InvalidInput naming ``marker`` otherwise).
    """
    scope = (Reservation.tenant_id == tenant_id,)
    stmt = sa.select(Reservation).where(*scope)
    if status:
        stmt = stmt.where(Reservation.status == status)
    # A read: clients poll the list while reservations build, and must not queue
    # behind (nor hold back) their writes.
    final = _final_progress.setdefault(id(database), FinalProgress())
    with database.read_session() as session:
        page, more = paging.newest_first(session, stmt, Reservation, limit, marker, scope)
        known = final.known(r.id for r in page if r.status == states.DELETED)
        progress = rows.progress_by_reservation(
            session, [r.id for r in page if r.id not in known])
    final.remember({r.id: progress[r.id] for r in page
                    if r.status == states.DELETED and r.id in progress})
    progress.update(known)
    return [(r, dict(progress[r.id])) for r in page], more


def show(database, tenant_id: str, reservation_id: str, *, instance_limit: int | None = None,
         instance_marker: str | None = None) -> tuple[sa.Row, dict, list[dict], bool]:
    """``(reservation, progress, instances, more)`` of the project's reservation (NotFound
    otherwise): its shown columns (:func:`persistence.reservations.shown`), and
    ``instances`` as :func:`persistence.reservations.instance_views` reads them.

    ``instance_limit``: at most that many instances, after the instance
    ``instance_marker`` (InvalidInput naming it when the reservation has no such
    instance); ``more`` says whether instances follow. 0 reads no instance: the
    summary that clients poll while a reservation builds. None: every instance.
    """
    with database.read_session() as session:
        reservation = rows.shown(session, reservation_id, tenant_id)
        progress = _progress(session, database, reservation)
        if instance_limit is None:
            return reservation, progress, rows.instance_views(session, reservation_id), False
        if instance_limit == 0:
            return reservation, progress, [], False
        page, more = rows.instance_view_page(session, reservation_id, instance_limit,
                                             instance_marker)
        return reservation, progress, page, more


# The list's DELETED reservations, counted once (services/final_progress.py), by
# database: a process may open more than one.
_final_progress: dict[int, FinalProgress] = {}

# A building reservation's progress is a count over every one of its instance
# rows; the clients polling it (eight, ten times a second each) share one count
# per PROGRESS_MAX_AGE seconds instead of each paying for it. A settled
# reservation's progress is always counted afresh: it is final.
PROGRESS_MAX_AGE = 0.1
_progress_seen: dict[tuple[int, str], tuple[float, dict]] = {}


def _progress(session, database, reservation) -> dict:
    if reservation.status in states.SETTLED:
        return rows.progress(session, reservation.id)
    key, now = (id(database), reservation.id), time.monotonic()
    seen = _progress_seen.get(key)
    if seen is not None and now - seen[0] < PROGRESS_MAX_AGE:
        return dict(seen[1])
    progress = rows.progress(session, reservation.id)
    if len(_progress_seen) > 1024:
        _progress_seen.clear()
    _progress_seen[key] = (now, progress)
    return dict(progress)


def queue_position(database, reservation) -> dict | None:
    """Where a QUEUED reservation stands (services/queue/views.py); None otherwise."""
    if reservation.status != states.QUEUED:
        return None
    from fleetflow.services.queue import views

    with database.read_session() as session:
        return views.entry_view(session, queue_rows.KIND_RESERVATION, reservation.id)


class ReservationOps:
    """Entry points for reservations and for deleting one server; one per process."""

    def __init__(self, conf, database, submit: Submitter):
        self.conf = conf
        self.database = database
        self.submit = intents.joining(submit)

    # -- reservations ------------------------------------------------------------
    def _check(self, session, req: ReservationRequest):
        if req.max_count > self.conf.api.max_reservation_count:
            raise InvalidInput(f"count: at most {self.conf.api.max_reservation_count} "
                               "instances per reservation", field="count")
        if not 1 <= req.min_count <= req.max_count:
            raise InvalidInput("min_count: must be between 1 and max_count",
                               field="min_count")
        if req.policy not in states.FAILURE_POLICIES:
            raise InvalidInput(f"policy: one of {', '.join(states.FAILURE_POLICIES)}",
                               field="policy")
        if req.on_error not in ON_ERROR_CHOICES:
            raise InvalidInput(f"on_error: one of {', '.join(ON_ERROR_CHOICES)}",
                               field="on_error")
        queue_limits.check(self.conf, req)
        servers.check_metadata(req.metadata or {})
        if req.volume_gb:
            volumes.refuse_in_openstack_mode(self.conf, "volume_gb")
        flavor = resolve_flavor(session, req.flavor_ref)
        image = resolve_image(session, req.image_ref)
        group = None
        if req.group_id:
            try:
                group = group_rows.get(session, req.group_id, req.tenant_id)
            except NotFound:
                raise InvalidInput(f"group_id: no server group {req.group_id}",
                                   field="group_id") from None
        return flavor, image, group

    def request_spec(self, session, req: ReservationRequest) -> dict:
        """The scheduler's input for ``req``, as JSON-safe data."""
        flavor, image, group = self._check(session, req)
        capabilities = {k[len("capabilities:"):]: v for k, v in flavor.extra_specs.items()
                        if k.startswith("capabilities:")}
        capabilities.update(req.capabilities)
        spec = {"min_count": req.min_count, "max_count": req.max_count,
                "resources": flavor.resources, "capabilities": capabilities,
                "flavor_id": flavor.id, "image_id": image.id, "volume_gb": req.volume_gb}
        if group is not None:
            spec["group"] = {"id": group.id, "policies": list(group.policies),
                             "scope": group.scope, "max_per_host": group.max_per_host,
                             "capabilities": dict(group.capabilities or {})}
        return spec

    def reserve(self, req: ReservationRequest,
                idempotency_key: str | None = None) -> tuple[Reservation, bool]:
        """Create the reservation and post its provision flow.

        Returns ``(reservation, created)``; with an ``idempotency_key`` already
        used by this tenant, the first reservation and ``False``. Nothing is
        written when validation or the quota check fails.
        """
        with self.database.session() as session:
            if idempotency_key:
                existing = rows.find_by_idempotency_key(session, req.tenant_id,
                                                        idempotency_key)
                if existing is not None:
                    return existing, False
            spec = self.request_spec(session, req)
            flavor = session.get(Flavor, spec["flavor_id"])
            queued = req.when_full == states.WHEN_FULL_QUEUE
            if queued:
                # What it will use is checked at admission (docs/queue.md).
                rows.check_quota_limits(session, req.tenant_id, flavor, req.max_count,
                                        self.conf.quota)
            else:
                rows.check_quota(session, req.tenant_id, flavor, req.max_count,
                                 self.conf.quota)
            reservation = rows.create(
                session, tenant_id=req.tenant_id, user_id=req.user_id, name=req.name,
                policy=req.policy, request=dataclasses.asdict(req) | {"spec": spec},
                count=req.max_count, flavor_id=flavor.id, image_id=spec["image_id"],
                group_id=req.group_id, idempotency_key=idempotency_key, queued=queued,
                metadata=req.metadata or None)
            if queued:
                queue_rows.add(session, queue_rows.KIND_RESERVATION, reservation.id,
                               req.tenant_id, req.priority,
                               req.queue_timeout or self.conf.queue.default_timeout or None)
            else:
                self._start(session, reservation)
        return reservation, True

    def _start(self, session, reservation: Reservation) -> None:
        """Post the provision flow of ``reservation``, whose instance rows exist."""
        req = reservation.request
        spec = req["spec"]
        if req.get("admitted_hosts"):
            # Where the admission pass placed it: its flow claims exactly there
            # rather than scheduling afresh (docs/queue.md, "Admission").
            spec = {**spec, "admitted_hosts": req["admitted_hosts"]}
        # NOTE: the flow's intent commits with the rows (the outbox): a
        # crash after the commit leaves a flow the reconciler posts, never
        # a PENDING reservation without one, nor a job without its rows.
        reservation.flow_id = ids.new_uuid()
        instance_uuids = rows.instance_ids(session, reservation.id)
        args = {"reservation_id": reservation.id, "count": req["max_count"],
                "policy": req["policy"], "with_volumes": bool(req.get("volume_gb")),
                "max_reschedules": self.conf.scheduler.max_reschedules}
        per_atom = self.conf.conductor.instances_per_atom
        if req["max_count"] > per_atom and not args["with_volumes"]:
            # Only then: a small reservation's flow stays one a conductor of
            # the release before could run.
            args["batch"] = per_atom
        self.submit(PROVISION, args,
                    store={keys.RESERVATION_ID: reservation.id,
                           keys.REQUEST_SPEC: spec,
                           keys.TENANT_ID: reservation.tenant_id,
                           keys.INSTANCE_UUIDS: instance_uuids},
                    tenant_id=reservation.tenant_id,
                    on_error=req.get("on_error", ON_ERROR_REVERT),
                    flow_id=reservation.flow_id, session=session)

    def admit(self, session, reservation_id: str, placed: list[str] | None = None) -> bool:
        """Start a queued reservation as a fitting one starts: False if it is no longer
        QUEUED (admitted by another, cancelled, expired).

        ``placed``: the host of each instance the admission pass placed; the flow
        claims there (another admitted request's flow, scheduling afresh, could
        otherwise pack differently and leave this one's hosts fragmented).

        The project's quota is checked now, against what it uses now
        (QuotaExceeded: it stays queued). Rows, status and intent commit
        together with the caller's transaction.
        """
        reservation = rows.get(session, reservation_id)
        req = reservation.request
        flavor = session.get(Flavor, req["spec"]["flavor_id"])
        if reservation.status != states.QUEUED:
            return False
        rows.check_quota(session, reservation.tenant_id, flavor, req["max_count"],
                         self.conf.quota)
        if not queue_rows.move_status(session, queue_rows.KIND_RESERVATION, reservation_id,
                                      states.QUEUED, states.PENDING):
            return False
        rows.create_instances(session, reservation, req["max_count"], flavor.id,
                              req["spec"]["image_id"], req.get("group_id"),
                              req.get("metadata") or None)
        if placed:
            reservation.request = {**req, "admitted_hosts": list(placed)}
        self._start(session, reservation)
        return True

    def dry_run(self, req: ReservationRequest) -> dict[str, Any]:
        """Whether ``req`` fits right now, with the scheduler's explanation; claims nothing."""
        from fleetflow.scheduler import plan

        with self.database.session() as session:
            spec = self.request_spec(session, req)
            return plan.dry_run(session, spec, self.conf)

    def delete_reservation(self, tenant_id: str | None, reservation_id: str) -> Reservation:
        with self.database.session() as session:
            reservation = rows.get(session, reservation_id, tenant_id)
            if reservation.status in (states.DELETING, states.DELETED):
                return reservation
            # Never started: nothing to tear down. The conditional UPDATE loses
            # to an admitter that started it meanwhile (then 409 below).
            for waiting in (states.QUEUED, states.EXPIRED):
                if queue_rows.move_status(session, queue_rows.KIND_RESERVATION, reservation_id,
                                         waiting, states.DELETED):
                    queue_rows.remove(session, queue_rows.KIND_RESERVATION, [reservation_id])
                    reservation.status = states.DELETED
                    return reservation
            session.refresh(reservation)
            if reservation.status not in states.SETTLED:
                raise Conflict(f"reservation {reservation_id} is {reservation.status}; "
                               "delete it once it has settled")
            instance_ids = rows.instance_ids(session, reservation_id)
            # Its servers first: one an evacuation moves refuses the whole delete.
            evac_rows.hold_for_delete(session, instance_ids)
            reservation.status = states.DELETING
            args = {"instance_ids": instance_ids, "reservation_id": reservation_id}
            if len(instance_ids) > self.conf.conductor.instances_per_atom:
                # Only then, as for the build: a small teardown stays one a
                # conductor of the release before could run.
                args["batch"] = self.conf.conductor.instances_per_atom
            # NOTE: pause, not revert: a deletion is finished by resuming it once
            # its cause is dealt with; a reverted teardown could never be resumed.
            self.submit(TEARDOWN, args,
                        store={keys.TENANT_ID: reservation.tenant_id},
                        tenant_id=reservation.tenant_id, flow_id=None,
                        on_error=ON_ERROR_PAUSE, session=session)
        return reservation

    def delete_server(self, tenant_id: str | None, instance_id: str) -> Instance:
        with self.database.session() as session:
            instance = session.get(Instance, instance_id) if ids.is_uuid(instance_id) else None
            if instance is None or (tenant_id is not None and instance.tenant_id != tenant_id):
                raise NotFound(f"server {instance_id} not found")
            if instance.status in (states.DELETING, states.DELETED, states.REVERTED):
                return instance
            if instance.vcluster_id is not None:
                raise Conflict(f"server {instance_id} belongs to vcluster "
                               f"{instance.vcluster_id}: remove it through the vcluster",
                               vcluster_id=instance.vcluster_id)
            if instance.status not in (states.ACTIVE, states.ERROR):
                raise Conflict(f"server {instance_id} is {instance.status}; "
                               "delete it once it has settled")
            if not evac_rows.hold_for_delete(session, [instance_id]):
                raise Conflict(f"server {instance_id} changed meanwhile; ask again",
                               instance_id=instance_id)
            instance.status, instance.task_state = states.DELETING, states.TASK_DELETING
            self.submit(TEARDOWN, {"instance_ids": [instance_id],
                                   "reservation_id": instance.reservation_id},
                        store={keys.TENANT_ID: instance.tenant_id},
                        tenant_id=instance.tenant_id, flow_id=None, on_error=ON_ERROR_PAUSE,
                        session=session)
        return instance
