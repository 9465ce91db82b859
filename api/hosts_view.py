"""Who sees where things run: one rule, ``servers:show_host``, for every view.

By default a project's readers see the hosts of their own servers, the
backends of their own volumes and the domains (host, rack, zone, backend) of
their groupings. An operator who restricts the rule (``"servers:show_host":
"role:admin"`` in the policy file) hides every such name from the callers it
refuses, in every view at once: ``host`` and a vcluster member's ``backend``
read null, and where a view needs a place to stay useful (``hosts_tried``,
alternates, a grouping's ``domains``, a dry run's hosts) it shows the place's
opaque id instead of its name.

Every server, reservation instance and vcluster member carries ``host_id``
whatever the rule says: as Nova's ``hostId``, the sha224 hex digest of the
project id followed by the name of its host (a volume: of its backend). Equal
ids mean the same place, so a tenant can check anti-affinity, yet two projects
get different ids for one host and cannot map the fleet together.

Schemas use the fields below; code that builds a body by hand (the GET of a
reservation) calls :func:`current` for the same answers.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re

import flask
import marshmallow as ma
from oslo_policy import policy as oslo_policy

from fleetflow.api.state import current_state

SHOW_HOST_RULE = "servers:show_host"
_G_KEY = "fleetflow_host_view"
HOST_ID_HELP = ("Opaque id of where it is, the same for one host within the project "
                "(sha224 hex of the project id and the host name, as Nova's hostId); "
                "shown to every caller.")


def opaque_id(project_id: str, name: str | None) -> str | None:
    """Nova's ``hostId`` of ``name`` for ``project_id``; None when there is no place."""
    if not name:
        return None
    return hashlib.sha224((project_id + name).encode("utf-8")).hexdigest()


@dataclasses.dataclass
class HostView:
    """What one caller may see of places, for one project."""

    project_id: str
    names_visible: bool
    _ids: dict = dataclasses.field(default_factory=dict, repr=False)

    def host_id(self, name: str | None) -> str | None:
        if name not in self._ids:
            self._ids[name] = opaque_id(self.project_id, name)
        return self._ids[name]

    def name(self, name: str | None) -> str | None:
        """The name, or null to a caller who may not see it."""
        return name if self.names_visible else None

    def place(self, name: str | None) -> str | None:
        """The name, or its opaque id to a caller who may not see it."""
        return name if self.names_visible or name is None else self.host_id(name)

    def places(self, names) -> list:
        return [self.place(n) for n in names]

    def text(self, text: str | None, names) -> str | None:
        """``text`` with each of ``names`` in it replaced by its opaque id when hidden."""
        if text is None or self.names_visible:
            return text
        for name in sorted({n for n in names if n}, key=len, reverse=True):
            text = re.sub(rf"(?<![\w.-]){re.escape(name)}(?![\w.-])", self.host_id(name),
                          text)
        return text

    def fault(self, fault: dict | None) -> dict | None:
        """A fault's body without its host's name (nor in its message) when hidden."""
        if fault is None or self.names_visible or fault.get("host") is None:
            return fault
        host = fault["host"]
        return {**fault, "host": None, "message": self.text(fault.get("message"), [host])}


def may_see_hosts() -> bool:
    """Whether the caller passes ``servers:show_host`` in the path's project."""
    return current().names_visible


def current() -> HostView:
    """The caller's view of places for this request (the rule is asked once)."""
    view = getattr(flask.g, _G_KEY, None)
    if view is None:
        context = flask.g.context
        tenant = (flask.request.view_args or {}).get("tenant_id") or context.project_id
        try:
            allowed = bool(current_state().enforcer.enforce(
                SHOW_HOST_RULE, {"project_id": tenant}, context))
        except oslo_policy.InvalidScope:
            allowed = False
        view = HostView(project_id=tenant, names_visible=allowed)
        setattr(flask.g, _G_KEY, view)
    return view


# -- schema fields --------------------------------------------------------------------


class HostName(ma.fields.String):
    """A host's (or backend's) name; null to callers refused ``servers:show_host``.

    NOTE: null rather than left out, so clients that read the key keep working.
    """

    def _serialize(self, value, attr, obj, **kwargs):
        return super()._serialize(current().name(value), attr, obj, **kwargs)


class Place(ma.fields.String):
    """A host's, backend's or domain's name; its opaque id to callers refused the rule."""

    def _serialize(self, value, attr, obj, **kwargs):
        return super()._serialize(current().place(value), attr, obj, **kwargs)


class HostId(ma.fields.String):
    """The opaque id of the place named by the object's ``attribute`` (shown to every caller)."""

    def __init__(self, **kwargs):
        kwargs.setdefault("dump_only", True)
        kwargs.setdefault("allow_none", True)
        kwargs.setdefault("metadata", {"description": HOST_ID_HELP})
        super().__init__(**kwargs)

    def _serialize(self, value, attr, obj, **kwargs):
        return current().host_id(value)


class PlaceOfMember(HostId):
    """A vcluster member's ``host_id``: its host (a server) or its backend (a volume)."""

    def get_value(self, obj, attr, accessor=None, default=ma.missing):
        return obj.get("host") or obj.get("backend")


class FaultMessage(ma.fields.String):
    """A fault's message, with its host's name replaced when the caller may not see it."""

    def _serialize(self, value, attr, obj, **kwargs):
        host = ma.utils.get_value(obj, "host", None)
        return super()._serialize(current().text(value, [host]), attr, obj, **kwargs)

