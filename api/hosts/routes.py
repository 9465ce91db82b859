"""Admin routes of compute hosts: list, show, change state."""

from __future__ import annotations

import logging

import sqlalchemy as sa
from flask.views import MethodView
from flask_smorest import abort

from fleetflow.api import auth, common, policy
from fleetflow.api.hosts import schemas
from fleetflow.api.state import current_state
from fleetflow.persistence.models import Host

LOG = logging.getLogger(__name__)

blp = common.Blueprint("hosts", __name__, url_prefix="/v2/admin/hosts",
                       description="Compute hosts of the fleet (administrators only).")


def _get_host(session, name: str) -> Host:
    host = session.scalars(sa.select(Host).where(Host.name == name)).first()
    if host is None:
        abort(404, message=f"Host {name} does not exist.")
    return host


@blp.route("")
class Hosts(MethodView):
    @policy.authorize("hosts:list")
    @blp.arguments(schemas.HostQueryArgsSchema, location="query")
    @blp.response(200, schemas.HostListSchema)
    def get(self, args):
        """List hosts with topology, inventory, capabilities, traits and state.

        Filters combine (AND); sorted by name, paginated with limit/marker.
        """
        stmt = sa.select(Host)
        for column in ("state", "region", "zone", "rack"):
            if args.get(column) is not None:
                stmt = stmt.where(getattr(Host, column) == args[column])
        with current_state().database.session() as session:
            hosts, links = common.paginate(session, stmt, Host.name, args)
            return {"hosts": hosts, "links": links}


@blp.route("/<name>")
class HostItem(MethodView):
    @policy.authorize("hosts:show")
    @blp.response(200, schemas.HostResponseSchema)
    def get(self, name):
        """Show one host."""
        with current_state().database.session() as session:
            return {"host": _get_host(session, name)}

    @policy.authorize("hosts:update")
    @blp.arguments(schemas.HostUpdateSchema)
    @blp.response(200, schemas.HostResponseSchema)
    def put(self, body, name):
        """Set a host's state (up, down, maintenance, disabled) and the reason.

        The scheduler only places on hosts that are ``up``.
        """
        change = body["host"]
        with current_state().database.session() as session:
            host = _get_host(session, name)
            previous = host.state
            host.state = change["state"]
            host.state_reason = change.get("reason")
            session.flush()
            # NOTE: once the placement store exists, a host that is not up
            # should also be marked on its resource provider (the
            # COMPUTE_STATUS_DISABLED trait, as Nova does) so that allocation
            # candidates skip it. Not done yet: scheduling reads Host.state.
            LOG.info("Host %s state %s -> %s by %s (%s)", name, previous, host.state,
                     auth.current_context().user_id, change.get("reason"))
            return {"host": host}
