"""Virtual clusters: servers, volumes and the groupings over them.

``POST`` checks the request against the cloud (flavors, images, volume
types, the groupings' contradictions, the quotas) and posts the build flow
before answering ``202``; it never waits for the flow. ``GET`` of one
cluster shows each member where it landed and whether each grouping holds.
A cluster changes (add members, remove one, delete) only once ACTIVE, one
run at a time (409 otherwise); renaming is always allowed. Another
project's cluster answers 404.

A POST may carry an ``Idempotency-Key`` (:mod:`fleetflow.api.idempotency`): a
retry answers the first cluster; the same key with another body (name,
instances or groupings) is a ``422``.

XML (``Content-Type``/``Accept: application/xml``, see
:mod:`fleetflow.api.xml`) has this shape: members are repeated
``<instance>`` elements in ``<instances>``, groupings ``<grouping>`` in
``<groupings>``, a grouping's members ``<member>`` elements in
``<membersRef>``; capabilities are ``<capability key="...">`` entries and the
shown domains ``<domain key="member">``::

    <vcluster name="db"><instances>
      <instance name="db-server-1" type="server"><spec imageRef="cirros" flavorRef="1"/>
      </instance>
      <instance name="db-vol-1" type="volume"><spec size="10" volume_type="ssd"/></instance>
    </instances><groupings>
      <grouping name="group-1"><membersRef><member>db-server-1</member>
        <member>db-vol-1</member></membersRef><spec rule="affinity"/></grouping>
    </groupings></vcluster>

An XML document has one root, so the body of ``POST .../instances`` is a
``<vcluster>`` holding ``<instances>`` and ``<groupings>``.

A member is named in the path of ``DELETE .../instances/{name}``; the rest
of the path is the name, so a name holding a ``/`` is removed too.
"""

from __future__ import annotations

import contextlib
import logging

import flask
import sqlalchemy as sa
from flask.views import MethodView
from flask_smorest import abort

from fleetflow.api import auth, common, idempotency, openapi, policy, xml
from fleetflow.api.state import current_state
from fleetflow.api.vclusters import schemas
from fleetflow.common.exceptions import NotFound
from fleetflow.services.vclusters import VClusterRequest

LOG = logging.getLogger(__name__)

blp = common.Blueprint("vclusters", __name__, url_prefix="/v2/<tenant_id>/vclusters",
                       description="Virtual clusters: servers, volumes and groupings over "
                                   "them, built together (JSON or XML).")

XML_SHAPE = xml.XmlShape(
    lists={"vclusters": "vcluster", "instances": "instance", "groupings": "grouping",
           "membersRef": "member", "alternates": "alternate"},
    keyed={"capabilities": "capability", "domains": "domain"})
xml.enable(blp, XML_SHAPE)

# What a replayed Idempotency-Key must repeat (VCluster.request holds them).
_COMPARED = ("name", "instances", "groupings", "when_full", "queue_timeout", "priority")
# What a field compared above meant in a request stored before it existed.
_STORED_DEFAULTS = {"when_full": "fail", "queue_timeout": None, "priority": 0}


def _ops():
    return current_state().service("vclusters")


def _self_link(tenant_id: str, vcluster_id: str) -> str:
    return flask.url_for("vclusters.VClusterItem", tenant_id=tenant_id,
                         vcluster_id=vcluster_id, _external=True)


def _links(tenant_id: str, vcluster_id: str) -> list[dict]:
    return [{"rel": "self", "href": _self_link(tenant_id, vcluster_id)}]


def _summary(vcluster) -> dict:
    return {"vcluster": {"id": vcluster.id, "status": vcluster.status,
                         "links": _links(vcluster.tenant_id, vcluster.id)}}


@contextlib.contextmanager
def _storable():
    """A request the schemas accepted but a column cannot hold: 400, not 500.

    The schemas bound every field to its column; this is the net under
    them (PostgreSQL refuses what does not fit, SQLite stores it). The
    transaction is rolled back and no flow is posted.
    """
    try:
        yield
    except sa.exc.DataError as exc:
        LOG.warning("vcluster request refused by the database: %s", exc.orig)
        abort(400, message="A value of the request does not fit the database.")


def _check_same_request(vcluster, asked: dict) -> None:
    first = vcluster.request or {}
    changed = [name for name in _COMPARED
               if first.get(name, _STORED_DEFAULTS.get(name)) != asked.get(name)]
    idempotency.refuse_changed("vcluster", vcluster.id, changed)


@blp.route("")
class VClusters(MethodView):
    @policy.authorize("vclusters:list")
    @blp.arguments(schemas.VClusterQueryArgsSchema, location="query")
    @blp.response(200, schemas.VClusterListSchema)
    def get(self, args, tenant_id):
        """List the project's clusters with their progress (no members).

        Newest first (``created_at`` descending, the id breaking ties),
        paginated with limit/marker (a cluster id); ``status`` filters.
        """
        limit = common.page_limit(args)
        try:
            # One more than asked tells whether a next page exists.
            page = _ops().list(tenant_id, args.get("status"), limit + 1, args.get("marker"))
        except NotFound:
            abort(400, message=f"Invalid query parameter field 'marker': no vcluster "
                               f"{args['marker']} in this project.")
        links = []
        if len(page) > limit:
            page = page[:limit]
            links = common.next_links(limit, page[-1]["id"])
        for item in page:
            item["links"] = _links(tenant_id, item["id"])
        return {"vclusters": page, "links": links}

    @policy.authorize("vclusters:create")
    @blp.arguments(schemas.VClusterCreateArgsSchema, location="query")
    @blp.arguments(schemas.VClusterCreateSchema)
    @blp.response(202, schemas.VClusterSummaryResponseSchema,
                  description="Accepted: the build flow is posted. The Location header is "
                              "the cluster's status URL.",
                  headers={"Location": openapi.LOCATION,
                           idempotency.REPLAYED_HEADER: openapi.REPLAYED})
    @blp.alt_response(200, schema=schemas.VClusterDryRunResponseSchema,
                      description="With dry_run=true: whether it fits now and where each "
                                  "member would go; nothing is claimed or written.")
    @blp.doc(parameters=idempotency.post_parameters(
        "vcluster", dry_run="Only say whether it fits now and where each member would go "
                            "(200); claim and write nothing."))
    def post(self, args, body, tenant_id):
        """Build a cluster: its servers, its volumes, and groupings over them.

        Refused before anything is written or posted: an unknown flavor,
        image or volume type, a grouping naming no member or contradicting
        another, a volume attached to a volume (400, naming what is wrong);
        a quota the cluster would exceed (403).
        """
        fields = body["vcluster"]
        req = VClusterRequest(tenant_id=tenant_id, user_id=auth.current_context().user_id,
                              name=fields["name"], instances=fields["instances"],
                              groupings=fields["groupings"], when_full=fields["when_full"],
                              queue_timeout=fields["queue_timeout"],
                              priority=fields["priority"])
        if args["dry_run"]:
            verdict = _ops().dry_run(req)
            return flask.jsonify(schemas.VClusterDryRunResponseSchema().dump({"dry_run": verdict}))
        key = idempotency.key()
        with _storable():
            vcluster, created = idempotency.create(
                lambda: _ops().create(req, idempotency_key=key), key)
        headers = {"Location": _self_link(tenant_id, vcluster.id)}
        if not created:
            _check_same_request(vcluster, fields)
            headers[idempotency.REPLAYED_HEADER] = "true"
        return _summary(vcluster), headers


@blp.route("/<vcluster_id>")
class VClusterItem(MethodView):
    @policy.authorize("vclusters:show")
    @blp.response(200, schemas.VClusterResponseSchema)
    def get(self, tenant_id, vcluster_id):
        """Show a cluster: each member where it landed, each grouping and whether it holds."""
        return {"vcluster": _ops().show(tenant_id, vcluster_id)}

    @policy.authorize("vclusters:update")
    @blp.arguments(schemas.VClusterRenameSchema)
    @blp.response(200, schemas.VClusterResponseSchema)
    def put(self, body, tenant_id, vcluster_id):
        """Rename a cluster (at any time but once deleted)."""
        _ops().rename(tenant_id, vcluster_id, body["vcluster"]["name"])
        return {"vcluster": _ops().show(tenant_id, vcluster_id)}

    @policy.authorize("vclusters:delete")
    @blp.response(202, schemas.VClusterSummaryResponseSchema,
                  description="Accepted: a teardown flow deletes every member.")
    def delete(self, tenant_id, vcluster_id):
        """Tear the whole cluster down (409 while a run changes it, or while an evacuation
        still moves one of its servers: SERVER_BEING_MOVED; a second delete is a no-op)."""
        return _summary(_ops().delete(tenant_id, vcluster_id))


@blp.route("/<vcluster_id>/instances")
class VClusterInstances(MethodView):
    @policy.authorize("vclusters:update")
    @blp.arguments(schemas.VClusterAddSchema)
    @blp.response(202, schemas.VClusterSummaryResponseSchema,
                  description="Accepted: a build flow adds the members; it reverts only "
                              "them if they cannot all be built.")
    def post(self, body, tenant_id, vcluster_id):
        """Add members, and groupings or members of existing groupings (409 unless ACTIVE).

        Existing members stay where they are; the new ones are placed around
        them by every grouping, old and new.
        """
        with _storable():
            vcluster = _ops().add(tenant_id, vcluster_id, body["instances"], body["groupings"])
        return _summary(vcluster)


@blp.route("/<vcluster_id>/instances/<path:member_name>")
class VClusterInstance(MethodView):
    @policy.authorize("vclusters:update")
    @blp.response(202, schemas.VClusterSummaryResponseSchema,
                  description="Accepted: a teardown flow removes the member (a volume is "
                              "detached first); groupings lose it.")
    def delete(self, tenant_id, vcluster_id, member_name):
        """Remove one member by its name (404 unknown member, 409 unless ACTIVE, or while
        an evacuation still moves the server: SERVER_BEING_MOVED)."""
        return _summary(_ops().remove(tenant_id, vcluster_id, member_name))
