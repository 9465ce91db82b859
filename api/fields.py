"""Field types of the request schemas: what a number or a name may be.

Every integer of a request body is an :class:`Integer`: a JSON number without
a fraction (``"2"``, ``1.5`` and ``2.0`` are refused, never cut or converted)
within the range of the database's integer columns. In an XML body every value
is text, so there the digits of an integer are read as one.

Names, ids, references and dictionary keys are :class:`Name`, and the free
text an operator or tenant writes (a host's or an evacuation's reason) is
:class:`Text`: neither takes control characters (nothing in a name needs one,
XML 1.0 cannot carry most of them, and the CLI prints text as it is stored, so
an escape sequence would reach the terminal and a newline would break a table).
Lone surrogates and NUL are refused for every string by the body decoder
(:mod:`fleetflow.api.bodies`).

Timestamps in answers are :class:`UtcDateTime`: ISO 8601 with the UTC offset.
"""

from __future__ import annotations

import datetime as dt
import re
import unicodedata

import flask
import marshmallow as ma

from fleetflow.api import xml
from fleetflow.services.servers import MAX_METADATA_ITEMS, MAX_METADATA_LENGTH

# The integer columns are 32-bit on PostgreSQL.
COLUMN_MIN = -(2**31)
COLUMN_MAX = 2**31 - 1
_XML_INTEGER = re.compile(r"\s*[+-]?\d{1,12}\s*")


class Integer(ma.fields.Integer):
    """A whole JSON number that fits an integer column (the bound shows in the OpenAPI
    document as minimum/maximum)."""

    default_error_messages = {"invalid": "Not a valid integer: give a number without "
                                         "a fraction or quotes."}

    def __init__(self, **kwargs):
        super().__init__(**{**kwargs, "strict": True})
        self.validators[:0] = [ma.validate.Range(min=COLUMN_MIN), ma.validate.Range(max=COLUMN_MAX)]

    def _validated(self, value):
        if (isinstance(value, str) and flask.has_request_context()
                and xml.is_xml_request(flask.request) and _XML_INTEGER.fullmatch(value)):
            return int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.make_error("invalid", input=value)
        return value


def no_control_characters(value: str) -> None:
    for char in value:
        if unicodedata.category(char) == "Cc":
            raise ma.ValidationError(f"Must not contain control characters "
                                     f"(U+{ord(char):04X}).")


class Name(ma.fields.String):
    """A name, id, reference or key: text without control characters."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.validators.insert(0, no_control_characters)


class Text(ma.fields.String):
    """Free text a person writes (a reason, a description): no control characters."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.validators.insert(0, no_control_characters)


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


METADATA_HELP = (f"String keys (1 to {MAX_METADATA_LENGTH} characters) and values (at most "
                 f"{MAX_METADATA_LENGTH}), at most {MAX_METADATA_ITEMS} items. Automatic "
                 "recovery reads ha=true, recovery=never and recovery_priority=N "
                 "(docs/recovery.md).")


def server_metadata(**kwargs) -> ma.fields.Dict:
    """A server's metadata as a client sends it, within Nova's bounds."""
    return ma.fields.Dict(
        keys=Name(validate=ma.validate.Length(min=1, max=MAX_METADATA_LENGTH)),
        values=Text(validate=ma.validate.Length(max=MAX_METADATA_LENGTH)),
        validate=ma.validate.Length(max=MAX_METADATA_ITEMS),
        metadata={"description": METADATA_HELP}, **kwargs)
