"""``OpenStack-API-Version: placement X.Y`` handling, as OpenStack Placement does it.

No header means the minimum version (1.0); ``latest`` means the maximum; a
malformed value answers 400 and a version outside [min, max] answers 406. The
chosen version is echoed in the response header (with ``Vary``) so a client
knows what it got.
"""

from __future__ import annotations

import re

import flask
import flask_smorest

from fleetflow.services.placement import errors

SERVICE = "placement"
HEADER = "OpenStack-API-Version"
MIN_VERSION = (1, 0)
# 1.39 is the newest Placement behaviour we follow (in: trait groups). Between
# 1.28 (consumer generations) and here: 1.34 mappings, 1.38 consumer types.
MAX_VERSION = (1, 39)

_VERSION = re.compile(r"^([1-9]\d*|0)\.([1-9]\d*|0)$")


def as_text(version: tuple[int, int]) -> str:
    return f"{version[0]}.{version[1]}"


def parse_header(value: str | None) -> tuple[int, int]:
    """The version a request asks for (400 / 406 on a bad one)."""
    if not value:
        return MIN_VERSION
    wanted = None
    for item in value.split(","):
        service, _sep, version = item.strip().partition(" ")
        if service.lower() == SERVICE:
            wanted = version.strip()
    if wanted is None:
        return MIN_VERSION
    if wanted == "latest":
        return MAX_VERSION
    match = _VERSION.match(wanted)
    if not match:
        flask_smorest.abort(400, message=f"invalid version string: {wanted}",
                            code=errors.UNDEFINED)
    version = (int(match.group(1)), int(match.group(2)))
    if not MIN_VERSION <= version <= MAX_VERSION:
        flask_smorest.abort(406, code=errors.UNDEFINED, message=(
            f"Unacceptable version header: {wanted} (minimum {as_text(MIN_VERSION)}, "
            f"maximum {as_text(MAX_VERSION)})"))
    return version


def negotiate() -> None:
    """before_request hook: record the requested version in ``g``."""
    flask.g.placement_version = MIN_VERSION  # so an error response can still say one
    flask.g.placement_version = parse_header(flask.request.headers.get(HEADER))


def current() -> tuple[int, int]:
    return getattr(flask.g, "placement_version", MIN_VERSION)


def at_least(major: int, minor: int) -> bool:
    """True when the request's version is ``major.minor`` or newer."""
    return current() >= (major, minor)


def require(major: int, minor: int, status: int = 404) -> None:
    """404 (or ``status``) for a route that does not exist before ``major.minor``."""
    if not at_least(major, minor):
        flask_smorest.abort(status, code=errors.UNDEFINED, message=(
            f"The resource could not be found (needs microversion {major}.{minor}; "
            f"the request asked for {as_text(current())})."))
