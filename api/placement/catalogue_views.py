"""Placement routes beside the provider views: a custom trait deleted."""

from __future__ import annotations

from fleetflow.api.placement import microversion
from fleetflow.api.placement.blueprint import blp, no_content, store
from fleetflow.persistence.placement import catalog


@blp.route("/traits/<name>", methods=["DELETE"])
def delete_trait(name):
    microversion.require(1, 6)
    store().in_transaction(catalog.delete_trait, name)
    return no_content()
