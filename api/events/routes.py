"""The feed of recent changes the console polls: operations and hosts whose state changed."""

from __future__ import annotations

from flask.views import MethodView

from fleetflow.api import common, policy
from fleetflow.api.events import schemas
from fleetflow.api.state import current_state
from fleetflow.services import events

blp = common.Blueprint("events", __name__, url_prefix="/v2",
                       description="Recent changes of reservations, virtual clusters, "
                                   "evacuations and hosts, from a cursor.")


def _changes(args, tenant: str | None = None) -> dict:
    state = current_state()
    return events.changes(state.database, state.conf.compute.service_down_time,
                          since=args.get("since"), tenant=tenant, limit=args["limit"])


@blp.route("/admin/events")
class AdminEvents(MethodView):
    @policy.authorize("events:admin_list")
    @blp.arguments(schemas.EventsQueryArgsSchema, location="query")
    @blp.response(200, schemas.EventsResponseSchema)
    def get(self, args):
        """What changed after ``since``, oldest first: every project's reservations and
        virtual clusters, evacuations, hosts (their state now). Without ``since``: the
        last ``limit`` changes. Poll again with the answer's ``cursor``."""
        return _changes(args)


@blp.route("/<tenant_id>/events")
class TenantEvents(MethodView):
    @policy.authorize("events:list")
    @blp.arguments(schemas.EventsQueryArgsSchema, location="query")
    @blp.response(200, schemas.EventsResponseSchema)
    def get(self, args, tenant_id):
        """What changed after ``since`` among the project's reservations and virtual
        clusters, oldest first; poll again with the answer's ``cursor``."""
        return _changes(args, tenant=tenant_id)
