"""Admin route of the queue: every request waiting for capacity, and why."""

from __future__ import annotations

from flask.views import MethodView

from fleetflow.api import common, policy
from fleetflow.api.queue import schemas
from fleetflow.api.state import current_state
from fleetflow.services.queue import views

blp = common.Blueprint("queue", __name__, url_prefix="/v2/admin/queue",
                       description="Requests waiting for capacity (administrators only).")


@blp.route("")
class Queue(MethodView):
    @policy.authorize("queue:list")
    @blp.arguments(schemas.QueueQueryArgsSchema, location="query")
    @blp.response(200, schemas.QueueListSchema)
    def get(self, args):
        """List every waiting request in queue order: priority, then age.

        ``position`` counts from 1; ``why`` is the last admission pass's
        answer (the dry run's explanation, or the quota it would exceed).
        """
        limit = common.page_limit(args)
        page, more = views.waiting_page(current_state().database, limit, args.get("marker"))
        return {"queue": page,
                "links": common.next_links(limit, page[-1]["id"]) if more else []}
