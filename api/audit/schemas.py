"""Schemas of the admin audit route."""

from __future__ import annotations

import marshmallow as ma

from fleetflow.services.audit.report import KINDS

KIND_HELP = "; ".join(f"{kind}: {meaning}" for kind, meaning in KINDS.items())


MAX_FLOW_GRACE = 365 * 24 * 3600  # a year, in seconds


class AuditQueryArgsSchema(ma.Schema):
    """Query arguments of GET /v2/admin/audit."""

    strict = ma.fields.Boolean(
        load_default=False,
        metadata={"description": "Flows have settled: instances in transitional states "
                                 "(PENDING, SCHEDULING, BUILDING, REVERTING, DELETING) are "
                                 "mismatches too, and flows get no grace (flow_grace 0 "
                                 "unless given)."})
    flow_grace = ma.fields.Float(
        # NOTE: bounded so that any accepted value is a valid time span
        # (1e308 seconds overflows a timedelta).
        load_default=None, validate=ma.validate.Range(min=0, max=MAX_FLOW_GRACE),
        metadata={"description": "Seconds a flow may go without progress (and its job "
                                 "unclaimed) before it is stranded, and a status may "
                                 "disagree with its members before it is a mismatch. "
                                 "Default: 0 when strict, else the larger of 60, three "
                                 "reconcile intervals and two claim expiries."})
    host = ma.fields.List(
        ma.fields.String(), load_default=None,
        metadata={"description": "Ask only these hosts for their guests (repeatable); "
                                 "placement, rows and groups are always checked whole."})


class MismatchSchema(ma.Schema):
    """One disagreement between placement, rows, hosts and groups."""

    kind = ma.fields.String(required=True, metadata={"description": KIND_HELP})
    subject = ma.fields.String(required=True,
                               metadata={"description": "The uuid it is about (a consumer, "
                                                        "instance, volume, host name, "
                                                        "group/instance of a member, flow, "
                                                        "reservation, vcluster or "
                                                        "evacuation)."})
    detail = ma.fields.String(required=True)
    host = ma.fields.String(allow_none=True)


class AuditSchema(ma.Schema):
    clean = ma.fields.Boolean(required=True)
    mismatches = ma.fields.List(ma.fields.Nested(MismatchSchema), required=True)
    counts = ma.fields.Dict(keys=ma.fields.String(), values=ma.fields.Integer(),
                            metadata={"description": "How much was looked at: hosts, "
                                                     "hosts_unreachable, guests, backends, "
                                                     "backends_asked, backends_unreachable, "
                                                     "backend_volumes, instances, volumes, "
                                                     "consumers, memberships, vclusters, "
                                                     "groupings; jobboard (1 when its jobs "
                                                     "were listed, 0 when there is none or "
                                                     "jobboard_unreachable is 1: unfinished "
                                                     "flows were then not checked), jobs, "
                                                     "unfinished_flows, unstarted_intents, "
                                                     "reservations, evacuations_busy."})


class AuditResponseSchema(ma.Schema):
    audit = ma.fields.Nested(AuditSchema, required=True)
