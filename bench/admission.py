"""The queue's admission: what one pass costs as the queue grows, and how soon a freed
host admits the next request.

A generated fleet of ``--hosts`` hosts is filled to the brim (one consumer per host
holding all of it, written straight to placement), then requests that do not fit
(1 to 4 ``m1.small`` each, all-or-nothing) are queued through ``ReservationOps``:

1. pass cost: one admission pass (services/queue/admission.py) that admits nothing,
   timed ``--repeat`` times with 100, 1,000 and 10,000 queued (``--sizes``), after a
   first one, as an admitter's passes follow each other (its memo kept);
2. latency: with ``--latency-queued`` queued and the admitter thread of a conductor
   process running, one host's consumer is released (a delete's effect on placement)
   and the time to the admitted request's flow submission (the POST-equivalent start)
   is measured, ``--repeat`` times.

    python bench/admission.py                                      # SQLite
    python bench/admission.py --db postgresql+psycopg://postgres@127.0.0.1/bench_queue
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time
import uuid

from fleetflow.common import states


def build(workdir: str, hosts: int, db_url: str | None):
    from fleetflow.persistence import fleet
    from fleetflow.persistence.db import Database
    from fleetflow.persistence.placement.client import from_conf
    from fleetflow.scheduler.snapshot import capacity_of
    from fleetflow.testing.cloud import isolated_conf

    conf = isolated_conf(workdir)
    if db_url:
        conf.set_override("connection", db_url, group="database")
    database = Database.from_conf(conf)
    database.upgrade()
    with database.session() as session:
        fleet.load(session, fleet.expand(fleet.generate(hosts)))
    placement = from_conf(conf, database)
    fillers = {}
    with database.read_session() as session:
        from fleetflow.persistence.models import Host

        for host in session.query(Host):
            fillers[host.uuid] = {rc: capacity_of(rec) for rc, rec in host.inventory.items()}
    consumers = {}
    for host_uuid, amounts in fillers.items():
        consumer = str(uuid.uuid4())
        consumers[consumer] = host_uuid
        placement.claim(consumer, {host_uuid: amounts}, "filler", "filler")
    return conf, database, placement, consumers


class Recorder:
    """A submit that records when each admitted flow was handed over."""

    def __init__(self):
        self.times: list[float] = []
        self.event = threading.Event()

    def __call__(self, flow_name, flow_kwargs, **options):
        self.times.append(time.perf_counter())
        self.event.set()
        return options.get("flow_id") or str(uuid.uuid4())


def queue_requests(ops, count: int, start: int) -> None:
    from fleetflow.services.reservations import ReservationRequest

    for i in range(start, start + count):
        n = 1 + i % 4
        ops.reserve(ReservationRequest(
            tenant_id=f"t{i % 10}", user_id="u", flavor_ref="m1.small", image_ref="cirros",
            min_count=n, max_count=n, when_full=states.WHEN_FULL_QUEUE))


def pass_cost(conf, database, ops, repeat: int) -> tuple[float, float, int]:
    from fleetflow.services.queue import admission

    times, cpu, examined = [], [], 0
    memo = admission.Memo()  # as an admitter keeps it between its passes
    admission.run_pass(conf, database, ops, memo=memo)
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        result = admission.run_pass(conf, database, ops, memo=memo)
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        examined = result.examined
        assert not result.admitted
    return statistics.median(times), statistics.median(cpu), examined


def latency(conf, database, ops, recorder, placement, consumers, repeat: int) -> list[float]:
    from fleetflow.services.queue.admitter import Admitter

    admitter = Admitter(conf, database, ops, "bench").start()
    figures = []
    try:
        time.sleep(0.5)  # the admitter's first look: nothing fits
        for consumer in list(consumers)[:repeat]:
            recorder.event.clear()
            placement.release(consumer)
            t0 = time.perf_counter()
            if not recorder.event.wait(10):
                raise SystemExit("no admission within 10 s")
            figures.append(recorder.times[-1] - t0)
            time.sleep(0.2)
    finally:
        admitter.stop()
    return figures


def main() -> None:
    from fleetflow.services.reservations import ReservationOps

    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--sizes", default="100,1000,10000")
    parser.add_argument("--latency-queued", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--db", default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workdir:
        conf, database, placement, consumers = build(workdir, args.hosts, args.db)
        recorder = Recorder()
        ops = ReservationOps(conf, database, submit=recorder)
        queued = 0
        print(f"fleet: {args.hosts} hosts, full; scan_depth {conf.queue.scan_depth}")
        for size in sorted(int(s) for s in args.sizes.split(",")):
            if args.latency_queued and queued < args.latency_queued <= size:
                queue_requests(ops, args.latency_queued - queued, queued)
                queued = args.latency_queued
                figures = latency(conf, database, ops, recorder, placement, consumers,
                                  args.repeat)
                print(f"latency at {queued} queued: delete -> admitted flow submitted: "
                      f"median {statistics.median(figures) * 1000:.0f} ms, "
                      f"max {max(figures) * 1000:.0f} ms ({len(figures)} deletes)")
                queued -= len(figures)  # those were admitted
            queue_requests(ops, size - queued, queued + len(recorder.times))
            queued = size
            cost, cpu, examined = pass_cost(conf, database, ops, args.repeat)
            print(f"one pass at {size} queued: {cost * 1000:.1f} ms, CPU {cpu * 1000:.1f} ms "
                  f"(examined {examined}; median of {args.repeat})")
        database.engine.dispose()
    os.sync()


if __name__ == "__main__":
    main()
