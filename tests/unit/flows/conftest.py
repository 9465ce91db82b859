"""A small real cloud in one process for flow tests.

Real pieces throughout: an upgraded SQLite database with a fleet loaded and
registered in the placement store, the fake hosts served over the in-process
oslo.messaging transport, the placement client tasks use — only the TaskFlow
persistence is TaskFlow's in-memory backend.
"""

from __future__ import annotations

import dataclasses

import pytest
import taskflow.engines
from taskflow import exceptions as tf_exc

import fleetflow.flows.evacuate  # noqa: F401  (registers the flows)
import fleetflow.flows.provision  # noqa: F401
from fleetflow.common import ids, states
from fleetflow.compute import agent as compute_agent
from fleetflow.compute import messaging
from fleetflow.compute.rpcapi import ComputeAPI
from fleetflow.engine.operations import Operations, ReservationRequest
from fleetflow.flows import registry, runtime
from fleetflow.persistence import fleet
from fleetflow.persistence.db import Database
from fleetflow.persistence.placement.client import from_conf as placement_from_conf

SMALL_FLEET = {
    "profiles": {"small": {"inventory": {
        "VCPU": {"total": 4, "allocation_ratio": 1.0},
        "MEMORY_MB": {"total": 8192, "allocation_ratio": 1.0},
        "DISK_GB": {"total": 100, "allocation_ratio": 1.0}}}},
    "rack_storage": {"capacity_gb": 1000, "volume_types": ["ssd"]},
    "regions": [{"name": "north-america", "zones": [{"name": "z1", "racks": [
        {"name": "r1", "hosts": 3, "profile": "small", "capabilities": {"gpu": "true"}},
        {"name": "r2", "hosts": 3, "profile": "small", "capabilities": {"sticker": "blue"}},
    ]}]}],
    "flavors": [{"id": "1", "name": "m1.small", "vcpus": 1, "ram_mb": 2048, "disk_gb": 20},
                {"id": "2", "name": "m1.half", "vcpus": 2, "ram_mb": 4096, "disk_gb": 40}],
    "images": [{"id": "8a6f3b56-0bd6-4c4e-9a0e-5a4c1f0c7a01", "name": "cirros"}],
}


@dataclasses.dataclass
class Cloud:
    conf: object
    database: Database
    runtime: runtime.Runtime
    agent: object
    posted: list

    @property
    def driver(self):
        return self.agent.driver

    def reserve(self, count: int, flavor: str = "m1.small", **kwargs):
        """Create the reservation rows the way the API does; returns the posted job."""
        ops = Operations(self.conf, self.database, submit=self._record)
        req = ReservationRequest(tenant_id=kwargs.pop("tenant_id", "t1"), user_id="u1",
                                 flavor_ref=flavor, image_ref="cirros",
                                 min_count=kwargs.pop("min_count", count), max_count=count,
                                 **kwargs)
        reservation, _ = ops.reserve(req)
        return reservation.id, self.posted[-1]

    def _record(self, flow_name, flow_kwargs, store=None, tenant_id=None, flow_id=None,
                **kwargs):
        self.posted.append({"flow": flow_name, "kwargs": flow_kwargs, "store": store,
                            "flow_id": flow_id})
        return flow_id or ids.new_uuid()

    def run(self, job, fence=None):
        """Run a posted job to its end on TaskFlow's in-memory backend.

        Returns the final flow state (SUCCESS or REVERTED).
        """
        flow = registry.build(job["flow"], **job["kwargs"])
        store = dict(job["store"] or {})
        if fence is not None:
            store["fence"] = fence
        engine = taskflow.engines.load(flow, store=store, engine="parallel", max_workers=8)
        try:
            engine.run()
        except tf_exc.WrappedFailure:
            pass
        except Exception:  # noqa: BLE001 - the flow reverted; its state says so
            pass
        return engine.storage.get_flow_state()


# Two racks of four hosts with their own disks and a rack-wide backend each:
# room to evacuate a host or two onto the others.
EVACUATION_FLEET = {
    "profiles": {"std": {"inventory": {
        "VCPU": {"total": 8, "allocation_ratio": 1.0},
        "MEMORY_MB": {"total": 16384, "allocation_ratio": 1.0},
        "DISK_GB": {"total": 200, "allocation_ratio": 1.0}},
        "local_storage": {"capacity_gb": 500, "volume_types": ["local"]}}},
    "rack_storage": {"capacity_gb": 1000, "volume_types": ["ssd"]},
    "regions": [{"name": "north-america", "zones": [{"name": "z1", "racks": [
        {"name": "r1", "hosts": 4, "profile": "std"},
        {"name": "r2", "hosts": 4, "profile": "std", "capabilities": {"gpu": "true"}},
    ]}]}],
    "flavors": SMALL_FLEET["flavors"],
    "images": SMALL_FLEET["images"],
}


@pytest.fixture
def cloud(make_conf):
    yield from _cloud(make_conf, SMALL_FLEET)


@pytest.fixture
def evac_cloud(make_conf):
    yield from _cloud(make_conf, EVACUATION_FLEET)


def _cloud(make_conf, fleet_doc):
    conf = make_conf(messaging={"rpc_timeout": 5}, compute={"move_poll_interval": 0.01})
    database = Database.from_conf(conf)
    database.upgrade()
    with database.session() as session:
        fleet.load(session, fleet.expand(fleet_doc))
    agent = compute_agent.serve_fleet(conf, database)
    rt = runtime.install(runtime.Runtime(conf, database, placement_from_conf(conf, database),
                                         ComputeAPI(conf, database)))
    yield Cloud(conf, database, rt, agent, [])
    runtime.uninstall()
    agent.stop()
    messaging.forget_transport(conf)
    database.dispose()


ACTIVE = states.ACTIVE
