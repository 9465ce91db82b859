"""The audit's volume and vcluster checks: space held, backends, reach, groupings.

A volume is *live* when it is AVAILABLE or IN-USE, or CREATING, ERROR or
DELETING once it names a backend: it then holds exactly its size of DISK_GB
on that backend's provider, and nothing anywhere else. A DELETED one holds
nothing, and whatever holds space on a storage backend without being a live
volume (no row, a DELETED row, an instance: instances hold disk on hosts) is
an orphan. The backends' own lists must agree with the rows, an attached
volume must be reachable from its server's host, and every grouping of an
ACTIVE vcluster must hold where its members are now.

As for instances, a volume a flow is still working on (CREATING, DELETING,
or a member of a vcluster running a flow) is left alone unless ``strict``.
"""

from __future__ import annotations

from collections import defaultdict

from fleetflow.common import states
from fleetflow.scheduler.vcluster.check import holds

KINDS = {
    "orphan_volume_allocation": "a consumer holds space on a storage backend and is no live "
                                "volume (no row, a DELETED row, or an instance)",
    "volume_wrong_size": "a volume holds on its backend other than its size of DISK_GB",
    "unknown_backend": "a volume row names a storage backend that is not in the fleet",
    "stale_volume": "a backend holds a volume whose row is DELETED, missing, or names "
                    "another backend",
    "missing_volume": "an AVAILABLE or IN-USE volume is not on its backend",
    "volume_unreachable": "an in-use volume's backend is out of reach of its server's host",
    "unreachable_backend": "living hosts reach a storage backend but none could list its "
                           "volumes: they are unknown",
    "grouping_violated": "a grouping of an ACTIVE vcluster does not hold where its members "
                         "are now",
    "unsettled_vcluster": "strict audit: a vcluster is still running a flow",
}

GONE = frozenset({states.DELETED, states.REVERTED})
ON_BACKEND = frozenset({states.VOLUME_AVAILABLE, states.VOLUME_IN_USE})
# Live only once they name a backend (a failed create keeps its space for the retry).
HOLDING = frozenset({states.VOLUME_CREATING, states.VOLUME_ERROR, states.DELETING})
IN_FLIGHT = frozenset({states.VOLUME_CREATING, states.DELETING})
# Where a grouping sees a member (the API's view, services/vcluster_views.py).
SERVER_PLACED = frozenset({states.ACTIVE, states.BUILDING})
VOLUME_PLACED = frozenset({states.VOLUME_AVAILABLE, states.VOLUME_IN_USE,
                           states.VOLUME_CREATING})


def is_live(volume) -> bool:
    return volume.status in ON_BACKEND or (volume.status in HOLDING and bool(volume.backend))


def created_on_backend(volume) -> bool:
    """Whether the backend must list it: a vcluster's volumes are created there,
    while a reservation's data volume (``flows/provision/volume.py``) is only
    attached, its id unknown to the backend, as are older volumes."""
    return volume.vcluster_id is not None


class VolumeChecks:
    """Mixed into the audit's checker: uses its ``rows``, ``view``, ``backends``
    (what the backends listed), ``strict``, ``add``, ``skip`` and its providers'
    names (``backend_names``, ``host_of_provider``)."""

    def volume_skip(self, volume) -> bool:
        """In flight and not strict: the volume's flow has yet to settle it."""
        return not self.strict and (
            volume.status in IN_FLIGHT
            or self.rows.vclusters.get(volume.vcluster_id) in states.VCLUSTER_BUSY)

    def named(self, amounts) -> dict:
        """``amounts`` keyed by backend or host name where the provider is one."""
        return {self.backend_names.get(rp) or self.host_of_provider.get(rp, rp): res
                for rp, res in amounts.items()}

    def _on_backends(self, amounts) -> list[str]:
        return sorted(rp for rp in amounts if rp in self.backend_names)

    def orphan_volume(self, consumer: str, amounts, why: str, host=None) -> bool:
        """Report ``consumer``'s space on storage backends; False if it holds none."""
        held = self._on_backends(amounts)
        if not held:
            return False
        self.add("orphan_volume_allocation", consumer,
                 f"{why}, but holds space on backend "
                 + ", ".join(self.backend_names[rp] for rp in held)
                 + f": {fmt(self.named(amounts))}",
                 host)
        return True

    # -- placement -------------------------------------------------------------
    def _volume_allocation(self, volume, amounts) -> None:
        if self.volume_skip(volume):
            return
        if not is_live(volume):
            why = f"volume is {volume.status}" + (
                "" if volume.status == states.VOLUME_DELETED else " on no backend")
            if not self.orphan_volume(volume.id, amounts, why):
                self.add("leaked_allocation", volume.id, f"{why} but holds {fmt(amounts)}")
            return
        expected = self.rows.backends.get(volume.backend) if volume.backend else None
        if expected is None:
            return  # no backend, or one not in the fleet: check_volumes says which
        elsewhere = {rp: res for rp, res in amounts.items() if rp != expected}
        if elsewhere:
            self.add("volume_on_wrong_backend", volume.id,
                     f"holds {fmt(self.named(elsewhere))}, but its backend is "
                     f"{volume.backend}")
        held = amounts.get(expected)
        if held is not None and held != {"DISK_GB": volume.size_gb}:
            self.add("volume_wrong_size", volume.id,
                     f"holds {fmt({volume.backend: held})}; its size is {volume.size_gb} GB")

    # -- rows ------------------------------------------------------------------
    def check_volumes(self) -> None:
        for volume in self.rows.volumes.values():
            if volume.status == states.VOLUME_DELETED:
                continue
            if volume.status in IN_FLIGHT:
                if self.strict:
                    self.add("unsettled_volume", volume.id, f"status {volume.status}")
                continue
            if self.volume_skip(volume):
                continue
            owner = self.rows.instances.get(volume.instance_id) if volume.instance_id else None
            if volume.instance_id and (owner is None or owner.status in GONE):
                self.add("leaked_volume", volume.id,
                         f"{volume.status}, but its instance {volume.instance_id} is "
                         f"{owner.status if owner else 'missing'}")
            if volume.backend and volume.backend not in self.rows.backends:
                self.add("unknown_backend", volume.id,
                         f"{volume.status} on backend {volume.backend}, which is not in the "
                         "fleet")
            elif (volume.id not in self.view.allocations
                  and (is_live(volume) if volume.backend
                       else volume.status == states.VOLUME_IN_USE)):
                self.add("volume_without_allocation", volume.id,
                         f"{volume.status} on backend {volume.backend} but holds nothing")
            if volume.status == states.VOLUME_IN_USE and owner is not None:
                self._reach(volume, owner)

    def _reach(self, volume, owner) -> None:
        if owner.status in GONE or not owner.host or self.skip(owner):
            return
        host = self.rows.host_places.get(owner.host)
        backend = self.rows.backend_places.get(volume.backend)
        if host is None or backend is None or host.reaches(backend):
            return
        where = (f"the disk of {backend.host}" if backend.host is not None else
                 f"shared by rack {backend.region}/{backend.zone}/{backend.rack}")
        self.add("volume_unreachable", volume.id,
                 f"IN-USE by {owner.id} on {owner.host}, which does not reach backend "
                 f"{volume.backend} ({where})", owner.host)

    # -- backends --------------------------------------------------------------
    def check_backend_volumes(self) -> None:
        expected: dict[str, set[str]] = defaultdict(set)
        for volume in self.rows.volumes.values():
            if (volume.status in ON_BACKEND and volume.backend and created_on_backend(volume)
                    and not self.volume_skip(volume)):
                expected[volume.backend].add(volume.id)
        for backend, listed in sorted(self.backends.by_backend.items()):
            host = self.rows.backend_places[backend].host
            there = set()
            for item in listed:
                volume_id = item["volume_id"]
                there.add(volume_id)
                self._listed(backend, item, self.rows.volumes.get(volume_id), host)
            for volume_id in sorted(expected.get(backend, set()) - there):
                self.add("missing_volume", volume_id,
                         f"{self.rows.volumes[volume_id].status} on backend {backend}, which "
                         "does not have it", host)
        for backend, (host, reason) in sorted(self.backends.unreachable.items()):
            self.add("unreachable_backend", backend, reason,
                     host or self.rows.backend_places[backend].host)

    def _listed(self, backend: str, item: dict, row, host) -> None:
        seen = f"{item.get('status')} on backend {backend} ({item.get('size_gb')} GB)"
        if row is None:
            self.add("stale_volume", item["volume_id"], f"{seen} with no volume row", host)
        elif self.volume_skip(row):
            return
        elif row.status == states.VOLUME_DELETED:
            self.add("stale_volume", row.id, f"{seen}, but the row is DELETED", host)
        elif row.backend != backend:
            self.add("stale_volume", row.id,
                     f"{seen}, but the row says backend {row.backend or 'none'}", host)

    # -- vclusters -------------------------------------------------------------
    def check_vclusters(self) -> None:
        if self.strict:
            for vcluster_id, status in sorted(self.rows.vclusters.items()):
                if status in states.VCLUSTER_BUSY:
                    self.add("unsettled_vcluster", vcluster_id, f"status {status}")
        servers, volumes = defaultdict(dict), defaultdict(dict)
        busy = set()
        for member in self.rows.vcluster_members:
            if member.kind == states.MEMBER_SERVER:
                row = self.rows.instances.get(member.resource_id)
                placed = row is not None and row.status in SERVER_PLACED
                place = self.rows.host_places.get(row.host) if placed and row.host else None
                servers[member.vcluster_id][member.name] = place
                in_flight = row is not None and self.skip(row)
            else:
                row = self.rows.volumes.get(member.resource_id)
                placed = row is not None and row.status in VOLUME_PLACED
                place = (self.rows.backend_places.get(row.backend) if placed and row.backend
                         else None)
                volumes[member.vcluster_id][member.name] = place
                in_flight = row is not None and self.volume_skip(row)
            if in_flight:
                busy.add(member.vcluster_id)
        for grouping in self.rows.groupings:
            vcluster_id = grouping.vcluster_id
            if vcluster_id in busy:
                continue
            satisfied, domains = holds(grouping.rule, grouping.scope, grouping.members,
                                       servers[vcluster_id], volumes[vcluster_id])
            if not satisfied:
                where = ", ".join(f"{member} in {domain or 'nowhere (not placed)'}"
                                  for member, domain in domains.items())
                self.add("grouping_violated", f"{vcluster_id}/{grouping.name}",
                         f"vcluster {vcluster_id}: {grouping.rule} grouping {grouping.name} "
                         f"(scope {grouping.scope or 'default'}) does not hold: {where}")


def fmt(amounts: dict) -> str:
    return "; ".join(f"{rp}: " + ", ".join(f"{rc}={n}" for rc, n in sorted(res.items()))
                     for rp, res in sorted(amounts.items()))
