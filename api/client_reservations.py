"""The reservation calls of :class:`fleetflow.api.client.Client` (a mixin of it).

A reservation's GET pages its instances (``instance_limit``,
``instance_marker``, ``instance_links``): :meth:`ReservationCalls.get_reservation`
follows the pages to give every instance, or asks for none, the cheap form
to poll while a reservation builds.
"""

from __future__ import annotations

import urllib.parse


class ReservationCalls:
    """Reserve, list, show and delete reservations; needs the Client's transport."""

    def _reservation_path(self, tenant_id: str | None, reservation_id: str = "") -> str:
        # One path segment: ids come from users, and a URL may not hold every character.
        item = "/" + urllib.parse.quote(str(reservation_id), safe="") if reservation_id else ""
        return self._tenant_path(tenant_id, "reservations" + item)

    def reserve(self, reservation: dict, *, dry_run: bool = False,
                idempotency_key: str | None = None, tenant_id: str | None = None) -> dict:
        """POST a reservation body (``{"count": 3, "flavor_ref": ...}``).

        Returns the accepted ``reservation`` (id, status, links), or with
        ``dry_run`` the scheduler's verdict (fits, explanation, ...).
        """
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
        body = self.request("POST", self._reservation_path(tenant_id),
                            json={"reservation": reservation},
                            params={"dry_run": "true"} if dry_run else None,
                            headers=headers)
        return body["dry_run"] if dry_run else body["reservation"]

    def list_reservations(self, *, status=None, limit=None,
                          tenant_id: str | None = None) -> list[dict]:
        return list(self.iterate(self._reservation_path(tenant_id), "reservations",
                                 status=status, limit=limit))

    def get_reservation(self, reservation_id: str, tenant_id: str | None = None, *,
                        instances: bool = True) -> dict:
        """The reservation with every instance, each page of them followed in turn.

        ``instances=False``: its status and progress alone (``instance_limit=0``),
        what to poll while it builds: a page of 1,000 instances costs the server
        several times more.
        """
        path = self._reservation_path(tenant_id, reservation_id)
        if not instances:
            return self.get(path, instance_limit=0)["reservation"]
        reservation = page = self.get(path)["reservation"]
        while following := [link["href"] for link in page.pop("instance_links", ())
                            if link.get("rel") == "next"]:
            page = self.request("GET", following[0])["reservation"]
            reservation["instances"] += page["instances"]
        return reservation

    def delete_reservation(self, reservation_id: str, tenant_id: str | None = None) -> dict:
        return self.delete(self._reservation_path(tenant_id, reservation_id))["reservation"]
