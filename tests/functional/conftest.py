"""Fixtures for API tests: an app on the test's own SQLite database, a client, identities.

``client.get(url, headers=admin_headers)``; ``make_headers("tenant-b", "member")``
builds any other identity (noauth headers). ``sample_catalog`` puts a few hosts,
flavors and images in the database; ``live_server`` serves the app over real
HTTP on 127.0.0.1 for clients that need a socket (requests, chunked bodies).
"""

from __future__ import annotations

import threading

import pytest

TENANT = "tenant-a"


@pytest.fixture
def api_services():
    """Services handed to create_app; tests (or other conftests) may add to the dict."""
    return {}


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


@pytest.fixture
def sample_catalog(db):
    """Three hosts in two regions, two flavors, two images."""
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
