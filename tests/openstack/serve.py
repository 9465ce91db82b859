"""A real ``fleetflow serve`` in openstack mode, driving the harness's Nova over HTTP.

Each test gets its own state directory (its own SQLite database), so its
fleetflow knows only what it synced from the cloud and what it did itself.
Started, killed (``kill -9`` of its whole session) and stopped as the reliability
layer's ``ServeProcess`` is.
"""

from __future__ import annotations

import os
import time

import requests

from tests.reliability.serve_process import ADMIN, TENANT, ServeProcess

UNFINISHED_RESERVATION = ("PENDING", "SCHEDULING", "BUILDING", "REVERTING", "DELETING")
UNFINISHED_EVACUATION = ("PENDING", "RUNNING", "REVERTING")
#: The harness's Nova's service_down_time (fleetflow.testing.nova_harness, not imported:
#: it imports Nova). fleetflow's [compute] service_down_time is set to it, as
#: docs/openstack.md advises, unless a test says otherwise.
NOVA_SERVICE_DOWN_TIME = 20
#: The image every harness cloud's Glance holds.
IMAGE = "155d900f-4e14-4e4c-a73d-069cbf4541e6"


class OpenStackServe(ServeProcess):
    """:class:`ServeProcess` in openstack mode: no fleet file, the harness's cloud."""

    def __init__(self, workdir, port: int, wait_for_api, cloud, **settings: str):
        # The cloud is synced, not generated: ServeProcess's fleet file is not made.
        self.workdir, self.port, self.wait_for_api = str(workdir), port, wait_for_api
        self.cloud = cloud
        self.url = f"http://127.0.0.1:{port}"
        self.settings = settings
        self.proc = None
        self.runs = 0

    def env(self, **settings: str) -> dict:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("FLEETFLOW_", "OS_"))}
        env.update(FLEETFLOW_STATE_DIR=self.workdir,
                   FLEETFLOW_API_PORT=str(self.port),
                   FLEETFLOW_CLOUD_DRIVER="openstack",
                   FLEETFLOW_OPENSTACK_CLOUD=self.cloud.cloud_name,
                   FLEETFLOW_OPENSTACK_CLOUDS_YAML=str(self.cloud.clouds_yaml),
                   FLEETFLOW_OPENSTACK_POLL_INTERVAL="0.2",
                   FLEETFLOW_COMPUTE_SERVICE_DOWN_TIME=str(NOVA_SERVICE_DOWN_TIME),
                   FLEETFLOW_COMPUTE_MOVE_POLL_INTERVAL="0.2")
        env.update(self.settings)
        env.update(settings)
        return env

    def start(self, wait: bool = True, **settings: str) -> OpenStackServe:
        super().start(wait, **settings)
        return self

    def status_in_database(self, table: str, row_id: str) -> str:
        """A row's status read from the database file (while serve is dead, say)."""
        import sqlite3

        with sqlite3.connect(self.db_path) as db:
            return db.execute(f"SELECT status FROM {table} WHERE id = ?",  # noqa: S608
                              (row_id,)).fetchone()[0]

    # -- the API -------------------------------------------------------------

    def call(self, method: str, path: str, headers=TENANT, expect=(200, 201, 202, 204),
             **kwargs):
        response = requests.request(method, f"{self.url}{path}", headers=headers,
                                    timeout=60, **kwargs)
        assert response.status_code in expect, (method, path, response.status_code,
                                                response.text[:2000])
        return response.json() if response.content else None

    def group(self, policies, **fields) -> str:
        body = {"group": {"name": "g", "policies": list(policies), **fields}}
        return self.call("POST", "/v2/demo/groups", json=body)["group"]["id"]

    def reserve(self, count: int, flavor: str = "m1.tiny", **fields) -> str:
        body = {"reservation": {"name": "r", "count": count, "flavor_ref": flavor,
                                "image_ref": IMAGE, **fields}}
        return self.call("POST", "/v2/demo/reservations", json=body)["reservation"]["id"]

    def reservation(self, reservation_id: str) -> dict:
        return self.call("GET", f"/v2/demo/reservations/{reservation_id}")["reservation"]

    def wait_reservation(self, reservation_id: str, timeout: float = 240) -> dict:
        return self._wait(lambda: self.reservation(reservation_id),
                          UNFINISHED_RESERVATION, timeout)

    def evacuate(self, hosts, mode: str, **fields) -> str:
        body = {"evacuation": {"hosts": list(hosts), "mode": mode, **fields}}
        return self.call("POST", "/v2/admin/evacuations", headers=ADMIN,
                         json=body)["evacuation"]["id"]

    def evacuation(self, evacuation_id: str) -> dict:
        return self.call("GET", f"/v2/admin/evacuations/{evacuation_id}",
                         headers=ADMIN)["evacuation"]

    def wait_evacuation(self, evacuation_id: str, timeout: float = 300) -> dict:
        return self._wait(lambda: self.evacuation(evacuation_id), UNFINISHED_EVACUATION,
                          timeout)

    def audit(self) -> dict:
        return self.call("GET", "/v2/admin/audit?strict=true", headers=ADMIN)["audit"]

    def servers(self) -> list[dict]:
        return self.call("GET", "/v2/admin/servers", headers=ADMIN)["servers"]

    def _wait(self, read, unfinished, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            body = read()
            if body["status"] not in unfinished:
                return body
            assert time.monotonic() < deadline, (body, self.log())
            time.sleep(0.3)
