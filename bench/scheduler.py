"""Time the scheduler on generated fleets (no database: pure placement).

    python bench/scheduler.py [--repeat 5] [--alternates 2]

Cases: 1,000 instances onto 10,000 hosts with capabilities and anti-affinity
(max_per_host 1), which should take under 1 s; 5,000 instances spread on
10,000 hosts; 30 instances with rack affinity (network-proximity) plus
host anti-affinity (30 in one 40-host rack); 1,000 instances with soft-anti-affinity per rack.
Each case is run ``--repeat`` times and the best and median are printed.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from fleetflow.scheduler import CloudSnapshot, GroupSpec, HostState, RequestSpec, schedule


def make_fleet(hosts: int, seed: int = 1) -> CloudSnapshot:
    """A fleet of ``hosts`` in 2 regions x 4 zones, 40 hosts a rack, some used."""
    rng = random.Random(seed)
    states = []
    for i in range(hosts):
        rack = i // 40
        zone = rack % 8
        gpu = rack % 4 == 0
        capacity = {"VCPU": 128, "MEMORY_MB": 262144, "DISK_GB": 4000}
        used = {"VCPU": rng.randrange(0, 64), "MEMORY_MB": rng.randrange(0, 131072, 1024),
                "DISK_GB": rng.randrange(0, 2000, 10)}
        states.append(HostState(
            name=f"host-{i:05d}", uuid=f"00000000-0000-0000-0000-{i:012d}",
            region="north-america" if zone < 4 else "europe", zone=f"zone-{zone}",
            rack=f"rack-{rack:04d}",
            capabilities={"gpu": "true" if gpu else "false",
                          "sticker": rng.choice(["blue", "red", "green"]),
                          "cores": 64 if i % 3 else 32},
            capacity=capacity, used=used, recent_failures=1 if rng.random() < 0.01 else 0))
    return CloudSnapshot(states)


CASES = {
    "1000 on 10000, capabilities + anti-affinity (max_per_host 1)": (10_000, lambda: RequestSpec(
        count=1000, resources={"VCPU": 2, "MEMORY_MB": 4096, "DISK_GB": 40},
        capabilities={"region": "north-america", "cores": ">= 64"},
        group=GroupSpec(policies=["anti-affinity"], max_per_host=1))),
    "5000 on 10000, spread": (10_000, lambda: RequestSpec(
        count=5000, resources={"VCPU": 2, "MEMORY_MB": 4096, "DISK_GB": 40})),
    "30 on 10000, network-proximity + anti-affinity": (10_000, lambda: RequestSpec(
        count=30, resources={"VCPU": 2, "MEMORY_MB": 4096},
        group=GroupSpec(policies=["network-proximity", "anti-affinity"]))),
    "1000 on 10000, affinity (zone)": (10_000, lambda: RequestSpec(
        count=1000, resources={"VCPU": 2, "MEMORY_MB": 4096},
        group=GroupSpec(policies=["affinity"], scope="zone"))),
    "1000 on 10000, soft-anti-affinity (rack)": (10_000, lambda: RequestSpec(
        count=1000, resources={"VCPU": 2, "MEMORY_MB": 4096},
        group=GroupSpec(policies=["soft-anti-affinity"], scope="rack"))),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--alternates", type=int, default=2)
    args = parser.parse_args()
    fleets: dict[int, tuple[CloudSnapshot, float]] = {}
    for name, (size, make_spec) in CASES.items():
        if size not in fleets:
            start = time.perf_counter()
            fleets[size] = (make_fleet(size), time.perf_counter() - start)
            print(f"fleet of {size} hosts built in {fleets[size][1]:.3f} s")
        snapshot = fleets[size][0]
        times, cpu = [], []
        for _ in range(args.repeat):
            spec = make_spec()
            start, start_cpu = time.perf_counter(), time.process_time()
            placement = schedule(spec, snapshot, alternates=args.alternates)
            times.append(time.perf_counter() - start)
            cpu.append(time.process_time() - start_cpu)
        # CPU time too: on a shared machine the wall clock includes waiting for a core.
        print(f"{name}: placed {len(placement.instances)}, wall best {min(times):.3f} s / "
              f"median {statistics.median(times):.3f} s, CPU best {min(cpu):.3f} s "
              f"({args.repeat} runs)")


if __name__ == "__main__":
    main()
