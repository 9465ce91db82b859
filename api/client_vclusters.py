"""The virtual cluster calls of :class:`fleetflow.api.client.Client` (a mixin of it).

A cluster is created from a JSON body or, as is, from a ``<vcluster>`` XML
document; with ``dry_run`` either answers the scheduler's verdict instead,
which the API may wrap under one key (:func:`_verdict` unwraps it).
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Sequence

XML_MIMETYPE = "application/xml"


# The client's own, repeated: the client imports this module, not the other way.
def _segment(value: str) -> str:
    """One path segment: names may hold characters that a URL may not."""
    return urllib.parse.quote(str(value), safe="")


def _idempotency(key: str | None) -> dict | None:
    return {"Idempotency-Key": key} if key else None


def _verdict(body: dict) -> dict:
    """A dry run's verdict, bare or under one key (``dry_run``, ``vcluster``)."""
    if "fits" in body:
        return body
    return next((v for v in body.values() if isinstance(v, dict) and "fits" in v), body)


class VclusterCalls:
    """Create, list, show, change and delete virtual clusters; needs the Client's transport."""

    def create_vcluster(self, vcluster: dict, *, dry_run: bool = False,
                        idempotency_key: str | None = None,
                        tenant_id: str | None = None) -> dict:
        """POST a cluster body (``{"name": "db", "instances": [...], "groupings": [...]}``).

        Returns the accepted ``vcluster`` (id, status, links), or with
        ``dry_run`` the scheduler's verdict (fits, explanation, instances,
        groupings).
        """
        body = self.request("POST", self._tenant_path(tenant_id, "vclusters"),
                            json={"vcluster": vcluster},
                            params={"dry_run": "true"} if dry_run else None,
                            headers=_idempotency(idempotency_key))
        return _verdict(body) if dry_run else body["vcluster"]

    def create_vcluster_xml(self, xml: bytes | str, *, dry_run: bool = False,
                            idempotency_key: str | None = None,
                            tenant_id: str | None = None) -> dict:
        """POST a ``<vcluster>`` document as is; answers as :meth:`create_vcluster`."""
        headers = {"Content-Type": XML_MIMETYPE, "Accept": "application/json",
                   **(_idempotency(idempotency_key) or {})}
        body = self.request("POST", self._tenant_path(tenant_id, "vclusters"), data=xml,
                            params={"dry_run": "true"} if dry_run else None, headers=headers)
        return _verdict(body) if dry_run else body["vcluster"]

    def list_vclusters(self, *, status=None, limit=None,
                       tenant_id: str | None = None) -> list[dict]:
        return list(self.iterate(self._tenant_path(tenant_id, "vclusters"), "vclusters",
                                 status=status, limit=limit))

    def get_vcluster(self, vcluster_id: str, tenant_id: str | None = None) -> dict:
        return self.get(self._vcluster_path(tenant_id, vcluster_id))["vcluster"]

    def rename_vcluster(self, vcluster_id: str, name: str,
                        tenant_id: str | None = None) -> dict:
        return self.put(self._vcluster_path(tenant_id, vcluster_id),
                        {"vcluster": {"name": name}})["vcluster"]

    def add_vcluster_members(self, vcluster_id: str, instances: Sequence[dict],
                             groupings: Sequence[dict] = (),
                             tenant_id: str | None = None) -> dict:
        """Add members, new groupings, or members to existing groupings: one update run."""
        return self.post(self._vcluster_path(tenant_id, vcluster_id, "instances"),
                         {"instances": list(instances), "groupings": list(groupings)})[
            "vcluster"]

    def remove_vcluster_member(self, vcluster_id: str, name: str,
                               tenant_id: str | None = None) -> dict:
        return self.delete(self._vcluster_path(tenant_id, vcluster_id,
                                               f"instances/{_segment(name)}"))["vcluster"]

    def delete_vcluster(self, vcluster_id: str, tenant_id: str | None = None) -> dict:
        return self.delete(self._vcluster_path(tenant_id, vcluster_id))["vcluster"]

    def _vcluster_path(self, tenant_id: str | None, vcluster_id: str, suffix: str = "") -> str:
        path = f"vclusters/{_segment(vcluster_id)}" + (f"/{suffix}" if suffix else "")
        return self._tenant_path(tenant_id, path)
