"""Evacuations: every server off one or several hosts, as one durable operation.

``POST`` hands the request to the ``evacuations`` service
(:class:`fleetflow.services.evacuations.EvacuationOps`), which checks it against
the cloud, writes the evacuation with one move per server, takes the hosts and
posts the flow, all before the ``202``; progress is read back with ``GET``.
An evacuation that paused on a server it could not move is steered with
``resume``, ``skip`` and ``revert`` (409 in any other state). Administrators
only; docs/evacuation.md tells the whole story.
"""

from __future__ import annotations

import urllib.parse

import flask
from flask.views import MethodView

from fleetflow.api import auth, common, openapi, policy
from fleetflow.api.evacuations import schemas
from fleetflow.api.state import current_state
from fleetflow.services.evacuations import EvacuationRequest

blp = common.Blueprint("evacuations", __name__, url_prefix="/v2/admin/evacuations",
                       description="Host evacuations and their moves (administrators only).")


def _ops():
    return current_state().service("evacuations")


def self_link(evacuation_id: str) -> str:
    return flask.url_for("evacuations.EvacuationItem", evacuation_id=evacuation_id,
                         _external=True)


def _links(view: dict) -> list[dict]:
    return [{"rel": "self", "href": self_link(view["id"])}]


def _with_links(view: dict) -> dict:
    return {**view, "links": _links(view)}


def accept(fields: dict, dry_run: bool):
    """Start an evacuation of ``fields`` (the body, hosts included), or only try it.

    Shared by this blueprint and ``POST /v2/admin/hosts/{name}/evacuate``.
    """
    req = EvacuationRequest(user_id=auth.current_context().user_id, **fields)
    if dry_run:
        verdict = _ops().dry_run(req)
        # A Response passes flask-smorest's 202 response decorator unchanged.
        body = schemas.EvacuationDryRunResponseSchema().dump({"evacuation": verdict})
        return flask.jsonify(body)
    view = _ops().evacuate(req)
    summary = {"id": view["id"], "status": view["status"], "links": _links(view)}
    return {"evacuation": summary}, {"Location": summary["links"][0]["href"]}


def _next_link(marker: str | None, limit: int) -> list[dict]:
    if marker is None:
        return []
    query = flask.request.args.to_dict()
    query.update(limit=str(limit), marker=marker)
    return [{"rel": "next", "href": flask.request.base_url + "?" + urllib.parse.urlencode(query)}]


@blp.route("")
class Evacuations(MethodView):
    @policy.authorize("evacuations:list")
    @blp.arguments(schemas.EvacuationQueryArgsSchema, location="query")
    @blp.response(200, schemas.EvacuationListSchema)
    def get(self, args):
        """List evacuations with their progress, newest first.

        ``status`` and ``host`` filter; paginated with limit/marker.
        """
        limit = args.get("limit") or current_state().conf.api.page_size
        views, marker = _ops().list(status=args.get("status"), host=args.get("host"),
                                    limit=limit, marker=args.get("marker"))
        return {"evacuations": [_with_links(v) for v in views],
                "links": _next_link(marker, limit)}

    @policy.authorize("evacuations:create")
    @blp.arguments(schemas.EvacuationCreateArgsSchema, location="query")
    @blp.arguments(schemas.EvacuationCreateSchema)
    @blp.response(202, schemas.EvacuationSummaryResponseSchema,
                  description="Accepted: the moves are written and the flow is posted. "
                              "The Location header is the evacuation's status URL.",
                  headers={"Location": openapi.LOCATION})
    @blp.alt_response(200, schema=schemas.EvacuationDryRunResponseSchema,
                      description="With dry_run=true: where each server would go now; "
                                  "nothing is claimed or written.")
    @blp.doc(responses={"404": {"description": "A host it names does not exist."}})
    def post(self, args, body):
        """Evacuate hosts: ``rebuild`` (dead hosts), ``live``, ``cold`` or ``drain``.

        Refused before anything is written: a bad field (400, naming it), an
        unknown host (404), a host another evacuation holds (409
        EVACUATION_IN_PROGRESS), a host with servers still building or being
        changed there (409 BUILDS_IN_PROGRESS), a rebuild of a host that is not
        down or still answers (409 HOST_ALIVE).
        """
        return accept(body["evacuation"], args["dry_run"])


@blp.route("/<evacuation_id>")
class EvacuationItem(MethodView):
    @policy.authorize("evacuations:show")
    @blp.response(200, schemas.EvacuationResponseSchema)
    def get(self, evacuation_id):
        """Show an evacuation: status, progress, and every server's move and fault."""
        return {"evacuation": _with_links(_ops().show(evacuation_id))}


def _action(description: str):
    return blp.response(202, schemas.EvacuationResponseSchema, description=description)


@blp.route("/<evacuation_id>/resume")
class EvacuationResume(MethodView):
    @policy.authorize("evacuations:resume")
    @blp.arguments(schemas.EvacuationActionSchema)
    @_action("Accepted: a new run is posted for the FAILED and PENDING servers.")
    def post(self, _body, evacuation_id):
        """Resume a PAUSED evacuation: its failed and pending servers are placed afresh."""
        return {"evacuation": _with_links(_ops().resume(evacuation_id))}


@blp.route("/<evacuation_id>/skip")
class EvacuationSkip(MethodView):
    @policy.authorize("evacuations:skip")
    @blp.arguments(schemas.EvacuationSkipSchema)
    @_action("Accepted: the named servers are SKIPPED and a run is posted for the rest.")
    def post(self, body, evacuation_id):
        """Leave named servers of a PAUSED evacuation where they are; go on with the rest."""
        view = _ops().skip(evacuation_id, list(body["skip"]["instances"]))
        return {"evacuation": _with_links(view)}


@blp.route("/<evacuation_id>/revert")
class EvacuationRevert(MethodView):
    @policy.authorize("evacuations:revert")
    @blp.arguments(schemas.EvacuationActionSchema)
    @_action("Accepted: the unfinished servers are REVERTED; finished moves stay.")
    def post(self, _body, evacuation_id):
        """End a PAUSED evacuation where it stands (status REVERTED)."""
        return {"evacuation": _with_links(_ops().revert(evacuation_id))}
