"""Admin route of the fleet's capacity: total, used and free per level and resource class."""

from __future__ import annotations

from flask.views import MethodView

from fleetflow.api import common, policy
from fleetflow.api.capacity import schemas
from fleetflow.api.state import current_state
from fleetflow.services import capacity

blp = common.Blueprint("capacity", __name__, url_prefix="/v2/admin/capacity",
                       description="Capacity of the fleet per region, zone, rack, host and "
                                   "storage backend (administrators only).")


@blp.route("")
class Capacity(MethodView):
    @policy.authorize("capacity:show")
    @blp.arguments(schemas.CapacityQueryArgsSchema, location="query")
    @blp.response(200, schemas.CapacityResponseSchema)
    def get(self, args):
        """Total, used and free of every resource class, instance and host counts, hosts
        by state, per region › zone › rack › host (``by`` stops higher), and per storage
        backend. Usage is placement's."""
        state = current_state()
        report = capacity.report(state.database, state.conf.compute.service_down_time,
                                 region=args.get("region"), zone=args.get("zone"),
                                 by=args["by"])
        return {"capacity": report}
