"""Reservations and their instances: creation, quotas, status rows.

These rows are what the API reports (docs/architecture.md, "Status lives in
rows"): tasks and the engine's status listener write them, nobody reads
TaskFlow's atom details for status.
"""

from __future__ import annotations

import json

import sqlalchemy as sa
from sqlalchemy import orm

from fleetflow.common import ids, states
from fleetflow.common.exceptions import Conflict, InvalidInput, NotFound
from fleetflow.persistence import bulk
from fleetflow.persistence.models import Flavor, Instance, Quota, Reservation, Volume, utcnow
from fleetflow.persistence.row_writes import RowWrites

INSTANCE_NAME = "{name}-{index:04d}"


class QuotaExceeded(Conflict):
    """The request would take the tenant past its quota."""

    code = "fleetflow.quota_exceeded"
    status = 403


INSTANCE_RESOURCES = ("instances", "vcpus", "ram_mb")
VOLUME_RESOURCES = ("volumes", "gigabytes")
QUOTA_RESOURCES = INSTANCE_RESOURCES + VOLUME_RESOURCES


def _limits(row: Quota, defaults) -> dict[str, int]:
    # A volume limit never set (NULL: rows older than it, or set without it) is the default's.
    return {key: getattr(defaults, key) if getattr(row, key) is None else getattr(row, key)
            for key in QUOTA_RESOURCES}


def quota_for(session: orm.Session, tenant_id: str, defaults) -> dict[str, int]:
    """The tenant's limits: its row, else the defaults of [quota] (-1: unlimited)."""
    row = session.get(Quota, tenant_id)
    if row is not None:
        return _limits(row, defaults)
    return {key: getattr(defaults, key) for key in QUOTA_RESOURCES}


def set_quota(session: orm.Session, tenant_id: str, limits: dict[str, int],
              defaults=None) -> dict[str, int]:
    """Write the limits given; a new row's volume limits not given stay NULL (the defaults).

    ``defaults`` only fills the answer's limits the row leaves NULL; without
    it those come back as None.
    """
    row = session.get(Quota, tenant_id)
    if row is None:
        row = Quota(tenant_id=tenant_id, **limits)
        session.add(row)
    else:
        for key, value in limits.items():
            setattr(row, key, value)
    session.flush()
    if defaults is not None:
        return _limits(row, defaults)
    return {key: getattr(row, key) for key in QUOTA_RESOURCES}


# Instances that count against a quota: everything not gone.
_LIVE = sa.not_(Instance.status.in_((states.DELETED, states.REVERTED)))
# Volumes likewise; none is marked REVERTED today, but one so marked would be gone too.
_LIVE_VOLUME = sa.not_(Volume.status.in_((states.VOLUME_DELETED, states.REVERTED)))


def usage(session: orm.Session, tenant_id: str) -> dict[str, int]:
    """What the tenant's live instances take (instances, vcpus, ram_mb)."""
    row = session.execute(
        sa.select(sa.func.count(Instance.id),
                  sa.func.coalesce(sa.func.sum(Flavor.vcpus), 0),
                  sa.func.coalesce(sa.func.sum(Flavor.ram_mb), 0))
        .join(Flavor, Flavor.id == Instance.flavor_id)
        .where(Instance.tenant_id == tenant_id, _LIVE)).one()
    return {"instances": row[0], "vcpus": int(row[1]), "ram_mb": int(row[2])}


def volume_usage(session: orm.Session, tenant_id: str) -> dict[str, int]:
    """What the tenant's live volumes take (volumes, gigabytes)."""
    row = session.execute(
        sa.select(sa.func.count(Volume.id), sa.func.coalesce(sa.func.sum(Volume.size_gb), 0))
        .where(Volume.tenant_id == tenant_id, _LIVE_VOLUME)).one()
    return {"volumes": row[0], "gigabytes": int(row[1])}


def _check(limits: dict[str, int], used: dict[str, int], asked: dict[str, int]) -> None:
    for key, amount in asked.items():
        limit = limits[key]
        if limit >= 0 and used[key] + amount > limit:
            raise QuotaExceeded(
                f"quota exceeded for {key}: {used[key]} used + {amount} asked > {limit}",
                resource=key, used=used[key], asked=amount, limit=limit)


def check_instance_quota(session: orm.Session, tenant_id: str, asked: dict[str, int],
                         defaults, limits_only: bool = False) -> None:
    """Raise QuotaExceeded if ``asked`` (instances, vcpus, ram_mb) does not fit.

    The amounts are totals, so one request of several flavors (a cluster's
    servers) is checked at once rather than flavor by flavor. ``limits_only``:
    against the limits alone, for a queued request (what the project uses is
    checked at admission; one that could never fit is refused at once).
    """
    used = dict.fromkeys(INSTANCE_RESOURCES, 0) if limits_only else usage(session, tenant_id)
    _check(quota_for(session, tenant_id, defaults), used,
           {key: asked.get(key, 0) for key in INSTANCE_RESOURCES})


def check_quota(session: orm.Session, tenant_id: str, flavor: Flavor, count: int,
                defaults) -> None:
    """Raise QuotaExceeded if ``count`` more instances of ``flavor`` do not fit."""
    check_instance_quota(session, tenant_id, {
        "instances": count, "vcpus": count * flavor.vcpus, "ram_mb": count * flavor.ram_mb},
        defaults)


def check_quota_limits(session: orm.Session, tenant_id: str, flavor: Flavor, count: int,
                       defaults) -> None:
    """:func:`check_quota` against the limits alone (a queued request)."""
    check_instance_quota(session, tenant_id, {
        "instances": count, "vcpus": count * flavor.vcpus, "ram_mb": count * flavor.ram_mb},
        defaults, limits_only=True)


def check_volume_quota(session: orm.Session, tenant_id: str, count: int, gigabytes: int,
                       defaults, limits_only: bool = False) -> None:
    """Raise QuotaExceeded if ``count`` more volumes of ``gigabytes`` in all do not fit."""
    used = (dict.fromkeys(VOLUME_RESOURCES, 0) if limits_only
            else volume_usage(session, tenant_id))
    _check(quota_for(session, tenant_id, defaults), used,
           {"volumes": count, "gigabytes": gigabytes})


def find_by_idempotency_key(session: orm.Session, tenant_id: str,
                            key: str) -> Reservation | None:
    return session.execute(sa.select(Reservation).where(
        Reservation.tenant_id == tenant_id,
        Reservation.idempotency_key == key)).scalar_one_or_none()


def create(session: orm.Session, *, tenant_id: str, user_id: str | None, name: str | None,
           policy: str, request: dict, count: int, flavor_id: str, image_id: str,
           group_id: str | None, idempotency_key: str | None = None,
           reservation_id: str | None = None, queued: bool = False,
           metadata: dict | None = None) -> Reservation:
    """The reservation row and one PENDING instance row per requested instance.

    ``count`` is the most it may get (max_count); instance uuids are made
    here, once, so every retry of every task names the same consumers.
    ``queued``: the row reads QUEUED and has no instances yet (they are made
    at admission, :func:`create_instances`): a queued request holds nothing
    and counts against no quota while it waits.
    """
    reservation = Reservation(
        id=reservation_id or ids.new_reservation_id(), tenant_id=tenant_id, user_id=user_id,
        name=name, status=states.QUEUED if queued else states.PENDING, policy=policy,
        request=request, idempotency_key=idempotency_key)
    session.add(reservation)
    session.flush()
    if not queued:
        create_instances(session, reservation, count, flavor_id, image_id, group_id, metadata)
    return reservation


def create_instances(session: orm.Session, reservation: Reservation, count: int,
                     flavor_id: str, image_id: str, group_id: str | None,
                     metadata: dict | None = None) -> list[str]:
    """Insert the reservation's ``count`` PENDING instance rows; their ids by index."""
    now = utcnow()
    label = reservation.name or reservation.id
    tried: list = []  # one object for every row: serialized once (``bulk``)
    metadata = dict(metadata) if metadata else None
    uuids = ids.new_uuids(count)
    bulk.insert(session, _INSTANCES_TABLE, [
        {"id": uuid, "reservation_id": reservation.id, "tenant_id": reservation.tenant_id,
         "name": INSTANCE_NAME.format(name=label, index=i), "index": i,
         "status": states.PENDING, "flavor_id": flavor_id, "image_id": image_id,
         "group_id": group_id, "attempts": 0, "hosts_tried": tried, "metadata": metadata,
         "created_at": now, "updated_at": now}
        for i, uuid in enumerate(uuids)])
    return uuids


def get(session: orm.Session, reservation_id: str,
        tenant_id: str | None = None) -> Reservation:
    reservation = session.get(Reservation, reservation_id)
    if reservation is None or (tenant_id is not None and reservation.tenant_id != tenant_id):
        raise NotFound(f"reservation {reservation_id} not found")
    return reservation


# What the API shows of the reservation itself: its row without the request.
_SHOWN_COLUMNS = tuple(Reservation.__table__.c[name] for name in (
    "id", "tenant_id", "name", "status", "policy", "flow_id", "fault", "created_at",
    "updated_at"))


def shown(session: orm.Session, reservation_id: str, tenant_id: str | None = None) -> sa.Row:
    """:func:`get` for a view: a Core row of the shown columns (attributes as the
    ORM object's), which costs a poll of the reservation less than loading the object."""
    table = Reservation.__table__
    row = session.execute(sa.select(*_SHOWN_COLUMNS).where(table.c.id == reservation_id)).first()
    if row is None or (tenant_id is not None and row.tenant_id != tenant_id):
        raise NotFound(f"reservation {reservation_id} not found")
    return row


def instances(session: orm.Session, reservation_id: str) -> list[Instance]:
    return list(session.scalars(sa.select(Instance).where(
        Instance.reservation_id == reservation_id).order_by(Instance.index)))


# What a reservation shows of each instance (the API's GET of one reservation).
INSTANCE_VIEW_COLUMNS = ("id", "name", "host", "status", "task_state", "attempts",
                         "hosts_tried", "fault")
_INSTANCES_TABLE = Instance.__table__
_JSON_VIEW_COLUMNS = ("hosts_tried", "fault")
# The stable order of a reservation's instances (its pages): by index, the id
# breaking ties (create_instances gives distinct indexes; nothing enforces it).
_INSTANCE_ORDER = (_INSTANCES_TABLE.c.index, _INSTANCES_TABLE.c.id)
# The JSON columns come as stored (text on SQLite) and are decoded below:
# SQLAlchemy's JSON result processing cost half of a large reservation's GET.
# The index comes last: the order of a page read as one row of JSON (_view_rows).
_INSTANCE_VIEWS = (
    sa.select(*(sa.type_coerce(_INSTANCES_TABLE.c[name], sa.Text).label(name)
                if name in _JSON_VIEW_COLUMNS else _INSTANCES_TABLE.c[name]
                for name in INSTANCE_VIEW_COLUMNS), _INSTANCES_TABLE.c.index)
    .where(_INSTANCES_TABLE.c.reservation_id == sa.bindparam("reservation_id"))
    .order_by(*_INSTANCE_ORDER))
# A page: the instances after the marker's (index, id), one more than asked.
_INSTANCE_PAGE = (
    _INSTANCE_VIEWS.where(sa.tuple_(*_INSTANCE_ORDER) > sa.tuple_(
        sa.bindparam("after_index", type_=sa.Integer), sa.bindparam("after_id", type_=sa.String)))
    .limit(sa.bindparam("page_rows", type_=sa.Integer)))
_NO_FAULT = ("null", None)


def _hosts_tried(stored, decoded: dict) -> list:
    if not isinstance(stored, str):  # already decoded by the driver, or NULL
        return stored or []
    # Many instances share a list (one host each, a few hundred hosts).
    value = decoded.get(stored)
    if value is None:
        value = decoded[stored] = json.loads(stored)
    return value


def _fault(stored) -> dict | None:
    if stored in _NO_FAULT:
        return None
    return json.loads(stored) if isinstance(stored, str) else stored


def _views(rows) -> list[dict]:
    decoded: dict = {}  # equal lists are shared: callers only read them
    return [{"id": row[0], "name": row[1], "host": row[2], "status": row[3],
             "task_state": row[4], "attempts": row[5],
             "hosts_tried": _hosts_tried(row[6], decoded), "fault": _fault(row[7])}
            for row in rows]


def _view_rows(session: orm.Session, statement: sa.Select, params: dict) -> list:
    """The rows of ``statement`` (the view's columns, then the index), by index then id.

    Read through ``bulk``: on SQLite as one row of JSON, so a page read while the
    reservation builds is not held up once a row by the threads building it.
    """
    return sorted(bulk.fetch(session, statement, params), key=lambda row: (row[-1], row[0]))


def instance_views(session: orm.Session, reservation_id: str) -> list[dict]:
    """The reservation's instances as plain dicts of INSTANCE_VIEW_COLUMNS, by index.

    One Core select of those columns only: no ORM objects, which cost most of
    a GET of a large reservation (polled while it builds).
    """
    return _views(_view_rows(session, _INSTANCE_VIEWS, {"reservation_id": reservation_id}))


def instance_view_page(session: orm.Session, reservation_id: str, limit: int,
                       marker: str | None = None) -> tuple[list[dict], bool]:
    """``(views, more)``: up to ``limit`` of :func:`instance_views` after the instance
    ``marker`` (an instance id of the reservation), and whether more follow.

    InvalidInput naming ``instance_marker`` when the reservation has no such instance.
    """
    after = (-1, "")  # before every instance: indexes start at 0
    if marker is not None:
        table = _INSTANCES_TABLE
        after = session.execute(sa.select(table.c.index, table.c.id).where(
            table.c.id == marker, table.c.reservation_id == reservation_id)).first()
        if after is None:
            raise InvalidInput(f"Invalid query parameter field 'instance_marker': no "
                               f"instance {marker} of this reservation to list after.",
                               field="instance_marker")
    views = _views(_view_rows(session, _INSTANCE_PAGE, {
        "reservation_id": reservation_id, "after_index": after[0], "after_id": after[1],
        "page_rows": limit + 1}))
    return views[:limit], len(views) > limit


def instance_ids(session: orm.Session, reservation_id: str) -> list[str]:
    """The reservation's instance ids by index."""
    table = _INSTANCES_TABLE
    found = bulk.select_where(session, (table.c.index, table.c.id), table.c.reservation_id,
                              reservation_id)
    return [uuid for _, uuid in sorted(found)]


def progress(session: orm.Session, reservation_id: str) -> dict[str, int]:
    """Counts by status, in the API's ``progress`` shape."""
    return progress_by_reservation(session, [reservation_id])[reservation_id]


def progress_by_reservation(session: orm.Session,
                            reservation_ids: list[str]) -> dict[str, dict[str, int]]:
    """:func:`progress` of each of ``reservation_ids``, with one query."""
    counts: dict[str, dict[str, int]] = {rid: {} for rid in reservation_ids}
    if reservation_ids:
        for rid, status, number in session.execute(
                sa.select(Instance.reservation_id, Instance.status, sa.func.count())
                .where(Instance.reservation_id.in_(reservation_ids))
                .group_by(Instance.reservation_id, Instance.status)):
            counts[rid][status] = number
    return {rid: _progress_buckets(c) for rid, c in counts.items()}


def _progress_buckets(counts: dict[str, int]) -> dict[str, int]:
    return {"total": sum(counts.values()),
            "active": counts.get(states.ACTIVE, 0),
            "building": sum(counts.get(s, 0) for s in (states.PENDING, states.SCHEDULING,
                                                      states.BUILDING, states.REVERTING)),
            "error": counts.get(states.ERROR, 0),
            "reverted": counts.get(states.REVERTED, 0),
            # A deleted instance was built and then removed on request: nothing
            # was undone, so it is not counted as reverted.
            "deleted": counts.get(states.DELETED, 0)}


# NOTE: the writes below are Core statements on the tables, not ORM-enabled
# updates: the engine makes one or more per instance and step, and the ORM's
# bulk-update machinery cost more Python than the statement. They do not
# refresh objects the caller's session already holds; no caller reads one after.
_RESERVATIONS_TABLE = Reservation.__table__


def set_status(session: orm.Session, reservation_id: str, status: str,
               fault: dict | None = None, clear_fault: bool = False) -> None:
    values: dict = {"status": status, "updated_at": utcnow()}
    if fault is not None or clear_fault:
        values["fault"] = fault
    session.execute(_RESERVATIONS_TABLE.update()
                    .where(_RESERVATIONS_TABLE.c.id == reservation_id).values(**values))


INSTANCE_ROWS = RowWrites(_INSTANCES_TABLE)


def update_instance(session: orm.Session | sa.Connection, instance_id: str,
                    **values) -> None:
    """Write an instance's status columns (status, task_state, host, fault, ...).

    ``session`` may also be a Core connection (``Database.transaction``).
    """
    INSTANCE_ROWS.update(session, instance_id, **values)


def write_instance(database, instance_id: str, **values) -> None:
    """:func:`update_instance` committed on return, together with concurrent callers' writes.

    For the one write most tasks of a large reservation end with (a boot's
    ACTIVE): a thousand of them finishing at once share a few transactions
    (``group_commit``) instead of queueing for SQLite's write lock one by one.
    """
    INSTANCE_ROWS.write(database, instance_id, **values)


def update_instances(session: orm.Session, instance_ids_: list[str], **values) -> None:
    """The same columns on many instances in one statement."""
    bulk.update_ids(session, _INSTANCES_TABLE, instance_ids_, **values, updated_at=utcnow())


def record_attempt(session: orm.Session, instance_id: str, host: str, **values) -> None:
    """One more try of this instance, on ``host`` (kept in order, no repeats in a row).

    ``values`` are further columns to write in the same statement (status,
    task_state): one write per step keeps SQLite's single writer free.
    """
    table = _INSTANCES_TABLE
    row = session.execute(sa.select(table.c.hosts_tried, table.c.attempts)
                          .where(table.c.id == instance_id)).first()
    if row is None:
        return
    tried = list(row.hosts_tried or [])
    attempts = row.attempts
    if not tried or tried[-1] != host:
        tried.append(host)
        attempts = (attempts or 0) + 1
    values = {"hosts_tried": tried, "attempts": attempts, "host": host, **values,
              "updated_at": utcnow()}
    session.execute(table.update().where(table.c.id == instance_id).values(**values))


def record_first_attempts(session: orm.Session, hosts_by_instance: dict[str, str],
                          **values) -> None:
    """First try of many instances at once: each on its host, attempts 1.

    For instances that have not been tried yet (the all-or-nothing fast path
    claims every primary in one write); writing it again is harmless.
    """
    bulk.update_each(session, _INSTANCES_TABLE, [
        {"id": uuid, "host": host, "hosts_tried": [host]}
        for uuid, host in hosts_by_instance.items()], attempts=1, updated_at=utcnow(), **values)


def fault(code: str, message: str, step: str | None = None, host: str | None = None) -> dict:
    return {"code": code, "message": message, "step": step, "host": host,
            "time": utcnow().isoformat() + "Z"}
