"""The catalogues every project sees alike: flavors and images.

Pages are sorted by name (the marker is a name); one item is found by its id
or by its unique name.
"""

from __future__ import annotations

import sqlalchemy as sa

from fleetflow.persistence import paging
from fleetflow.persistence.models import Flavor, Image


def _page(database, model, what: str, limit: int, marker: str | None) -> tuple[list, bool]:
    with database.read_session() as session:
        return paging.keyset_page(session, sa.select(model), model.name, limit, marker, what)


def _find(database, model, ref: str):
    with database.read_session() as session:
        row = session.get(model, ref)
        if row is None:
            row = session.scalars(sa.select(model).where(model.name == ref)).first()
        return row


def flavor_page(database, *, limit: int, marker: str | None = None) -> tuple[list[Flavor], bool]:
    """``(flavors, more)``: one page by name; an unknown marker is InvalidInput (``marker``)."""
    return _page(database, Flavor, "flavor", limit, marker)


def find_flavor(database, ref: str) -> Flavor | None:
    """The flavor whose id or name is ``ref``, or None."""
    return _find(database, Flavor, ref)


def image_page(database, *, limit: int, marker: str | None = None) -> tuple[list[Image], bool]:
    """``(images, more)``: one page by name; an unknown marker is InvalidInput (``marker``)."""
    return _page(database, Image, "image", limit, marker)


def find_image(database, ref: str) -> Image | None:
    """The image whose id or name is ``ref``, or None."""
    return _find(database, Image, ref)
