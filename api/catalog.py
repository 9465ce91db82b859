"""The routes of a catalogue every project sees alike (flavors, images): one blueprint shape.

A catalogue is listed sorted by name (the marker is a name) and one item is
shown by its id or by its name; its rows come from :mod:`fleetflow.services.catalog`.
:func:`blueprint` makes the two routes of one catalogue, with their
documentation, so that flavors and images say and do exactly the same.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from flask.views import MethodView
from flask_smorest import abort

from fleetflow.api import common, policy
from fleetflow.api.state import current_state


@dataclasses.dataclass(frozen=True)
class Catalog:
    """What tells one catalogue's routes from another's."""

    kind: str  # one item, as the path names it: "flavor"
    plural: str  # the collection and its body key: "flavors"
    article: str  # "a" or "an", before ``kind``
    list_rule: str  # the policy rules, spelled out where the routes are
    show_rule: str
    query_schema: type
    list_schema: type
    item_schema: type
    page: Callable  # page(database, limit=, marker=) -> (rows, more)
    find: Callable  # find(database, ref) -> row or None


def blueprint(catalog: Catalog, import_name: str) -> common.Blueprint:
    """The blueprint of ``catalog``: ``GET .../<plural>`` and ``GET .../<plural>/<ref>``."""
    kind, plural = catalog.kind, catalog.plural
    blp = common.Blueprint(plural, import_name, url_prefix=f"/v2/<tenant_id>/{plural}",
                           description=f"{plural.capitalize()} (every project sees the same "
                                       "catalog).")

    def list_items(self, args, tenant_id):
        limit = common.page_limit(args)
        found, more = catalog.page(current_state().database, limit=limit,
                                   marker=args.get("marker"))
        return {plural: found,
                "links": common.next_links(limit, found[-1].name) if more else []}

    def show_item(self, tenant_id, **path):
        ref = path[kind]
        row = catalog.find(current_state().database, ref)
        if row is None:
            abort(404, message=f"{kind.capitalize()} {ref} does not exist.")
        return {kind: row}

    # NOTE: flask-smorest reads a view's docstring when the route is
    # registered: it must be set before the decorators below.
    list_items.__doc__ = f"List {plural}, sorted by name, paginated with limit/marker."
    show_item.__doc__ = f"Show {catalog.article} {kind} by id or by name."
    collection = policy.authorize(catalog.list_rule)(
        blp.arguments(catalog.query_schema, location="query")(
            blp.response(200, catalog.list_schema)(list_items)))
    item = policy.authorize(catalog.show_rule)(
        blp.response(200, catalog.item_schema)(show_item))
    # The view classes' names are the endpoints' (``flavors.Flavors``, ``flavors.FlavorItem``).
    blp.route("")(type(plural.capitalize(), (MethodView,), {"get": collection}))
    blp.route(f"/<{kind}>")(type(f"{kind.capitalize()}Item", (MethodView,), {"get": item}))
    return blp
