"""Flavors a project can boot: list, and show by id or name."""

from __future__ import annotations

import sqlalchemy as sa
from flask.views import MethodView
from flask_smorest import abort

from fleetflow.api import common, policy
from fleetflow.api.flavors import schemas
from fleetflow.api.state import current_state
from fleetflow.persistence.models import Flavor

blp = common.Blueprint("flavors", __name__, url_prefix="/v2/<tenant_id>/flavors",
                       description="Flavors (every project sees the same catalog).")


@blp.route("")
class Flavors(MethodView):
    @policy.authorize("flavors:list")
    @blp.arguments(schemas.FlavorQueryArgsSchema, location="query")
    @blp.response(200, schemas.FlavorListSchema)
    def get(self, args, tenant_id):
        """List flavors, sorted by name, paginated with limit/marker."""
        with current_state().database.session() as session:
            flavors, links = common.paginate(session, sa.select(Flavor), Flavor.name, args,
                                             "flavor")
            return {"flavors": flavors, "links": links}


@blp.route("/<flavor>")
class FlavorItem(MethodView):
    @policy.authorize("flavors:show")
    @blp.response(200, schemas.FlavorResponseSchema)
    def get(self, tenant_id, flavor):
        """Show a flavor by id or by name."""
        with current_state().database.session() as session:
            row = common.get_by_id_or_name(session, Flavor, flavor)
            if row is None:
                abort(404, message=f"Flavor {flavor} does not exist.")
            return {"flavor": row}
