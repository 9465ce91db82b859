"""Images a project can boot: list, and show by id or name."""

from __future__ import annotations

import sqlalchemy as sa
from flask.views import MethodView
from flask_smorest import abort

from fleetflow.api import common, policy
from fleetflow.api.images import schemas
from fleetflow.api.state import current_state
from fleetflow.persistence.models import Image

blp = common.Blueprint("images", __name__, url_prefix="/v2/<tenant_id>/images",
                       description="Images (every project sees the same catalog).")


@blp.route("")
class Images(MethodView):
    @policy.authorize("images:list")
    @blp.arguments(schemas.ImageQueryArgsSchema, location="query")
    @blp.response(200, schemas.ImageListSchema)
    def get(self, args, tenant_id):
        """List images, sorted by name, paginated with limit/marker."""
        with current_state().database.session() as session:
            images, links = common.paginate(session, sa.select(Image), Image.name, args,
                                            "image")
            return {"images": images, "links": links}


@blp.route("/<image>")
class ImageItem(MethodView):
    @policy.authorize("images:show")
    @blp.response(200, schemas.ImageResponseSchema)
    def get(self, tenant_id, image):
        """Show an image by id or by name."""
        with current_state().database.session() as session:
            row = common.get_by_id_or_name(session, Image, image)
            if row is None:
                abort(404, message=f"Image {image} does not exist.")
            return {"image": row}
