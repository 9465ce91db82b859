"""Placement tables: providers, inventories, traits, consumers and allocations.

Keys are the external uuids (providers, consumers) and resource class names,
so allocation rows can be written in bulk without first resolving ids. Every
generation column is bumped with compare-and-swap by :mod:`.store`.
"""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from fleetflow.persistence.db import Base

# Placement's own limit for integer inventory fields (a signed 32-bit column).
MAX_INT = 2147483647


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


class ResourceProvider(Base):
    """A host, a storage backend, or anything else that has inventory."""

    __tablename__ = "resource_providers"

    uuid: Mapped[str] = mapped_column(sa.String(36), primary_key=True)
    name: Mapped[str] = mapped_column(sa.String(200), unique=True)
    generation: Mapped[int] = mapped_column(sa.Integer, default=0)
    parent_provider_uuid: Mapped[str | None] = mapped_column(
        sa.String(36), sa.ForeignKey("resource_providers.uuid"), nullable=True, index=True)
    root_provider_uuid: Mapped[str] = mapped_column(sa.String(36), index=True)
    created_at: Mapped[dt.datetime] = mapped_column(sa.DateTime, default=_utcnow)
    updated_at: Mapped[dt.datetime] = mapped_column(sa.DateTime, default=_utcnow,
                                                    onupdate=_utcnow)


class Inventory(Base):
    """How much of one resource class a provider has, and how it may be used."""

    __tablename__ = "inventories"

    resource_provider_uuid: Mapped[str] = mapped_column(
        sa.String(36), sa.ForeignKey("resource_providers.uuid", ondelete="CASCADE"),
        primary_key=True)
    resource_class: Mapped[str] = mapped_column(sa.String(255), primary_key=True)
    total: Mapped[int] = mapped_column(sa.Integer)
    reserved: Mapped[int] = mapped_column(sa.Integer, default=0)
    min_unit: Mapped[int] = mapped_column(sa.Integer, default=1)
    max_unit: Mapped[int] = mapped_column(sa.Integer, default=MAX_INT)
    step_size: Mapped[int] = mapped_column(sa.Integer, default=1)
    allocation_ratio: Mapped[float] = mapped_column(sa.Float, default=1.0)


class Trait(Base):
    """A known trait name (standard ones and CUSTOM_*)."""

    __tablename__ = "traits"

    name: Mapped[str] = mapped_column(sa.String(255), primary_key=True)


class ProviderTrait(Base):
    __tablename__ = "provider_traits"

    resource_provider_uuid: Mapped[str] = mapped_column(
        sa.String(36), sa.ForeignKey("resource_providers.uuid", ondelete="CASCADE"),
        primary_key=True)
    trait: Mapped[str] = mapped_column(sa.String(255), sa.ForeignKey("traits.name"),
                                       primary_key=True, index=True)


class Consumer(Base):
    """Whoever holds allocations (an instance, a migration, a volume).

    NOTE: unlike Placement, a consumer whose allocations are emptied keeps its
    row (and its generation keeps growing), so a writer holding a generation
    from before the emptying can never match again after the consumer is
    re-created. To clients it looks exactly like Placement's deleted consumer:
    no allocations, no generation, and ``null`` is accepted as the generation.
    """

    __tablename__ = "consumers"

    uuid: Mapped[str] = mapped_column(sa.String(36), primary_key=True)
    project_id: Mapped[str] = mapped_column(sa.String(255), index=True)
    user_id: Mapped[str] = mapped_column(sa.String(255))
    consumer_type: Mapped[str] = mapped_column(sa.String(255), default="unknown")
    generation: Mapped[int] = mapped_column(sa.Integer, default=0)
    updated_at: Mapped[dt.datetime] = mapped_column(sa.DateTime, default=_utcnow,
                                                    onupdate=_utcnow)


class Allocation(Base):
    """``used`` units of one resource class of one provider held by one consumer."""

    __tablename__ = "allocations"

    consumer_uuid: Mapped[str] = mapped_column(
        sa.String(36), sa.ForeignKey("consumers.uuid"), primary_key=True)
    resource_provider_uuid: Mapped[str] = mapped_column(
        sa.String(36), sa.ForeignKey("resource_providers.uuid"), primary_key=True)
    resource_class: Mapped[str] = mapped_column(sa.String(255), primary_key=True)
    used: Mapped[int] = mapped_column(sa.Integer)

    # Capacity checks sum ``used`` per provider and class.
    __table_args__ = (sa.Index("ix_allocations_provider_class",
                               "resource_provider_uuid", "resource_class"),)


class ResourceClass(Base):
    """A custom resource class (CUSTOM_*); the standard ones come from os-resource-classes."""

    __tablename__ = "resource_classes"

    name: Mapped[str] = mapped_column(sa.String(255), primary_key=True)
    created_at: Mapped[dt.datetime] = mapped_column(sa.DateTime, default=_utcnow)
    updated_at: Mapped[dt.datetime] = mapped_column(sa.DateTime, default=_utcnow,
                                                    onupdate=_utcnow)


class ProviderAggregate(Base):
    """A provider's membership of one aggregate (Placement's aggregates are bare uuids)."""

    __tablename__ = "provider_aggregates"

    resource_provider_uuid: Mapped[str] = mapped_column(
        sa.String(36), sa.ForeignKey("resource_providers.uuid", ondelete="CASCADE"),
        primary_key=True)
    aggregate_uuid: Mapped[str] = mapped_column(sa.String(36), primary_key=True, index=True)
