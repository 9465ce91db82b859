"""``GET /v2/{tenant_id}/permissions``: which operations the caller may call.

A client asks once and shapes itself: the ``openstack fleet`` commands hide
what the caller's roles cannot use and say so plainly when called anyway. The
answer is the policy's own (defaults and ``[api] policy_file``), rule by rule,
on the project of the path, so it never disagrees with what the routes do.
"""

from __future__ import annotations

from flask.views import MethodView

from fleetflow.api import auth, common, policy
from fleetflow.api.permissions import schemas

blp = common.Blueprint("permissions", __name__, url_prefix="/v2/<tenant_id>/permissions",
                       description="Which operations the caller's roles may call.")


@blp.route("")
class Permissions(MethodView):
    @policy.authorize("permissions:show")
    @blp.response(200, schemas.PermissionsResponseSchema)
    def get(self, tenant_id):
        """List the route rules the caller passes, and those it does not, in this project.

        Any role in the project may ask (an administrator: about any project).
        """
        context = auth.current_context()
        target = {"project_id": tenant_id}
        answers = {name: policy.allowed(name, target) for name, *_ in policy.ROUTE_RULES}
        return {"permissions": {
            "project_id": tenant_id, "roles": sorted(context.roles),
            "allowed": sorted(name for name, ok in answers.items() if ok),
            "denied": sorted(name for name, ok in answers.items() if not ok)}}
