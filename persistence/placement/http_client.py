"""``HttpPlacement``: the PlacementClient over HTTP, for ours or OpenStack's Placement."""

from __future__ import annotations

import requests

from fleetflow.common.exceptions import FleetflowError, StaleFence
from fleetflow.persistence import fences
from fleetflow.persistence.placement import errors
from fleetflow.persistence.placement.client import ConsumerAllocations, PlacementClient

# Placement's 409 codes -> our exceptions. A real Placement answers a capacity
# failure with 'placement.undefined_code'; see _raise_for.
CONFLICTS = {
    errors.CONCURRENT_UPDATE: errors.ConcurrentUpdate,
    errors.CAPACITY_EXCEEDED: errors.CapacityExceeded,
    errors.CONSTRAINT_VIOLATED: errors.ConstraintViolated,
    errors.INVENTORY_INUSE: errors.InventoryInUse,
    errors.DUPLICATE_NAME: errors.DuplicateProvider,
    errors.PROVIDER_IN_USE: errors.ProviderInUse,
    errors.CANNOT_DELETE_PARENT: errors.CannotDeleteParent,
    StaleFence.code: StaleFence,
}
FENCE_HEADER = "FleetFlow-Fence"


def _raise_for(response: requests.Response) -> None:
    if response.status_code < 400:
        return
    try:
        error = response.json()["errors"][0]
        code, detail = error.get("code"), error.get("detail") or error.get("title")
    except (ValueError, KeyError, IndexError, TypeError):
        code, detail = None, response.text[:500]
    detail = f"{response.request.method} {response.url}: {response.status_code} {detail}"
    status = response.status_code
    if status == 409:
        cls = CONFLICTS.get(code)
        if cls is None:
            # Placement's capacity/constraint failure: "Unable to allocate inventory".
            cls = errors.CapacityExceeded if "allocate" in detail.lower() \
                else errors.PlacementConflict
        raise cls(detail)
    if status == 404:
        raise errors.ProviderNotFound(detail) if "resource_provider" in response.url \
            else errors.ConsumerNotFound(detail)
    if status == 400:
        # Placement's words for a provider deleted since the caller read it.
        gone = "Allocation for resource provider" in detail and "does not exist" in detail
        raise (errors.ProviderGone if gone else errors.BadRequest)(detail)
    error = FleetflowError(detail)
    error.status = status
    raise error


class HttpPlacement(PlacementClient):
    """Any Placement endpoint (``http://host:port/placement``), token auth.

    ``database``: when given, a fence is also checked against the fleetflow
    database before each write (a real Placement knows nothing of fences; our
    own API checks the ``FleetFlow-Fence`` header inside its transaction).
    """

    def __init__(self, endpoint: str, token: str | None = "admin", max_retries: int = 10,
                 version: str = "1.38", timeout: float = 30.0, database=None,
                 chunk_size: int = 200):
        super().__init__(max_retries)
        if not endpoint:
            raise ValueError("[placement] endpoint is required when backend = http")
        self.endpoint = endpoint.rstrip("/")
        self.timeout = timeout
        self.database = database
        # Our API limits request bodies ([api] max_body_bytes): big POSTs are split.
        self.chunk_size = chunk_size
        self.session = requests.Session()
        self.session.headers.update({"OpenStack-API-Version": f"placement {version}",
                                     "Accept": "application/json"})
        if token:
            self.session.headers["X-Auth-Token"] = token

    def _call(self, method: str, path: str, fence=None, **kwargs) -> requests.Response:
        headers = {}
        if fence:
            headers[FENCE_HEADER] = f"{fence['key']}={fence['token']}"
            if self.database is not None:
                with self.database.session() as session:
                    fences.check(session, fence)
        response = self.session.request(method, self.endpoint + path, headers=headers,
                                        timeout=self.timeout, **kwargs)
        _raise_for(response)
        return response

    def get_allocations(self, consumer: str) -> ConsumerAllocations:
        return ConsumerAllocations.from_placement(
            self._call("GET", f"/allocations/{consumer}").json())

    @staticmethod
    def _body(write) -> dict:
        # 1.38 carries the consumer type (a migration consumer must stay one,
        # or it reads as a leaked instance) and requires it on every write.
        return {"allocations": {rp: {"resources": r} for rp, r in write.allocations.items()},
                "project_id": write.project_id, "user_id": write.user_id,
                "consumer_generation": write.generation,
                "consumer_type": write.consumer_type or "INSTANCE"}

    def write(self, writes, fence=None) -> None:
        writes = list(writes)
        if len(writes) == 1:
            w = writes[0]
            self._call("PUT", f"/allocations/{w.consumer_uuid}", fence, json=self._body(w))
            return
        done = []
        try:
            for start in range(0, len(writes), self.chunk_size):
                chunk = writes[start:start + self.chunk_size]
                self._call("POST", "/allocations", fence,
                           json={w.consumer_uuid: self._body(w) for w in chunk})
                done.extend(chunk)
        except Exception:
            # All or nothing across chunks: undo the chunks already written
            # (best effort; only new consumers, which is what large POSTs are).
            for w in done:
                if w.generation is None:
                    try:
                        self.release(w.consumer_uuid, fence=fence)
                    except FleetflowError:
                        pass
            raise

    def usages(self, provider=None, project_id=None, user_id=None) -> dict[str, int]:
        if provider is not None:
            return self._call("GET", f"/resource_providers/{provider}/usages").json()["usages"]
        params = {"project_id": project_id}
        if user_id:
            params["user_id"] = user_id
        usages = self._call("GET", "/usages", params=params).json()["usages"]
        if not all(isinstance(v, dict) for v in usages.values()):
            return usages
        # From 1.38 usages come per consumer type: the total is their sum.
        totals: dict[str, int] = {}
        for by_type in usages.values():
            for rc, used in by_type.items():
                if rc != "consumer_count":
                    totals[rc] = totals.get(rc, 0) + used
        return totals

    def usages_by_provider(self) -> dict[str, dict[str, int]]:
        # NOTE: Placement has no "usage of every provider" call; one GET per
        # provider is what its own clients do. Fine for hundreds of hosts;
        # a large cloud on remote Placement wants allocation candidates instead.
        providers = self._call("GET", "/resource_providers").json()["resource_providers"]
        return {rp["uuid"]: self.usages(provider=rp["uuid"]) for rp in providers}

    def candidates(self, resources, required=(), limit=None) -> dict:
        params = [("resources", ",".join(f"{rc}:{n}" for rc, n in resources.items()))]
        params += [("required", r) for r in required]
        if limit:
            params.append(("limit", str(limit)))
        return self._call("GET", "/allocation_candidates", params=params).json()
