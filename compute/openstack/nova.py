"""Nova's compute API as the driver uses it: one microversion, answers mapped to errors.

Every call names the microversion it is written against (2.94: ``host`` on
create (2.74), ``host`` on migrate (2.56), tags in the server detail (2.26),
``instance_uuid`` on os-migrations (2.59), services by id (2.53), and an
evacuated server still ACTIVE, as 2.95 no longer leaves it). The cloud's
maximum is read once and a cloud older than that is refused with one line.

Errors: an answer Nova gave is a FleetflowError the flows know (not found,
refused); no answer, or a 5xx, is OutcomeUnknown: the caller asks what
happened before sending it again.
"""

from __future__ import annotations

import threading

from fleetflow.common.exceptions import Conflict, InvalidInput
from fleetflow.compute.exceptions import OutcomeUnknown

MICROVERSION = "2.94"
#: Tries again of a read whose connection failed (keystoneauth backs off between them).
READ_RETRIES = 3
#: Tag that marks a server as fleetflow's instance (Nova cannot filter on metadata).
INSTANCE_TAG = "fleetflow:"
#: Tag that finds the server of one try at a move from the try's migration id.
MOVE_TAG = "fleetflow-move:"


class Refused(Conflict):
    """Nova refused the request (4xx)."""

    code = "fleetflow.openstack.refused"


def instance_tag(uuid: str) -> str:
    return INSTANCE_TAG + uuid


def move_tag(migration_id: str) -> str:
    return MOVE_TAG + migration_id


class Nova:
    """The calls on one openstacksdk connection's compute endpoint."""

    def __init__(self, connection):
        self.connection = connection
        self._checked = False
        self._lock = threading.Lock()

    # -- plumbing -------------------------------------------------------------

    def _request(self, method: str, url: str, ok=(200, 201, 202, 204), **kwargs):
        self._check_version()
        if method == "get":
            # A read is safe to send again: a connection the cloud's front end reset
            # or refused (its accept queue full under a burst) is tried again first.
            kwargs.setdefault("connect_retries", READ_RETRIES)
        try:
            response = getattr(self.connection.compute, method)(
                url, microversion=MICROVERSION, raise_exc=False, **kwargs)
        except Exception as exc:  # keystoneauth: connect failures, timeouts, refusals
            if _refused_identity(exc):
                # Keystone refused the credentials or the scope (fleetflow's user has
                # no role in that project): an answer, and no request reached Nova.
                raise Refused(f"{method.upper()} {url}: the cloud's identity service "
                              f"refused fleetflow's credentials: {exc}",
                              status_code=401, url=url) from exc
            raise OutcomeUnknown(f"{method.upper()} {url}: no answer from Nova: {exc}") from exc
        if response.status_code in ok:
            return response.json() if response.content else {}
        message = _message(response)
        if response.status_code >= 500:
            raise OutcomeUnknown(f"{method.upper()} {url}: Nova answered "
                                 f"{response.status_code}: {message}")
        raise Refused(message, status_code=response.status_code, url=url)

    def _check_version(self) -> None:
        if self._checked:
            return
        with self._lock:
            if self._checked:
                return
            try:
                response = self.connection.compute.get("/", raise_exc=False)
                versions = response.json()
            except Exception as exc:
                raise OutcomeUnknown(f"Nova's version document: no answer: {exc}") from exc
            version = versions.get("version") or next(
                (v for v in versions.get("versions", []) if v.get("id") == "v2.1"), {})
            top = version.get("version") or "2.1"
            if _as_tuple(top) < _as_tuple(MICROVERSION):
                raise InvalidInput(f"this cloud's compute API goes up to {top}: fleetflow "
                                   f"needs {MICROVERSION} (Nova 2023.2 or newer)")
            self._checked = True

    # -- servers --------------------------------------------------------------

    def servers(self, **filters) -> list[dict]:
        """Servers of every project matching ``filters`` (Nova's list filters)."""
        params = {"all_tenants": "1", **filters}
        found, marker = [], None
        while True:
            page = dict(params, limit=1000, **({"marker": marker} if marker else {}))
            servers = self._request("get", "/servers/detail", params=page)["servers"]
            found.extend(servers)
            if len(servers) < 1000:
                return found
            marker = servers[-1]["id"]

    def server(self, server_id: str) -> dict | None:
        try:
            return self._request("get", f"/servers/{server_id}")["server"]
        except Refused as exc:
            if exc.details.get("status_code") == 404:
                return None
            raise

    def tagged(self, tag: str) -> list[dict]:
        return self.servers(tags=tag)

    def create(self, body: dict, hints: dict | None = None) -> dict:
        payload = {"server": body}
        if hints:
            payload["os:scheduler_hints"] = hints
        return self._request("post", "/servers", json=payload)["server"]

    def delete(self, server_id: str) -> None:
        self._request("delete", f"/servers/{server_id}", ok=(204, 404))

    def action(self, server_id: str, body: dict, microversion: str | None = None) -> dict:
        return self._request("post", f"/servers/{server_id}/action", json=body)

    def add_tag(self, server_id: str, tag: str) -> None:
        self._request("put", f"/servers/{server_id}/tags/{tag}", ok=(201, 204))

    def set_metadata(self, server_id: str, metadata: dict) -> None:
        self._request("post", f"/servers/{server_id}/metadata", json={"metadata": metadata})

    def migrations(self, server_id: str) -> list[dict]:
        """The server's migrations, newest first."""
        found = self._request("get", "/os-migrations",
                              params={"instance_uuid": server_id})["migrations"]
        return sorted(found, key=lambda m: m["id"], reverse=True)

    def abort_migration(self, server_id: str, migration_id: int) -> None:
        self._request("delete", f"/servers/{server_id}/migrations/{migration_id}",
                      ok=(202, 400, 404))

    # -- services and groups ---------------------------------------------------

    def compute_services(self, host: str | None = None) -> list[dict]:
        params = {"binary": "nova-compute", **({"host": host} if host else {})}
        return self._request("get", "/os-services", params=params)["services"]

    def hypervisors(self) -> list[dict]:
        """Compute nodes: ``id`` is the node's uuid, its provider's in Placement (2.53+)."""
        return self._request("get", "/os-hypervisors/detail")["hypervisors"]

    def providers_of(self, host: str) -> set[str]:
        """The Placement providers of ``host``'s compute nodes (their uuids)."""
        return {h["id"] for h in self.hypervisors()
                if (h.get("service") or {}).get("host") == host}

    def update_service(self, service_id: str, values: dict) -> dict:
        return self._request("put", f"/os-services/{service_id}", json=values)["service"]

    def server_groups(self) -> list[dict]:
        return self._request("get", "/os-server-groups",
                             params={"all_projects": "True"})["server_groups"]

    def create_server_group(self, body: dict) -> dict:
        return self._request("post", "/os-server-groups",
                             json={"server_group": body})["server_group"]

    def delete_server_group(self, group_id: str) -> None:
        self._request("delete", f"/os-server-groups/{group_id}", ok=(204, 404))


def _message(response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:300] or str(response.status_code)
    if isinstance(body, dict):
        for value in body.values():
            if isinstance(value, dict) and "message" in value:
                return str(value["message"])
    return str(body)[:300]


def _refused_identity(exc: Exception) -> bool:
    from keystoneauth1 import exceptions as ks

    return isinstance(exc, (ks.Unauthorized, ks.Forbidden, ks.MissingAuthPlugin))


def _as_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def host_of(server: dict) -> str | None:
    return server.get("OS-EXT-SRV-ATTR:host")


def task_state_of(server: dict) -> str | None:
    return server.get("OS-EXT-STS:task_state")


def fault_of(server: dict) -> str:
    fault = server.get("fault") or {}
    return fault.get("message") or f"server {server['id']} went {server.get('status')}"
