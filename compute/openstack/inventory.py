"""What the cloud says about its hosts, catalogs and usage, read into plain data.

:func:`read_cloud` asks Nova and Placement through an openstacksdk connection and
returns a :class:`CloudView`: dicts and lists only, so what turns it into
fleetflow's rows (``persistence.cloud_sync``) is tested with data, not a cloud.

Every answer goes through one of the ``*_from_nova`` / ``*_from_glance``
normalizers below, which take the JSON bodies as the API reference documents
them. Calls are raw GETs with an explicit microversion: the fields read are
then the documented ones, whatever openstacksdk's resource classes rename.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import urllib.parse
from concurrent.futures import ThreadPoolExecutor

LOG = logging.getLogger(__name__)

# 2.53: services and hypervisors carry uuids (a hypervisor's id is its compute
# node's uuid, which is its resource provider's uuid) and forced_down.
SERVICES_MICROVERSION = "2.53"
HYPERVISORS_MICROVERSION = "2.53"
# 2.41: aggregates carry their uuid (not needed) and every field read here.
AGGREGATES_MICROVERSION = "2.41"
# 2.61: flavors list their extra specs inline (one request, not one per flavor).
FLAVORS_MICROVERSION = "2.61"
# 2.64: a server group has one ``policy`` (earlier: a ``policies`` list).
SERVER_GROUPS_MICROVERSION = "2.64"
# The last microversion with Nova's image proxy (2.36 removed it).
IMAGES_MICROVERSION = "2.35"
# 1.6: provider traits.
PLACEMENT_MICROVERSION = "1.6"
# Providers read at once: one host is three small GETs.
READ_THREADS = 8
# Server groups per page (Nova's default api.max_limit).
GROUPS_PAGE = 1000


@dataclasses.dataclass
class CloudView:
    """The cloud at one moment, as plain data.

    ``services``: one ``{host, state, status, forced_down, zone, disabled_reason,
    updated_at}`` per nova-compute service (``updated_at``: its last heartbeat, a
    naive UTC datetime, or None). ``providers``: service host -> resource provider
    uuid. ``inventories`` / ``traits`` / ``usages`` are keyed by provider uuid:
    ``{rc: {total, reserved, allocation_ratio, ...}}``, ``[trait]``, ``{rc: used}``.
    ``aggregates``: ``{name, hosts, metadata, availability_zone}``. ``flavors``:
    ``{id, name, vcpus, ram, disk, ephemeral, swap, extra_specs}``. ``images``:
    ``{id, name, min_disk, min_ram}``. ``server_groups``: ``{id, name, policy,
    members}``. ``region``: the connection's region name (None when unset).
    """

    services: list[dict] = dataclasses.field(default_factory=list)
    providers: dict[str, str] = dataclasses.field(default_factory=dict)
    aggregates: list[dict] = dataclasses.field(default_factory=list)
    inventories: dict[str, dict] = dataclasses.field(default_factory=dict)
    traits: dict[str, list] = dataclasses.field(default_factory=dict)
    usages: dict[str, dict] = dataclasses.field(default_factory=dict)
    flavors: list[dict] = dataclasses.field(default_factory=list)
    images: list[dict] = dataclasses.field(default_factory=list)
    server_groups: list[dict] = dataclasses.field(default_factory=list)
    region: str | None = None


# -- normalizers: documented JSON in, CloudView entries out ------------------------------

def beat_time(value: str | None) -> dt.datetime | None:
    """A service's ``updated_at`` (ISO 8601, UTC, with or without an offset) as a naive
    UTC datetime, fleetflow's own; None when it never reported or cannot be read."""
    if not value:
        return None
    try:
        stamp = dt.datetime.fromisoformat(value)
    except ValueError:
        LOG.warning("unreadable service updated_at %r: no heartbeat taken from it", value)
        return None
    if stamp.tzinfo is not None:
        stamp = stamp.astimezone(dt.UTC).replace(tzinfo=None)
    return stamp


def services_from_nova(body: dict) -> list[dict]:
    """``GET /os-services`` (2.11+) -> the nova-compute services."""
    return [{"host": s["host"], "state": s.get("state", "down"),
             "status": s.get("status", "disabled"),
             "forced_down": bool(s.get("forced_down", False)),
             "zone": s.get("zone") or "nova",
             "disabled_reason": s.get("disabled_reason"),
             "updated_at": beat_time(s.get("updated_at"))}
            for s in body.get("services", []) if s.get("binary") == "nova-compute"]


def providers_from_nova(hypervisors: list[dict]) -> dict[str, str]:
    """``GET /os-hypervisors/detail`` (2.53+) entries -> ``{service host: provider uuid}``.

    A service with several nodes (Ironic) keeps the first node by uuid: fleetflow
    schedules onto a host as one provider.
    """
    found: dict[str, str] = {}
    for hypervisor in sorted(hypervisors, key=lambda h: str(h["id"])):
        host = (hypervisor.get("service") or {}).get("host")
        if host:
            found.setdefault(host, str(hypervisor["id"]))
    return found


def aggregates_from_nova(body: dict) -> list[dict]:
    """``GET /os-aggregates`` -> ``{name, hosts, metadata, availability_zone}``."""
    return [{"name": a["name"], "hosts": list(a.get("hosts") or []),
             "metadata": dict(a.get("metadata") or {}),
             "availability_zone": a.get("availability_zone")}
            for a in body.get("aggregates", [])]


def flavors_from_nova(flavors: list[dict]) -> list[dict]:
    """``GET /flavors/detail`` (2.61+) entries -> flavors with their extra specs."""
    found = []
    for f in flavors:
        swap = f.get("swap") or 0  # "" before 2.75 when the flavor has none
        found.append({"id": str(f["id"]), "name": f["name"], "vcpus": int(f["vcpus"]),
                      "ram": int(f["ram"]), "disk": int(f.get("disk") or 0),
                      "ephemeral": int(f.get("OS-FLV-EXT-DATA:ephemeral") or 0),
                      "swap": int(swap), "extra_specs": dict(f.get("extra_specs") or {})})
    return found


def images_from_nova(images: list[dict]) -> list[dict]:
    """``GET /images/detail`` of Nova's image proxy (2.35 at most)."""
    return [{"id": i["id"], "name": i.get("name") or i["id"],
             "min_disk": int(i.get("minDisk") or 0), "min_ram": int(i.get("minRam") or 0)}
            for i in images]


def images_from_glance(images: list[dict]) -> list[dict]:
    """``GET /v2/images`` of the image service."""
    return [{"id": i["id"], "name": i.get("name") or i["id"],
             "min_disk": int(i.get("min_disk") or 0), "min_ram": int(i.get("min_ram") or 0)}
            for i in images]


def server_groups_from_nova(groups: list[dict]) -> list[dict]:
    """``GET /os-server-groups`` entries (2.64+: ``policy``; earlier: ``policies``)."""
    return [{"id": g["id"], "name": g.get("name"),
             "policy": g.get("policy") or next(iter(g.get("policies") or []), None),
             "members": list(g.get("members") or [])}
            for g in groups]


def inventories_from_placement(body: dict) -> dict:
    """``GET /resource_providers/{uuid}/inventories`` -> ``{rc: inventory}``."""
    return {rc: dict(spec) for rc, spec in (body.get("inventories") or {}).items()}


# -- reading the cloud -------------------------------------------------------------------

def _get(proxy, url: str, microversion: str | None) -> dict:
    from openstack import exceptions

    response = proxy.get(url, microversion=microversion)
    exceptions.raise_from_response(response)
    return response.json()


def _linked_pages(proxy, url: str, key: str, microversion: str) -> list[dict]:
    """Every entry of a Nova list that pages with ``<key>_links`` (rel ``next``)."""
    entries: list[dict] = []
    while url:
        body = _get(proxy, url, microversion)
        entries.extend(body.get(key, []))
        url = next((link["href"] for link in body.get(f"{key}_links", [])
                    if link.get("rel") == "next"), None)
    return entries


def _server_groups(compute) -> list[dict]:
    groups: list[dict] = []
    while True:
        query = urllib.parse.urlencode({"all_projects": "True", "limit": GROUPS_PAGE,
                                        "offset": len(groups)})
        page = _get(compute, f"/os-server-groups?{query}",
                    SERVER_GROUPS_MICROVERSION).get("server_groups", [])
        groups.extend(page)
        if len(page) < GROUPS_PAGE:
            return groups


def _images(connection) -> list[dict]:
    """Nova's image proxy, else the image service, else none (neither answers)."""
    try:
        return images_from_nova(_linked_pages(connection.compute, "/images/detail",
                                              "images", IMAGES_MICROVERSION))
    except Exception as exc:  # a cloud without the proxy answers 404 or 406
        LOG.debug("Nova's image proxy did not answer (%s); asking the image service", exc)
    try:
        images, url = [], "/v2/images?limit=1000"
        while url:
            body = _get(connection.image, url, None)
            images.extend(body.get("images", []))
            url = body.get("next")
        return images_from_glance(images)
    except Exception as exc:  # no image endpoint in the catalog, or it fails
        LOG.warning("no image list from the cloud (%s): syncing no images", exc)
        return []


def _provider_data(placement, uuid: str) -> tuple[dict, list, dict]:
    from openstack import exceptions

    base = f"/resource_providers/{uuid}"
    try:
        return _read_provider(placement, base)
    except exceptions.NotFoundException:
        # Deleted since the hypervisors were listed: the next sync will not see it.
        LOG.info("resource provider %s is gone; its host syncs without inventory", uuid)
        return {}, [], {}


def _read_provider(placement, base: str) -> tuple[dict, list, dict]:
    inventories = inventories_from_placement(_get(placement, base + "/inventories",
                                                  PLACEMENT_MICROVERSION))
    traits = sorted(_get(placement, base + "/traits", PLACEMENT_MICROVERSION)
                    .get("traits", []))
    usages = dict(_get(placement, base + "/usages", PLACEMENT_MICROVERSION)
                  .get("usages", {}))
    return inventories, traits, usages


def read_cloud(connection) -> CloudView:
    """Read the cloud ``connection`` (an ``openstack.connection.Connection``) reaches."""
    compute, placement = connection.compute, connection.placement
    view = CloudView(region=getattr(connection.config, "region_name", None) or None)
    view.services = services_from_nova(_get(compute, "/os-services?binary=nova-compute",
                                            SERVICES_MICROVERSION))
    view.providers = providers_from_nova(_linked_pages(
        compute, "/os-hypervisors/detail", "hypervisors", HYPERVISORS_MICROVERSION))
    view.aggregates = aggregates_from_nova(_get(compute, "/os-aggregates",
                                                AGGREGATES_MICROVERSION))
    view.flavors = flavors_from_nova(_linked_pages(
        compute, "/flavors/detail?is_public=None", "flavors", FLAVORS_MICROVERSION))
    view.images = _images(connection)
    view.server_groups = server_groups_from_nova(_server_groups(compute))
    uuids = sorted(set(view.providers.values()))
    with ThreadPoolExecutor(max_workers=READ_THREADS) as pool:
        for uuid, (inventories, traits, usages) in zip(
                uuids, pool.map(lambda u: _provider_data(placement, u), uuids), strict=True):
            view.inventories[uuid] = inventories
            view.traits[uuid] = traits
            view.usages[uuid] = usages
    return view
