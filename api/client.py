"""A small Python client of the fleetflow REST API (used by the ``fleetflow`` CLI).

::

    client = Client("http://127.0.0.1:8774", project_id="admin", roles=["admin"])
    for host in client.list_hosts(region="north-america"):
        ...
    client.update_host("host-001", "maintenance", reason="disk swap")

Identity is sent as noauth headers (``project_id``, ``user_id``, ``roles``) or
as a token (``token``): a Keystone token, or in noauth mode ``PROJECT:ROLE[,ROLE]``,
whose project is then the client's unless ``project_id`` is given. Any error answer raises
:class:`FleetflowApiError` carrying the API's error body. This module imports
nothing of the server side, so the CLI can use it against a remote cloud.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterator, Sequence

import requests

from fleetflow.api.client_reservations import ReservationCalls
from fleetflow.api.client_vclusters import VclusterCalls

REQUEST_ID_HEADER = "X-OpenStack-Request-Id"


def where(item: dict) -> str | None:
    """Where a server, instance or vcluster member is, as the caller may see it.

    The host's (a volume's: the backend's) name, or its opaque ``host_id`` when
    the policy rule ``servers:show_host`` hides names from the caller: equal
    ids still mean the same place.
    """
    name = item.get("backend") if item.get("type") == "volume" else item.get("host")
    return name or item.get("host_id")


def _segment(value: str) -> str:
    """One path segment: names may hold characters that a URL may not."""
    return urllib.parse.quote(str(value), safe="")


class FleetflowApiError(Exception):
    """The API answered an error; ``errors`` is its list of error objects."""

    def __init__(self, status: int, errors: list[dict], request_id: str | None = None,
                 body=None):
        self.status = status
        self.errors = errors
        self.request_id = request_id
        self.body = body
        first = errors[0] if errors else {}
        self.code = first.get("code")
        detail = "; ".join(e.get("detail", "") for e in errors) or "no detail"
        super().__init__(f"HTTP {status} {self.code or ''}: {detail} "
                         f"(request {request_id})".replace("  ", " "))


class Client(ReservationCalls, VclusterCalls):
    """Talks to one fleetflow API endpoint with one identity."""

    def __init__(self, base_url: str, *, project_id: str | None = None,
                 user_id: str | None = None, roles: Sequence[str] = (),
                 token: str | None = None, timeout: float = 30.0,
                 session: requests.Session | None = None):
        self.base_url = base_url.rstrip("/")
        self.project_id = project_id
        self.timeout = timeout
        self.session = session or requests.Session()
        headers = {"Accept": "application/json"}
        if token:
            # NOTE: the token alone is the identity: noauth headers would win over a
            # noauth token (PROJECT:ROLE[,ROLE]), which also names the project.
            headers["X-Auth-Token"] = token
            head, colon, _ = token.partition(":")
            self.project_id = project_id or (head.strip() if colon else None) or None
        else:
            if project_id:
                headers["X-Project-Id"] = project_id
            if user_id:
                headers["X-User-Id"] = user_id
            if roles:
                headers["X-Roles"] = ",".join(roles)
        self.session.headers.update(headers)

    # -- transport ---------------------------------------------------------

    def request(self, method: str, path: str, *, json=None, params=None, headers=None,
                data: bytes | str | None = None):
        """Send one request; the decoded JSON body, or FleetflowApiError.

        ``data`` is a body already encoded (XML): give its Content-Type in
        ``headers``. The answer is asked for as JSON either way.
        """
        url = path if path.startswith(("http://", "https://")) else self.base_url + path
        if isinstance(data, str):
            data = data.encode("utf-8")
        response = self.session.request(method, url, json=json, params=params, data=data,
                                        headers=headers, timeout=self.timeout)
        if response.status_code >= 400:
            raise self._error(response)
        if response.status_code == 204 or not response.content:
            return None
        return response.json()

    @staticmethod
    def _error(response: requests.Response) -> FleetflowApiError:
        request_id = response.headers.get(REQUEST_ID_HEADER)
        try:
            body = response.json()
            errors = list(body["errors"])
        except (ValueError, KeyError, TypeError):
            # Not our format: a proxy or a middleware answered. Keep the text.
            body = response.text
            errors = [{"status": response.status_code, "code": None,
                       "title": response.reason, "detail": body[:500]}]
        return FleetflowApiError(response.status_code, errors, request_id, body)

    def get(self, path, **params):
        return self.request("GET", path, params=params or None)

    def put(self, path, body):
        return self.request("PUT", path, json=body)

    def post(self, path, body):
        return self.request("POST", path, json=body)

    def delete(self, path):
        return self.request("DELETE", path)

    def iterate(self, path: str, key: str, **params) -> Iterator[dict]:
        """Every item of a paginated list, following its ``next`` links."""
        page = self.get(path, **{k: v for k, v in params.items() if v is not None})
        while True:
            yield from page[key]
            following = [link["href"] for link in page.get("links", [])
                         if link.get("rel") == "next"]
            if not following:
                return
            page = self.request("GET", following[0])

    def _tenant_path(self, tenant_id: str | None, suffix: str) -> str:
        tenant = tenant_id or self.project_id
        if not tenant:
            raise ValueError("a tenant id is needed (give project_id to the Client)")
        return f"/v2/{_segment(tenant)}/{suffix}"

    # -- hosts (admin) -----------------------------------------------------

    def list_hosts(self, *, state=None, region=None, zone=None, rack=None,
                   limit=None) -> list[dict]:
        return list(self.iterate("/v2/admin/hosts", "hosts", state=state, region=region,
                                 zone=zone, rack=rack, limit=limit))

    def get_host(self, name: str) -> dict:
        return self.get(f"/v2/admin/hosts/{_segment(name)}")["host"]

    def update_host(self, name: str, state: str, reason: str | None = None) -> dict:
        change = {"state": state}
        if reason is not None:
            change["reason"] = reason
        return self.put(f"/v2/admin/hosts/{_segment(name)}", {"host": change})["host"]

    def simulate_host(self, name: str, dead: bool) -> dict:
        """Kill (``dead=True``) or revive a simulated host; ``{"host", "faults"}``."""
        return self.post(f"/v2/admin/hosts/{_segment(name)}/simulate",
                         {"simulate": {"dead": bool(dead)}})

    # -- evacuations (admin) -------------------------------------------------

    def evacuate(self, evacuation: dict, *, dry_run: bool = False) -> dict:
        """POST an evacuation body (``{"hosts": [...], "mode": "live", ...}``).

        Returns the accepted ``evacuation`` (id, status, links), or with
        ``dry_run`` where each server would go (fits, instances).
        """
        return self.request("POST", "/v2/admin/evacuations", json={"evacuation": evacuation},
                            params={"dry_run": "true"} if dry_run else None)["evacuation"]

    def evacuate_host(self, name: str, fields: dict, *, dry_run: bool = False) -> dict:
        """Evacuate one host: ``fields`` as for :meth:`evacuate`, without hosts."""
        return self.request("POST", f"/v2/admin/hosts/{_segment(name)}/evacuate",
                            json={"evacuate": fields},
                            params={"dry_run": "true"} if dry_run else None)["evacuation"]

    def list_evacuations(self, *, status=None, host=None, limit=None) -> list[dict]:
        return list(self.iterate("/v2/admin/evacuations", "evacuations", status=status,
                                 host=host, limit=limit))

    def get_evacuation(self, evacuation_id: str) -> dict:
        return self.get(f"/v2/admin/evacuations/{_segment(evacuation_id)}")["evacuation"]

    def resume_evacuation(self, evacuation_id: str) -> dict:
        return self.post(f"/v2/admin/evacuations/{_segment(evacuation_id)}/resume",
                         {})["evacuation"]

    def skip_evacuation(self, evacuation_id: str, instance_ids: Sequence[str]) -> dict:
        return self.post(f"/v2/admin/evacuations/{_segment(evacuation_id)}/skip",
                         {"skip": {"instances": list(instance_ids)}})["evacuation"]

    def revert_evacuation(self, evacuation_id: str) -> dict:
        return self.post(f"/v2/admin/evacuations/{_segment(evacuation_id)}/revert",
                         {})["evacuation"]

    # -- catalog -----------------------------------------------------------

    def list_flavors(self, tenant_id: str | None = None) -> list[dict]:
        return list(self.iterate(self._tenant_path(tenant_id, "flavors"), "flavors"))

    def get_flavor(self, ref: str, tenant_id: str | None = None) -> dict:
        return self.get(self._tenant_path(tenant_id, f"flavors/{_segment(ref)}"))["flavor"]

    def list_images(self, tenant_id: str | None = None) -> list[dict]:
        return list(self.iterate(self._tenant_path(tenant_id, "images"), "images"))

    def get_image(self, ref: str, tenant_id: str | None = None) -> dict:
        return self.get(self._tenant_path(tenant_id, f"images/{_segment(ref)}"))["image"]

    # -- volumes -------------------------------------------------------------

    def list_volumes(self, *, vcluster_id=None, status=None, limit=None,
                     tenant_id: str | None = None) -> list[dict]:
        """The project's volumes; DELETED ones only when ``status`` asks for them."""
        return list(self.iterate(self._tenant_path(tenant_id, "volumes"), "volumes",
                                 vcluster_id=vcluster_id, status=status, limit=limit))

    def get_volume(self, volume_id: str, tenant_id: str | None = None) -> dict:
        return self.get(self._tenant_path(tenant_id, f"volumes/{_segment(volume_id)}"))[
            "volume"]

    # -- servers -----------------------------------------------------------

    def list_servers(self, *, reservation_id=None, status=None, host=None, limit=None,
                     tenant_id: str | None = None) -> list[dict]:
        return list(self.iterate(self._tenant_path(tenant_id, "servers"), "servers",
                                 reservation_id=reservation_id, status=status, host=host,
                                 limit=limit))

    def list_all_servers(self, *, project_id=None, reservation_id=None, status=None,
                         host=None, limit=None) -> list[dict]:
        """Every project's servers, or one ``project_id``'s (administrators)."""
        return list(self.iterate("/v2/admin/servers", "servers", project_id=project_id,
                                 reservation_id=reservation_id, status=status, host=host,
                                 limit=limit))

    def get_server(self, server_id: str, tenant_id: str | None = None) -> dict:
        return self.get(self._tenant_path(tenant_id, f"servers/{_segment(server_id)}"))[
            "server"]

    def delete_server(self, server_id: str, tenant_id: str | None = None) -> dict:
        return self.delete(self._tenant_path(tenant_id, f"servers/{_segment(server_id)}"))[
            "server"]

    def update_server_metadata(self, server_id: str, metadata: dict, replace: bool = False,
                               tenant_id: str | None = None) -> dict:
        """Merge ``metadata`` into the server's (``replace``: instead of it); all of it."""
        path = self._tenant_path(tenant_id, f"servers/{_segment(server_id)}/metadata")
        send = self.put if replace else self.post
        return send(path, {"metadata": metadata})["metadata"]

    def delete_server_metadata(self, server_id: str, key: str,
                               tenant_id: str | None = None) -> None:
        self.delete(self._tenant_path(
            tenant_id, f"servers/{_segment(server_id)}/metadata/{_segment(key)}"))

    # -- server groups -----------------------------------------------------

    def list_groups(self, *, name=None, tenant_id: str | None = None) -> list[dict]:
        return list(self.iterate(self._tenant_path(tenant_id, "groups"), "groups", name=name))

    def get_group(self, group_id: str, tenant_id: str | None = None) -> dict:
        return self.get(self._tenant_path(tenant_id, f"groups/{_segment(group_id)}"))["group"]

    def create_group(self, group: dict, tenant_id: str | None = None) -> dict:
        """``group``: name, policies, scope, max_per_host, metadata, capabilities."""
        return self.post(self._tenant_path(tenant_id, "groups"), {"group": group})["group"]

    def update_group(self, group_id: str, changes: dict, tenant_id: str | None = None) -> dict:
        return self.put(self._tenant_path(tenant_id, f"groups/{_segment(group_id)}"),
                        {"group": changes})["group"]

    def delete_group(self, group_id: str, tenant_id: str | None = None) -> None:
        self.delete(self._tenant_path(tenant_id, f"groups/{_segment(group_id)}"))

    # -- permissions ---------------------------------------------------------

    def get_permissions(self, tenant_id: str | None = None) -> dict:
        """The route rules the caller passes (``allowed``) and not (``denied``)."""
        return self.get(self._tenant_path(tenant_id, "permissions"))["permissions"]

    # -- quotas ------------------------------------------------------------

    def get_quota(self, tenant_id: str | None = None) -> dict:
        """The project's own limits and usage."""
        return self.get(self._tenant_path(tenant_id, "quotas"))["quota"]

    def get_project_quota(self, tenant_id: str) -> dict:
        """Any project's limits (administrators)."""
        return self.get(f"/v2/admin/quotas/{_segment(tenant_id)}")["quota"]

    def set_quota(self, tenant_id: str, **limits: int) -> dict:
        """Set instances / vcpus / ram_mb / volumes / gigabytes of a project (administrators)."""
        return self.put(f"/v2/admin/quotas/{_segment(tenant_id)}", {"quota": limits})["quota"]

    # -- flows ---------------------------------------------------------------

    def list_flows(self, *, state=None, tenant=None, limit=None) -> list[dict]:
        """Every flow (administrators); ``state`` may be PAUSED."""
        return list(self.iterate("/v2/admin/flows", "flows", state=state, tenant=tenant,
                                 limit=limit))

    def list_queue(self, *, limit=None) -> list[dict]:
        """Every request waiting for capacity, in queue order (administrators)."""
        return list(self.iterate("/v2/admin/queue", "queue", limit=limit))

    def get_flow(self, flow_id: str) -> dict:
        """A flow with every atom (administrators)."""
        return self.get(f"/v2/admin/flows/{_segment(flow_id)}")["flow"]

    def resume_flow(self, flow_id: str) -> dict:
        """Resume a stopped flow from its checkpoint (administrators)."""
        return self.post(f"/v2/admin/flows/{_segment(flow_id)}/resume", None)["flow"]

    def revert_flow(self, flow_id: str) -> dict:
        """Revert a paused, suspended or failed flow (administrators)."""
        return self.post(f"/v2/admin/flows/{_segment(flow_id)}/revert", None)["flow"]

    def list_project_flows(self, *, state=None, tenant_id: str | None = None) -> list[dict]:
        """The project's own flows."""
        return list(self.iterate(self._tenant_path(tenant_id, "flows"), "flows", state=state))

    def get_project_flow(self, flow_id: str, tenant_id: str | None = None) -> dict:
        return self.get(self._tenant_path(tenant_id, f"flows/{_segment(flow_id)}"))["flow"]

    def get_flow_graph(self, flow_id: str) -> dict:
        """Any flow as a graph: its summary and ``root``, the nested nodes (administrators)."""
        return self.get(f"/v2/admin/flows/{_segment(flow_id)}/graph")["graph"]

    def get_project_flow_graph(self, flow_id: str, tenant_id: str | None = None) -> dict:
        return self.get(self._tenant_path(tenant_id,
                                          f"flows/{_segment(flow_id)}/graph"))["graph"]

    # -- capacity and events (admin) -------------------------------------------

    def capacity(self, *, region=None, zone=None, by=None) -> dict:
        """Total, used and free per resource class, per region › zone › rack › host."""
        return self.get("/v2/admin/capacity", region=region, zone=zone, by=by)["capacity"]

    def events(self, *, since: str | None = None, limit=None) -> dict:
        """``{"events", "cursor"}``: operations and hosts changed after ``since``."""
        return self.get("/v2/admin/events", since=since, limit=limit)
