"""Admin route of the audit: do placement, rows, hosts, groups and flows agree?"""

from __future__ import annotations

from flask.views import MethodView

from fleetflow.api import common, policy
from fleetflow.api.audit import schemas
from fleetflow.api.state import current_state
from fleetflow.services import wiring
from fleetflow.services.audit import flows as audit_flows
from fleetflow.services.audit.report import audit

blp = common.Blueprint("audit", __name__, url_prefix="/v2/admin/audit",
                       description="Reconcile placement, instances, hosts and group "
                                   "memberships (administrators only).")


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
        # The placement this API serves (its store), else the configured one.
        placement = wiring.placement_client(state.conf, state.database,
                                            state.services.get("placement_store"))
        report = audit(state.database, placement, state.service("compute_rpcapi"),
                       hosts=args.get("host"), strict=args["strict"],
                       service_down_time=state.conf.compute.service_down_time,
                       board=state.services.get("jobboard"),
                       flow_grace=audit_flows.grace(args["strict"], args.get("flow_grace"),
                                                    state.conf))
        return {"audit": report.to_dict()}
