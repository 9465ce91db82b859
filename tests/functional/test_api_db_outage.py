"""The API while its database is out of reach: 503 with Retry-After, nothing written.

PostgreSQL is reached through a TCP relay the test cuts and restores, so the
server other tests share never stops; SQLite is made unavailable by putting a
directory where its file was.
"""

from __future__ import annotations

import logging
import os
import shutil
import urllib.parse

import pytest
import sqlalchemy as sa

from fleetflow.persistence.db import Database
from fleetflow.persistence.models import Reservation

URL = "/v2/tenant-a/reservations"
BODY = {"reservation": {"count": 2, "flavor_ref": "m1.small", "image_ref": "cirros"}}


def _app(conf, database, jobs):
    from fleetflow.api.app import create_app
    from fleetflow.services.reservations import ReservationOps

    def submit(flow_name, flow_kwargs, **options):
        jobs.append((flow_name, flow_kwargs, options))
        return options.get("flow_id") or "flow"

    return create_app(conf, database=database,
                      services={"reservations": ReservationOps(conf, database, submit=submit)})


def _assert_503(response):
    assert response.status_code == 503, response.json
    (error,) = response.json["errors"]
    assert error["code"] == "fleetflow.service_unavailable"
    assert error["status"] == 503 and "database" in error["detail"]
    assert int(response.headers["Retry-After"]) > 0
    assert error["request_id"] == response.headers["X-OpenStack-Request-Id"]


def _reservations(url: str) -> int:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as connection:
            return connection.scalar(sa.select(sa.func.count()).select_from(Reservation))
    finally:
        engine.dispose()


def test_postgresql_out_of_reach_is_503_with_retry_after_and_nothing_written(
        make_conf, pg_url, tcp_proxy, member_headers, jobs, caplog, monkeypatch):
    from fleetflow.api import errors
    from fleetflow.common.log_throttle import Throttle

    # A fresh rate limit on a clock that stands still: what an earlier 503 of
    # this process logged, and how long the requests take, change nothing.
    monkeypatch.setattr(errors, "_database_outage", Throttle(clock=lambda: 0.0))
    address = urllib.parse.urlsplit(pg_url.replace("+psycopg", ""))
    proxy = tcp_proxy(address.port or 5432)
    relayed = pg_url.replace(f"{address.hostname}:{address.port}",
                             f"127.0.0.1:{proxy.port}")
    conf = make_conf(database={"connection": relayed, "max_retry_seconds": 1,
                               "retry_interval": 0.05})
    database = Database.from_conf(conf)
    database.upgrade()
    with database.session() as session:
        from fleetflow.persistence.models import Flavor, Image
        session.add_all([Flavor(id="f-small", name="m1.small", vcpus=1, ram_mb=512,
                                disk_gb=1, extra_specs={}),
                         Image(id="i-cirros", name="cirros", min_disk_gb=1, min_ram_mb=64)])
    client = _app(conf, database, jobs).test_client()
    try:
        assert client.get(URL, headers=member_headers).status_code == 200

        proxy.stop()
        caplog.set_level(logging.INFO, logger="fleetflow.api.errors")
        listed = client.get(URL, headers=member_headers)
        posted = client.post(URL, json=BODY, headers=member_headers)
        again = [client.get(URL, headers=member_headers) for _ in range(5)]

        for response in (listed, posted, *again):
            _assert_503(response)
        assert jobs == [] and _reservations(pg_url) == 0
        # One line for the outage, not one traceback per request.
        loud = [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(loud) == 1 and loud[0].exc_info is None, [r.getMessage() for r in loud]

        proxy.start()
        assert client.get(URL, headers=member_headers).status_code == 200
        assert client.post(URL, json=BODY, headers=member_headers).status_code == 202
        assert _reservations(pg_url) == 1 and len(jobs) == 1
    finally:
        database.dispose()


def test_a_sqlite_file_that_cannot_be_opened_is_503(conf, db, app, client, member_headers,
                                                    jobs):
    path = sa.make_url(conf.database.connection).database
    assert client.get(URL, headers=member_headers).status_code == 200
    db.dispose()
    for leftover in (path, f"{path}-wal", f"{path}-shm"):
        if os.path.exists(leftover):
            os.remove(leftover)
    os.mkdir(path)  # where the file was, nothing SQLite can open
    try:
        response = client.post(URL, json=BODY, headers=member_headers)
    finally:
        shutil.rmtree(path)

    _assert_503(response)
    assert jobs == []


@pytest.fixture
def api_services(recording_services):
    return recording_services
