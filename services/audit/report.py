"""The audit: do placement, the rows, the hosts and the groups agree?

fleetflow promises that after every flow (success, revert, crash) nothing
leaks (docs/architecture.md). :func:`audit` checks it by reading the four places the
cloud's state lives, each in bulk (see :mod:`.sources`), and comparing:

- placement allocations: instance consumers on their host's provider, volume
  consumers on their backend's provider, migration consumers during a move;
- instance and volume rows (status, host, backend);
- the guests each host really runs and the volumes each storage backend
  really holds (asked over RPC, in parallel);
- server group memberships, and the groupings of every ACTIVE vcluster.

Each disagreement is one :class:`Mismatch`; :data:`KINDS` lists them. A flow
that is still running legitimately has half-made state, so instances and
volumes in transitional states (and the members of a vcluster running a flow)
are skipped unless ``strict=True`` — which tests use once every flow has
settled, and which then reports the in-flight rows themselves. The volume and
vcluster checks live in :mod:`.volumes`.

Work that should be moving and is not is checked too: flows that nothing
runs any more (:mod:`.flows`, with the jobboard when there is one) and
rows whose status disagrees with their members or their flow, or whose flow
ended FAILURE half way (:mod:`.status`). In flight there means "progressed within the grace
period", which ``strict`` lowers to nothing.
"""

from __future__ import annotations

import dataclasses
from collections import Counter

from fleetflow.common import states
from fleetflow.common.exceptions import NotFound
from fleetflow.compute.openstack import audit as cloud_audit
from fleetflow.persistence.cloud_sync import EXTERNAL_TYPE
from fleetflow.services.audit import flows as audit_flows
from fleetflow.services.audit import recovery as audit_recovery
from fleetflow.services.audit import sources
from fleetflow.services.audit import status as audit_status
from fleetflow.services.audit import volumes as audit_volumes
from fleetflow.services.audit.volumes import GONE, VolumeChecks, fmt

# Every kind of mismatch, with what it means (also the CLI's and API's legend).
KINDS = {
    "leaked_allocation": "a consumer holds allocations that no live instance, volume or "
                         "move explains",
    "instance_without_allocation": "an ACTIVE instance holds nothing on its host's provider",
    "allocation_on_wrong_host": "an instance holds resources on another host's provider",
    "double_allocation": "an instance holds resources on more than one host outside a move",
    "orphan_guest": "a host runs a guest whose instance is missing, gone, or placed elsewhere",
    "missing_guest": "an ACTIVE instance's host does not run it",
    "stale_membership": "a group member whose instance is gone or on another host",
    "volume_without_allocation": "a volume in use holds nothing on its backend",
    "volume_on_wrong_backend": "a volume's space is held on a backend other than its own",
    "leaked_volume": "a volume that is not deleted belongs to an instance that is gone",
    "stray_attachment": "a guest has a volume attached that is not its in-use volume",
    "missing_attachment": "an in-use volume is not attached to its instance's guest",
    "unknown_host": "an instance row names a host that is not in the fleet",
    "missing_provider": "a fleet host has no placement resource provider: the scheduler "
                        "leaves it out and nothing can be claimed on it",
    "unreachable_host": "a host that is not down did not answer: its guests are unknown",
    "evacuated_copy": "a host still runs a copy of a server rebuilt elsewhere off it",
    "stale_migration": "a migration consumer holds resources and no move is in flight",
    "stranded_instance": "an instance on a down host that no evacuation is moving",
    "unsettled_instance": "strict audit: an instance is still in a transitional state",
    "unsettled_volume": "strict audit: a volume is still being created or deleted",
    **audit_volumes.KINDS,
    **audit_flows.KINDS,
    **audit_status.KINDS,
    **audit_recovery.KINDS,
    **cloud_audit.KINDS,
}

IN_FLIGHT = frozenset({states.PENDING, states.SCHEDULING, states.BUILDING, states.REVERTING,
                       states.DELETING})
MIGRATION_TYPE = "MIGRATION"


@dataclasses.dataclass(frozen=True)
class Mismatch:
    """One disagreement: its kind, the uuid it is about, and what was seen."""

    kind: str
    subject: str
    detail: str
    host: str | None = None

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class AuditReport:
    """Every mismatch found, and how much was looked at (``counts``)."""

    mismatches: list[Mismatch] = dataclasses.field(default_factory=list)
    counts: dict[str, int] = dataclasses.field(default_factory=dict)

    @property
    def clean(self) -> bool:
        return not self.mismatches

    def of_kind(self, kind: str) -> list[Mismatch]:
        return [m for m in self.mismatches if m.kind == kind]

    def kinds(self) -> Counter:
        return Counter(m.kind for m in self.mismatches)

    def to_dict(self) -> dict:
        return {"clean": self.clean, "mismatches": [m.to_dict() for m in self.mismatches],
                "counts": dict(self.counts)}

    def summary(self) -> str:
        """One line per mismatch (what a failing test prints)."""
        if self.clean:
            return "0 mismatches"
        lines = [f"{len(self.mismatches)} mismatches:"]
        lines += [f"  {m.kind} {m.subject}" + (f" on {m.host}" if m.host else "")
                  + f": {m.detail}" for m in self.mismatches]
        return "\n".join(lines)


def audit(database, placement_client, compute_api, hosts=None, *, strict: bool = False,
          workers: int = 16, rpc_timeout: float | None = None,
          service_down_time: float = 60, board=None,
          flow_grace: float | None = None) -> AuditReport:
    """Compare placement, rows, hosts, groups and flows; return every mismatch.

    ``hosts``: host names to ask over RPC (default: every host of the fleet;
    a name not in the fleet raises NotFound before anything is asked);
    guest checks only cover the hosts asked and answering, the other checks
    the whole cloud; storage backends are asked through the hosts that
    answered. ``compute_api`` None skips the hosts and backends altogether.
    ``strict``: flows have settled, so transitional states are mismatches too.
    ``board``: the jobboard, to tell which unfinished flows have a live owner
    (None skips that part: ``counts["jobboard"]`` is 0). ``flow_grace``:
    seconds without progress before a flow or a status counts as stuck
    (default: none when strict, else :data:`.flows.DEFAULT_GRACE`).
    """
    rows = sources.read_rows(database, service_down_time)
    asked = list(rows.hosts) if hosts is None else list(hosts)
    unknown = [name for name in asked if name not in rows.hosts]
    if unknown:
        # NOTE: asked over RPC, a host nobody serves only times out, and then
        # reads "unreachable" as if it were a real host that went silent.
        raise NotFound(f"host {', '.join(unknown)} is not in the fleet", hosts=unknown)
    view = sources.read_placement(placement_client, database)
    guests = (sources.ask_hosts(compute_api, asked, workers=workers, timeout=rpc_timeout)
              if compute_api is not None else sources.Guests({}, {}))
    backends = (sources.ask_backends(compute_api, rows, guests, asked, workers=workers,
                                     timeout=rpc_timeout)
                if compute_api is not None else sources.BackendVolumes({}, {}))
    checker = _Checker(rows, view, guests, backends, strict)
    checker.run()
    if compute_api is not None:
        settled = {i.id: i.host for i in rows.instances.values()
                   if i.status == states.ACTIVE and not i.task_state and i.id not in rows.moving}
        members: dict[str, set[str]] = {}
        for member in rows.members:
            if member.instance_id in settled:
                members.setdefault(member.group_id, set()).add(member.instance_id)
        for finding in compute_api.audit_cloud(settled, members):
            checker.add(*finding)
    grace = audit_flows.grace(strict, flow_grace)
    flow_counts = audit_flows.check_stranded(checker.add, database, board, grace)
    flow_counts.update(audit_status.check_status(checker.add, database, grace))
    flow_counts.update(audit_recovery.check_held(checker.add, database))
    report = AuditReport(checker.found, {
        "hosts": len(rows.hosts), "hosts_asked": len(guests.by_host) + len(guests.unreachable),
        "hosts_unreachable": len(guests.unreachable),
        "guests": sum(len(g) for g in guests.by_host.values()),
        "backends": len(rows.backends),
        "backends_asked": len(backends.by_backend) + len(backends.unreachable),
        "backends_unreachable": len(backends.unreachable),
        "backend_volumes": sum(len(v) for v in backends.by_backend.values()),
        "instances": len(rows.instances), "volumes": len(rows.volumes),
        "consumers": len(view.allocations), "memberships": len(rows.members),
        "vclusters": len(rows.vclusters), "groupings": len(rows.groupings),
        **flow_counts, "mismatches": len(checker.found)})
    return report


class _Checker(VolumeChecks):
    """The comparisons, one method per source; results accumulate in ``found``."""

    def __init__(self, rows: sources.Rows, view: sources.PlacementView,
                 guests: sources.Guests, backends: sources.BackendVolumes, strict: bool):
        self.rows, self.view, self.guests, self.strict = rows, view, guests, strict
        self.backends = backends
        self.found: list[Mismatch] = []
        self.host_of_provider = {uuid: name for name, uuid in rows.hosts.items()}
        self.backend_names = {uuid: name for name, uuid in rows.backends.items()}
        # Providers that are compute hosts: by trait, or by a host row of that uuid.
        self.compute = set(view.compute_providers) | set(self.host_of_provider)

    def add(self, kind, subject, detail, host=None) -> None:
        self.found.append(Mismatch(kind, subject, detail, host))

    def skip(self, instance) -> bool:
        """In flight and not strict: half-made state is expected, leave it alone.

        A server between its move's claim and confirm is in flight too: its
        allocation, its copies and its membership are the move's to settle.
        """
        return not self.strict and (instance.status in IN_FLIGHT
                                    or instance.id in self.rows.moving)

    def run(self) -> None:
        self.check_providers()
        self.check_allocations()
        self.check_instances()
        self.check_volumes()
        self.check_guests()
        self.check_backend_volumes()
        self.check_memberships()
        self.check_vclusters()
        self.check_stranded()
        for host, reason in sorted(self.guests.unreachable.items()):
            # A down host is expected to be silent; what it held is judged by
            # its instances (stranded or evacuated), not by its silence.
            if host not in self.rows.down_hosts:
                self.add("unreachable_host", host, reason, host)

    # -- placement -------------------------------------------------------------
    def check_allocations(self) -> None:
        for consumer, amounts in self.view.allocations.items():
            instance = self.rows.instances.get(consumer)
            volume = self.rows.volumes.get(consumer)
            if instance is not None:
                self._instance_allocation(instance, amounts)
            elif volume is not None:
                self._volume_allocation(volume, amounts)
            elif self.view.consumer_types.get(consumer) == EXTERNAL_TYPE:
                continue  # the cloud's usage by others, held for them by the sync
            elif self.view.consumer_types.get(consumer) == MIGRATION_TYPE:
                # A migration consumer is explained by its move only while the
                # move is between its claim and its confirm.
                if consumer not in self.rows.migrations:
                    self.add("stale_migration", consumer,
                             f"migration consumer holds {fmt(amounts)} and no move is "
                             "in flight")
            elif not self.orphan_volume(consumer, amounts,
                                        "no instance, volume or migration has this uuid"):
                self.add("leaked_allocation", consumer,
                         f"no instance, volume or migration has this uuid; it holds "
                         f"{fmt(amounts)}")

    def _instance_allocation(self, instance, amounts) -> None:
        if self.skip(instance):
            return
        if instance.status in GONE:
            self.add("leaked_allocation", instance.id,
                     f"instance is {instance.status} but holds {fmt(amounts)}",
                     instance.host)
            return
        # Instances hold their disk on hosts; a volume's space is its own consumer's.
        self.orphan_volume(instance.id, amounts, f"{instance.status} instance", instance.host)
        on_hosts = sorted(rp for rp in amounts if rp in self.compute)
        if len(on_hosts) > 1:
            self.add("double_allocation", instance.id,
                     "holds resources on " + ", ".join(self._name(rp) for rp in on_hosts),
                     instance.host)
        expected = self.rows.hosts.get(instance.host) if instance.host else None
        wrong = [rp for rp in on_hosts if rp != expected]
        if wrong and (expected is None or expected not in on_hosts):
            where = f"its host {instance.host}" if instance.host else "no host"
            self.add("allocation_on_wrong_host", instance.id,
                     f"holds resources on {', '.join(self._name(rp) for rp in wrong)}, "
                     f"but the row says {where}", instance.host)

    def check_providers(self) -> None:
        if self.view.providers is None:
            return
        for host, provider in sorted(self.rows.hosts.items()):
            if provider not in self.view.providers:
                self.add("missing_provider", host,
                         f"resource provider {provider} does not exist: the host takes no "
                         "new work until it is registered again (fleetflow fleet load)",
                         host)

    # -- rows ------------------------------------------------------------------
    def check_instances(self) -> None:
        for instance in self.rows.instances.values():
            if instance.status in IN_FLIGHT:
                if self.strict:
                    self.add("unsettled_instance", instance.id,
                             f"status {instance.status}, task {instance.task_state}",
                             instance.host)
                continue
            if instance.status != states.ACTIVE or not instance.host or self.skip(instance):
                continue
            provider = self.rows.hosts.get(instance.host)
            if provider is None:
                self.add("unknown_host", instance.id,
                         f"ACTIVE on {instance.host}, which is not in the fleet", instance.host)
            elif provider not in self.view.allocations.get(instance.id, {}):
                self.add("instance_without_allocation", instance.id,
                         f"ACTIVE on {instance.host} but holds nothing on its provider",
                         instance.host)

    # -- hosts -----------------------------------------------------------------
    def check_guests(self) -> None:
        attached = {}  # instance id -> its IN-USE volume ids
        for volume in self.rows.volumes.values():
            if volume.status == states.VOLUME_IN_USE and volume.instance_id:
                attached.setdefault(volume.instance_id, set()).add(volume.id)
        seen = set()
        for host, guests in self.guests.by_host.items():
            for guest in guests:
                seen.add((host, guest["uuid"]))
                self._guest(host, guest, attached.get(guest["uuid"], set()))
        for instance in self.rows.instances.values():
            if (instance.status == states.ACTIVE and instance.host in self.guests.by_host
                    and (instance.host, instance.id) not in seen and not self.skip(instance)):
                self.add("missing_guest", instance.id,
                         f"ACTIVE on {instance.host}, which does not run it", instance.host)

    def _guest(self, host: str, guest: dict, volumes: set) -> None:
        uuid = guest["uuid"]
        instance = self.rows.instances.get(uuid)
        if instance is None:
            self.add("orphan_guest", uuid, f"{guest.get('state')} guest with no instance row",
                     host)
            return
        if self.skip(instance):
            return
        if instance.status in GONE:
            self.add("orphan_guest", uuid, f"guest of a {instance.status} instance", host)
            return
        if instance.host != host:
            if (host, uuid) in self.rows.evacuated:
                self.add("evacuated_copy", uuid,
                         f"rebuilt on {instance.host} after this host was evacuated, and "
                         "still here", host)
            else:
                self.add("orphan_guest", uuid,
                         f"instance is placed on {instance.host or 'no host'}, not here",
                         host)
            return
        if instance.status != states.ACTIVE:
            return
        on_guest = set(guest.get("volumes") or ())
        for volume_id in sorted(on_guest - volumes):
            if self._volume_settling(volume_id):
                continue
            self.add("stray_attachment", volume_id, f"attached to {uuid} but not IN-USE by it",
                     host)
        for volume_id in sorted(volumes - on_guest):
            if self._volume_settling(volume_id):
                continue
            self.add("missing_attachment", volume_id, f"IN-USE by {uuid} but not attached",
                     host)

    def _volume_settling(self, volume_id: str) -> bool:
        """A flow attaching or detaching it writes the row after the guest changed."""
        volume = self.rows.volumes.get(volume_id)
        return volume is not None and self.volume_skip(volume)

    # -- groups ----------------------------------------------------------------
    def check_memberships(self) -> None:
        for member in self.rows.members:
            instance = self.rows.instances.get(member.instance_id)
            subject = f"{member.group_id}/{member.instance_id}"
            if instance is None or instance.status in GONE:
                state = instance.status if instance else "missing"
                self.add("stale_membership", subject, f"instance is {state}", member.host)
            elif self.skip(instance):
                continue
            elif instance.status == states.ACTIVE and member.host != instance.host:
                self.add("stale_membership", subject,
                         f"member says host {member.host}, instance runs on {instance.host}",
                         member.host)

    def check_stranded(self) -> None:
        for instance in self.rows.instances.values():
            if (instance.host in self.rows.down_hosts and instance.status not in GONE
                    and instance.id not in self.rows.held):
                self.add("stranded_instance", instance.id,
                         f"{instance.status} on {instance.host}, which is down, and no "
                         "evacuation is moving it", instance.host)

    def _name(self, provider: str) -> str:
        return self.host_of_provider.get(provider, provider)
