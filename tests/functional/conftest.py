"""Fixtures for API tests: an app on the test's own SQLite database, a client, identities.

``client.get(url, headers=admin_headers)``; ``make_headers("tenant-b", "member")``
builds any other identity (noauth headers). ``sample_catalog`` puts a few hosts,
flavors and images in the database; ``live_server`` serves the app over real
HTTP on 127.0.0.1 for clients that need a socket (requests, chunked bodies).
"""

from __future__ import annotations

import contextlib
import threading
import uuid

import pytest

TENANT = "tenant-a"


@pytest.fixture(autouse=True)
def wide_tables(monkeypatch):
    """The CLI's tables at their default width (160), whatever COLUMNS the run inherited:
    pytest-xdist's workers have COLUMNS=80, which cuts the ids the tests look for."""
    monkeypatch.setenv("COLUMNS", "160")


@pytest.fixture
def api_services():
    """Services handed to create_app; tests (or other conftests) may add to the dict."""
    return {}


@pytest.fixture
def jobs():
    """Every flow the recording operations posted: (flow name, flow kwargs, options)."""
    return []


@pytest.fixture
def recording_services(conf, db, jobs):
    """API services whose operations record each flow in ``jobs`` instead of running it.

    A test module uses them by overriding ``api_services`` to return them.
    """
    from fleetflow.services.reservations import ReservationOps
    from fleetflow.services.vclusters import VClusterOps

    def submit(flow_name, flow_kwargs, **options):
        jobs.append((flow_name, flow_kwargs, options))
        return options.get("flow_id") or "flow"

    return {"reservations": ReservationOps(conf, db, submit=submit),
            "vclusters": VClusterOps(conf, db, submit=submit)}


@pytest.fixture
def app(conf, db, api_services):
    from fleetflow.api.app import create_app

    return create_app(conf, database=db, services=api_services)


@pytest.fixture
def client(app):
    return app.test_client()


@pytest.fixture
def make_headers():
    """``make_headers(tenant, *roles, user=None)`` -> noauth identity headers."""
    def _make(tenant: str = TENANT, *roles: str, user: str | None = None) -> dict:
        headers = {"X-Project-Id": tenant, "X-User-Id": user or f"{tenant}-user"}
        if roles:
            headers["X-Roles"] = ",".join(roles)
        return headers

    return _make


@pytest.fixture
def tenant():
    """The project of member_headers / reader_headers."""
    return TENANT


@pytest.fixture
def admin_headers(make_headers):
    return make_headers("admin", "admin", "member", "reader", user="admin")


@pytest.fixture
def member_headers(make_headers):
    return make_headers(TENANT, "member", "reader")


@pytest.fixture
def reader_headers(make_headers):
    return make_headers(TENANT, "reader")


AGENT_HOST_INVENTORY = {"VCPU": {"total": 16, "allocation_ratio": 1.0, "reserved": 0},
                        "MEMORY_MB": {"total": 16384, "allocation_ratio": 1.0, "reserved": 0}}


@pytest.fixture
def add_hosts(db):
    """``add_hosts(names)``: host rows (16 VCPU, 16 GB each) for a compute agent to serve."""
    import uuid

    from fleetflow.persistence.models import Host

    def _add(names):
        with db.session() as session:
            for name in names:
                session.add(Host(uuid=str(uuid.uuid4()), name=name, region="r1", zone="z1",
                                 rack="k1", inventory=AGENT_HOST_INVENTORY))
        return db

    return _add


@pytest.fixture
def compute_conf(make_conf):
    """``compute_conf(**compute)``: a configuration for an in-process compute agent and its
    clients, on an RPC topic of its own (the in-memory broker is shared by the whole
    process); its transports are closed after the test."""
    from fleetflow.compute import messaging

    made: list = []

    def _make(**compute):
        conf = make_conf(compute=compute,
                         messaging={"topic": f"compute-{uuid.uuid4().hex[:8]}",
                                    "rpc_timeout": 30})
        made.append(conf)
        return conf

    yield _make
    for conf in made:
        messaging.forget_transport(conf)


@pytest.fixture
def served_agent():
    """``with served_agent(conf, db) as agent``: an in-process compute agent for every host
    of ``db``'s fleet, stopped when the block ends."""
    from fleetflow.compute import agent as compute_agent

    @contextlib.contextmanager
    def _serve(conf, database):
        agent = compute_agent.serve_fleet(conf, database)
        try:
            yield agent
        finally:
            agent.stop()
    return _serve


@pytest.fixture
def sample_catalog(db):
    """Three hosts in two regions (placement providers too), two flavors, two images."""
    from fleetflow.persistence import fleet
    from fleetflow.persistence.models import Flavor, Host, Image

    def host(name, region, zone, rack, **caps):
        return Host(uuid=f"00000000-0000-0000-0000-{name[-3:]:0>12}", name=name,
                    region=region, zone=zone, rack=rack,
                    inventory={"VCPU": {"total": 64, "allocation_ratio": 4.0, "reserved": 0},
                               "MEMORY_MB": {"total": 262144, "allocation_ratio": 1.0,
                                             "reserved": 2048}},
                    capabilities={"region": region, **caps}, traits=["HW_CPU_X86_AVX2"])

    with db.session() as session:
        session.add_all([
            host("host-001", "north-america", "na-1", "r1", gpu="true", sticker="blue"),
            host("host-002", "north-america", "na-1", "r2"),
            host("host-003", "europe", "eu-1", "r1"),
            Flavor(id="11111111-1111-1111-1111-111111111111", name="m1.small", vcpus=1,
                   ram_mb=2048, disk_gb=20, extra_specs={}),
            Flavor(id="22222222-2222-2222-2222-222222222222", name="g1.large", vcpus=8,
                   ram_mb=16384, disk_gb=80,
                   extra_specs={"gpu": "true", "resources:GPU": 1}),
            Image(id="33333333-3333-3333-3333-333333333333", name="cirros",
                  min_disk_gb=1, min_ram_mb=64),
            Image(id="44444444-4444-4444-4444-444444444444", name="ubuntu-24.04",
                  min_disk_gb=10, min_ram_mb=512),
        ])
        session.flush()
        # As the fleet loader does: the scheduler leaves out a host without its provider.
        fleet.register_providers(session)
    return db


@pytest.fixture
def live_server(app):
    """The app behind werkzeug's threaded HTTP server on a free port; yields its base URL."""
    from werkzeug.serving import make_server

    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, name="api-live-server",
                              daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    thread.join(timeout=10)
    server.server_close()


# -- a small real cloud (audit tests) ---------------------------------------------

AUDIT_FLEET = {
    "profiles": {"small": {"inventory": {
        "VCPU": {"total": 8, "allocation_ratio": 1.0},
        "MEMORY_MB": {"total": 16384, "allocation_ratio": 1.0},
        "DISK_GB": {"total": 200, "allocation_ratio": 1.0}}}},
    "rack_storage": {"capacity_gb": 1000, "volume_types": ["ssd"]},
    "regions": [{"name": "north-america", "zones": [{"name": "z1", "racks": [
        {"name": "r1", "hosts": 2, "profile": "small", "capabilities": {"gpu": "true"}},
        {"name": "r2", "hosts": 2, "profile": "small"},
    ]}]}],
    "flavors": [{"id": "1", "name": "m1.small", "vcpus": 1, "ram_mb": 2048, "disk_gb": 20}],
    "images": [{"id": "8a6f3b56-0bd6-4c4e-9a0e-5a4c1f0c7a01", "name": "cirros"}],
}


class SmallCloud:
    """Four simulated hosts served in-process, placement, rows, and the flow runtime.

    ``boot(host)`` makes a healthy instance the direct way (row, allocation,
    guest); ``provision(count)`` runs the real provision flow on TaskFlow's
    in-memory engine; ``audit()`` runs the audit with every part.
    """

    def __init__(self, conf, database, runtime, agent):
        self.conf, self.database, self.runtime, self.agent = conf, database, runtime, agent
        self.posted: list = []

    @property
    def driver(self):
        return self.agent.driver

    @property
    def placement(self):
        return self.runtime.placement

    @property
    def compute(self):
        return self.runtime.compute

    def host_uuid(self, host: str) -> str:
        from fleetflow.persistence.fleet import stable_uuid

        return stable_uuid(host)

    def boot(self, host: str = "z1-r1-h01", tenant: str = "t1", status: str = "ACTIVE",
             group_id: str | None = None) -> str:
        """An instance made consistently on ``host``: row, allocation, guest (and member)."""
        from fleetflow.common import ids
        from fleetflow.persistence.models import GroupMember, Instance

        uuid = ids.new_uuid()
        resources = {"VCPU": 1, "MEMORY_MB": 2048, "DISK_GB": 20}
        with self.database.session() as session:
            session.add(Instance(id=uuid, tenant_id=tenant, name=f"vm-{uuid[:8]}",
                                 host=host, status=status, flavor_id="1",
                                 image_id="8a6f3b56-0bd6-4c4e-9a0e-5a4c1f0c7a01",
                                 group_id=group_id))
            if group_id:
                session.add(GroupMember(group_id=group_id, instance_id=uuid, host=host))
        self.placement.claim(uuid, {self.host_uuid(host): resources}, tenant, tenant)
        self.compute.build_instance(host, uuid, resources)
        return uuid

    def provision(self, count: int, **kwargs) -> str:
        """Reserve and run the provision flow to its end; returns the final flow state."""
        import taskflow.engines

        from fleetflow.common import ids
        from fleetflow.flows import registry
        from fleetflow.services.reservations import ReservationOps, ReservationRequest

        def record(flow_name, flow_kwargs, store=None, tenant_id=None, flow_id=None, **_):
            self.posted.append((flow_name, flow_kwargs, store))
            return flow_id or ids.new_uuid()

        ops = ReservationOps(self.conf, self.database, submit=record)
        ops.reserve(ReservationRequest(tenant_id="t1", user_id="u1", flavor_ref="m1.small",
                                       image_ref="cirros", min_count=count, max_count=count,
                                       **kwargs))
        flow_name, flow_kwargs, store = self.posted[-1]
        engine = taskflow.engines.load(registry.build(flow_name, **flow_kwargs),
                                       store=dict(store or {}), engine="serial")
        try:
            engine.run()
        except Exception:  # noqa: BLE001 - a reverted flow raises; its state says so
            pass
        return engine.storage.get_flow_state()

    def audit(self, strict: bool = True, **kwargs):
        from fleetflow.services.audit.report import audit

        kwargs.setdefault("service_down_time", self.conf.compute.service_down_time)
        return audit(self.database, self.placement, self.compute, strict=strict, **kwargs)


@pytest.fixture
def small_cloud(conf, db, api_services):
    """A four-host cloud on the test's database, its services added to ``api_services``.

    Ask for it before ``app``/``client`` so the app is built with the services.
    The ``vclusters`` service posts its jobs to ``posted`` (run them like
    ``provision`` does).
    """
    import fleetflow.flows.provision  # noqa: F401  (registers the flows)
    import fleetflow.flows.vcluster  # noqa: F401
    from fleetflow.compute import agent as compute_agent
    from fleetflow.compute import messaging
    from fleetflow.compute.rpcapi import ComputeAPI
    from fleetflow.flows import runtime
    from fleetflow.persistence import fleet
    from fleetflow.persistence.placement.client import from_conf as placement_from_conf
    from fleetflow.services.vclusters import VClusterOps

    conf.set_override("rpc_timeout", 5, group="messaging")
    with db.session() as session:
        fleet.load(session, fleet.expand(AUDIT_FLEET))
    agent = compute_agent.serve_fleet(conf, db)
    rt = runtime.install(runtime.Runtime(conf, db, placement_from_conf(conf, db),
                                         ComputeAPI(conf, db)))
    cloud = SmallCloud(conf, db, rt, agent)

    def record(flow_name, flow_kwargs, store=None, flow_id=None, **_):
        cloud.posted.append((flow_name, flow_kwargs, store))
        return flow_id

    api_services.update(placement_store=rt.placement.store, compute_rpcapi=rt.compute,
                        vclusters=VClusterOps(conf, db, submit=record))
    yield cloud
    runtime.uninstall()
    agent.stop()
    messaging.forget_transport(conf)


# -- flows for the operator routes (test_api_flows.py, test_cli_flows.py) ----------

SWITCH_FAULTS: set[str] = set()  # atom names whose execute fails


def _switch_flow_factory():
    """Registers "api-switches": n tasks in a line that fail while SWITCH_FAULTS names them."""
    from taskflow import task
    from taskflow.patterns import linear_flow

    from fleetflow.flows import registry

    class Switch(task.Task):
        def execute(self):
            if self.name in SWITCH_FAULTS:
                raise RuntimeError(f"{self.name} is broken")
            return self.name

    def api_switches(count: int):
        flow = linear_flow.Flow("api-switches")
        for index in range(count):
            flow.add(Switch(name=f"inst-{index:04d}-step"))
        return flow

    # NOTE: registered under a module-level name so the registry accepts it.
    api_switches.__qualname__ = "api_switches"
    if "api-switches" not in registry.names():
        registry.register("api-switches", api_switches)


class FlowEngine:
    """A jobboard and an in-memory logbook shared with the app; runs flows on demand."""

    def __init__(self, conf, board, backend):
        self.conf, self.board, self.backend = conf, board, backend
        self.faults = SWITCH_FAULTS

    def submit(self, tenant: str, count: int = 2, on_error: str = "revert") -> str:
        from fleetflow.engine.submit import submit

        return submit(self.board, self.backend, "api-switches", {"count": count},
                      owner_tenant=tenant, on_error=on_error)

    def run_until(self, flow_id: str, *wanted: str) -> str:
        """Conductor threads run jobs until the flow is in one of ``wanted``."""
        import time

        from fleetflow.engine.actions import show_flow
        from fleetflow.engine.conductor.pool import ConductorPool

        deadline = time.monotonic() + 30
        with ConductorPool(self.conf, workers=1, persistence=self.backend, wait_timeout=0.05):
            while True:
                state = show_flow(self.backend, flow_id)["state"]
                if state in wanted and self.board.job_count == 0:
                    return state
                assert time.monotonic() < deadline, f"flow {flow_id} stuck in {state}"
                time.sleep(0.03)


@pytest.fixture
def flow_engine(conf, db, api_services):
    """Flows, a board and a logbook the app's flow routes use; ask before ``app``."""
    from taskflow.persistence import backends as tf_backends

    from fleetflow.engine.jobboard.boards import make_jobboard

    _switch_flow_factory()
    SWITCH_FAULTS.clear()
    backend = tf_backends.fetch({"connection": "memory://"})
    board = make_jobboard(conf, backend)
    api_services.update(jobboard=board, logbook_backend=backend)
    yield FlowEngine(conf, board, backend)
    SWITCH_FAULTS.clear()
    board.close()
    backend.close()
