"""Who sees where things run: one rule, ``servers:show_host``, for every view.

By default a project's readers see the hosts of their own servers, the
backends of their own volumes and the domains (host, rack, zone, backend) of
their groupings. An operator who restricts the rule (``"servers:show_host":
"role:admin"`` in the policy file) hides every such name from the callers it
refuses, in every view at once: ``host`` and a vcluster member's ``backend``
read null, and where a view needs a place to stay useful (``hosts_tried``,
alternates, a grouping's ``domains``, a dry run's hosts) it shows the place's
opaque id instead of its name, as it does for every place name of the fleet in
free text (fault messages, flow failures, dry-run explanations).

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
from collections.abc import Callable

import flask
import marshmallow as ma
from oslo_policy import policy as oslo_policy

from fleetflow.api.state import current_state
from fleetflow.services import hosts as host_ops

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


# A name as it stands in free text: dots only inside it, so a sentence's full
# stop is not taken for part of the name.
_NAME_IN_TEXT = re.compile(r"[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*")


@dataclasses.dataclass
class HostView:
    """What one caller may see of places, for one project.

    ``load_names`` gives every place name of the fleet, asked at most once and
    only when free text must be cleaned for a caller who may not see names.
    """

    project_id: str
    names_visible: bool
    load_names: Callable[[], frozenset[str]] = frozenset
    _ids: dict = dataclasses.field(default_factory=dict, repr=False)
    _fleet_names: frozenset[str] | None = dataclasses.field(default=None, repr=False)

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

    def text(self, text: str | None, names=()) -> str | None:
        """``text`` with every place name in it (the fleet's and ``names``) replaced by
        its opaque id when the caller may not see names."""
        if not text or self.names_visible:
            return text
        if self._fleet_names is None:
            self._fleet_names = frozenset(self.load_names())
        known = self._fleet_names | {n for n in names if n}

        def replace(match: re.Match) -> str:
            word = match.group()
            return self.host_id(word) if word in known else word

        return _NAME_IN_TEXT.sub(replace, text)

    def fault(self, fault: dict | None) -> dict | None:
        """A fault's body without its host's name (nor in its message) when hidden."""
        if fault is None or self.names_visible:
            return fault
        hidden = dict(fault)
        if "host" in hidden:
            hidden["host"] = None
        if isinstance(hidden.get("message"), str):
            hidden["message"] = self.text(hidden["message"], [fault.get("host")])
        return hidden


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
        database = current_state().database
        view = HostView(project_id=tenant, names_visible=allowed,
                        load_names=lambda: host_ops.place_names(database))
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


class FreeText(ma.fields.String):
    """Text that may name places (a fault's message, a failure): their opaque ids instead
    to callers refused the rule."""

    def _serialize(self, value, attr, obj, **kwargs):
        host = ma.utils.get_value(obj, "host", None)
        names = [host] if isinstance(host, str) else []
        return super()._serialize(current().text(value, names), attr, obj, **kwargs)

