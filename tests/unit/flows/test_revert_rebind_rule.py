"""The rule "a revert never needs a value a retry provides", kept for every flow.

A REVERTED retry's results are wiped, and TaskFlow may revert a retry while a
task of its chain is still reverting: a revert that a crash leaves unfinished
then runs again without the retry's value, fails the flow and strands the
operation (docs/adding-a-flow.md). So no task's revert may be bound to a
name a retry provides.
"""

from __future__ import annotations

import pytest
from taskflow import flow as tf_flow
from taskflow import retry as tf_retry

import fleetflow.flows.evacuate.flow  # noqa: F401 (registers its factory)
import fleetflow.flows.provision.flow  # noqa: F401
import fleetflow.flows.provision.teardown  # noqa: F401
import fleetflow.flows.vcluster.build  # noqa: F401
import fleetflow.flows.vcluster.teardown  # noqa: F401
from fleetflow.flows import registry
from fleetflow.flows.tasks.boot import BootInstance

SERVERS = [{"index": i, "name": f"s{i}", "id": f"server-{i}", "image_id": "cirros",
            "resources": {"VCPU": 1, "MEMORY_MB": 512}} for i in range(2)]
VOLUMES = [{"index": i, "name": f"v{i}", "id": f"volume-{i}", "size_gb": 1}
           for i in range(2)]

# A small flow of each factory, with every optional part in it.
SMALL = {
    "provision": {"reservation_id": "r-1", "count": 2, "with_volumes": True},
    "reservation-teardown": {"instance_ids": ["i-0", "i-1"], "reservation_id": "r-1"},
    "evacuate": {"evacuation_id": "e-1", "count": 2},
    "vcluster-build": {"vcluster_id": "vc-1", "run": "create", "servers": SERVERS,
                       "volumes": VOLUMES},
    "vcluster-teardown": {"vcluster_id": "vc-1", "run": "delete", "servers": SERVERS,
                          "volumes": VOLUMES},
}


def atoms_of(flow: tf_flow.Flow):
    if flow.retry is not None:
        yield flow.retry
    for item in flow:
        if isinstance(item, tf_flow.Flow):
            yield from atoms_of(item)
        else:
            yield item


def test_every_factory_of_fleetflow_has_a_small_flow_here():
    ours = {name for name in registry.names()
            if registry.get(name).__module__.startswith("fleetflow.flows.")}
    assert ours <= set(SMALL), "add the new factory to SMALL"


@pytest.mark.parametrize("name", sorted(SMALL))
def test_no_revert_is_bound_to_a_value_a_retry_provides(name):
    atoms = list(atoms_of(registry.build(name, **SMALL[name])))
    from_retries = {provided for atom in atoms if isinstance(atom, tf_retry.Retry)
                    for provided in atom.provides}
    bound = {atom.name: sorted(set(atom.revert_rebind.values()) & from_retries)
             for atom in atoms if not isinstance(atom, tf_retry.Retry)}
    assert {task: names for task, names in bound.items() if names} == {}


def test_a_rebind_still_binds_the_names_a_revert_declares():
    boot = BootInstance("b", rebind={"host": "b.host", "instance_uuids": "b.uuids"},
                        inject={"index": 0})
    assert boot.rebind["host"] == "b.host"
    assert boot.revert_rebind["instance_uuids"] == "b.uuids"
    assert "host" not in boot.revert_rebind
