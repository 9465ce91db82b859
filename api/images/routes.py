"""Images a project can boot: list, and show by id or name."""

from __future__ import annotations

from flask.views import MethodView
from flask_smorest import abort

from fleetflow.api import common, policy
from fleetflow.api.images import schemas
from fleetflow.api.state import current_state
from fleetflow.services import catalog

blp = common.Blueprint("images", __name__, url_prefix="/v2/<tenant_id>/images",
                       description="Images (every project sees the same catalog).")


@blp.route("")
class Images(MethodView):
    @policy.authorize("images:list")
    @blp.arguments(schemas.ImageQueryArgsSchema, location="query")
    @blp.response(200, schemas.ImageListSchema)
    def get(self, args, tenant_id):
        """List images, sorted by name, paginated with limit/marker."""
        limit = common.page_limit(args)
        found, more = catalog.image_page(current_state().database, limit=limit,
                                         marker=args.get("marker"))
        return {"images": found,
                "links": common.next_links(limit, found[-1].name) if more else []}


@blp.route("/<image>")
class ImageItem(MethodView):
    @policy.authorize("images:show")
    @blp.response(200, schemas.ImageResponseSchema)
    def get(self, tenant_id, image):
        """Show an image by id or by name."""
        row = catalog.find_image(current_state().database, image)
        if row is None:
            abort(404, message=f"Image {image} does not exist.")
        return {"image": row}
