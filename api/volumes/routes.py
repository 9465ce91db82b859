"""Volumes of a project: vcluster members, reservations' data volumes, all of them.

Read-only: volumes are made and deleted by the flows of what owns them (a
virtual cluster, a reservation). The list leaves deleted volumes out unless
``status=DELETED`` asks for them; one volume is shown whatever its status.
Which backend holds a volume is the operator's business (``backend`` is
null unless the caller passes ``volumes:show_backend``). Another project's
volume answers 404. ``Accept: application/xml`` answers XML (``<volumes>`` of
``<volume>`` elements; see :mod:`fleetflow.api.xml`).
"""

from __future__ import annotations

from flask.views import MethodView
from flask_smorest import abort

from fleetflow.api import common, policy, xml
from fleetflow.api.state import current_state
from fleetflow.api.volumes import schemas
from fleetflow.services import volumes

blp = common.Blueprint("volumes", __name__, url_prefix="/v2/<tenant_id>/volumes",
                       description="Volumes of the project (JSON or XML).")

xml.enable(blp, xml.XmlShape(lists={"volumes": "volume"}))


@blp.route("")
class Volumes(MethodView):
    @policy.authorize("volumes:list")
    @blp.arguments(schemas.VolumeQueryArgsSchema, location="query")
    @blp.response(200, schemas.VolumeListSchema)
    def get(self, args, tenant_id):
        """List the project's volumes; filter by vcluster_id and status.

        Newest first (``created_at`` descending, the id breaking ties), paginated
        with limit/marker (a volume id). Deleted volumes are left out
        unless ``status=DELETED`` asks for them.
        """
        limit = common.page_limit(args)
        found, more = volumes.list_page(
            current_state().database, tenant_id, limit=limit, marker=args.get("marker"),
            vcluster_id=args.get("vcluster_id"), status=args.get("status"))
        return {"volumes": found,
                "links": common.next_links(limit, found[-1].id) if more else []}


@blp.route("/<volume_id>")
class VolumeItem(MethodView):
    @policy.authorize("volumes:show")
    @blp.response(200, schemas.VolumeResponseSchema)
    def get(self, tenant_id, volume_id):
        """Show one volume: size, type, status, the server it is attached to."""
        volume = volumes.get(current_state().database, tenant_id, volume_id)
        if volume is None:
            abort(404, message=f"Volume {volume_id} does not exist.")
        return {"volume": volume}
