"""Servers: every instance of a project, whatever reservation made it.

A server's id is a uuid and never a reservation id (docs/origins.md,
"Reservations of N instances"); the servers of one reservation are
``GET .../servers?reservation_id=r-...``.
Another project's server answers 404. Operators list every project's servers
with ``GET /v2/admin/servers`` (or ``all_tenants=1`` on a project's list, as
in Nova); both lists are one query (:mod:`fleetflow.services.servers`) shown
by one schema.
"""

from __future__ import annotations

from flask.views import MethodView
from flask_smorest import abort

from fleetflow.api import common, policy
from fleetflow.api.servers import schemas
from fleetflow.api.state import current_state
from fleetflow.services import servers

blp = common.Blueprint("servers", __name__, url_prefix="/v2",
                       description="Instances of the project, one by one; every "
                                   "project's for operators.")


def _page(args: dict, tenant_id: str | None) -> dict:
    limit = common.page_limit(args)
    found, more = servers.list_page(
        current_state().database, limit=limit, marker=args.get("marker"), tenant_id=tenant_id,
        reservation_id=args.get("reservation_id"), status=args.get("status"),
        host=args.get("host"))
    return {"servers": found,
            "links": common.next_links(limit, found[-1].id) if more else []}


@blp.route("/<tenant_id>/servers")
class Servers(MethodView):
    @policy.authorize("servers:list")
    @blp.arguments(schemas.TenantServerQueryArgsSchema, location="query")
    @blp.response(200, schemas.ServerListSchema)
    def get(self, args, tenant_id):
        """List the project's servers; filter by reservation_id, status, host (admins).

        Newest first (``created_at`` descending, the id breaking ties), paginated
        with limit/marker (a server id). Deleted servers are left out unless
        ``status=DELETED`` asks for them. ``all_tenants=1`` lists every
        project's servers for administrators and is ignored for others (as Nova).
        """
        if args.get("host") is not None:
            # NOTE: where instances run is the operator's business (a tenant
            # could map the fleet with it), so the filter has its own rule.
            policy.enforce("servers:filter_by_host")
        every_project = args.get("all_tenants") and policy.allowed(
            "servers:list_all_projects", {"project_id": tenant_id})
        return _page(args, None if every_project else tenant_id)


@blp.route("/admin/servers")
class AdminServers(MethodView):
    @policy.authorize("servers:admin_list")
    @blp.arguments(schemas.AdminServerQueryArgsSchema, location="query")
    @blp.response(200, schemas.ServerListSchema)
    def get(self, args):
        """List the servers of every project; filter by project_id (or tenant_id),
        reservation_id, status and host.

        Newest first, paginated with limit/marker. Deleted servers are left out
        unless ``status=DELETED`` asks for them.
        """
        return _page(args, args.get("project_id") or args.get("tenant_id"))


@blp.route("/<tenant_id>/servers/<server_id>")
class ServerItem(MethodView):
    @policy.authorize("servers:show")
    @blp.response(200, schemas.ServerResponseSchema)
    def get(self, tenant_id, server_id):
        """Show one server with its host, attempts and fault."""
        server = servers.get(current_state().database, tenant_id, server_id)
        if server is None:
            abort(404, message=f"Server {server_id} does not exist.")
        return {"server": server}

    @policy.authorize("servers:delete")
    @blp.response(202, schemas.ServerDeleteResponseSchema,
                  description="Accepted: a teardown flow frees its allocation and group "
                              "membership.")
    def delete(self, tenant_id, server_id):
        """Delete one server (409 while it is still being built, or while an evacuation
        still moves it: SERVER_BEING_MOVED)."""
        reservations = current_state().service("reservations")
        return {"server": reservations.delete_server(tenant_id, server_id)}


@blp.route("/<tenant_id>/servers/<server_id>/metadata")
class ServerMetadata(MethodView):
    """A server's metadata, as Nova's ``/servers/{id}/metadata``."""

    @policy.authorize("servers:show_metadata")
    @blp.response(200, schemas.ServerMetadataSchema)
    @blp.doc(responses={"404": {"description": "No such server in the project."}})
    def get(self, tenant_id, server_id):
        """Show the server's metadata."""
        return {"metadata": servers.get_metadata(current_state().database, tenant_id,
                                                 server_id)}

    @policy.authorize("servers:update_metadata")
    @blp.arguments(schemas.ServerMetadataSchema)
    @blp.response(200, schemas.ServerMetadataSchema)
    @blp.doc(responses={"404": {"description": "No such server in the project."}})
    def put(self, body, tenant_id, server_id):
        """Replace the server's metadata with the body's: keys it leaves out are gone."""
        return {"metadata": servers.update_metadata(
            current_state().database, tenant_id, server_id, body["metadata"], replace=True)}

    @policy.authorize("servers:update_metadata")
    @blp.arguments(schemas.ServerMetadataSchema)
    @blp.response(200, schemas.ServerMetadataSchema)
    @blp.doc(responses={"404": {"description": "No such server in the project."}})
    def post(self, body, tenant_id, server_id):
        """Merge the body's items into the server's metadata; answers all of it."""
        return {"metadata": servers.update_metadata(
            current_state().database, tenant_id, server_id, body["metadata"])}


@blp.route("/<tenant_id>/servers/<server_id>/metadata/<key>")
class ServerMetadataItem(MethodView):
    @policy.authorize("servers:update_metadata")
    @blp.response(204)
    @blp.doc(responses={"404": {"description": "No such server, or no such key."}})
    def delete(self, tenant_id, server_id, key):
        """Remove one key of the server's metadata."""
        servers.update_metadata(current_state().database, tenant_id, server_id,
                                remove=(key,))
