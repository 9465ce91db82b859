"""schemathesis, every check, against the app on a small simulated cloud.

Each operation of ``/openapi.json`` gets a bounded number of generated
requests (valid and invalid ones), sent as an administrator, and each project
operation the same as a tenant member; every response must be what the
document says: a documented status, a body matching its schema, the documented
content type and headers, no 5xx, invalid input refused, valid input accepted.

Nothing runs flows: the API posts its jobs to a recorder, so a reservation or
a vcluster stays as the API left it. The cloud is built once for the module
and shared by both runs. Generation is deterministic (the same cases on every
run, so CI does not flicker); FLEETFLOW_FUZZ_EXAMPLES raises the number of
cases per operation to hunt further.

The positive-data check also takes a 400 and a /placement 405 (see CONFIG); every other check
runs with schemathesis's defaults.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

from tests.functional.conftest import AUDIT_FLEET

# Fuzzing every route takes minutes.
pytestmark = pytest.mark.slow

MEMBER_PROJECT = "tenant-a"
IDENTITIES = {
    "member": {"X-Project-Id": MEMBER_PROJECT, "X-User-Id": "tenant-a-user",
               "X-Roles": "member,reader"},
    "admin": {"X-Project-Id": "admin", "X-User-Id": "admin", "X-Roles": "admin,member,reader"},
}
# Cases per operation and phase: both runs take about a minute and a half.
MAX_EXAMPLES = int(os.environ.get("FLEETFLOW_FUZZ_EXAMPLES", "20"))


@pytest.fixture(scope="module")
def fuzz_app(tmp_path_factory):
    """The API with every service, on a four-host simulated cloud of its own."""
    from taskflow.persistence import backends as tf_backends

    import fleetflow.flows.provision  # noqa: F401  (registers the flows)
    import fleetflow.flows.vcluster  # noqa: F401
    from fleetflow.api.app import create_app
    from fleetflow.common import config
    from fleetflow.compute import agent as compute_agent
    from fleetflow.compute import messaging
    from fleetflow.compute.rpcapi import ComputeAPI
    from fleetflow.engine.jobboard.boards import make_jobboard
    from fleetflow.flows import runtime
    from fleetflow.persistence import fleet
    from fleetflow.persistence.db import Database
    from fleetflow.persistence.placement.client import from_conf as placement_from_conf
    from fleetflow.services.evacuations import EvacuationOps
    from fleetflow.services.hosts import HostOps
    from fleetflow.services.reservations import ReservationOps
    from fleetflow.services.vclusters import VClusterOps

    root = tmp_path_factory.mktemp("fuzz")
    conf = config.load(args=[], environ={})
    conf.set_override("state_dir", str(root))
    conf.set_override("connection", f"sqlite:///{root / 'fleetflow.db'}", group="database")
    conf.set_override("policy_file", str(root / "policy.yaml"), group="api")
    # A host that does not answer costs the audit one timeout; keep it short.
    conf.set_override("rpc_timeout", 2, group="messaging")
    # The fuzzer checks the answers' shapes, not scale: a count it draws up to the
    # default limit (10,000) would write that many instance rows for each request.
    conf.set_override("max_reservation_count", 1000, group="api")
    database = Database.from_conf(conf)
    database.upgrade()
    with database.session() as session:
        fleet.load(session, fleet.expand(AUDIT_FLEET))
    agent = compute_agent.serve_fleet(conf, database)
    rt = runtime.install(runtime.Runtime(conf, database, placement_from_conf(conf, database),
                                         ComputeAPI(conf, database)))
    backend = tf_backends.fetch({"connection": "memory://"})
    board = make_jobboard(conf, backend)

    def record(flow_name, flow_kwargs, store=None, flow_id=None, **_):
        return flow_id or "flow"

    hosts = HostOps(conf, database, rt.placement.store, rt.compute)
    app = create_app(conf, database, services={
        "reservations": ReservationOps(conf, database, record),
        "placement_store": rt.placement.store,
        "compute_rpcapi": rt.compute,
        "jobboard": board,
        "logbook_backend": backend,
        "evacuations": EvacuationOps(conf, database, record, compute=rt.compute,
                                     on_host_state=hosts.sync_placement),
        "hosts": hosts,
        "vclusters": VClusterOps(conf, database, record),
    })
    yield app
    board.close()
    backend.close()
    runtime.uninstall()
    agent.stop()
    messaging.forget_transport(conf)
    database.dispose()


@pytest.fixture(scope="module")
def fuzz_url(fuzz_app):
    """The app behind werkzeug's threaded server on a free port."""
    from werkzeug.serving import make_server

    server = make_server("127.0.0.1", 0, fuzz_app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, name="fuzz-server", daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    thread.join(timeout=10)
    server.server_close()


# NOTE: a request can fit every schema and still be refused with a 400 by
# the API's contract (OpenStack's): a flavor, host, group or marker it names
# does not exist, or rules across fields or between body and path (count or
# min_count/max_count, tenant_id = the path's project) that JSON Schema does
# not express; the schema descriptions say so. Such a 400 is an answer, not a
# failure of the positive-data check. Every other check keeps its defaults.
# NOTE: 405 too: a /placement method that the microversion asked for (or the
# default, 1.0) does not have, which valid data cannot change (Placement's rule).
CONFIG = """
[checks.positive_data_acceptance]
expected-statuses = ["2xx", "3xx", "400", "401", "403", "404", "405", "409", "429"]
"""
# A member works in its own project: another project's path is a 403 before
# anything else is looked at.
MEMBER_CONFIG = f"""
[parameters]
"path.tenant_id" = "{MEMBER_PROJECT}"
"""
# The operators' routes and Placement refuse a member (403) before they read anything
# of the request, whatever it holds: fuzzing those 68 operations as a member took 40%
# of the member's run for the same refusal each time. test_api_permissions.py checks
# that every one of them refuses a member.
MEMBER_SKIPS = ["--exclude-path-regex", r"^/(placement|v2/admin)(/|$)"]


def run_schemathesis(url: str, identity: str, tmp_path) -> subprocess.CompletedProcess:
    config = tmp_path / "schemathesis.toml"
    config.write_text(CONFIG + (MEMBER_CONFIG if identity == "member" else ""))
    headers = [arg for name, value in IDENTITIES[identity].items()
               for arg in ("-H", f"{name}: {value}")]
    command = [sys.executable, "-m", "schemathesis.cli", "--config-file", str(config),
               "run", f"{url}/openapi.json", "--checks", "all",
               "--max-examples", str(MAX_EXAMPLES), "--generation-deterministic",
               "--workers", "1",
               "--request-timeout", "30", "--no-color", *headers,
               *(MEMBER_SKIPS if identity == "member" else [])]
    return subprocess.run(command, capture_output=True, text=True, cwd=tmp_path,
                          timeout=900, check=False)


@pytest.mark.parametrize("identity", sorted(IDENTITIES))
def test_api_matches_its_openapi_document(fuzz_url, identity, tmp_path):
    result = run_schemathesis(fuzz_url, identity, tmp_path)
    # The report's failures and summary (its head is only the banner).
    report = result.stdout[max(result.stdout.find("=== FAILURES"), 0):]
    assert result.returncode == 0, report[:40000] + result.stderr[-5000:]
