"""Quotas: what a project may hold at once (instances, vcpus, ram_mb, volumes, gigabytes).

Administrators read and set any project's limits at ``/v2/admin/quotas/{tenant_id}``;
a project reads its own, with its usage, at ``/v2/{tenant_id}/quotas``. Limits
are checked when a reservation is made, before any row or job exists (and
again at claim time by the flow). A project without limits of its own gets the
``[quota]`` defaults of the configuration.
"""

from __future__ import annotations

from flask.views import MethodView

from fleetflow.api import common, policy
from fleetflow.api.quotas import schemas
from fleetflow.api.state import current_state
from fleetflow.services import quotas

blp = common.Blueprint("quotas", __name__, url_prefix="/v2",
                       description="Per project limits on instances, vcpus, RAM and volumes.")


def _show(tenant_id: str) -> dict:
    state = current_state()
    return {"quota": quotas.show(state.database, state.conf, tenant_id)}


@blp.route("/admin/quotas/<tenant_id>")
class AdminQuota(MethodView):
    @policy.authorize("quotas:admin_show")
    @blp.response(200, schemas.QuotaResponseSchema)
    def get(self, tenant_id):
        """Show any project's limits and usage."""
        return _show(tenant_id)

    @policy.authorize("quotas:update")
    @blp.arguments(schemas.QuotaUpdateSchema)
    @blp.response(200, schemas.QuotaResponseSchema)
    def put(self, body, tenant_id):
        """Set a project's limits; limits not given keep their current value.

        Lowering a limit below the usage is allowed (as in Nova): running
        instances stay, new reservations are refused until usage drops.
        A project's first limits copy the defaults of those not given; the
        volume limits are only written when given, and follow the defaults
        until then.
        """
        state = current_state()
        return {"quota": quotas.update(state.database, state.conf, tenant_id, body["quota"])}


@blp.route("/<tenant_id>/quotas")
class ProjectQuota(MethodView):
    @policy.authorize("quotas:show")
    @blp.response(200, schemas.QuotaResponseSchema)
    def get(self, tenant_id):
        """Show the project's own limits and usage."""
        return _show(tenant_id)
