"""``GET /allocation_candidates`` at 1,000 resource providers: in-process and over HTTP.

    python bench/placement_candidates.py [--providers 1000] [--repeat 200] [--no-http]

A SQLite database in a temporary directory gets ``--providers`` providers: compute
hosts with VCPU (ratio 4.0), MEMORY_MB (2 GiB reserved, ratio 1.5) and DISK_GB
inventories, a tenth of them with a child provider (an SR-IOV NIC with
``SRIOV_NET_VF``), a few traits (AVX2 on half, AVX-512 on a tenth, a few disabled
hosts), one of four aggregates each, and three or four consumers per host (one
host in twenty full, so it drops out). Each query variant is then timed (median and p90 of
``--repeat``; the last variant with a claim on one host, untimed, before each
request, so the server must read that host again):

- in-process, through Flask's test client (the whole app: auth, policy,
  microversion, validation, search, JSON);
- over HTTP with keep-alive (one ``requests`` session) against a live
  ``fleetflow serve`` started on the same database in a scratch state directory
  (its one-host fleet adds a provider too small for the request).

Besides wall-clock median and p90, the mean CPU per request of the process that
answers it (this one in-process; the server's, from /proc, over HTTP), which a
machine shared with other work disturbs less.

Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

FLEET = """\
profiles:
  p: {inventory: {VCPU: {total: 1}, MEMORY_MB: {total: 1}, DISK_GB: {total: 1}}}
regions:
  - name: bench
    zones:
      - name: z
        racks:
          - {name: r, hosts: 1, profile: p}
"""
AGGREGATES = [str(uuid.UUID(int=0xA66 << 64 | i)) for i in range(4)]
AVX2, AVX512, DISABLED = "HW_CPU_X86_AVX2", "HW_CPU_X86_AVX512F", "COMPUTE_STATUS_DISABLED"
BASE = "resources=VCPU:1,MEMORY_MB:512,DISK_GB:10"
# Each request of this variant follows a claim on one host (not timed): the
# snapshot must read that host again.
AFTER_A_CLAIM = "plain, a claim before each"
# (label, microversion, query string)
VARIANTS = [
    ("plain", "1.29", BASE),
    ("plain", "1.36", BASE),
    ("plain", "1.39", BASE),
    ("required=AVX2", "1.39", f"{BASE}&required={AVX2}"),
    ("required=in:AVX2,AVX512F", "1.39", f"{BASE}&required=in:{AVX2},{AVX512}"),
    ("required=!DISABLED", "1.39", f"{BASE}&required=!{DISABLED}"),
    ("member_of=one aggregate", "1.39", f"{BASE}&member_of={AGGREGATES[0]}"),
    ("limit=10", "1.39", f"{BASE}&limit=10"),
    ("plain", "1.10", BASE),
    (AFTER_A_CLAIM, "1.39", BASE),
]
ADMIN = {"X-Auth-Token": "admin"}


def provider_uuid(i: int) -> str:
    return str(uuid.UUID(int=0xB0B << 64 | i))


def seed(database, providers: int) -> None:
    """The fleet described in the module doc, written in a few transactions."""
    import sqlalchemy as sa

    from fleetflow.persistence.placement import models
    from fleetflow.persistence.placement.store import PlacementStore

    rnd = random.Random(19)
    children = providers // 11  # one host in ten has a NIC: hosts + NICs == providers
    hosts = providers - children
    rp_rows, inventories, traits, aggregates = [], [], [], []
    for i in range(hosts):
        rp = provider_uuid(i)
        rp_rows.append({"uuid": rp, "name": f"compute-{i:05d}", "generation": 3,
                        "parent_provider_uuid": None, "root_provider_uuid": rp})
        for rc, total, reserved, ratio in (("VCPU", 32, 0, 4.0),
                                           ("MEMORY_MB", 131072, 2048, 1.5),
                                           ("DISK_GB", 1000, 10, 1.0)):
            inventories.append({"resource_provider_uuid": rp, "resource_class": rc,
                                "total": total, "reserved": reserved, "min_unit": 1,
                                "max_unit": total, "step_size": 1,
                                "allocation_ratio": ratio})
        names = {AVX2} if i % 2 else set()
        if i % 10 == 0:
            names.add(AVX512)
        if i % 50 == 7:
            names.add(DISABLED)
        traits += [{"resource_provider_uuid": rp, "trait": t} for t in sorted(names)]
        aggregates.append({"resource_provider_uuid": rp, "aggregate_uuid": AGGREGATES[i % 4]})
    for j in range(children):
        parent, rp = provider_uuid(j * 10), provider_uuid(hosts + j)
        rp_rows.append({"uuid": rp, "name": f"compute-{j * 10:05d}-nic", "generation": 1,
                        "parent_provider_uuid": parent, "root_provider_uuid": parent})
        inventories.append({"resource_provider_uuid": rp, "resource_class": "SRIOV_NET_VF",
                            "total": 16, "reserved": 0, "min_unit": 1, "max_unit": 16,
                            "step_size": 1, "allocation_ratio": 1.0})
    with database.session() as session:
        session.execute(sa.insert(models.Trait), [{"name": t} for t in (AVX2, AVX512,
                                                                        DISABLED)])
        session.execute(sa.insert(models.ResourceProvider), rp_rows[:hosts])
        session.execute(sa.insert(models.ResourceProvider), rp_rows[hosts:])
        session.execute(sa.insert(models.Inventory), inventories)
        session.execute(sa.insert(models.ProviderTrait), traits)
        session.execute(sa.insert(models.ProviderAggregate), aggregates)
    # Usage through the real claim path: most hosts partly used, one in twenty full.
    claims = {}
    for i in range(hosts):
        vcpus = 32 if i % 20 == 3 else rnd.randint(1, 16)  # 4 x 32 fills a host
        for _ in range(4 if i % 20 == 3 else 3):
            claims[str(uuid.uuid4())] = {provider_uuid(i): {
                "VCPU": vcpus, "MEMORY_MB": 4096, "DISK_GB": 20}}
    PlacementStore(database).claim_many(claims, "bench", "bench")


def summarize(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[int(len(ordered) * 0.9) - 1]


def claim_body(i: int) -> dict:
    return {"allocations": {provider_uuid(20 * (i % 40) + 1): {"resources": {"VCPU": 1}}},
            "project_id": "bench", "user_id": "bench", "consumer_generation": None,
            "consumer_type": "INSTANCE"}


def server_cpu(pid: int | None) -> float:
    """CPU seconds used so far by process ``pid`` (this one when None)."""
    if pid is None:
        return time.process_time()
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def time_requests(get, repeat: int, before=None, pid=None) -> tuple:
    """((median, p90) wall ms of ``get()``, each after ``before(i)`` (untimed); the
    candidate count it answered; the server's mean CPU ms per request)."""
    # Warm-up, and the answer's size. Only then is the body parsed: the client's
    # JSON decoding is not the server's time.
    count = len(json.loads(get())["allocation_requests"])
    samples, cpu = [], 0.0
    for i in range(repeat):
        if before is not None:
            before(i)
        cpu_began = server_cpu(pid)
        began = time.perf_counter()
        get()
        samples.append((time.perf_counter() - began) * 1000)
        cpu += server_cpu(pid) - cpu_began
    return summarize(samples), count, cpu / repeat * 1000


def in_process(conf, database, repeat: int) -> dict:
    from fleetflow.api.app import create_app
    from fleetflow.common import gc_policy

    client = create_app(conf, database=database).test_client()
    gc_policy.for_service()  # the collector settings of fleetflow serve
    results = {}
    for label, version, query in VARIANTS:
        headers = dict(ADMIN, **{"OpenStack-API-Version": f"placement {version}"})

        def get(query=query, headers=headers):
            response = client.get(f"/placement/allocation_candidates?{query}",
                                  headers=headers)
            assert response.status_code == 200, response.get_data(as_text=True)
            return response.get_data()

        def claim(i, headers=headers):
            response = client.put(f"/placement/allocations/{uuid.uuid4()}",
                                  json=claim_body(i), headers=headers)
            assert response.status_code == 204, response.get_data(as_text=True)
        results[(label, version)] = time_requests(
            get, repeat, claim if label == AFTER_A_CLAIM else None)
    return results


def over_http(directory: str, repeat: int) -> dict:
    import requests

    with open(os.path.join(directory, "fleet.yaml"), "w") as out:
        out.write(FLEET)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETFLOW_")}
    env.update({"FLEETFLOW_API_PORT": str(port),
                "FLEETFLOW_FLEET_FILE": os.path.join(directory, "fleet.yaml"),
                "FLEETFLOW_COMPUTE_SIMULATE": "false",
                "FLEETFLOW_CONDUCTOR_RECONCILE_INTERVAL": "0"})
    log = open(os.path.join(directory, "serve.log"), "wb")
    server = subprocess.Popen([sys.executable, "-m", "fleetflow.cli.main", "serve"],
                              cwd=directory, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}/placement"
    try:
        session = requests.Session()
        deadline = time.monotonic() + 120
        while True:
            if server.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("fleetflow serve did not start; see its log:\n"
                                 + open(os.path.join(directory, "serve.log")).read())
            try:
                session.get(f"{base}/", timeout=5)
                break
            except requests.ConnectionError:
                time.sleep(0.2)
        results = {}
        for label, version, query in VARIANTS:
            headers = dict(ADMIN, **{"OpenStack-API-Version": f"placement {version}"})

            def get(query=query, headers=headers):
                response = session.get(f"{base}/allocation_candidates?{query}",
                                       headers=headers, timeout=30)
                assert response.status_code == 200, response.text
                return response.content

            def claim(i, headers=headers):
                response = session.put(f"{base}/allocations/{uuid.uuid4()}",
                                       json=claim_body(i), headers=headers, timeout=30)
                assert response.status_code == 204, response.text
            results[(label, version)] = time_requests(
                get, repeat, claim if label == AFTER_A_CLAIM else None, server.pid)
        return results
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--providers", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--no-http", action="store_true", help="in-process only")
    args = parser.parse_args()

    from fleetflow.common import config
    from fleetflow.persistence.db import Database

    with tempfile.TemporaryDirectory() as tmp:
        state = os.path.join(tmp, "fleetflow-state")
        os.makedirs(state)
        conf = config.load(args=[], environ={})
        config.set_state_dir(conf, state)
        conf.set_override("policy_file", os.path.join(tmp, "policy.yaml"), group="api")
        database = Database.from_conf(conf)
        database.upgrade()
        seed(database, args.providers)
        local = in_process(conf, database, args.repeat)
        database.dispose()
        remote = {} if args.no_http else over_http(tmp, args.repeat)

    print(f"{args.providers} providers in SQLite; median / p90 of {args.repeat} requests\n")
    print("| query | microversion | candidates | in-process median / p90 (CPU) "
          "| HTTP keep-alive median / p90 (server CPU) |")
    print("| --- | --- | --- | --- | --- |")
    for label, version, _query in VARIANTS:
        (median, p90), count, cpu = local[(label, version)]
        http = "-"
        if remote:
            (h_median, h_p90), _count, h_cpu = remote[(label, version)]
            http = f"{h_median:.1f} / {h_p90:.1f} ms ({h_cpu:.1f} ms)"
        print(f"| {label} | {version} | {count} | {median:.1f} / {p90:.1f} ms "
              f"({cpu:.1f} ms) | {http} |")


if __name__ == "__main__":
    main()
