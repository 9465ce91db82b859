"""Domain tables: the fleet (hosts, storage backends, catalogs) and what tenants own.

Placement's tables (providers, inventories, consumers, allocations) live in
``persistence.placement``; the engine's (jobs, logbooks) in their own modules.
All share ``db.Base`` and one alembic history.
"""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa
from sqlalchemy import orm
from sqlalchemy.orm import Mapped, mapped_column

from fleetflow.common import states
from fleetflow.persistence.db import Base


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


class Timestamps:
    created_at: Mapped[dt.datetime] = mapped_column(sa.DateTime, default=utcnow)
    updated_at: Mapped[dt.datetime] = mapped_column(sa.DateTime, default=utcnow,
                                                    onupdate=utcnow)


class Host(Timestamps, Base):
    """A compute host; also a placement resource provider with the same uuid."""

    __tablename__ = "hosts"

    id: Mapped[int] = mapped_column(primary_key=True)
    uuid: Mapped[str] = mapped_column(sa.String(36), unique=True)
    name: Mapped[str] = mapped_column(sa.String(255), unique=True)
    state: Mapped[str] = mapped_column(sa.String(16), default=states.HOST_UP)
    region: Mapped[str] = mapped_column(sa.String(64), index=True)
    zone: Mapped[str] = mapped_column(sa.String(64))
    rack: Mapped[str] = mapped_column(sa.String(64))
    # {"VCPU": {"total": 64, "allocation_ratio": 4.0, "reserved": 0}, ...}
    inventory: Mapped[dict] = mapped_column(sa.JSON, default=dict)
    capabilities: Mapped[dict] = mapped_column(sa.JSON, default=dict)
    traits: Mapped[list] = mapped_column(sa.JSON, default=list)
    # RPC server that serves this host: the host's own agent (None: its name) or
    # an agent serving many hosts, which then receives the host as an argument.
    compute_agent: Mapped[str | None] = mapped_column(sa.String(255), nullable=True)
    # Builds that failed here lately: the scheduler weighs such hosts down.
    build_failures: Mapped[int] = mapped_column(sa.Integer, default=0)
    last_build_failure_at: Mapped[dt.datetime | None] = mapped_column(sa.DateTime,
                                                                      nullable=True)
    # Why the host is in its state (set with the state by the operator).
    state_reason: Mapped[str | None] = mapped_column(sa.String(255), nullable=True)
    # Last heartbeat of the host's agent: older than [compute] service_down_time
    # reads "down" (NULL: never reported, judged by ``state`` alone).
    heartbeat_at: Mapped[dt.datetime | None] = mapped_column(sa.DateTime, nullable=True)
    # The evacuation that holds this host (one at a time), set and cleared by
    # conditional UPDATEs so two requests cannot both take it.
    evacuation_id: Mapped[str | None] = mapped_column(sa.String(36), nullable=True)

    @property
    def topology(self) -> dict:
        return {"region": self.region, "zone": self.zone, "rack": self.rack}


class StorageBackend(Timestamps, Base):
    """Block storage: host-local (scope ``host``) or shared by a rack (scope ``rack``)."""

    __tablename__ = "storage_backends"

    id: Mapped[int] = mapped_column(primary_key=True)
    uuid: Mapped[str] = mapped_column(sa.String(36), unique=True)
    name: Mapped[str] = mapped_column(sa.String(255), unique=True)
    scope: Mapped[str] = mapped_column(sa.String(16))
    region: Mapped[str] = mapped_column(sa.String(64))
    zone: Mapped[str] = mapped_column(sa.String(64))
    rack: Mapped[str] = mapped_column(sa.String(64))
    host_name: Mapped[str | None] = mapped_column(sa.String(255), nullable=True)
    capacity_gb: Mapped[int] = mapped_column(sa.Integer)
    volume_types: Mapped[list] = mapped_column(sa.JSON, default=list)


class Flavor(Base):
    __tablename__ = "flavors"

    id: Mapped[str] = mapped_column(sa.String(36), primary_key=True)
    name: Mapped[str] = mapped_column(sa.String(255), unique=True)
    vcpus: Mapped[int] = mapped_column(sa.Integer)
    ram_mb: Mapped[int] = mapped_column(sa.Integer)
    disk_gb: Mapped[int] = mapped_column(sa.Integer)
    # Capabilities every host of this flavor must have, e.g. {"gpu": "true"}.
    extra_specs: Mapped[dict] = mapped_column(sa.JSON, default=dict)

    @property
    def resources(self) -> dict[str, int]:
        res = {"VCPU": self.vcpus, "MEMORY_MB": self.ram_mb, "DISK_GB": self.disk_gb}
        gpus = int(self.extra_specs.get("resources:GPU", 0) or 0)
        if gpus:
            res["GPU"] = gpus
        return {k: v for k, v in res.items() if v}


class Image(Base):
    __tablename__ = "images"

    id: Mapped[str] = mapped_column(sa.String(36), primary_key=True)
    name: Mapped[str] = mapped_column(sa.String(255), unique=True)
    min_disk_gb: Mapped[int] = mapped_column(sa.Integer, default=0)
    min_ram_mb: Mapped[int] = mapped_column(sa.Integer, default=0)


class ServerGroup(Timestamps, Base):
    """A server group: policies, metadata and read-only members.

    See docs/origins.md, "Server groups".
    """

    __tablename__ = "server_groups"

    id: Mapped[str] = mapped_column(sa.String(36), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(sa.String(64), index=True)
    name: Mapped[str | None] = mapped_column(sa.String(255), nullable=True)
    policies: Mapped[list] = mapped_column(sa.JSON, default=list)
    scope: Mapped[str] = mapped_column(sa.String(16), default="host")
    max_per_host: Mapped[int | None] = mapped_column(sa.Integer, nullable=True)
    # Capability requirements of the host-capabilities policy.
    capabilities: Mapped[dict] = mapped_column(sa.JSON, default=dict)
    metadata_: Mapped[dict] = mapped_column("metadata", sa.JSON, default=dict)
    # A group made for a virtual cluster's server-server grouping: the cluster
    # owns it (tenants cannot change or delete it; its teardown deletes it).
    vcluster_id: Mapped[str | None] = mapped_column(sa.String(36), nullable=True, index=True)

    members: Mapped[list[GroupMember]] = orm.relationship(
        back_populates="group", cascade="all, delete-orphan", lazy="selectin")


class GroupMember(Base):
    __tablename__ = "server_group_members"
    __table_args__ = (sa.UniqueConstraint("group_id", "instance_id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    group_id: Mapped[str] = mapped_column(sa.ForeignKey("server_groups.id", ondelete="CASCADE"))
    instance_id: Mapped[str] = mapped_column(sa.String(36), index=True)
    # Where the member runs (None until placed): group rules are checked against it.
    host: Mapped[str | None] = mapped_column(sa.String(255), nullable=True)

    group: Mapped[ServerGroup] = orm.relationship(back_populates="members")


class Reservation(Timestamps, Base):
    """N instances asked for together. Its id is never an instance id.

    See docs/origins.md, "Reservations of N instances".
    """

    __tablename__ = "reservations"
    __table_args__ = (sa.UniqueConstraint("tenant_id", "idempotency_key"),)

    id: Mapped[str] = mapped_column(sa.String(36), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(sa.String(64), index=True)
    user_id: Mapped[str | None] = mapped_column(sa.String(64), nullable=True)
    name: Mapped[str | None] = mapped_column(sa.String(255), nullable=True)
    status: Mapped[str] = mapped_column(sa.String(16), default=states.PENDING, index=True)
    policy: Mapped[str] = mapped_column(sa.String(16), default=states.ALL_OR_NOTHING)
    request: Mapped[dict] = mapped_column(sa.JSON, default=dict)
    flow_id: Mapped[str | None] = mapped_column(sa.String(36), nullable=True, index=True)
    fault: Mapped[dict | None] = mapped_column(sa.JSON, nullable=True)
    idempotency_key: Mapped[str | None] = mapped_column(sa.String(255), nullable=True)

    instances: Mapped[list[Instance]] = orm.relationship(
        back_populates="reservation", order_by="Instance.index")


class Instance(Timestamps, Base):
    __tablename__ = "instances"
    # A reservation's progress counts its instances by status while clients poll
    # it: this index holds both columns, so the count reads no table row.
    __table_args__ = (sa.Index("ix_instances_reservation_status", "reservation_id", "status"),)

    id: Mapped[str] = mapped_column(sa.String(36), primary_key=True)
    reservation_id: Mapped[str | None] = mapped_column(
        sa.ForeignKey("reservations.id"), nullable=True, index=True)
    tenant_id: Mapped[str] = mapped_column(sa.String(64), index=True)
    name: Mapped[str] = mapped_column(sa.String(255))
    # Position inside its reservation; atom names derive from it.
    index: Mapped[int] = mapped_column(sa.Integer, default=0)
    host: Mapped[str | None] = mapped_column(sa.String(255), nullable=True, index=True)
    status: Mapped[str] = mapped_column(sa.String(16), default=states.PENDING, index=True)
    task_state: Mapped[str | None] = mapped_column(sa.String(32), nullable=True)
    flavor_id: Mapped[str] = mapped_column(sa.String(36))
    image_id: Mapped[str] = mapped_column(sa.String(36))
    group_id: Mapped[str | None] = mapped_column(sa.String(36), nullable=True)
    attempts: Mapped[int] = mapped_column(sa.Integer, default=0)
    hosts_tried: Mapped[list] = mapped_column(sa.JSON, default=list)
    # {"code", "message", "step", "host", "time"} when it failed.
    fault: Mapped[dict | None] = mapped_column(sa.JSON, nullable=True)
    vcluster_id: Mapped[str | None] = mapped_column(sa.String(36), nullable=True, index=True)
    # The server's metadata; automatic recovery reads ha, recovery and
    # recovery_priority (docs/recovery.md). NULL: none.
    metadata_: Mapped[dict | None] = mapped_column("metadata", sa.JSON, nullable=True)

    reservation: Mapped[Reservation | None] = orm.relationship(back_populates="instances")


class Volume(Timestamps, Base):
    __tablename__ = "volumes"

    id: Mapped[str] = mapped_column(sa.String(36), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(sa.String(64), index=True)
    name: Mapped[str | None] = mapped_column(sa.String(255), nullable=True)
    size_gb: Mapped[int] = mapped_column(sa.Integer)
    volume_type: Mapped[str | None] = mapped_column(sa.String(64), nullable=True)
    backend: Mapped[str | None] = mapped_column(sa.String(255), nullable=True)
    status: Mapped[str] = mapped_column(sa.String(16), default=states.VOLUME_CREATING)
    instance_id: Mapped[str | None] = mapped_column(sa.String(36), nullable=True, index=True)
    reservation_id: Mapped[str | None] = mapped_column(sa.String(36), nullable=True, index=True)
    vcluster_id: Mapped[str | None] = mapped_column(sa.String(36), nullable=True, index=True)
    fault: Mapped[dict | None] = mapped_column(sa.JSON, nullable=True)


class Quota(Base):
    """A tenant's limits; tenants without a row get the defaults of [quota]."""

    __tablename__ = "quotas"

    tenant_id: Mapped[str] = mapped_column(sa.String(64), primary_key=True)
    instances: Mapped[int] = mapped_column(sa.Integer)
    vcpus: Mapped[int] = mapped_column(sa.Integer)
    ram_mb: Mapped[int] = mapped_column(sa.Integer)
    # None: the default of [quota].
    volumes: Mapped[int | None] = mapped_column(sa.Integer, nullable=True)
    gigabytes: Mapped[int | None] = mapped_column(sa.Integer, nullable=True)


class Evacuation(Timestamps, Base):
    """Moving every server off one or several hosts, as one durable operation.

    Each run of its flow handles the moves still unfinished; an operator's
    resume or skip starts a new run (``flow_id`` is the current one, ``runs``
    all of them).
    """

    __tablename__ = "evacuations"

    id: Mapped[str] = mapped_column(sa.String(36), primary_key=True)
    hosts: Mapped[list] = mapped_column(sa.JSON, default=list)
    mode: Mapped[str] = mapped_column(sa.String(16))
    status: Mapped[str] = mapped_column(sa.String(16), default=states.PENDING, index=True)
    on_error: Mapped[str] = mapped_column(sa.String(16), default=states.ON_ERROR_PAUSE)
    max_parallel: Mapped[int] = mapped_column(sa.Integer, default=8)
    fallback: Mapped[str] = mapped_column(sa.String(8), default=states.FALLBACK_NONE)
    # The only allowed destinations (None: any host that fits).
    target_hosts: Mapped[list | None] = mapped_column(sa.JSON, nullable=True)
    reason: Mapped[str | None] = mapped_column(sa.String(255), nullable=True)
    user_id: Mapped[str | None] = mapped_column(sa.String(64), nullable=True)
    flow_id: Mapped[str | None] = mapped_column(sa.String(36), nullable=True, index=True)
    runs: Mapped[list] = mapped_column(sa.JSON, default=list)
    # Set once a server ran out of hosts under on_error pause / revert: no new
    # move starts (and under revert, moves in flight are undone).
    stopping: Mapped[str | None] = mapped_column(sa.String(16), nullable=True)
    fault: Mapped[dict | None] = mapped_column(sa.JSON, nullable=True)

    moves: Mapped[list[Move]] = orm.relationship(
        back_populates="evacuation", order_by="Move.index", cascade="all, delete-orphan")


class Move(Timestamps, Base):
    """One server's move inside an evacuation; its ``migration_id`` is the
    placement migration consumer and the hosts' key for the move."""

    __tablename__ = "evacuation_moves"
    __table_args__ = (sa.UniqueConstraint("evacuation_id", "instance_id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    evacuation_id: Mapped[str] = mapped_column(
        sa.ForeignKey("evacuations.id", ondelete="CASCADE"), index=True)
    instance_id: Mapped[str] = mapped_column(sa.String(36), index=True)
    # Position in the evacuation; atom names derive from it.
    index: Mapped[int] = mapped_column(sa.Integer)
    tenant_id: Mapped[str] = mapped_column(sa.String(64))
    source: Mapped[str] = mapped_column(sa.String(255), index=True)
    destination: Mapped[str | None] = mapped_column(sa.String(255), nullable=True)
    # rebuild, live or cold: drain's fallback may turn one server's live into cold.
    mode: Mapped[str] = mapped_column(sa.String(16))
    status: Mapped[str] = mapped_column(sa.String(16), default=states.PENDING, index=True)
    # What is being done right now: claim, move, attach, confirm (None when idle).
    step: Mapped[str | None] = mapped_column(sa.String(16), nullable=True)
    migration_id: Mapped[str] = mapped_column(sa.String(36), unique=True)
    attempts: Mapped[int] = mapped_column(sa.Integer, default=0)
    hosts_tried: Mapped[list] = mapped_column(sa.JSON, default=list)
    volumes_lost: Mapped[list] = mapped_column(sa.JSON, default=list)
    # {"code", "message", "step", "host", "time"} of its last failure.
    fault: Mapped[dict | None] = mapped_column(sa.JSON, nullable=True)

    evacuation: Mapped[Evacuation] = orm.relationship(back_populates="moves")


class VCluster(Timestamps, Base):
    """A tenant's small datacentre: servers, volumes and groupings over them.

    Each create, update and delete is one run of a flow; ``flow_id`` is the
    current one, ``runs`` every one (``{"flow_id", "kind", "added", "removed"}``).
    """

    __tablename__ = "vclusters"
    __table_args__ = (sa.UniqueConstraint("tenant_id", "idempotency_key"),)

    id: Mapped[str] = mapped_column(sa.String(36), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(sa.String(64), index=True)
    user_id: Mapped[str | None] = mapped_column(sa.String(64), nullable=True)
    name: Mapped[str] = mapped_column(sa.String(255))
    status: Mapped[str] = mapped_column(sa.String(16), default=states.PENDING, index=True)
    # The body of the creating request, as validated (an idempotent replay compares it).
    request: Mapped[dict] = mapped_column(sa.JSON, default=dict)
    flow_id: Mapped[str | None] = mapped_column(sa.String(36), nullable=True, index=True)
    runs: Mapped[list] = mapped_column(sa.JSON, default=list)
    fault: Mapped[dict | None] = mapped_column(sa.JSON, nullable=True)
    idempotency_key: Mapped[str | None] = mapped_column(sa.String(255), nullable=True)

    members: Mapped[list[VClusterMember]] = orm.relationship(
        back_populates="vcluster", order_by="(VClusterMember.kind, VClusterMember.index)",
        cascade="all, delete-orphan")
    groupings: Mapped[list[VClusterGrouping]] = orm.relationship(
        back_populates="vcluster", order_by="VClusterGrouping.position",
        cascade="all, delete-orphan")


class VClusterMember(Base):
    """One server or volume of a vcluster, by its name in the cluster.

    Its state lives on the resource row it names (``resource_id``: an
    instance or a volume); ``index`` numbers the members of one kind, never
    reused, so atom names stay deterministic across updates.
    """

    __tablename__ = "vcluster_members"
    __table_args__ = (sa.UniqueConstraint("vcluster_id", "name"),
                      sa.UniqueConstraint("vcluster_id", "kind", "index",
                                          name="uq_vcluster_members_vcluster_id_kind"))

    id: Mapped[int] = mapped_column(primary_key=True)
    vcluster_id: Mapped[str] = mapped_column(
        sa.ForeignKey("vclusters.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(sa.String(255))
    kind: Mapped[str] = mapped_column(sa.String(8))
    index: Mapped[int] = mapped_column(sa.Integer)
    resource_id: Mapped[str] = mapped_column(sa.String(36), unique=True)
    spec: Mapped[dict] = mapped_column(sa.JSON, default=dict)
    # The server (member name) a volume is attached to, once the cluster is built.
    attach_to: Mapped[str | None] = mapped_column(sa.String(255), nullable=True)
    # The run that added it (an update's members are reverted by their run alone).
    added_by: Mapped[str | None] = mapped_column(sa.String(36), nullable=True)
    # Set while a run removes it; the row goes when the removal is done.
    removing: Mapped[bool] = mapped_column(sa.Boolean, default=False)

    vcluster: Mapped[VCluster] = orm.relationship(back_populates="members")


class VClusterGrouping(Base):
    """An affinity or anti-affinity rule over members; server-server rules also
    live as a server group (``server_group_id``) so later moves keep them."""

    __tablename__ = "vcluster_groupings"
    __table_args__ = (sa.UniqueConstraint("vcluster_id", "name"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    vcluster_id: Mapped[str] = mapped_column(
        sa.ForeignKey("vclusters.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(sa.String(255))
    position: Mapped[int] = mapped_column(sa.Integer)
    rule: Mapped[str] = mapped_column(sa.String(16))
    # As asked (None: the default of each pair of kinds).
    scope: Mapped[str | None] = mapped_column(sa.String(16), nullable=True)
    members: Mapped[list] = mapped_column(sa.JSON, default=list)
    server_group_id: Mapped[str | None] = mapped_column(sa.String(36), nullable=True)

    vcluster: Mapped[VCluster] = orm.relationship(back_populates="groupings")
