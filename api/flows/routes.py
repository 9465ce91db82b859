"""Flows: operators list, show, resume and revert any flow; tenants read their own.

``/v2/admin/flows...`` is for administrators; ``/v2/{tenant_id}/flows...``
shows only the flows that tenant submitted (another tenant's flow id answers
404, so ids cannot be probed). Resume and revert answer ``202`` at once: they
rewrite the flow's checkpoints and post its job; a conductor does the work
(read the state back with ``GET``). The service is services/flows.py.
"""

from __future__ import annotations

from flask.views import MethodView

from fleetflow.api import common, policy
from fleetflow.api.flows import schemas
from fleetflow.api.state import current_state
from fleetflow.services import flows

blp = common.Blueprint("flows", __name__, url_prefix="/v2",
                       description="Flows run by the engine: state, atoms, failures; "
                                   "operator resume and revert.")


def _backend():
    return current_state().service("logbook_backend")


def _page(args: dict, tenant: str | None, own: str | None = None) -> dict:
    """A page of flows (of ``tenant`` when given); the marker must be a flow the
    caller may see (``own``: the project whose flows those are, None for operators)."""
    limit = common.page_limit(args)
    found, more = flows.list_page(_backend(), limit=limit, marker=args.get("marker"),
                                  state=args.get("state"), tenant=tenant, own=own)
    return {"flows": found, "links": common.next_links(limit, found[-1]["id"]) if more else []}


@blp.route("/admin/flows")
class AdminFlows(MethodView):
    @policy.authorize("flows:admin_list")
    @blp.arguments(schemas.AdminFlowQueryArgsSchema, location="query")
    @blp.response(200, schemas.FlowListSchema)
    def get(self, args):
        """List every flow (filter by state, PAUSED included, and owner tenant).

        Newest first (created descending, the id breaking ties), paginated with
        limit/marker (a flow id).
        """
        return _page(args, args.get("tenant"))


@blp.route("/admin/flows/<flow_id>")
class AdminFlowItem(MethodView):
    @policy.authorize("flows:admin_show")
    @blp.response(200, schemas.FlowResponseSchema)
    def get(self, flow_id):
        """Show a flow: every atom's state, intention, attempts and failure."""
        return {"flow": flows.show(_backend(), flow_id)}


@blp.route("/admin/flows/<flow_id>/resume")
class FlowResume(MethodView):
    @policy.authorize("flows:resume")
    @blp.response(202, schemas.FlowResponseSchema)
    def post(self, flow_id):
        """Resume a stopped flow (crashed, suspended, paused on error) from its checkpoint.

        A paused flow re-runs the atom that failed; a flow whose revert failed
        retries that revert. 409 for a flow that ended SUCCESS or REVERTED.
        """
        state = current_state()
        return {"flow": flows.resume(state.service("jobboard"), _backend(), flow_id)}


@blp.route("/admin/flows/<flow_id>/revert")
class FlowRevert(MethodView):
    @policy.authorize("flows:revert")
    @blp.response(202, schemas.FlowResponseSchema)
    def post(self, flow_id):
        """Revert a paused, suspended or failed flow (its on_error becomes revert).

        409 for a flow that is running or ended SUCCESS; a REVERTED flow is
        shown as it is.
        """
        state = current_state()
        return {"flow": flows.revert(state.service("jobboard"), _backend(), flow_id)}


@blp.route("/<tenant_id>/flows")
class TenantFlows(MethodView):
    @policy.authorize("flows:list")
    @blp.arguments(schemas.FlowQueryArgsSchema, location="query")
    @blp.response(200, schemas.FlowListSchema)
    def get(self, args, tenant_id):
        """List the project's own flows, newest first, paginated with limit/marker."""
        return _page(args, tenant_id, own=tenant_id)


@blp.route("/<tenant_id>/flows/<flow_id>")
class TenantFlowItem(MethodView):
    @policy.authorize("flows:show")
    @blp.response(200, schemas.FlowResponseSchema)
    def get(self, tenant_id, flow_id):
        """Show one of the project's flows (404 for any other)."""
        return {"flow": flows.show(_backend(), flow_id, tenant=tenant_id)}


@blp.route("/admin/flows/<flow_id>/graph")
class AdminFlowGraph(MethodView):
    @policy.authorize("flows:admin_graph")
    @blp.response(200, schemas.FlowGraphResponseSchema)
    def get(self, flow_id):
        """Show any flow as a graph: nested flows, retries, atoms with states and failures."""
        return {"graph": flows.graph(_backend(), flow_id)}


@blp.route("/<tenant_id>/flows/<flow_id>/graph")
class TenantFlowGraph(MethodView):
    @policy.authorize("flows:graph")
    @blp.response(200, schemas.FlowGraphResponseSchema)
    def get(self, tenant_id, flow_id):
        """Show one of the project's flows as a graph (404 for any other).

        Its structure comes from the flow's factory, rebuilt as a conductor
        resuming it would; each atom carries its state, intention, last
        checkpoint and failure, each flow its atoms counted by state.
        """
        return {"graph": flows.graph(_backend(), flow_id, tenant=tenant_id)}
