"""Flavors a project can boot: list, and show by id or name."""

from __future__ import annotations

from flask.views import MethodView
from flask_smorest import abort

from fleetflow.api import common, policy
from fleetflow.api.flavors import schemas
from fleetflow.api.state import current_state
from fleetflow.services import catalog

blp = common.Blueprint("flavors", __name__, url_prefix="/v2/<tenant_id>/flavors",
                       description="Flavors (every project sees the same catalog).")


@blp.route("")
class Flavors(MethodView):
    @policy.authorize("flavors:list")
    @blp.arguments(schemas.FlavorQueryArgsSchema, location="query")
    @blp.response(200, schemas.FlavorListSchema)
    def get(self, args, tenant_id):
        """List flavors, sorted by name, paginated with limit/marker."""
        limit = common.page_limit(args)
        found, more = catalog.flavor_page(current_state().database, limit=limit,
                                          marker=args.get("marker"))
        return {"flavors": found,
                "links": common.next_links(limit, found[-1].name) if more else []}


@blp.route("/<flavor>")
class FlavorItem(MethodView):
    @policy.authorize("flavors:show")
    @blp.response(200, schemas.FlavorResponseSchema)
    def get(self, tenant_id, flavor):
        """Show a flavor by id or by name."""
        row = catalog.find_flavor(current_state().database, flavor)
        if row is None:
            abort(404, message=f"Flavor {flavor} does not exist.")
        return {"flavor": row}
