"""Automatic recovery of dead hosts: what the monitor saw and did, and its switch.

Every detection of a silent host is a recovery with its timeline (suspect,
confirmed dead, held by the storm guard, fenced, its evacuation, the
outcome), read from the ``recoveries`` service
(:class:`fleetflow.services.recovery.ops.RecoveryOps`). ``pause`` and
``resume`` stop and restart automatic action cluster-wide (detection goes
on); a host's ``recovery-plan`` is a dry run. Administrators only;
docs/recovery.md tells the whole story.
"""

from __future__ import annotations

import flask
from flask.views import MethodView

from fleetflow.api import auth, common, policy
from fleetflow.api.evacuations.routes import _next_link
from fleetflow.api.recoveries import schemas
from fleetflow.api.state import current_state
from fleetflow.services.recovery.ops import RecoveryOps

blp = common.Blueprint("recoveries", __name__, url_prefix="/v2/admin",
                       description="Automatic recovery of dead hosts (administrators only).")


def _ops() -> RecoveryOps:
    state = current_state()
    if "recoveries" in state.services:
        return state.service("recoveries")
    # NOTE: an app built without the service (tests of other routes) still gets
    # the same logic, with whatever evacuations service it was given (the plan).
    return RecoveryOps(state.conf, state.database, state.services.get("evacuations"))


def _with_links(view: dict) -> dict:
    href = flask.url_for("recoveries.RecoveryItem", recovery_id=view["id"], _external=True)
    return {**view, "links": [{"rel": "self", "href": href}]}


@blp.route("/recoveries")
class Recoveries(MethodView):
    @policy.authorize("recoveries:list")
    @blp.arguments(schemas.RecoveryQueryArgsSchema, location="query")
    @blp.response(200, schemas.RecoveryListSchema)
    def get(self, args):
        """List the monitor's detections, newest first, and whether it may act.

        ``status`` and ``host`` filter; paginated with limit/marker.
        """
        limit = args.get("limit") or current_state().conf.api.page_size
        views, marker = _ops().list(limit=limit, marker=args.get("marker"),
                                    host=args.get("host"), status=args.get("status"))
        return {"recoveries": [_with_links(v) for v in views], "recovery": _ops().status(),
                "links": _next_link(marker, limit)}


# The id's length (``rc-`` and 12 hex digits) keeps ``pause``, ``resume`` and
# ``projects`` from matching it, also for OPTIONS, whose Allow lists every match.
@blp.route("/recoveries/<string(length=15):recovery_id>")
class RecoveryItem(MethodView):
    @policy.authorize("recoveries:show")
    @blp.response(200, schemas.RecoveryResponseSchema)
    def get(self, recovery_id):
        """Show one recovery with its timeline."""
        return {"recovery": _with_links(_ops().show(recovery_id))}


def _switch(paused: bool, body: dict) -> dict:
    reason = (body.get("recovery") or {}).get("reason")
    return {"recovery": _ops().set_paused(paused, reason, auth.current_context().user_id)}


@blp.route("/recoveries/pause")
class RecoveriesPause(MethodView):
    @policy.authorize("recoveries:pause")
    @blp.arguments(schemas.RecoverySwitchSchema, required=False)
    @blp.response(200, schemas.RecoveryStatusResponseSchema)
    def post(self, body):
        """Stop automatic fencing and evacuation cluster-wide (a maintenance window).

        Detection goes on and is listed; evacuations already started go on.
        """
        return _switch(True, body)


@blp.route("/recoveries/resume")
class RecoveriesResume(MethodView):
    @policy.authorize("recoveries:resume")
    @blp.arguments(schemas.RecoverySwitchSchema, required=False)
    @blp.response(200, schemas.RecoveryStatusResponseSchema)
    def post(self, body):
        """Let the monitor act again: hosts found dead meanwhile are recovered."""
        return _switch(False, body)


@blp.route("/hosts/<name>/recovery-plan")
class HostRecoveryPlan(MethodView):
    @policy.authorize("hosts:recovery_plan")
    @blp.response(200, schemas.RecoveryPlanResponseSchema)
    @blp.doc(responses={"404": {"description": "The host does not exist."}})
    def get(self, name):
        """What a recovery of this host would do if it died now: a dry run.

        Which servers would be rebuilt where, in their move order, and which
        would stay (``recovery=never``, not ``ha=true`` ...); nothing changes.
        """
        return {"recovery_plan": _ops().plan(name)}


@blp.route("/recoveries/projects")
class RecoveryProjects(MethodView):
    @policy.authorize("recoveries:projects")
    @blp.response(200, schemas.RecoveryProjectListSchema)
    def get(self):
        """List the projects whose servers a recovery chooses otherwise than
        ``[recovery] servers``."""
        return {"projects": _ops().projects()}


@blp.route("/recoveries/projects/<project_id>")
class RecoveryProject(MethodView):
    @policy.authorize("recoveries:projects")
    @blp.response(200, schemas.RecoveryProjectResponseSchema)
    def get(self, project_id):
        """Which of the project's servers a recovery moves (``default``: no override)."""
        return {"project": _ops().project(project_id)}

    @policy.authorize("recoveries:update_project")
    @blp.arguments(schemas.RecoveryProjectUpdateSchema)
    @blp.response(200, schemas.RecoveryProjectResponseSchema)
    def put(self, body, project_id):
        """Choose which of the project's servers a recovery moves: all, ha (metadata
        ha=true only) or none. ``recovery=never`` servers never move."""
        fields = body["project"]
        return {"project": _ops().set_project(project_id, fields["servers"],
                                              fields.get("reason"),
                                              auth.current_context().user_id)}

    @policy.authorize("recoveries:update_project")
    @blp.response(200, schemas.RecoveryProjectResponseSchema)
    def delete(self, project_id):
        """Drop the project's override: ``[recovery] servers`` applies again."""
        return {"project": _ops().clear_project(project_id)}
