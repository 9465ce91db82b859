"""Property: on random small fleets every placement keeps capacity and the group rule,
and the one greedy pass places as many instances as the fleet can possibly take."""

from collections import Counter, defaultdict

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleetflow.scheduler import (
    CloudSnapshot,
    GroupSpec,
    HostState,
    NoValidHost,
    RequestSpec,
    schedule,
)

GROUPS = [None, ("anti-affinity", "host"), ("anti-affinity", "rack"), ("anti-affinity", "zone"),
          ("affinity", "host"), ("affinity", "rack"), ("affinity", "zone"),
          ("soft-anti-affinity", "rack"), ("soft-affinity", "host"),
          ("network-proximity", "host"), ("network-proximity+anti-affinity", "host")]


@st.composite
def fleets(draw):
    count = draw(st.integers(0, 12))
    hosts = []
    for i in range(count):
        vcpu = draw(st.integers(0, 8))
        mem = draw(st.integers(0, 4))
        hosts.append(HostState(
            f"h{i}", uuid=f"u{i}", state=draw(st.sampled_from(["up", "up", "up", "down"])),
            region="r", zone=f"z{draw(st.integers(0, 1))}", rack=f"k{draw(st.integers(0, 2))}",
            capabilities={"color": draw(st.sampled_from(["blue", "red"]))},
            capacity={"VCPU": vcpu, "MEMORY_MB": mem},
            used={"VCPU": draw(st.integers(0, vcpu)), "MEMORY_MB": draw(st.integers(0, mem))},
            recent_failures=draw(st.integers(0, 1))))
    return CloudSnapshot(hosts)


@st.composite
def requests(draw, snapshot):
    max_count = draw(st.integers(1, 10))
    min_count = draw(st.integers(1, max_count))
    group = draw(st.sampled_from(GROUPS))
    group_spec = None
    if group:
        names = [h.name for h in snapshot.hosts]
        members = draw(st.lists(st.sampled_from(names), max_size=3)) if names else []
        group_spec = GroupSpec(policies=group[0].split("+"), scope=group[1],
                               max_per_host=draw(st.sampled_from([None, 1, 2])),
                               member_hosts=members)
    capabilities = draw(st.sampled_from([{}, {"color": "blue"}, {"color": "!= blue"}]))
    return RequestSpec(min_count=min_count, max_count=max_count, capabilities=capabilities,
                       resources={"VCPU": draw(st.integers(1, 3)),
                                  "MEMORY_MB": draw(st.integers(0, 1))},
                       group=group_spec)


def fit(host, resources, extra=None):
    used = extra or host.used
    return min((host.capacity.get(rc, 0) - used.get(rc, 0)) // n for rc, n in resources.items())


def eligible(spec, snapshot):
    want = spec.capabilities.get("color")
    return [h for h in snapshot.hosts if h.state == "up" and fit(h, spec.resources) > 0
            and (want is None or (h.capabilities["color"] == "blue") == (want == "blue"))]


def rule_of(spec):
    """(affinity scope or None, anti-affinity scope, limit or None) of the request."""
    group = spec.group
    if group is None:
        return None, "host", None
    policies = set(group.policies)
    affinity = "rack" if "network-proximity" in policies else (
        group.scope if "affinity" in policies else None)
    if "affinity" in policies and "network-proximity" in policies:
        affinity = group.scope if group.scope == "host" else "rack"
    anti = "anti-affinity" in policies
    return affinity, group.scope if anti else "host", (group.max_per_host or 1) if anti else None


def most_that_fit(spec, snapshot):
    """What an optimal placement could take: independent of the scheduler's algorithm."""
    affinity, anti_scope, limit = rule_of(spec)
    members = Counter(snapshot.by_name[m].domain(anti_scope) for m in spec.group.member_hosts
                      ) if spec.group else Counter()
    parts = defaultdict(lambda: defaultdict(int))
    for host in eligible(spec, snapshot):
        parts[host.domain(affinity) if affinity else None][host.domain(anti_scope)] += fit(
            host, spec.resources)
    if affinity and spec.group.member_hosts:
        allowed = {snapshot.by_name[m].domain(affinity) for m in spec.group.member_hosts}
        parts = {d: p for d, p in parts.items() if d in allowed}
    totals = [sum(min(room, max(0, limit - members[sub])) if limit else room
                  for sub, room in subs.items()) for subs in parts.values()]
    return max(totals, default=0)


def check_rule(spec, snapshot, hosts):
    affinity, anti_scope, limit = rule_of(spec)
    if affinity:
        domains = {snapshot.by_name[h].domain(affinity) for h in hosts}
        assert len(domains) == 1
        if spec.group.member_hosts:
            assert domains <= {snapshot.by_name[m].domain(affinity)
                               for m in spec.group.member_hosts}
    if limit:
        members = Counter(snapshot.by_name[m].domain(anti_scope) for m in spec.group.member_hosts)
        placed = Counter(snapshot.by_name[h].domain(anti_scope) for h in hosts)
        for domain, count in placed.items():
            assert members[domain] + count <= limit


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_placements_respect_capacity_group_rule_and_place_the_most(data):
    snapshot = data.draw(fleets())
    spec = data.draw(requests(snapshot))
    best = most_that_fit(spec, snapshot)
    try:
        placement = schedule(spec, snapshot, alternates=2)
    except NoValidHost:
        assert best < spec.min_count
        return
    hosts = [p.host for p in placement.instances]
    assert spec.min_count <= len(hosts) == min(spec.max_count, best)
    allowed = {h.name for h in eligible(spec, snapshot)}
    assert set(hosts) <= allowed
    # Capacity: the original usage plus every primary fits on every host.
    per_host = Counter(hosts)
    final = {}
    for name, count in per_host.items():
        host = snapshot.by_name[name]
        final[name] = {rc: host.used.get(rc, 0) + n * count for rc, n in spec.resources.items()}
        assert all(final[name][rc] <= host.capacity.get(rc, 0) for rc in spec.resources)
    check_rule(spec, snapshot, hosts)
    # Alternates: fit given every primary, and swapping one in keeps the rule.
    for i, item in enumerate(placement.instances):
        assert item.host not in item.alternates and len(set(item.alternates)) == len(
            item.alternates) <= 2
        for alt in item.alternates:
            assert alt in allowed
            assert fit(snapshot.by_name[alt], spec.resources,
                       final.get(alt, snapshot.by_name[alt].used)) >= 1
            check_rule(spec, snapshot, hosts[:i] + [alt] + hosts[i + 1:])
