"""Field types the resource schemas share."""

from __future__ import annotations

import datetime as dt

import marshmallow as ma


def utc_isoformat(value: dt.datetime | None) -> str | None:
    """``value`` as ISO 8601 with its UTC offset (``...T12:00:00.5+00:00``).

    The database keeps naive datetimes that are UTC by convention (SQLite has
    no zones); without the offset a client could not tell them from local
    times, and the document promises RFC 3339 ``date-time``, which needs one.
    """
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return value.astimezone(dt.UTC).isoformat()


class UtcDateTime(ma.fields.DateTime):
    """A timestamp shown with its UTC offset (see :func:`utc_isoformat`)."""

    def _serialize(self, value, attr, obj, **kwargs):
        return utc_isoformat(value)


class JsonBoolean(ma.fields.Boolean):
    """A body field that is JSON ``true`` or ``false``, never 0, 1 or "yes".

    NOTE: marshmallow's Boolean takes many spellings, and a truthy set cannot
    refuse 0 and 1 (``0 == False`` in Python).
    """

    def _deserialize(self, value, attr, data, **kwargs):
        if not isinstance(value, bool):
            raise self.make_error("invalid", input=value)
        return value
