"""Reservations: N instances asked for together, built by one provision flow.

``POST`` validates the request against the cloud (flavor, image, group, the
count limit, the project's quota), writes the reservation and its instance
rows and posts the provision flow, all before answering ``202``; it never
waits for the flow. Status is read back from the rows with ``GET``.

A POST may carry an ``Idempotency-Key`` (:mod:`fleetflow.api.idempotency`): a
retry answers the first reservation; the same key with another request (name,
counts, flavor, image, group, policy, volume or on_error) is a ``422``.
"""

from __future__ import annotations

import flask
from flask.views import MethodView

from fleetflow.api import auth, common, fields, hosts_view, idempotency, openapi, policy
from fleetflow.api.reservations import schemas
from fleetflow.api.state import current_state
from fleetflow.services import reservations as reservation_ops
from fleetflow.services.reservations import ON_ERROR_REVERT, ReservationRequest

blp = common.Blueprint("reservations", __name__, url_prefix="/v2/<tenant_id>/reservations",
                       description="Reservations of N instances and their progress.")

# Request fields that must match for a replayed Idempotency-Key.
_COMPARED = ("name", "flavor_ref", "image_ref", "min_count", "max_count", "capabilities",
             "group_id", "policy", "volume_gb", "on_error", "when_full", "queue_timeout",
             "priority", "metadata")
# What a field compared above meant in a request stored before it existed.
_STORED_DEFAULTS = {"on_error": ON_ERROR_REVERT, "when_full": "fail", "queue_timeout": None,
                    "priority": 0, "metadata": {}}


def _self_link(tenant_id: str, reservation_id: str) -> str:
    return flask.url_for("reservations.ReservationItem", tenant_id=tenant_id,
                         reservation_id=reservation_id, _external=True)


def _summary(reservation) -> dict:
    return {"id": reservation.id, "status": reservation.status,
            "links": [{"rel": "self",
                       "href": _self_link(reservation.tenant_id, reservation.id)}]}


def _view(reservation, progress: dict) -> dict:
    """The list item shape (instances are added by the item route)."""
    return {"id": reservation.id, "name": reservation.name, "status": reservation.status,
            "policy": reservation.policy, "flow_id": reservation.flow_id,
            "created_at": reservation.created_at, "updated_at": reservation.updated_at,
            "progress": progress, "fault": reservation.fault,
            "queue": _queue(reservation), "links": _summary(reservation)["links"]}


def _queue(reservation) -> dict | None:
    return reservation_ops.queue_position(current_state().database, reservation)


# NOTE: GET of one reservation builds its JSON by hand, not with marshmallow:
# clients poll it while a reservation builds, and dumping a thousand instances
# through ReservationResponseSchema cost most of the request's CPU (and the
# engine's GIL). The helpers below give exactly what that schema's dump gives
# (tests compare the two); the schema still documents the route.
_FAULT_KEYS = tuple(schemas.FaultSchema().fields)
_QUEUE_TIMES = ("waiting_since", "last_attempt")


def _text(value):
    """What a marshmallow String field dumps."""
    return value if value is None or isinstance(value, str) else str(value)


def _fault_body(fault: dict | None, view: hosts_view.HostView) -> dict | None:
    """A stored fault as FaultSchema dumps it: its keys only (not "time")."""
    if fault is None:
        return None
    return view.fault({key: _text(fault[key]) for key in _FAULT_KEYS if key in fault})


def _instance_body(instance: dict, view: hosts_view.HostView) -> dict:
    """An instance of ``reservation_ops.show`` as ReservationInstanceSchema dumps it."""
    fault = instance["fault"]
    if fault is not None:
        instance["fault"] = _fault_body(fault, view)
    host = instance["host"]
    instance["host_id"] = view.host_id(host)
    if not view.names_visible:
        instance["host"] = view.name(host)
        instance["hosts_tried"] = view.places(instance["hosts_tried"])
    return instance


def _show_body(view: dict, instances: list[dict] | None) -> dict:
    """``{"reservation": ...}`` as ReservationResponseSchema dumps it (``instances``
    None: without them, the summary of ``instance_limit=0``)."""
    body = dict(view)
    for key in ("created_at", "updated_at"):
        body[key] = fields.utc_isoformat(body[key])  # as schemas' UtcDateTime
    # The caller's view of hosts costs a policy check: asked only when something
    # may name a host (not in a polled summary without a fault).
    view = hosts_view.current() if body["fault"] is not None or instances else None
    body["fault"] = _fault_body(body["fault"], view)
    if body["queue"] is not None:
        body["queue"] = {key: fields.utc_isoformat(value) if key in _QUEUE_TIMES else value
                         for key, value in body["queue"].items()}
    if instances is not None:
        body["instances"] = [_instance_body(i, view) for i in instances]
    return {"reservation": body}


def _check_same_request(reservation, req: ReservationRequest) -> None:
    first = reservation.request or {}
    asked = vars(req)
    changed = [name for name in _COMPARED
               if first.get(name, _STORED_DEFAULTS.get(name)) != asked.get(name)]
    idempotency.refuse_changed("reservation", reservation.id, changed)


@blp.route("")
class Reservations(MethodView):
    @policy.authorize("reservations:list")
    @blp.arguments(schemas.ReservationQueryArgsSchema, location="query")
    @blp.response(200, schemas.ReservationListSchema)
    def get(self, args, tenant_id):
        """List the project's reservations with their progress.

        Newest first (``created_at`` descending, the id breaking ties), paginated
        with limit/marker (a reservation id); ``status`` filters.
        """
        limit = common.page_limit(args)
        page, more = reservation_ops.list_page(current_state().database, tenant_id,
                                               limit=limit, marker=args.get("marker"),
                                               status=args.get("status"))
        return {"reservations": [_view(r, progress) for r, progress in page],
                "links": common.next_links(limit, page[-1][0].id) if more else []}

    @policy.authorize("reservations:create")
    @blp.arguments(schemas.ReservationCreateArgsSchema, location="query")
    @blp.arguments(schemas.ReservationCreateSchema)
    @blp.response(202, schemas.ReservationSummaryResponseSchema,
                  description="Accepted: the provision flow is posted. The Location "
                              "header is the reservation's status URL.",
                  headers={"Location": openapi.LOCATION,
                           idempotency.REPLAYED_HEADER: openapi.REPLAYED})
    @blp.alt_response(200, schema=schemas.DryRunResponseSchema,
                      description="With dry_run=true: whether it fits now; nothing is "
                                  "claimed or written.")
    @blp.doc(parameters=idempotency.post_parameters(
        "reservation", dry_run="Only say whether it fits now (200); claim and write "
                               "nothing."))
    def post(self, args, body, tenant_id):
        """Reserve N instances: ``count``, or ``min_count``/``max_count``.

        Refused before anything is written or posted: unknown flavor, image or
        group (400, naming the field), a count above the configured maximum
        (400), a quota the request would exceed (403).
        """
        fields = body["reservation"]
        req = ReservationRequest(tenant_id=tenant_id,
                                 user_id=auth.current_context().user_id, **fields)
        reservations = current_state().service("reservations")
        if args["dry_run"]:
            verdict = reservations.dry_run(req)
            return flask.jsonify(schemas.DryRunResponseSchema().dump({"dry_run": verdict}))
        key = idempotency.key()
        reservation, created = idempotency.create(
            lambda: reservations.reserve(req, idempotency_key=key), key)
        headers = {"Location": _self_link(tenant_id, reservation.id)}
        if not created:
            _check_same_request(reservation, req)
            headers[idempotency.REPLAYED_HEADER] = "true"
        return {"reservation": _summary(reservation)}, headers


@blp.route("/<reservation_id>")
class ReservationItem(MethodView):
    @policy.authorize("reservations:show")
    @blp.arguments(schemas.ReservationShowArgsSchema, location="query")
    @blp.response(200, schemas.ReservationResponseSchema)
    def get(self, args, tenant_id, reservation_id):
        """Show a reservation: status, progress, and its instances with their faults.

        Instances come a page at a time, by index: ``instance_limit`` of them
        (``[api] page_size`` by default) after ``instance_marker``, with an
        ``instance_links`` next link while more remain. ``instance_limit=0``
        shows no instance: the form to poll while a large reservation builds.
        """
        limit = args.get("instance_limit")
        if limit is None:
            limit = current_state().conf.api.page_size
        reservation, progress, instances, more = reservation_ops.show(
            current_state().database, tenant_id, reservation_id, instance_limit=limit,
            instance_marker=args.get("instance_marker"))
        body = _show_body(_view(reservation, progress), instances if limit else None)
        if more:
            body["reservation"]["instance_links"] = common.next_links(
                limit, instances[-1]["id"], "instance_limit", "instance_marker")
        # A Response passes flask-smorest's response decorator unchanged.
        return flask.jsonify(body)

    @policy.authorize("reservations:delete")
    @blp.response(202, schemas.ReservationSummaryResponseSchema,
                  description="Accepted: a teardown flow deletes every instance.")
    def delete(self, tenant_id, reservation_id):
        """Delete a settled reservation and all its instances (409 while it is building,
        or while an evacuation still moves one of them: SERVER_BEING_MOVED)."""
        reservations = current_state().service("reservations")
        reservation = reservations.delete_reservation(tenant_id, reservation_id)
        return {"reservation": _summary(reservation)}
