"""API overhead: host listing pages and a host state change, through the WSGI app.

    python bench/api.py [--hosts 10000] [--limit 1000] [--repeat 5]

Builds a fresh SQLite database in a temporary directory with ``--hosts`` hosts,
then times (wall and CPU, best and median of ``--repeat``) with Flask's test
client, which runs the whole app (auth, policy, validation, serialization)
without sockets:

- walking the whole host list in pages of ``--limit``;
- one page of 100 hosts filtered by region;
- one PUT of a host's state (validation, write, commit);
- an error answer (403 for a member on an admin route).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

ADMIN = {"X-Project-Id": "admin", "X-Roles": "admin"}


def seed(db, hosts: int) -> None:
    from fleetflow.persistence.models import Host

    inventory = {"VCPU": {"total": 64, "allocation_ratio": 4.0, "reserved": 0},
                 "MEMORY_MB": {"total": 262144, "allocation_ratio": 1.0, "reserved": 2048},
                 "DISK_GB": {"total": 2000, "allocation_ratio": 1.0, "reserved": 0}}
    rows = []
    for i in range(hosts):
        region = "north-america" if i % 2 else "europe"
        rows.append(Host(uuid=f"00000000-0000-0000-0000-{i:012d}", name=f"host-{i:05d}",
                         region=region, zone=f"{region}-{i % 4}", rack=f"r{i // 40}",
                         inventory=inventory, capabilities={"region": region},
                         traits=["HW_CPU_X86_AVX2"]))
    with db.session() as session:
        session.add_all(rows)


def measure(label: str, fn, repeat: int) -> None:
    walls, cpus = [], []
    for _ in range(repeat):
        wall, cpu = time.perf_counter(), time.process_time()
        detail = fn()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    print(f"| {label} | {detail} | {min(walls) * 1000:.1f} ms | "
          f"{statistics.median(walls) * 1000:.1f} ms | {min(cpus) * 1000:.1f} ms |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=10000)
    parser.add_argument("--limit", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    from fleetflow.api.app import create_app
    from fleetflow.common import config
    from fleetflow.persistence.db import Database

    with tempfile.TemporaryDirectory() as tmp:
        conf = config.load(args=[], environ={})
        conf.set_override("connection", f"sqlite:///{tmp}/bench.db", group="database")
        conf.set_override("policy_file", f"{tmp}/policy.yaml", group="api")
        db = Database.from_conf(conf)
        db.upgrade()
        seed(db, args.hosts)
        client = create_app(conf, database=db).test_client()

        def walk():
            url, pages, count = f"/v2/admin/hosts?limit={args.limit}", 0, 0
            while url:
                body = client.get(url, headers=ADMIN).get_json()
                pages, count = pages + 1, count + len(body["hosts"])
                url = body["links"][0]["href"].replace("http://localhost", "") \
                    if body["links"] else None
            return f"{count} hosts, {pages} pages"

        def filtered():
            body = client.get("/v2/admin/hosts?region=europe&limit=100",
                              headers=ADMIN).get_json()
            return f"{len(body['hosts'])} hosts"

        states = iter(["maintenance", "up"] * args.repeat)

        def update():
            response = client.put("/v2/admin/hosts/host-00042", headers=ADMIN,
                                  json={"host": {"state": next(states), "reason": "bench"}})
            return f"HTTP {response.status_code}"

        def forbidden():
            response = client.get("/v2/admin/hosts?limit=1",
                                  headers={"X-Project-Id": "p", "X-Roles": "member"})
            return f"HTTP {response.status_code}"

        print(f"{args.hosts} hosts in SQLite; best / median of {args.repeat}\n")
        print("| case | result | wall best | wall median | CPU best |")
        print("| --- | --- | --- | --- | --- |")
        measure(f"list all hosts, pages of {args.limit}", walk, args.repeat)
        measure("one page of 100, region filter", filtered, args.repeat)
        measure("PUT host state", update, args.repeat)
        measure("403 error answer", forbidden, args.repeat)
        db.dispose()


if __name__ == "__main__":
    main()
