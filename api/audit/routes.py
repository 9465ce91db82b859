"""Admin route of the audit: do placement, rows, hosts, groups and flows agree?"""

from __future__ import annotations

from flask.views import MethodView

from fleetflow.api import common, policy
from fleetflow.api.audit import schemas
from fleetflow.api.state import current_state
from fleetflow.services.audit import flows as audit_flows
from fleetflow.services.audit.report import audit

blp = common.Blueprint("audit", __name__, url_prefix="/v2/admin/audit",
                       description="Reconcile placement, instances, hosts and group "
                                   "memberships (administrators only).")


def _placement_client(state):
    """The placement the API serves (its store), else what the configuration names."""
    from fleetflow.persistence.placement.client import LocalPlacement, from_conf

    store = state.services.get("placement_store")
    if store is not None:
        return LocalPlacement(store)
    return from_conf(state.conf, state.database)


@blp.route("")
class Audit(MethodView):
    @policy.authorize("audit:run")
    @blp.arguments(schemas.AuditQueryArgsSchema, location="query")
    @blp.response(200, schemas.AuditResponseSchema)
    @blp.doc(responses={"404": {"description": "A host asked for does not exist."}})
    def get(self, args):
        """Run the audit now and list every mismatch.

        Hosts are asked for their guests over RPC in parallel; a host that does
        not answer is an ``unreachable_host`` mismatch, never taken as empty.
        Unfinished flows are looked up on the jobboard this API posts to, when
        it has one (``counts.jobboard`` says whether it was listed).
        ``clean`` is true only when nothing disagrees.
        """
        state = current_state()
        report = audit(state.database, _placement_client(state),
                       state.service("compute_rpcapi"), hosts=args.get("host"),
                       strict=args["strict"],
                       service_down_time=state.conf.compute.service_down_time,
                       board=state.services.get("jobboard"),
                       flow_grace=audit_flows.grace(args["strict"], args.get("flow_grace"),
                                                    state.conf))
        return {"audit": report.to_dict()}
