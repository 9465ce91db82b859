"""Server groups of a project, in JSON or XML.

Members are read-only: an instance joins the group named by its
reservation's ``group_id`` when it is claimed, and leaves when it is deleted.
``PUT`` changes name and metadata at any time and the placement rules
(policies, scope, max_per_host, capabilities) only while the group is empty;
``DELETE`` of a group with members is a 409. Another project's group answers
404, as if it did not exist.

``Accept: application/xml`` answers XML and ``Content-Type: application/xml``
bodies are accepted (see :mod:`fleetflow.api.xml` for the document shape).
"""

from __future__ import annotations

import flask
from flask.views import MethodView
from flask_smorest import abort

from fleetflow.api import common, openapi, policy, xml
from fleetflow.api.groups import schemas
from fleetflow.api.state import current_state
from fleetflow.services import groups

blp = common.Blueprint("groups", __name__, url_prefix="/v2/<tenant_id>/groups",
                       description="Server groups: placement rules shared by instances "
                                   "(JSON or XML).")

XML_SHAPE = xml.XmlShape(
    lists={"groups": "group", "policies": "policy", "members": "member"},
    keyed={"metadata": "meta", "capabilities": "capability"})
xml.enable(blp, XML_SHAPE)


def _check_tenant_field(fields: dict, tenant_id: str) -> None:
    # NOTE: tenant_id is among the attributes a client may send; accepting
    # only the path's project keeps it from moving a group elsewhere.
    given = fields.pop("tenant_id", None)
    if given is not None and given != tenant_id:
        abort(400, message=f"Invalid body field 'group.tenant_id': must be the project "
                           f"of the path ({tenant_id}).")


@blp.route("")
class Groups(MethodView):
    @policy.authorize("groups:list")
    @blp.arguments(schemas.GroupQueryArgsSchema, location="query")
    @blp.response(200, schemas.GroupListSchema)
    def get(self, args, tenant_id):
        """List the project's server groups, newest first, paginated with limit/marker.

        Newest first: ``created_at`` descending, the id breaking ties; the marker
        is a group id.
        """
        limit = common.page_limit(args)
        found, more = groups.list_page(current_state().database, tenant_id, limit=limit,
                                       marker=args.get("marker"), name=args.get("name"))
        return {"groups": found,
                "links": common.next_links(limit, found[-1].id) if more else []}

    @policy.authorize("groups:create")
    @blp.arguments(schemas.GroupCreateSchema)
    @blp.response(201, schemas.GroupResponseSchema, headers={"Location": openapi.LOCATION})
    def post(self, body, tenant_id):
        """Create an empty server group; answers 201 with a Location header."""
        fields = dict(body["group"])
        _check_tenant_field(fields, tenant_id)
        group = groups.create(current_state().database, tenant_id, fields)
        location = flask.url_for("groups.GroupItem", tenant_id=tenant_id,
                                 group_id=group.id, _external=True)
        return {"group": group}, {"Location": location}


@blp.route("/<group_id>")
class GroupItem(MethodView):
    @policy.authorize("groups:show")
    @blp.response(200, schemas.GroupResponseSchema)
    def get(self, tenant_id, group_id):
        """Show one group with its members."""
        return {"group": groups.get(current_state().database, tenant_id, group_id)}

    @policy.authorize("groups:update")
    @blp.arguments(schemas.GroupUpdateSchema)
    @blp.response(200, schemas.GroupResponseSchema)
    def put(self, body, tenant_id, group_id):
        """Change name or metadata; change the rules only while the group is empty (409)."""
        fields = dict(body["group"])
        _check_tenant_field(fields, tenant_id)
        return {"group": groups.update(current_state().database, tenant_id, group_id, fields)}

    @policy.authorize("groups:delete")
    @blp.response(204)
    def delete(self, tenant_id, group_id):
        """Delete an empty group (409 while it has members)."""
        groups.delete(current_state().database, tenant_id, group_id)
