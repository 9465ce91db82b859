"""Servers: every instance of a project, whatever reservation made it.

A server's id is a uuid and never a reservation id (docs/origins.md,
"Reservations of N instances"); the servers of one reservation are
``GET .../servers?reservation_id=r-...``.
Another project's server answers 404.
"""

from __future__ import annotations

import sqlalchemy as sa
from flask.views import MethodView
from flask_smorest import abort

from fleetflow.api import common, policy
from fleetflow.api.servers import schemas
from fleetflow.api.state import current_state
from fleetflow.common import ids, states
from fleetflow.persistence.models import Instance

blp = common.Blueprint("servers", __name__, url_prefix="/v2/<tenant_id>/servers",
                       description="Instances of the project, one by one.")


def _get_server(session, tenant_id: str, server_id: str) -> Instance:
    instance = session.get(Instance, server_id) if ids.is_uuid(server_id) else None
    if instance is None or instance.tenant_id != tenant_id:
        abort(404, message=f"Server {server_id} does not exist.")
    return instance


@blp.route("")
class Servers(MethodView):
    @policy.authorize("servers:list")
    @blp.arguments(schemas.ServerQueryArgsSchema, location="query")
    @blp.response(200, schemas.ServerListSchema)
    def get(self, args, tenant_id):
        """List the project's servers; filter by reservation_id, status, host (admins).

        Sorted by id, paginated with limit/marker. Deleted servers are left out
        unless ``status=DELETED`` asks for them.
        """
        stmt = sa.select(Instance).where(Instance.tenant_id == tenant_id)
        if args.get("reservation_id") is not None:
            stmt = stmt.where(Instance.reservation_id == args["reservation_id"])
        if args.get("status") is not None:
            stmt = stmt.where(Instance.status == args["status"])
        else:
            stmt = stmt.where(Instance.status != states.DELETED)
        if args.get("host") is not None:
            # NOTE: where instances run is the operator's business (a tenant
            # could map the fleet with it), so the filter has its own rule.
            policy.enforce("servers:filter_by_host")
            stmt = stmt.where(Instance.host == args["host"])
        with current_state().database.session() as session:
            servers, links = common.paginate(session, stmt, Instance.id, args)
            return {"servers": servers, "links": links}


@blp.route("/<server_id>")
class ServerItem(MethodView):
    @policy.authorize("servers:show")
    @blp.response(200, schemas.ServerResponseSchema)
    def get(self, tenant_id, server_id):
        """Show one server with its host, attempts and fault."""
        with current_state().database.session() as session:
            return {"server": _get_server(session, tenant_id, server_id)}

    @policy.authorize("servers:delete")
    @blp.response(202, schemas.ServerDeleteResponseSchema,
                  description="Accepted: a teardown flow frees its allocation and group "
                              "membership.")
    def delete(self, tenant_id, server_id):
        """Delete one server (409 while it is still being built, or while an evacuation
        still moves it: SERVER_BEING_MOVED)."""
        operations = current_state().service("operations")
        return {"server": operations.delete_server(tenant_id, server_id)}
