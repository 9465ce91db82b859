"""The ``/placement`` blueprint and what its views share.

Views are plain functions (Placement's JSON is not marshmallow-shaped);
requests are version-negotiated (:mod:`.microversion`) and each view needs
Placement's own policy rule (:mod:`.policies`, ``RULE_OF_ENDPOINT``).
"""

from __future__ import annotations

import flask
import flask_smorest

from fleetflow.api import policy
from fleetflow.api.placement import microversion, policies
from fleetflow.api.state import current_state
from fleetflow.services.placement import PlacementService, errors, new_store

FENCE_HEADER = "FleetFlow-Fence"
STORE_SERVICE = "placement_store"
VERSIONS_ENDPOINT = "placement.versions"

blp = flask_smorest.Blueprint(
    "placement", __name__, url_prefix="/placement",
    description="OpenStack Placement compatible API (microversions "
                f"{microversion.as_text(microversion.MIN_VERSION)}-"
                f"{microversion.as_text(microversion.MAX_VERSION)}).")


@blp.before_request
def _negotiate_and_authorize() -> None:
    microversion.negotiate()
    if flask.request.endpoint == VERSIONS_ENDPOINT:
        return  # version discovery needs no credentials, as in Placement
    rule = policies.RULE_OF_ENDPOINT.get(flask.request.endpoint)
    if rule is None:
        return  # no such route or method: 404 or 405, as in Placement
    context = flask.g.context
    if rule == "placement:usages":
        # The project the usages are of, as Placement's target.
        target = {"project_id": flask.request.args.get("project_id")}
    else:
        target = {"project_id": context.project_id, "user_id": context.user_id}
    policy.enforce(rule, target)


def service() -> PlacementService:
    """The placement service over this app's placement store (the store is made on
    first use from the app's database when the app was given none)."""
    state = current_state()
    store = state.services.get(STORE_SERVICE)
    if store is None:
        store = state.services.setdefault(
            STORE_SERVICE, new_store(state.database, state.conf.placement.max_retries))
    return PlacementService(store)


def fence() -> dict | None:
    """The fencing token a fleetflow client sent (``FleetFlow-Fence: <key>=<token>``)."""
    value = flask.request.headers.get(FENCE_HEADER)
    if not value:
        return None
    key, _sep, token = value.rpartition("=")
    if not key or not token.isdigit():
        raise errors.BadRequest(f"{FENCE_HEADER} must be '<key>=<token>'")
    return {"key": key, "token": int(token)}


def base_url() -> str:
    return flask.request.script_root + blp.url_prefix


def provider_links(rp_uuid: str) -> list[dict]:
    self_url = f"{base_url()}/resource_providers/{rp_uuid}"
    links = [{"rel": "self", "href": self_url},
             {"rel": "inventories", "href": f"{self_url}/inventories"},
             {"rel": "usages", "href": f"{self_url}/usages"}]
    if microversion.at_least(1, 1):
        links.append({"rel": "aggregates", "href": f"{self_url}/aggregates"})
    if microversion.at_least(1, 6):
        links.append({"rel": "traits", "href": f"{self_url}/traits"})
    if microversion.at_least(1, 11):
        links.append({"rel": "allocations", "href": f"{self_url}/allocations"})
    return links


def provider_json(rp: dict) -> dict:
    out = {"uuid": rp["uuid"], "name": rp["name"], "generation": rp["generation"],
           "links": provider_links(rp["uuid"])}
    if microversion.at_least(1, 14):
        out["parent_provider_uuid"] = rp["parent_provider_uuid"]
        out["root_provider_uuid"] = rp["root_provider_uuid"]
    return out


def no_content() -> flask.Response:
    response = flask.Response(status=204)
    response.headers.pop("Content-Type", None)
    return response
