"""What every resource blueprint uses: the Blueprint class, pagination, links.

Pagination (every list route, the same way): ``?limit=N&marker=K``. What
tenants and operators make (reservations, servers, volumes, groups, clusters,
evacuations, flows) comes newest first: ``created_at`` descending, the id
breaking ties; the fleet and its catalogs (hosts, flavors, images) come
sorted by name. ``marker`` is the key (id or
name) of the last item already seen and the page holds the next ``limit`` items
(``[api] page_size`` by default, at most :data:`MAX_LIMIT`). The body lists a
``next`` link while more remain::

    {"hosts": [...], "links": [{"rel": "next", "href": ".../hosts?limit=2&marker=h-002"}]}

Keyset pagination needs no stable snapshot: rows made after the first page
never shift the pages that follow. A marker must name an item of the list
(before its filters: one whose status changed since still works); any other
is a 400 naming ``marker``.

The services read the pages: given ``limit`` and ``marker`` they return the
rows and whether more follow (:mod:`fleetflow.persistence.paging` below
them); a route asks for :func:`page_limit` items and adds :func:`next_links`.
"""

from __future__ import annotations

import urllib.parse

import flask
import flask_smorest
import marshmallow as ma

from fleetflow.api.bodies import BodyParser
from fleetflow.api.state import current_state

MAX_LIMIT = 1000


class Blueprint(flask_smorest.Blueprint):
    """flask-smorest Blueprint reading bodies and query strings the API's way
    (:mod:`fleetflow.api.bodies`); validation errors are documented (and sent) as 400."""

    ARGUMENTS_PARSER = BodyParser()


class PaginationArgsSchema(ma.Schema):
    """Query arguments of every list route; resource query schemas inherit them."""

    limit = ma.fields.Integer(
        validate=ma.validate.Range(min=1, max=MAX_LIMIT),
        metadata={"description": f"Items per page (at most {MAX_LIMIT})."})
    marker = ma.fields.String(
        metadata={"description": "Key (name or id) of the last item of the previous page."})


class LinkSchema(ma.Schema):
    rel = ma.fields.String(required=True, metadata={"description": "'next'"})
    href = ma.fields.String(required=True)


def page_limit(args: dict) -> int:
    """Items per page: ``limit`` if the query gives one, else ``[api] page_size``."""
    return args.get("limit") or current_state().conf.api.page_size


def next_links(limit: int, marker: str, limit_arg: str = "limit",
               marker_arg: str = "marker") -> list[dict]:
    """The ``links`` of a page after which more items remain (``limit_arg`` and
    ``marker_arg``: the names the route's query gives them)."""
    query = flask.request.args.to_dict()
    query.update({limit_arg: str(limit), marker_arg: marker})
    return [{"rel": "next", "href": flask.request.base_url + "?" + urllib.parse.urlencode(query)}]
