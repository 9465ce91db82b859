"""Audit time on a generated fleet: rows, placement and every host asked over RPC.

    python bench/audit.py [--hosts 1000] [--instances 2000] [--repeat 3] [--workers 16]

Builds a fresh SQLite cloud: ``persistence.fleet.generate(hosts)`` loaded and
registered in placement, the fleet served in-process by one agent on
``kombu+memory://``, then ``--instances`` ACTIVE instances made directly (rows
in one insert, allocations in one ``claim_many``, guests through the fake
driver), spread round-robin over the hosts. Then the strict audit runs
``--repeat`` times; the set-up is not timed. Prints the phases of one extra
run too: reading rows + placement, and asking the hosts.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid

import sqlalchemy as sa

from fleetflow.common import config, states
from fleetflow.compute import agent as compute_agent
from fleetflow.compute import messaging
from fleetflow.compute.rpcapi import ComputeAPI
from fleetflow.persistence import fleet
from fleetflow.persistence.db import Database
from fleetflow.persistence.models import Host, Instance
from fleetflow.persistence.placement.client import LocalPlacement
from fleetflow.persistence.placement.store import PlacementStore
from fleetflow.services.audit import sources as audit_sources
from fleetflow.services.audit.report import audit

RESOURCES = {"VCPU": 1, "MEMORY_MB": 1024}


def build_cloud(directory: str, hosts: int, instances: int):
    conf = config.load(args=[], environ={})
    conf.set_override("state_dir", directory)
    conf.set_override("connection", f"sqlite:///{directory}/fleetflow.db", group="database")
    conf.set_override("topic", f"bench-audit-{uuid.uuid4().hex[:8]}", group="messaging")
    database = Database.from_conf(conf)
    database.upgrade()
    started = time.perf_counter()
    with database.session() as session:
        fleet.load(session, fleet.expand(fleet.generate(hosts)))
        names = dict(session.execute(sa.select(Host.name, Host.uuid)).all())
    agent = compute_agent.serve_fleet(conf, database)
    placement = LocalPlacement(PlacementStore(database))
    host_names = sorted(names)
    flavor, image = "1", "8a6f3b56-0bd6-4c4e-9a0e-5a4c1f0c7a01"
    plan = [(str(uuid.uuid4()), host_names[i % len(host_names)]) for i in range(instances)]
    with database.session() as session:
        session.execute(sa.insert(Instance), [
            {"id": u, "tenant_id": "bench", "name": f"vm-{i}", "index": i, "host": h,
             "status": states.ACTIVE, "flavor_id": flavor, "image_id": image}
            for i, (u, h) in enumerate(plan)])
    placement.claim_many({u: {names[h]: RESOURCES} for u, h in plan}, "bench", "bench")
    for u, h in plan:
        agent.driver.build_instance(h, u, RESOURCES)
    print(f"set-up: {hosts} hosts, {instances} instances in "
          f"{time.perf_counter() - started:.1f} s (not part of the figures)")
    return conf, database, placement, agent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--instances", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workers", type=int, default=16)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        conf, database, placement, agent = build_cloud(directory, args.hosts, args.instances)
        compute = ComputeAPI(conf, database)
        try:
            walls, cpus = [], []
            for _ in range(args.repeat):
                wall, cpu = time.perf_counter(), time.process_time()
                report = audit(database, placement, compute, strict=True,
                               workers=args.workers)
                walls.append(time.perf_counter() - wall)
                cpus.append(time.process_time() - cpu)
                assert report.clean, report.summary()
            print(f"audit (strict, {args.workers} RPC threads): "
                  f"{report.counts['hosts']} hosts, {report.counts['guests']} guests, "
                  f"{report.counts['consumers']} consumers, {report.counts['mismatches']} "
                  f"mismatches; wall best {min(walls):.2f} s, median "
                  f"{statistics.median(walls):.2f} s; CPU best {min(cpus):.2f} s")
            start = time.perf_counter()
            audit_sources.read_rows(database)
            audit_sources.read_placement(placement)
            reads = time.perf_counter() - start
            start = time.perf_counter()
            audit_sources.ask_hosts(compute, list(fleet_hosts(database)), args.workers)
            asks = time.perf_counter() - start
            print(f"phases: rows + placement {reads:.2f} s; list_instances on every host "
                  f"{asks:.2f} s")
        finally:
            agent.stop()
            messaging.forget_transport(conf)
            database.dispose()


def fleet_hosts(database):
    with database.session() as session:
        return session.scalars(sa.select(Host.name)).all()


if __name__ == "__main__":
    main()
