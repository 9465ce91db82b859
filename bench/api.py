"""API overhead: host listing pages and a host state change, through the WSGI app.

    python bench/api.py [--hosts 10000] [--limit 1000] [--repeat 5]
    python bench/api.py --http werkzeug,cheroot,waitress [--repeat 5]

Builds a fresh SQLite database in a temporary directory with ``--hosts`` hosts,
then times (wall and CPU, best and median of ``--repeat``) with Flask's test
client, which runs the whole app (auth, policy, validation, serialization)
without sockets:

- walking the whole host list in pages of ``--limit``;
- one page of 100 hosts filtered by region;
- one PUT of a host's state (validation, write, commit);
- an error answer (403 for a member on an admin route).

``--http`` serves the same app over sockets instead, once per HTTP server
named (werkzeug's threaded development server, what ``fleetflow serve``
ran before; cheroot, what it runs now; waitress), all listening at once,
and times the same cases through a keep-alive session, the servers
interleaved within each repeat, plus requests per second of 8 client
processes reading one host each over keep-alive connections. CPU is this
process's: the client and the server.
"""

from __future__ import annotations

import argparse
import http.client
import multiprocessing
import socket
import statistics
import tempfile
import threading
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


def serve(kind: str, app) -> str:
    """``app`` served by the HTTP server ``kind`` on a free port, in threads; its URL."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    port = sock.getsockname()[1]
    if kind == "werkzeug":
        import logging

        from werkzeug.serving import make_server

        # As under fleetflow serve (logging at WARNING): no line per request.
        logging.getLogger("werkzeug").setLevel(logging.WARNING)
        server = make_server("127.0.0.1", port, app, threaded=True, fd=sock.fileno())
        sock.close()
        run = server.serve_forever
    elif kind == "cheroot":
        from fleetflow.api.server import APIServer

        run = APIServer(app, sock, threads=16).serve_forever
    elif kind == "waitress":
        import waitress

        run = waitress.create_server(app, sockets=[sock], threads=16).run
    else:
        raise SystemExit(f"unknown server {kind!r}: werkzeug, cheroot or waitress")
    threading.Thread(target=run, daemon=True).start()
    return f"http://127.0.0.1:{port}"


def reader(port: int, requests_each: int, start, done) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port)
    start.wait()
    for _ in range(requests_each):
        conn.request("GET", "/v2/admin/hosts/host-00042", headers=ADMIN)
        response = conn.getresponse()
        response.read()
        assert response.status == 200, response.status
    done.put(True)


def readers_rate(url: str, clients: int = 8, requests_each: int = 200) -> float:
    """Requests per second of ``clients`` processes on keep-alive connections."""
    ctx = multiprocessing.get_context("fork")
    start, done = ctx.Event(), ctx.Queue()
    port = int(url.rsplit(":", 1)[1])
    procs = [ctx.Process(target=reader, args=(port, requests_each, start, done))
             for _ in range(clients)]
    for proc in procs:
        proc.start()
    time.sleep(0.3)
    began = time.perf_counter()
    start.set()
    for _ in procs:
        done.get(timeout=600)
    elapsed = time.perf_counter() - began
    for proc in procs:
        proc.join()
    return clients * requests_each / elapsed


def cases(get, put, limit: int, repeat: int) -> dict:
    """The four timed cases, through ``get(path, headers)`` and ``put(path, json)``."""
    def walk():
        path, pages, count = f"/v2/admin/hosts?limit={limit}", 0, 0
        while path:
            body = get(path, ADMIN)[1]
            pages, count = pages + 1, count + len(body["hosts"])
            path = ("/" + body["links"][0]["href"].split("/", 3)[3]) if body["links"] else None
        return f"{count} hosts, {pages} pages"

    def filtered():
        return f"{len(get('/v2/admin/hosts?region=europe&limit=100', ADMIN)[1]['hosts'])} hosts"

    states = iter(["maintenance", "up"] * repeat * 4)

    def update():
        body = {"host": {"state": next(states), "reason": "bench"}}
        return f"HTTP {put('/v2/admin/hosts/host-00042', body)}"

    def forbidden():
        member = {"X-Project-Id": "p", "X-Roles": "member"}
        return f"HTTP {get('/v2/admin/hosts?limit=1', member)[0]}"

    return {f"list all hosts, pages of {limit}": walk, "one page of 100, region filter": filtered,
            "PUT host state": update, "403 error answer": forbidden}


def main_http(app, servers: list[str], args) -> None:
    import requests

    urls = {kind: serve(kind, app) for kind in servers}
    sessions = {kind: requests.Session() for kind in servers}
    timed = {}
    for kind in servers:
        session, url = sessions[kind], urls[kind]

        def get(path, headers, session=session, url=url):
            response = session.get(url + path, headers=headers)
            return response.status_code, response.json()

        def put(path, body, session=session, url=url):
            return session.put(url + path, headers=ADMIN, json=body).status_code

        timed[kind] = cases(get, put, args.limit, args.repeat)
    print(f"{args.hosts} hosts in SQLite, over HTTP (keep-alive); best / median of "
          f"{args.repeat}, servers interleaved\n")
    print("| case | server | result | wall best | wall median | CPU best |")
    print("| --- | --- | --- | --- | --- | --- |")
    for case in timed[servers[0]]:
        walls = {kind: [] for kind in servers}
        cpus = {kind: [] for kind in servers}
        details = {}
        for _ in range(args.repeat):
            for kind in servers:
                wall, cpu = time.perf_counter(), time.process_time()
                details[kind] = timed[kind][case]()
                walls[kind].append(time.perf_counter() - wall)
                cpus[kind].append(time.process_time() - cpu)
        for kind in servers:
            print(f"| {case} | {kind} | {details[kind]} | {min(walls[kind]) * 1000:.1f} ms | "
                  f"{statistics.median(walls[kind]) * 1000:.1f} ms | "
                  f"{min(cpus[kind]) * 1000:.1f} ms |")
    rates = {kind: [] for kind in servers}
    for _ in range(args.repeat):
        for kind in servers:
            rates[kind].append(readers_rate(urls[kind]))
    for kind in servers:
        print(f"| GET one host, 8 client processes | {kind} | best "
              f"{max(rates[kind]):,.0f} req/s | | median {statistics.median(rates[kind]):,.0f} "
              "req/s | |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=10000)
    parser.add_argument("--limit", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--http", default=None,
                        help="comma-separated HTTP servers: werkzeug, cheroot, waitress")
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
        app = create_app(conf, database=db)
        if args.http:
            main_http(app, args.http.split(","), args)
            db.dispose()
            return
        client = app.test_client()

        def get(path, headers):
            response = client.get(path, headers=headers)
            return response.status_code, response.get_json()

        def put(path, body):
            return client.put(path, headers=ADMIN, json=body).status_code

        print(f"{args.hosts} hosts in SQLite; best / median of {args.repeat}\n")
        print("| case | result | wall best | wall median | CPU best |")
        print("| --- | --- | --- | --- | --- |")
        for label, fn in cases(get, put, args.limit, args.repeat).items():
            measure(label, fn, args.repeat)
        db.dispose()


if __name__ == "__main__":
    main()
