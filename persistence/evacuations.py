"""Evacuation rows: the operation, one move per server, the host lock, the views.

The database is the record of an evacuation: the flow's tasks write each
move's progress here, the API reads it, and a host that comes back asks it
which of its guests were rebuilt elsewhere (:func:`evacuated_copies`).
"""

from __future__ import annotations

import datetime as dt
import uuid as uuidlib
from collections import Counter

import sqlalchemy as sa
from sqlalchemy import orm

from fleetflow.common import states
from fleetflow.common.exceptions import Conflict, NotFound
from fleetflow.persistence.models import (
    Evacuation,
    Host,
    Instance,
    Move,
    StorageBackend,
    Volume,
    utcnow,
)

EVACUATION_PREFIX = "e-"
# Namespace of migration ids: uuid5(namespace, "<evacuation id>/<instance uuid>").
MIGRATION_NAMESPACE = uuidlib.UUID("5d0c7b2e-61a4-4f0e-a7f3-0b9c4e2d8a61")

# Codes of a move's fault, shown by the API per server: stable, upper case.
NO_VALID_HOST = "NO_VALID_HOST"
MIGRATION_FAILED = "MIGRATION_FAILED"
GROUP_POLICY = "GROUP_POLICY"
VOLUME_UNREACHABLE = "VOLUME_UNREACHABLE"
HOST_ALIVE = "HOST_ALIVE"


class EvacuationInProgress(Conflict):
    """A host of the request is held by another evacuation."""

    code = "EVACUATION_IN_PROGRESS"


class ServerBeingMoved(Conflict):
    """A server to delete is held by an unfinished move of an evacuation."""

    code = "SERVER_BEING_MOVED"


class BuildsInProgress(Conflict):
    """A host of the request has servers that have not settled yet (building there)."""

    code = "BUILDS_IN_PROGRESS"


def new_evacuation_id() -> str:
    return EVACUATION_PREFIX + uuidlib.uuid4().hex[:12]


def migration_id_for(evacuation_id: str, instance_id: str, attempt: int = 0) -> str:
    """The deterministic id of one try at moving a server: its placement migration
    consumer and the destination's key for the move. Each try (a new host, or
    the same host in a later run) has its own, so a try that failed and was
    undone never stands in the way of the next."""
    return str(uuidlib.uuid5(MIGRATION_NAMESPACE, f"{evacuation_id}/{instance_id}/{attempt}"))


def get(session: orm.Session, evacuation_id: str, lock: bool = False) -> Evacuation:
    query = sa.select(Evacuation).where(Evacuation.id == evacuation_id)
    if lock:
        query = query.with_for_update()
    evacuation = session.execute(query).scalar_one_or_none()
    if evacuation is None:
        raise NotFound(f"evacuation {evacuation_id} not found", evacuation_id=evacuation_id)
    return evacuation


def move(session: orm.Session, evacuation_id: str, instance_id: str) -> Move:
    found = session.execute(sa.select(Move).where(
        Move.evacuation_id == evacuation_id, Move.instance_id == instance_id)
    ).scalar_one_or_none()
    if found is None:
        raise NotFound(f"server {instance_id} is not part of evacuation {evacuation_id}",
                       evacuation_id=evacuation_id, instance_id=instance_id)
    return found


def hold_hosts(session: orm.Session, evacuation_id: str, hosts: list[str]) -> None:
    """Take ``hosts`` for ``evacuation_id``; EvacuationInProgress if one is held already.

    A conditional UPDATE per host: of two requests racing for a host, one
    changes the row and the other changes nothing and is refused. The rows
    are taken in name order, the order a build's claim locks them in
    (:func:`closed_to_builds`), so the two never wait for each other in a cycle.
    """
    for name in sorted(hosts):
        taken = session.execute(sa.update(Host).where(
            Host.name == name, sa.or_(Host.evacuation_id.is_(None),
                                      Host.evacuation_id == evacuation_id))
            .values(evacuation_id=evacuation_id)).rowcount
        if not taken:
            holder = session.execute(sa.select(Host.evacuation_id).where(
                Host.name == name)).scalar()
            raise EvacuationInProgress(
                f"host {name} is being evacuated by {holder}; wait for it to end, or "
                "resume / revert it", host=name, evacuation_id=holder)


def refuse_unsettled_servers(session: orm.Session, hosts: list[str]) -> None:
    """BuildsInProgress when a server that has not settled is on one of ``hosts``.

    Call it after :func:`hold_hosts`, in its transaction: see
    docs/evacuation.md, "Overlapping operations", for why that order makes
    the check and a build's claim exclude each other.
    """
    building = Counter(dict(session.execute(
        sa.select(Instance.host, sa.func.count()).where(
            Instance.host.in_(hosts),
            Instance.status.not_in(tuple(states.INSTANCE_SETTLED)))
        .group_by(Instance.host)).all()))
    # Another evacuation's moves into these hosts: claimed, not confirmed yet.
    building.update(dict(session.execute(
        sa.select(Move.destination, sa.func.count()).where(
            Move.destination.in_(hosts),
            sa.or_(Move.status == states.MOVING,
                   sa.and_(Move.status == states.PENDING, Move.step == "claimed")))
        .group_by(Move.destination)).all()))
    for name in hosts:
        if building[name]:
            raise BuildsInProgress(
                f"host {name} has {building[name]} server(s) still building, moving in or "
                "being changed there; evacuate it once they have settled", host=name,
                servers=building[name])


def closed_to_builds(session: orm.Session, hosts) -> dict[str, str]:
    """Of ``hosts``, those no new server may land on, with why: not ``up``, or held.

    A build's claim calls it in the transaction that records the instance on
    its host. On PostgreSQL the rows are read ``FOR SHARE`` (claims on one
    host do not wait for each other, an evacuation's hold waits for them and
    they for it); SQLite's writing transactions are serial already.
    """
    closed = {}
    for name, state, holder in session.execute(
            sa.select(Host.name, Host.state, Host.evacuation_id)
            .where(Host.name.in_(sorted(set(hosts)))).order_by(Host.name)
            .with_for_update(read=True)):
        if holder:
            closed[name] = f"held by evacuation {holder}"
        elif state != states.HOST_UP:
            closed[name] = f"in state {state}"
    return closed


def lock_hosts(session: orm.Session, names) -> list[str]:
    """Lock the rows of the hosts ``names`` for an update, in name order; the names found.

    A write of several host rows takes them in the order a build's claim reads
    them (:func:`closed_to_builds`): two transactions that take rows in one
    order never wait for each other in a cycle, where an UPDATE of many rows
    takes them in whatever order the table stores them and can deadlock a
    claim on PostgreSQL. SQLite writes one transaction at a time and ignores it.
    """
    return list(session.scalars(sa.select(Host.name).where(Host.name.in_(sorted(set(names))))
                                .order_by(Host.name).with_for_update()))


def release_hosts(session: orm.Session, evacuation_id: str) -> None:
    held = list(session.scalars(sa.select(Host.name).where(Host.evacuation_id == evacuation_id)))
    lock_hosts(session, held)
    session.execute(sa.update(Host).where(Host.evacuation_id == evacuation_id)
                    .values(evacuation_id=None))


def create(session: orm.Session, *, evacuation_id: str, hosts: list[str], mode: str,
           on_error: str, max_parallel: int, fallback: str, target_hosts: list | None,
           reason: str | None, user_id: str | None,
           servers: list[Instance]) -> Evacuation:
    """The evacuation and one PENDING move per server, in the caller's transaction."""
    evacuation = Evacuation(id=evacuation_id, hosts=list(hosts), mode=mode,
                            status=states.PENDING, on_error=on_error,
                            max_parallel=max_parallel, fallback=fallback,
                            target_hosts=list(target_hosts) if target_hosts else None,
                            reason=reason, user_id=user_id, runs=[])
    session.add(evacuation)
    session.flush()
    move_mode = states.MODE_LIVE if mode == states.MODE_DRAIN else mode
    if servers:
        # One bulk insert: a thousand ORM objects' flush cost most of the 202.
        session.execute(sa.insert(Move), [
            {"evacuation_id": evacuation_id, "instance_id": server.id, "index": index,
             "tenant_id": server.tenant_id, "source": server.host, "mode": move_mode,
             "status": states.PENDING,
             "migration_id": migration_id_for(evacuation_id, server.id),
             "attempts": 0, "hosts_tried": [], "volumes_lost": []}
            for index, server in enumerate(servers)])
    return evacuation


def moves(session: orm.Session, evacuation_id: str,
          statuses: frozenset | tuple | None = None) -> list[Move]:
    query = sa.select(Move).where(Move.evacuation_id == evacuation_id).order_by(Move.index)
    if statuses is not None:
        query = query.where(Move.status.in_(tuple(statuses)))
    return list(session.scalars(query))


def progress(session: orm.Session, evacuation_id: str) -> dict[str, int]:
    """Moves by what happened to them: a reverted move is no longer waiting to run."""
    counts = Counter(dict(session.execute(
        sa.select(Move.status, sa.func.count()).where(Move.evacuation_id == evacuation_id)
        .group_by(Move.status)).all()))
    return {"total": sum(counts.values()), "done": counts[states.DONE],
            "moving": counts[states.MOVING],
            "pending": counts[states.PENDING], "failed": counts[states.FAILED],
            "skipped": counts[states.SKIPPED], "reverted": counts[states.REVERTED]}


def attached_volumes(session: orm.Session, uuid: str) -> list[tuple[Volume, StorageBackend | None]]:
    return attached_volumes_of(session, [uuid]).get(uuid, [])


def attached_volumes_of(session: orm.Session, uuids: list[str]
                        ) -> dict[str, list[tuple[Volume, StorageBackend | None]]]:
    """:func:`attached_volumes` of each of ``uuids`` (those with none left out), in one
    query: a thousand servers' schedule asked a thousand times before."""
    found: dict[str, list] = {}
    for volume, backend in session.execute(
            sa.select(Volume, StorageBackend).outerjoin(
                StorageBackend, StorageBackend.name == Volume.backend)
            .where(Volume.instance_id.in_(uuids), Volume.status == states.VOLUME_IN_USE)
            .order_by(Volume.id)).all():
        found.setdefault(volume.instance_id, []).append((volume, backend))
    return found


def move_view(move: Move) -> dict:
    fault = move.fault
    return {"id": move.instance_id, "tenant_id": move.tenant_id, "source": move.source,
            "destination": move.destination, "status": move.status, "mode": move.mode,
            "step": move.step, "attempts": move.attempts,
            "hosts_tried": list(move.hosts_tried or []),
            "volumes_lost": list(move.volumes_lost or []),
            "fault": ({k: fault.get(k) for k in ("code", "message", "step", "host")}
                      if fault else None)}


def view(session: orm.Session, evacuation: Evacuation, with_moves: bool = True) -> dict:
    """The evacuation as the API shows it."""
    body = {"id": evacuation.id, "hosts": list(evacuation.hosts), "mode": evacuation.mode,
            "status": evacuation.status, "on_error": evacuation.on_error,
            "max_parallel": evacuation.max_parallel, "fallback": evacuation.fallback,
            "target_hosts": evacuation.target_hosts, "flow_id": evacuation.flow_id,
            "reason": evacuation.reason, "created_at": evacuation.created_at,
            "updated_at": evacuation.updated_at,
            "progress": progress(session, evacuation.id), "fault": evacuation.fault}
    if with_moves:
        body["instances"] = [move_view(m) for m in moves(session, evacuation.id)]
    return body


def update_move(session: orm.Session, evacuation_id: str, instance_id: str, **values) -> None:
    values["updated_at"] = utcnow()
    session.execute(sa.update(Move).where(Move.evacuation_id == evacuation_id,
                                          Move.instance_id == instance_id).values(**values))


def set_status(session: orm.Session, evacuation_id: str, status: str, **values) -> None:
    session.execute(sa.update(Evacuation).where(Evacuation.id == evacuation_id)
                    .values(status=status, updated_at=utcnow(), **values))


def evacuated_copies(session: orm.Session, host: str) -> list[str]:
    """Instances rebuilt elsewhere after ``host`` was evacuated: its copies must go.

    Only moves that finished (DONE) count, and only while the instance still
    lives on another host: a rebuild that failed or was reverted left the
    source's copy as the only one, and it is never named here.
    """
    return sorted(session.scalars(
        sa.select(Move.instance_id).join(Instance, Instance.id == Move.instance_id)
        .where(Move.source == host, Move.mode == states.MODE_REBUILD,
               Move.status == states.DONE, Instance.host != host).distinct()))


def stale_copies(session: orm.Session, host: str) -> list[str]:
    """Every guest ``host`` must destroy when it comes back: servers rebuilt
    elsewhere (:func:`evacuated_copies`) and servers deleted while it was dead."""
    deleted = session.scalars(sa.select(Instance.id).where(
        Instance.host == host, Instance.status == states.DELETED))
    return sorted(set(evacuated_copies(session, host)) | set(deleted))


def hosts_with_stale_copies(session: orm.Session) -> set[str]:
    """Hosts :func:`stale_copies` may name something for (one query each way)."""
    rebuilt_off = session.scalars(sa.select(Move.source).where(
        Move.mode == states.MODE_REBUILD, Move.status == states.DONE).distinct())
    deleted_on = session.scalars(sa.select(Instance.host).where(
        Instance.status == states.DELETED, Instance.host.is_not(None)).distinct())
    return set(rebuilt_off) | set(deleted_on)


def effective_host_state(host, service_down_time: float,
                         now: dt.datetime | None = None) -> str:
    """``down`` for an ``up`` host whose heartbeat is older than ``service_down_time``
    (``host``: a Host, or a row of its state and heartbeat_at)."""
    if host.state != states.HOST_UP or host.heartbeat_at is None:
        return host.state
    now = now or utcnow()
    if (now - host.heartbeat_at).total_seconds() > service_down_time:
        return states.HOST_DOWN
    return host.state


def heartbeat(session: orm.Session, hosts: list[str], chunk: int = 500) -> None:
    """Record that ``hosts`` are alive now (their agent's periodic report)."""
    now = utcnow()
    hosts = sorted(set(hosts))
    for start in range(0, len(hosts), chunk):
        names = lock_hosts(session, hosts[start:start + chunk])
        session.execute(sa.update(Host).where(Host.name.in_(names)).values(heartbeat_at=now))


# What a move's claim writes on its server: while it holds, no delete may take the server.
MOVE_TASK_STATES = (states.TASK_MIGRATING, states.TASK_REBUILDING)
# Servers a delete request takes: the ones an evacuation may move.
REQUEST_DELETABLE = (states.ACTIVE, states.ERROR)


def hold_for_delete(session: orm.Session, instance_ids: list[str],
                    statuses: tuple | None = REQUEST_DELETABLE) -> int:
    """Mark ``instance_ids`` DELETING for a delete; ServerBeingMoved while a move holds one.

    The one rule of every path that deletes servers (a server, a reservation,
    a vcluster or some of its members, and the teardown flows themselves):
    a server with a PENDING or MOVING move of an evacuation still under way
    (PAUSED included) is refused, naming the server and the evacuation. The
    caller's transaction rolls back with the Conflict, so nothing is written.

    Only servers in ``statuses`` are taken (None: every one not DELETED yet,
    as a teardown takes them); one already DELETING is the delete's own, and
    a move that lists it never starts (its claim refuses a deleting server).
    The mark is a conditional UPDATE, not a read then a write: a move's claim
    sets task_state with the mirror condition, so of a claim and a delete
    racing for one server exactly one wins. Returns how many were taken.
    """
    if not instance_ids:
        return 0
    ids = list(instance_ids)
    if statuses is None:
        candidates = sa.and_(Instance.id.in_(ids), Instance.status != states.DELETED)
    else:
        candidates = sa.and_(Instance.id.in_(ids), Instance.status.in_(tuple(statuses)))
    held = session.execute(
        sa.select(Move.instance_id, Move.evacuation_id)
        .join(Evacuation, Evacuation.id == Move.evacuation_id)
        .join(Instance, Instance.id == Move.instance_id)
        .where(candidates, Instance.status != states.DELETING,
               Move.status.in_((states.PENDING, states.MOVING)),
               Evacuation.status.in_(tuple(states.EVACUATION_ACTIVE)))
        .order_by(Move.instance_id)).first()
    if held is not None:
        raise _being_moved(held.instance_id, held.evacuation_id)
    wanted = session.scalar(sa.select(sa.func.count()).select_from(Instance).where(candidates))
    taken = session.execute(sa.update(Instance).where(candidates, sa.or_(
        Instance.task_state.is_(None), Instance.task_state.not_in(MOVE_TASK_STATES)))
        .values(status=states.DELETING, task_state=states.TASK_DELETING, updated_at=utcnow())
        ).rowcount
    if taken != wanted:
        # A claim won the race between the count and the UPDATE (or before both).
        claimed = session.execute(
            sa.select(Instance.id).where(candidates, Instance.task_state.in_(MOVE_TASK_STATES))
            .order_by(Instance.id)).scalar()
        if claimed is None:  # another delete took one meanwhile
            raise Conflict("a server to delete changed meanwhile; ask again",
                           instance_ids=ids)
        by = session.execute(
            sa.select(Move.evacuation_id).where(Move.instance_id == claimed)
            .order_by(Move.updated_at.desc())).scalar()
        raise _being_moved(claimed, by)
    return taken


def _being_moved(instance_id: str, evacuation_id: str | None) -> ServerBeingMoved:
    by = f" by evacuation {evacuation_id}" if evacuation_id else ""
    return ServerBeingMoved(f"server {instance_id} is being moved{by}; delete it once the "
                            "move has ended", instance_id=instance_id,
                            evacuation_id=evacuation_id)
