"""What every resource blueprint uses: the Blueprint class, pagination, links.

Pagination (every list route, the same way): ``?limit=N&marker=K``. What
tenants and operators make (reservations, servers, volumes, groups, clusters,
evacuations, flows) comes newest first: ``created_at`` descending, the id
breaking ties (:mod:`fleetflow.persistence.paging`); the fleet and its catalogs
(hosts, flavors, images) come sorted by name. ``marker`` is the key (id or
name) of the last item already seen and the page holds the next ``limit`` items
(``[api] page_size`` by default, at most :data:`MAX_LIMIT`). The body lists a
``next`` link while more remain::

    {"hosts": [...], "links": [{"rel": "next", "href": ".../hosts?limit=2&marker=h-002"}]}

Keyset pagination needs no stable snapshot: rows made after the first page
never shift the pages that follow. A marker must name an item of the list
(before its filters: one whose status changed since still works); any other
is a 400 naming ``marker`` (:mod:`fleetflow.persistence.paging`).
"""

from __future__ import annotations

import urllib.parse

import flask
import flask_smorest
import marshmallow as ma
import sqlalchemy as sa

from fleetflow.api.bodies import BodyParser
from fleetflow.api.state import current_state
from fleetflow.persistence import paging

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


def paginate(session, stmt: sa.Select, key: sa.orm.InstrumentedAttribute, args: dict,
             what: str, scope: sa.Select | None = None):
    """Run ``stmt`` for one page ordered by the unique column ``key``.

    Returns ``(rows, links)``; ``links`` holds the ``next`` link when more
    rows follow. An unknown marker (not in ``scope``, ``stmt`` by default) is a
    400 saying there is no such ``what``.
    """
    limit = args.get("limit") or current_state().conf.api.page_size
    rows, more = paging.keyset_page(session, stmt, key, limit, args.get("marker"), what,
                                    scope)
    return rows, (next_links(limit, str(getattr(rows[-1], key.key))) if more else [])


def paginate_newest_first(session, stmt: sa.Select, model, args: dict, scope: tuple = ()):
    """Run ``stmt`` for one page of ``model`` rows, newest first (marker: an id).

    ``scope`` says whose rows these are (a tenant); a marker outside it is a
    400. Returns ``(rows, links)`` as :func:`paginate` does.
    """
    limit = args.get("limit") or current_state().conf.api.page_size
    rows, more = paging.newest_first(session, stmt, model, limit, args.get("marker"), scope)
    return rows, (next_links(limit, rows[-1].id) if more else [])


def next_links(limit: int, marker: str) -> list[dict]:
    """The ``links`` of a page after which more items remain."""
    query = flask.request.args.to_dict()
    query.update(limit=str(limit), marker=marker)
    return [{"rel": "next", "href": flask.request.base_url + "?" + urllib.parse.urlencode(query)}]


def get_by_id_or_name(session, model, ref: str):
    """The row of ``model`` whose id or (unique) name is ``ref``, or None."""
    row = session.get(model, ref)
    if row is None:
        row = session.scalars(sa.select(model).where(model.name == ref)).first()
    return row
