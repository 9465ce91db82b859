"""Admin routes of compute hosts: list, show, change state, evacuate, simulate.

The state shown (and filtered on) is the effective one: an ``up`` host whose
agent stopped reporting reads ``down``. The logic lives in the ``hosts``
service (:class:`fleetflow.services.hosts.HostOps`); evacuating one host is the
evacuation routes' POST with that single host.
"""

from __future__ import annotations

from flask.views import MethodView

from fleetflow.api import auth, common, openapi, policy
from fleetflow.api.evacuations import routes as evacuation_routes
from fleetflow.api.evacuations import schemas as evacuation_schemas
from fleetflow.api.hosts import schemas
from fleetflow.api.state import current_state
from fleetflow.services import hosts as host_ops

blp = common.Blueprint("hosts", __name__, url_prefix="/v2/admin/hosts",
                       description="Compute hosts of the fleet (administrators only).")


def _ops() -> host_ops.HostOps:
    state = current_state()
    if "hosts" in state.services:
        return state.service("hosts")
    # NOTE: an app built without the service (tests of the host list) still
    # gets the same logic, with whatever placement and compute it was given.
    return host_ops.HostOps(state.conf, state.database, state.services.get("placement_store"),
                            state.services.get("compute_rpcapi"))


@blp.route("")
class Hosts(MethodView):
    @policy.authorize("hosts:list")
    @blp.arguments(schemas.HostQueryArgsSchema, location="query")
    @blp.response(200, schemas.HostListSchema)
    def get(self, args):
        """List hosts with topology, inventory, capacity, capabilities, traits, state and
        instances.

        Filters combine (AND); ``state`` is the effective state. Sorted by
        name, paginated with limit/marker.
        """
        limit = common.page_limit(args)
        hosts, more = _ops().list_page(limit=limit, marker=args.get("marker"),
                                       state=args.get("state"), region=args.get("region"),
                                       zone=args.get("zone"), rack=args.get("rack"))
        return {"hosts": hosts,
                "links": common.next_links(limit, hosts[-1]["name"]) if more else []}


@blp.route("/<name>")
class HostItem(MethodView):
    @policy.authorize("hosts:show")
    @blp.response(200, schemas.HostResponseSchema)
    def get(self, name):
        """Show one host."""
        return {"host": _ops().show(name)}

    @policy.authorize("hosts:update")
    @blp.arguments(schemas.HostUpdateSchema)
    @blp.response(200, schemas.HostResponseSchema)
    def put(self, body, name):
        """Set a host's state (up, down, maintenance, disabled) and the reason.

        The scheduler only places on hosts that are ``up``; a host that is not
        carries the COMPUTE_STATUS_DISABLED trait on its resource provider.
        ``down`` is immediate (an operator's forced down). A host held by an
        evacuation cannot be set ``up`` (409 EVACUATION_IN_PROGRESS).
        """
        change = body["host"]
        host = _ops().set_state(name, change["state"], change.get("reason"),
                                user_id=auth.current_context().user_id)
        return {"host": host}


@blp.route("/<name>/evacuate")
class HostEvacuate(MethodView):
    @policy.authorize("hosts:evacuate")
    @blp.arguments(evacuation_schemas.EvacuationCreateArgsSchema, location="query")
    @blp.arguments(evacuation_schemas.HostEvacuateSchema)
    @blp.response(202, evacuation_schemas.EvacuationSummaryResponseSchema,
                  description="Accepted: the Location header is the evacuation's status "
                              "URL (GET /v2/admin/evacuations/{id}).",
                  headers={"Location": openapi.LOCATION})
    @blp.alt_response(200, schema=evacuation_schemas.EvacuationDryRunResponseSchema,
                      description="With dry_run=true: where each server would go now.")
    def post(self, args, body, name):
        """Evacuate one host: the same as POST /v2/admin/evacuations with this host."""
        return evacuation_routes.accept({**body["evacuate"], "hosts": [name]}, args["dry_run"])


@blp.route("/<name>/simulate")
class HostSimulate(MethodView):
    @policy.authorize("hosts:simulate")
    @blp.arguments(schemas.HostSimulateSchema)
    @blp.response(200, schemas.HostSimulateResponseSchema)
    def post(self, body, name):
        """Kill (``dead: true``) or revive a simulated host.

        404 NOT_SIMULATED for a host that runs a real hypervisor; 409
        SIMULATED_ONLY in openstack mode (``[cloud] driver = openstack``). The
        host's state is left to the operator and its heartbeat.
        """
        host = _ops().simulate(name, body["simulate"]["dead"])
        faults = host.pop("faults", None)
        return {"host": host, "faults": faults}
