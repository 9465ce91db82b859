"""``Idempotency-Key`` on the POSTs that start something (reservations, vclusters).

A POST with an ``Idempotency-Key`` header that this project has used before
creates nothing and answers the first resource again, with the same ``202``
and ``Location`` as the first time (so a client retrying after a lost answer
needs no special case) plus ``Idempotent-Replayed: true``. The same key with
a different request body is a client bug and answers ``422`` (as the IETF
Idempotency-Key draft says). The services find the first resource by its
key; this module is the HTTP side, shared by the routes that take a key.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import flask
import sqlalchemy as sa
from flask_smorest import abort

HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"
MAX_KEY = 255  # the column's size

T = TypeVar("T")


def key() -> str | None:
    """The request's key, or None; a 400 for an empty or too long one."""
    raw = flask.request.headers.get(HEADER)
    if raw is None:
        return None
    # The IETF draft sends the key as a quoted string; bare values are common.
    value = raw.strip()
    if len(value) >= 2 and value[0] == value[-1] == '"':
        value = value[1:-1]
    if not value or len(value) > MAX_KEY:
        abort(400, message=f"Invalid header field '{HEADER}': 1 to {MAX_KEY} characters.")
    return value


def create(make: Callable[[], T], key: str | None) -> T:
    """``make()``, asked once more when a retry with the same ``key`` won the race."""
    try:
        return make()
    except sa.exc.IntegrityError:
        if key is None:
            raise
        # NOTE: two retries with one key raced past the lookup; the unique
        # (tenant_id, idempotency_key) index let one insert win and rolled
        # this one back before its flow was posted. Asking again finds the
        # winner's.
        return make()


def refuse_changed(what: str, resource_id: str, changed: list[str]) -> None:
    """422 when a replayed key came with another body (``changed``: the fields that differ)."""
    if changed:
        abort(422, code="fleetflow.idempotency_key_reused",
              message=f"{HEADER} was already used for {what} {resource_id} "
                      f"with a different {', '.join(changed)}.")


def post_parameters(what: str, dry_run: str) -> list[dict]:
    """The documented parameters of a POST that takes ``dry_run`` and a key.

    NOTE: parameters given to ``@blp.doc`` replace those ``@blp.arguments``
    documents rather than add to them, so dry_run is listed again here.
    """
    return [{
        "in": "query", "name": "dry_run", "required": False,
        "schema": {"type": "boolean", "default": False},
        "description": dry_run}, {
        "in": "header", "name": HEADER, "required": False,
        "schema": {"type": "string", "maxLength": MAX_KEY},
        "description": f"Retrying with the same key returns the first {what} (202, "
                       f"{REPLAYED_HEADER}: true); the same key with another body is "
                       "a 422."}]
