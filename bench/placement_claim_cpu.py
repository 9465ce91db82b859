"""Server-side CPU per placement claim, in-process through Flask's test client.

    python bench/placement_claim_cpu.py [--claims 200] [--rounds 7] [--profile 500]

Three hot providers in a fresh SQLite database; each claim is a new consumer at
microversion 1.39 with ``consumer_generation: null``, either ``PUT
/placement/allocations/{consumer}`` or a one-consumer ``POST /placement/allocations``.
Prints the median (and every round's) process CPU time per claim over ``--rounds``
rounds of ``--claims`` claims, the two kinds interleaved round by round. No
sockets: the figure is the whole app's work (auth, policy, microversion, schema,
the transaction), not the HTTP server's.

``--profile N`` instead runs N PUT claims under cProfile and prints the top
functions by their own time.

To compare two revisions, run it with each checkout first on ``PYTHONPATH``
(as package ``fleetflow``), alternating.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import tempfile
import time
import uuid

HEADERS = {"X-Auth-Token": "admin", "OpenStack-API-Version": "placement 1.39"}


def make_client(directory: str):
    from fleetflow.api.app import create_app
    from fleetflow.common import config
    from fleetflow.persistence.db import Database

    conf = config.load(args=[], environ={})
    config.set_state_dir(conf, directory)
    conf.set_override("policy_file", os.path.join(directory, "policy.yaml"), group="api")
    database = Database.from_conf(conf)
    database.upgrade()
    client = create_app(conf, database=database).test_client()
    providers = []
    for i in range(3):
        response = client.post("/placement/resource_providers", json={"name": f"hot-{i}"},
                               headers=HEADERS)
        rp = response.get_json()["uuid"]
        response = client.put(f"/placement/resource_providers/{rp}/inventories",
                              headers=HEADERS, json={
                                  "resource_provider_generation": 0,
                                  "inventories": {"VCPU": {"total": 1_000_000},
                                                  "MEMORY_MB": {"total": 1_000_000_000}}})
        assert response.status_code == 200, response.get_data(as_text=True)
        providers.append(rp)
    return client, providers, database


def claim_body(rp: str) -> dict:
    return {"allocations": {rp: {"resources": {"VCPU": 1, "MEMORY_MB": 512}}},
            "project_id": "bench", "user_id": "bench", "consumer_generation": None,
            "consumer_type": "INSTANCE"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--claims", type=int, default=200, help="claims per round")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--profile", type=int, default=0, metavar="N")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        client, providers, database = make_client(tmp)

        def put(i: int) -> None:
            response = client.put(f"/placement/allocations/{uuid.uuid4()}",
                                  json=claim_body(providers[i % 3]), headers=HEADERS)
            assert response.status_code == 204, response.get_data(as_text=True)

        def post(i: int) -> None:
            response = client.post("/placement/allocations", headers=HEADERS,
                                   json={str(uuid.uuid4()): claim_body(providers[i % 3])})
            assert response.status_code == 204, response.get_data(as_text=True)

        for i in range(20):  # warm-up: first-use imports and caches
            put(i)
            post(i)
        if args.profile:
            profiler = cProfile.Profile()
            profiler.runcall(lambda: [put(i) for i in range(args.profile)])
            pstats.Stats(profiler).sort_stats("tottime").print_stats(30)
            return
        rounds: dict[str, list[float]] = {"PUT /allocations/{c}": [], "POST /allocations": []}
        for _ in range(args.rounds):
            for samples, fn in zip(rounds.values(), (put, post), strict=True):
                began = time.process_time()
                for i in range(args.claims):
                    fn(i)
                samples.append((time.process_time() - began) / args.claims * 1000)
        database.dispose()
    print(f"CPU per claim, median of {args.rounds} rounds of {args.claims}\n")
    print("| request | median | rounds |")
    print("| --- | --- | --- |")
    for label, samples in rounds.items():
        print(f"| {label} | {statistics.median(samples):.2f} ms | "
              f"{', '.join(f'{s:.2f}' for s in samples)} |")


if __name__ == "__main__":
    main()
