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
import sqlalchemy as sa
from flask.views import MethodView
from flask_smorest import abort

from fleetflow.api import common, openapi, policy, xml
from fleetflow.api.groups import schemas
from fleetflow.api.state import current_state
from fleetflow.persistence import groups as group_rows
from fleetflow.persistence.models import ServerGroup

blp = common.Blueprint("groups", __name__, url_prefix="/v2/<tenant_id>/groups",
                       description="Server groups: placement rules shared by instances "
                                   "(JSON or XML).")

XML_SHAPE = xml.XmlShape(
    lists={"groups": "group", "policies": "policy", "members": "member"},
    keyed={"metadata": "meta", "capabilities": "capability"})
xml.enable(blp, XML_SHAPE)


def _loaded(group: ServerGroup) -> ServerGroup:
    """Load what the response shows while the session is still open."""
    group.members  # noqa: B018 - the relationship loads on first access
    return group


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
        stmt = sa.select(ServerGroup).where(ServerGroup.tenant_id == tenant_id)
        if args.get("name") is not None:
            stmt = stmt.where(ServerGroup.name == args["name"])
        with current_state().database.session() as session:
            groups, links = common.paginate_newest_first(
                session, stmt, ServerGroup, args, scope=(ServerGroup.tenant_id == tenant_id,))
            return {"groups": [_loaded(g) for g in groups], "links": links}

    @policy.authorize("groups:create")
    @blp.arguments(schemas.GroupCreateSchema)
    @blp.response(201, schemas.GroupResponseSchema, headers={"Location": openapi.LOCATION})
    def post(self, body, tenant_id):
        """Create an empty server group; answers 201 with a Location header."""
        fields = dict(body["group"])
        _check_tenant_field(fields, tenant_id)
        with current_state().database.session() as session:
            group = group_rows.create(
                session, tenant_id, fields.get("name"), fields["policies"],
                scope=fields["scope"], max_per_host=fields.get("max_per_host"),
                metadata=fields.get("metadata"), capabilities=fields.get("capabilities"))
            location = flask.url_for("groups.GroupItem", tenant_id=tenant_id,
                                     group_id=group.id, _external=True)
            return {"group": _loaded(group)}, {"Location": location}


@blp.route("/<group_id>")
class GroupItem(MethodView):
    @policy.authorize("groups:show")
    @blp.response(200, schemas.GroupResponseSchema)
    def get(self, tenant_id, group_id):
        """Show one group with its members."""
        with current_state().database.session() as session:
            return {"group": _loaded(group_rows.get(session, group_id, tenant_id))}

    @policy.authorize("groups:update")
    @blp.arguments(schemas.GroupUpdateSchema)
    @blp.response(200, schemas.GroupResponseSchema)
    def put(self, body, tenant_id, group_id):
        """Change name or metadata; change the rules only while the group is empty (409)."""
        fields = dict(body["group"])
        _check_tenant_field(fields, tenant_id)
        with current_state().database.session() as session:
            group = group_rows.get(session, group_id, tenant_id)
            # NOTE: a client that reads a group and sends it back whole with a
            # new name repeats the rules unchanged; that is not a change of
            # rules, so it must not be refused because the group has members.
            for name in schemas.RULES:
                if name in fields and fields[name] == getattr(group, name):
                    del fields[name]
            return {"group": _loaded(group_rows.update(session, group, **fields))}

    @policy.authorize("groups:delete")
    @blp.response(204)
    def delete(self, tenant_id, group_id):
        """Delete an empty group (409 while it has members)."""
        with current_state().database.session() as session:
            group_rows.delete(session, group_rows.get(session, group_id, tenant_id))
