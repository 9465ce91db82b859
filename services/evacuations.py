"""Evacuations as operators ask for them: validate, write the rows, post the flow.

The API and the CLI call :class:`EvacuationOps`; it checks the request
against the cloud, writes the evacuation and one move per server in one
transaction (taking the hosts, so a second evacuation of a host is refused),
and posts the flow that moves them. It never waits for the flow: status is
read back from the rows. An operator's ``resume`` and ``skip`` post a new
run of the flow for the servers still unfinished; ``revert`` ends a paused
evacuation where it stands (see docs/evacuation.md).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Callable

import sqlalchemy as sa

from fleetflow.common import ids, states
from fleetflow.common.exceptions import Conflict, FleetflowError, InvalidInput, NotFound
from fleetflow.flows import keys
from fleetflow.flows.evacuate.tasks import HostAlive
from fleetflow.persistence import evacuations as rows
from fleetflow.persistence import intents
from fleetflow.persistence.models import Evacuation, Host, Instance, Move

LOG = logging.getLogger(__name__)

EVACUATE = "evacuate"
MAX_PARALLEL_LIMIT = 256

# submit(flow_name, flow_kwargs, store=, tenant_id=, on_error=, flow_id=, session=) -> flow id
Submitter = Callable[..., str]


@dataclasses.dataclass
class EvacuationRequest:
    """A validated evacuation body (the API's schema made it; this checks the cloud)."""

    hosts: list[str]
    mode: str
    on_error: str = states.ON_ERROR_PAUSE
    max_parallel: int = 8
    fallback: str = states.FALLBACK_NONE
    target_hosts: list[str] | None = None
    reason: str | None = None
    user_id: str | None = None
    # Automatic recovery: the id chosen (and recorded) before the request, so a
    # request repeated after a crash finds the evacuation instead of making a
    # second; and the servers to move, in order (None: every server, in order
    # of host and age).
    evacuation_id: str | None = None
    instances: list[str] | None = None


class EvacuationOps:
    """Entry points of evacuations; one per process (API service ``evacuations``).

    ``compute`` is the hosts' RPC client (compute.rpcapi.ComputeAPI): a
    rebuild is refused (HOST_ALIVE) while a host still answers its ping.
    """

    def __init__(self, conf, database, submit: Submitter, compute=None,
                 on_host_state: Callable[[str, str], object] | None = None,
                 placement=None):
        self.conf = conf
        self.database = database
        self.submit = intents.joining(submit)
        self.compute = compute
        # Gives back what moves of deleted servers still hold (skip, revert);
        # by default the process's runtime's.
        self.placement = placement
        # Called with (host name, state) after the evacuation fenced a host,
        # to keep its placement provider in step (services.hosts).
        self.on_host_state = on_host_state

    # -- creating ------------------------------------------------------------------
    def _check(self, req: EvacuationRequest) -> None:
        if req.mode not in states.EVACUATION_MODES:
            raise InvalidInput(f"mode: one of {', '.join(states.EVACUATION_MODES)}",
                               field="mode")
        if req.on_error not in states.EVACUATION_ON_ERROR:
            raise InvalidInput(f"on_error: one of {', '.join(states.EVACUATION_ON_ERROR)}",
                               field="on_error")
        if req.fallback not in states.EVACUATION_FALLBACKS:
            raise InvalidInput(f"fallback: one of {', '.join(states.EVACUATION_FALLBACKS)}",
                               field="fallback")
        if req.fallback == states.FALLBACK_COLD and req.mode != states.MODE_DRAIN:
            raise InvalidInput("fallback: 'cold' applies to mode 'drain' only",
                               field="fallback")
        if not 1 <= int(req.max_parallel) <= MAX_PARALLEL_LIMIT:
            raise InvalidInput(f"max_parallel: between 1 and {MAX_PARALLEL_LIMIT}",
                               field="max_parallel")
        if not req.hosts:
            raise InvalidInput("hosts: name at least one host", field="hosts")
        if len(set(req.hosts)) != len(req.hosts):
            raise InvalidInput("hosts: a host is named twice", field="hosts")
        if req.target_hosts is not None:
            if not req.target_hosts:
                raise InvalidInput("target_hosts: give at least one host, or leave it out",
                                   field="target_hosts")
            both = sorted(set(req.target_hosts) & set(req.hosts))
            if both:
                raise InvalidInput(f"target_hosts: {', '.join(both)} is being evacuated",
                                   field="target_hosts")

    def _host_rows(self, session, names: list[str], field: str) -> dict[str, Host]:
        found = {h.name: h for h in session.scalars(sa.select(Host).where(
            Host.name.in_(names)))}
        missing = [n for n in names if n not in found]
        if missing:
            if field == "hosts":
                raise NotFound(f"host {missing[0]} does not exist", host=missing[0])
            raise InvalidInput(f"{field}: host {missing[0]} does not exist", field=field)
        return found

    def _check_dead(self, session, req: EvacuationRequest) -> None:
        """Rebuild only off hosts that are down (stored or by heartbeat) and silent."""
        hosts = self._host_rows(session, req.hosts, "hosts")
        down_time = self.conf.compute.service_down_time
        for name in req.hosts:
            state = rows.effective_host_state(hosts[name], down_time)
            if state != states.HOST_DOWN:
                raise HostAlive(f"host {name} is {state}: rebuild evacuates a host that is "
                                "down (set it down, or drain / live / cold migrate it)",
                                host=name)

    def _check_silent(self, req: EvacuationRequest) -> None:
        if self.compute is None:
            return
        from fleetflow.flows.evacuate.tasks import PING_TIMEOUT, answers  # noqa: I001

        timeout = min(PING_TIMEOUT, self.conf.messaging.rpc_timeout)
        for name in req.hosts:
            if answers(self.compute, name, timeout):
                raise HostAlive(f"host {name} still answers: a rebuild would run a second "
                                "copy of its servers", host=name)

    def _servers(self, session, hosts: list[str]) -> list[Instance]:
        return list(session.scalars(sa.select(Instance).where(
            Instance.host.in_(hosts), Instance.status.in_((states.ACTIVE, states.ERROR)))
            .order_by(Instance.host, Instance.created_at, Instance.id)))

    def evacuate(self, req: EvacuationRequest) -> dict:
        """Create the evacuation and post its flow; returns its view (status PENDING).

        InvalidInput (400, naming the field), NotFound (404: unknown host),
        HostAlive (409), EvacuationInProgress (409), BuildsInProgress (409: a
        server is still building on a host); nothing is written then.
        """
        self._check(req)
        with self.database.session() as session:
            if req.evacuation_id and session.get(Evacuation, req.evacuation_id) is not None:
                return rows.view(session, rows.get(session, req.evacuation_id))
            self._host_rows(session, req.hosts, "hosts")
            if req.target_hosts:
                self._host_rows(session, req.target_hosts, "target_hosts")
            if req.mode == states.MODE_REBUILD:
                self._check_dead(session, req)
        if req.mode == states.MODE_REBUILD:
            self._check_silent(req)
        try:
            return self._create(req)
        except sa.exc.IntegrityError:
            if req.evacuation_id is None:
                raise
            # Another process created this very evacuation meanwhile.
            return self.show(req.evacuation_id)

    def _create(self, req: EvacuationRequest) -> dict:
        with self.database.session() as session:
            evacuation_id = req.evacuation_id or rows.new_evacuation_id()
            rows.hold_hosts(session, evacuation_id, req.hosts)
            # After the hold, in its transaction: a build that claimed one of
            # these hosts first is seen here; one that claims later sees the hold.
            rows.refuse_unsettled_servers(session, req.hosts)
            servers = self._servers(session, req.hosts)
            if req.instances is not None:
                by_id = {s.id: s for s in servers}
                servers = [by_id[uuid] for uuid in req.instances if uuid in by_id]
            evacuation = rows.create(
                session, evacuation_id=evacuation_id, hosts=req.hosts, mode=req.mode,
                on_error=req.on_error, max_parallel=int(req.max_parallel),
                fallback=req.fallback, target_hosts=req.target_hosts, reason=req.reason,
                user_id=req.user_id, servers=servers)
            fenced = {states.MODE_REBUILD: states.HOST_DOWN,
                      states.MODE_DRAIN: states.HOST_MAINTENANCE}.get(req.mode)
            if fenced:
                # From now on nothing new lands here: a rebuilt host's agent
                # must not get work, a drained one must end empty.
                session.execute(sa.update(Host).where(Host.name.in_(req.hosts)).values(
                    state=fenced, state_reason=req.reason or f"evacuation {evacuation_id}"))
            # NOTE: the run's intent commits with the rows (the outbox): a
            # crash after the commit leaves a run the reconciler posts.
            flow_id = ids.new_uuid()
            evacuation.flow_id, evacuation.runs = flow_id, [flow_id]
            # Placement hears of the fenced hosts before the run is posted.
            intents.on_commit(session, functools.partial(self._after_fence, req.hosts, fenced))
            self._post(session, evacuation_id, flow_id, [s.id for s in servers],
                       int(req.max_parallel), run=0)
        return self.show(evacuation_id)

    def _after_fence(self, hosts: list[str], state: str | None) -> None:
        """Keep the placement trait in step with a host that is no longer up."""
        if state is None or self.on_host_state is None:
            return
        for name in hosts:
            try:
                self.on_host_state(name, state)
            except FleetflowError as exc:  # the state is written; the trait can follow
                LOG.warning("host %s: could not mark its provider %s: %s", name, state, exc)

    def _post(self, session, evacuation_id: str, flow_id: str, uuids: list[str], lanes: int,
              run: int) -> None:
        """Submit a run in ``session``'s transaction: posted once the rows commit."""
        args = {"evacuation_id": evacuation_id, "count": len(uuids), "lanes": lanes,
                "run": run}
        per_atom = self.conf.conductor.instances_per_atom
        if len(uuids) > per_atom:
            # Only then: a small evacuation's flow stays one a conductor of the
            # release before could run.
            args["batch"] = per_atom
        self.submit(EVACUATE, args,
                    store={keys.EVACUATION_ID: evacuation_id, keys.INSTANCE_UUIDS: uuids,
                           keys.TENANT_ID: None},
                    tenant_id=None, flow_id=flow_id, session=session)

    def dry_run(self, req: EvacuationRequest, as_up: tuple[str, ...] = ()) -> dict:
        """``{"fits": bool, "instances": [{"id", "tenant_id", "source", "destination",
        "explanation"}]}``: where each server would go now; nothing changes.

        ``as_up``: hosts to count as ``up`` whatever their state (a recovery's
        reserve pool, kept in maintenance until a recovery brings it up)."""
        from fleetflow.persistence.placement import allocations
        from fleetflow.scheduler.moves import plan as move_plan

        self._check(req)
        with self.database.session() as session:
            self._host_rows(session, req.hosts, "hosts")
            if req.target_hosts:
                self._host_rows(session, req.target_hosts, "target_hosts")
            servers = self._servers(session, req.hosts)
            if req.instances is not None:
                wanted = set(req.instances)
                servers = [s for s in servers if s.id in wanted]
            probe = Evacuation(id="dry-run", hosts=list(req.hosts), mode=req.mode,
                               target_hosts=req.target_hosts)
            plan = move_plan.plan(session, probe, [s.id for s in servers],
                                      allocations.usages_by_provider(session), self.conf,
                                      alternates=0, as_up=as_up)
            session.expunge_all()
        instances = []
        for server in servers:
            candidates = plan.candidates.get(server.id) or [None]
            why = plan.unplaced.get(server.id)
            instances.append({"id": server.id, "tenant_id": server.tenant_id,
                              "source": server.host, "destination": candidates[0],
                              "explanation": why[1] if why else None})
        return {"fits": not plan.unplaced, "instances": instances}

    # -- reading --------------------------------------------------------------------
    def show(self, evacuation_id: str) -> dict:
        """The evacuation's view with its instances; NotFound."""
        with self.database.session() as session:
            return rows.view(session, rows.get(session, evacuation_id))

    def list(self, status: str | None = None, host: str | None = None,
             limit: int | None = None, marker: str | None = None) -> tuple[list[dict], str | None]:
        """Views (without instances), newest first; the marker of the next page or None."""
        limit = limit or self.conf.api.page_size
        with self.database.session() as session:
            query = sa.select(Evacuation).order_by(Evacuation.created_at.desc(),
                                                   Evacuation.id.desc())
            if status:
                query = query.where(Evacuation.status == status)
            found = [e for e in session.scalars(query) if host is None or host in e.hosts]
            if marker:
                position = next((i for i, e in enumerate(found) if e.id == marker), None)
                if position is None:
                    raise InvalidInput(f"marker: no evacuation {marker}", field="marker")
                found = found[position + 1:]
            page = found[:limit]
            views = [rows.view(session, e, with_moves=False) for e in page]
            more = len(found) > limit
        return views, (page[-1].id if more and page else None)

    # -- operator actions ---------------------------------------------------------------
    def _paused(self, session, evacuation_id: str, action: str) -> Evacuation:
        evacuation = rows.get(session, evacuation_id, lock=True)
        if evacuation.status != states.PAUSED:
            raise Conflict(f"evacuation {evacuation_id} is {evacuation.status}: only a PAUSED "
                           f"evacuation can be {action}", evacuation_id=evacuation_id,
                           status=evacuation.status)
        return evacuation

    def _next_run(self, session, evacuation: Evacuation) -> tuple[str, list[str], int] | None:
        """Reset the unfinished moves and record a new run; None when nothing is left."""
        unfinished = rows.moves(session, evacuation.id, states.MOVE_UNFINISHED)
        if not unfinished:
            return None
        for move in unfinished:
            move.status, move.step = states.PENDING, None
        flow_id = ids.new_uuid()
        evacuation.flow_id = flow_id
        evacuation.runs = [*evacuation.runs, flow_id]
        evacuation.stopping, evacuation.status = None, states.PENDING
        return flow_id, [m.instance_id for m in unfinished], len(evacuation.runs) - 1

    def _go_on(self, session, evacuation) -> None:
        """Post the next run of a PAUSED evacuation's unfinished servers, or settle it."""
        run = self._next_run(session, evacuation)
        if run is None:
            from fleetflow.flows.evacuate.tasks import settle

            settle(session, evacuation)
        else:
            self._post(session, evacuation.id, run[0], run[1], evacuation.max_parallel, run[2])

    def resume(self, evacuation_id: str) -> dict:
        """A PAUSED evacuation tries its FAILED and PENDING servers again; Conflict otherwise."""
        with self.database.session() as session:
            evacuation = self._paused(session, evacuation_id, "resumed")
            self._go_on(session, evacuation)
        return self.show(evacuation_id)

    def skip(self, evacuation_id: str, instance_ids: list[str]) -> dict:
        """Mark named unfinished servers SKIPPED and go on with the rest (PAUSED only)."""
        if not instance_ids:
            raise InvalidInput("skip.instances: name at least one server",
                               field="skip.instances")
        self._release_gone(evacuation_id, instance_ids)
        with self.database.session() as session:
            evacuation = self._paused(session, evacuation_id, "skipped through")
            moves = {m.instance_id: m for m in rows.moves(session, evacuation_id)}
            for uuid in instance_ids:
                move = moves.get(uuid)
                if move is None:
                    raise InvalidInput(f"skip.instances: server {uuid} is not part of "
                                       f"evacuation {evacuation_id}", field="skip.instances")
                if move.status not in states.MOVE_UNFINISHED:
                    raise Conflict(f"server {uuid} is {move.status}: only a FAILED or "
                                   "PENDING server can be skipped", instance_id=uuid)
            for uuid in instance_ids:
                moves[uuid].status, moves[uuid].step = states.SKIPPED, None
            session.flush()
            self._go_on(session, evacuation)
        return self.show(evacuation_id)

    def _release_gone(self, evacuation_id: str, instance_ids: list[str] | None = None) -> None:
        """What unfinished moves of deleted servers (among ``instance_ids``) still hold
        goes back: a skip or a revert ends them without another run, so nothing
        else would (docs/evacuation.md, "Deletes and moves").

        Only for a PAUSED evacuation, before the action's own transaction: the
        releases commit in transactions of their own (and SQLite has one
        writer). Idempotent, so an action refused afterwards loses nothing.
        """
        from fleetflow.flows.evacuate import gone

        with self.database.read_session() as session:
            if rows.get(session, evacuation_id).status != states.PAUSED:
                return
            query = sa.select(Move.instance_id).outerjoin(
                Instance, Instance.id == Move.instance_id).where(
                Move.evacuation_id == evacuation_id,
                Move.status.in_(tuple(states.MOVE_UNFINISHED)),
                sa.or_(Instance.id.is_(None), Instance.status.in_(gone.GONE)))
            if instance_ids is not None:
                query = query.where(Move.instance_id.in_(list(instance_ids)))
            deleted = list(session.scalars(query))
        if not deleted:
            return
        placement = self.placement
        if placement is None:
            from fleetflow.flows import runtime

            placement = runtime.get().placement
        for uuid in deleted:
            gone.release_leftovers(placement, self.database, evacuation_id, uuid)

    def revert(self, evacuation_id: str) -> dict:
        """End a PAUSED evacuation: its unfinished servers REVERTED, status REVERTED.

        A paused evacuation has no move in flight (the run ended once its
        running moves finished) and every failed move was undone by its
        retry, so this is the record of the operator's decision; finished
        moves stay where they are.
        """
        self._release_gone(evacuation_id)
        with self.database.session() as session:
            evacuation = rows.get(session, evacuation_id, lock=True)
            if evacuation.status == states.REVERTED:
                return rows.view(session, evacuation)
            evacuation = self._paused(session, evacuation_id, "reverted")
            for move in rows.moves(session, evacuation_id, states.MOVE_UNFINISHED):
                move.status, move.step = states.REVERTED, None
            evacuation.stopping = None
            evacuation.status = states.REVERTED
            rows.release_hosts(session, evacuation_id)
        return self.show(evacuation_id)
