"""Admin host routes beyond the catalog basics: effective state, instances, transitions,
the placement trait kept in step, and simulated failures.

test_api_catalog.py covers listing, paging and plain state changes.
"""

from __future__ import annotations

import datetime as dt

import pytest
import sqlalchemy as sa

from fleetflow.common import states
from fleetflow.compute.exceptions import HostDead
from fleetflow.persistence.models import Host, Instance, utcnow
from fleetflow.services.hosts import DISABLED_TRAIT, HostOps, sync_disabled_trait

HOSTS = "/v2/admin/hosts"


def details(response) -> str:
    return " ".join(e["detail"] for e in response.json["errors"])


def code(response) -> str:
    return response.json["errors"][0]["code"]


def update_host(db, name, **values):
    with db.session() as session:
        session.execute(sa.update(Host).where(Host.name == name).values(**values))


def host_row(db, name) -> Host:
    with db.session() as session:
        return session.scalars(sa.select(Host).where(Host.name == name)).one()


def listed(client, headers, query="") -> list[str]:
    response = client.get(f"{HOSTS}{query}", headers=headers)
    assert response.status_code == 200, response.json
    return [h["name"] for h in response.json["hosts"]]


def put_state(client, headers, name, state, reason=None):
    body = {"state": state} if reason is None else {"state": state, "reason": reason}
    return client.put(f"{HOSTS}/{name}", json={"host": body}, headers=headers)


# -- effective state --------------------------------------------------------------------


def test_a_silent_up_host_reads_down(client, admin_headers, sample_catalog, conf):
    stale = utcnow() - dt.timedelta(seconds=conf.compute.service_down_time + 5)
    update_host(sample_catalog, "host-001", heartbeat_at=stale)
    update_host(sample_catalog, "host-002", heartbeat_at=utcnow())
    # host-003 never reported: judged by its state alone.

    shown = client.get(f"{HOSTS}/host-001", headers=admin_headers).json["host"]

    assert shown["state"] == "down" and shown["heartbeat_at"]
    assert host_row(sample_catalog, "host-001").state == "up"
    assert listed(client, admin_headers, "?state=down") == ["host-001"]
    assert listed(client, admin_headers, "?state=up") == ["host-002", "host-003"]
    states_by_name = {h["name"]: h["state"] for h in client.get(
        HOSTS, headers=admin_headers).json["hosts"]}
    assert states_by_name == {"host-001": "down", "host-002": "up", "host-003": "up"}


def test_a_fresh_heartbeat_brings_it_back_up(client, admin_headers, sample_catalog, conf):
    stale = utcnow() - dt.timedelta(seconds=conf.compute.service_down_time + 5)
    update_host(sample_catalog, "host-001", heartbeat_at=stale)
    assert listed(client, admin_headers, "?state=down") == ["host-001"]

    update_host(sample_catalog, "host-001", heartbeat_at=utcnow())

    assert listed(client, admin_headers, "?state=down") == []
    assert client.get(f"{HOSTS}/host-001", headers=admin_headers).json["host"]["state"] == "up"


def test_operator_states_win_over_heartbeats(client, admin_headers, sample_catalog, conf):
    stale = utcnow() - dt.timedelta(seconds=conf.compute.service_down_time + 5)
    update_host(sample_catalog, "host-001", state="maintenance", heartbeat_at=stale)
    update_host(sample_catalog, "host-002", state="down", heartbeat_at=utcnow())

    assert listed(client, admin_headers, "?state=maintenance") == ["host-001"]
    assert listed(client, admin_headers, "?state=down") == ["host-002"]
    assert listed(client, admin_headers, "?state=up") == ["host-003"]


def test_state_filter_pages_on_the_effective_state(client, admin_headers, sample_catalog,
                                                   conf):
    stale = utcnow() - dt.timedelta(seconds=conf.compute.service_down_time + 5)
    update_host(sample_catalog, "host-002", heartbeat_at=stale)

    first = client.get(f"{HOSTS}?state=up&limit=1", headers=admin_headers).json
    assert [h["name"] for h in first["hosts"]] == ["host-001"]
    rest = client.get(first["links"][0]["href"], headers=admin_headers).json
    assert [h["name"] for h in rest["hosts"]] == ["host-003"] and rest["links"] == []


# -- instances and evacuation ------------------------------------------------------------


def add_instances(db, host, statuses):
    with db.session() as session:
        for index, status in enumerate(statuses):
            session.add(Instance(id=f"{host}-{index:04d}-{status}".lower()[:36],
                                 tenant_id="tenant-a", name=f"vm-{index}", host=host,
                                 status=status, flavor_id="11111111-1111-1111-1111-111111111111",
                                 image_id="33333333-3333-3333-3333-333333333333"))


def test_hosts_count_their_living_instances(client, admin_headers, sample_catalog):
    add_instances(sample_catalog, "host-001", [states.ACTIVE, states.ERROR, states.BUILDING,
                                               states.DELETED, states.REVERTED])
    add_instances(sample_catalog, "host-002", [states.DELETED])

    hosts = {h["name"]: h for h in client.get(HOSTS, headers=admin_headers).json["hosts"]}
    one = client.get(f"{HOSTS}/host-001", headers=admin_headers).json["host"]

    assert {name: h["instances"] for name, h in hosts.items()} == {
        "host-001": 3, "host-002": 0, "host-003": 0}
    assert one["instances"] == 3


def test_hosts_show_the_evacuation_holding_them(client, admin_headers, sample_catalog):
    update_host(sample_catalog, "host-002", evacuation_id="e-0123456789ab")

    hosts = {h["name"]: h for h in client.get(HOSTS, headers=admin_headers).json["hosts"]}

    assert hosts["host-002"]["evacuation_id"] == "e-0123456789ab"
    assert hosts["host-001"]["evacuation_id"] is None


# -- PUT transitions ------------------------------------------------------------------------


def test_a_held_host_cannot_be_set_up(client, admin_headers, sample_catalog):
    update_host(sample_catalog, "host-001", state="maintenance",
                evacuation_id="e-0123456789ab")

    refused = put_state(client, admin_headers, "host-001", "up", "done")

    assert refused.status_code == 409
    assert code(refused) == "EVACUATION_IN_PROGRESS"
    assert "e-0123456789ab" in details(refused)
    row = host_row(sample_catalog, "host-001")
    assert (row.state, row.evacuation_id) == ("maintenance", "e-0123456789ab")
    # Other states stay open to the operator while it is held.
    disabled = put_state(client, admin_headers, "host-001", "disabled", "broken fan")
    assert disabled.status_code == 200 and disabled.json["host"]["state"] == "disabled"


def test_a_held_host_that_is_up_may_be_set_up_again(client, admin_headers, sample_catalog):
    update_host(sample_catalog, "host-001", evacuation_id="e-0123456789ab")

    again = put_state(client, admin_headers, "host-001", "up", "still up")

    assert again.status_code == 200, again.json
    assert again.json["host"]["reason"] == "still up"


@pytest.mark.parametrize("first, then", [
    ("maintenance", "up"), ("down", "up"), ("disabled", "maintenance"), ("up", "down"),
    ("maintenance", "maintenance"), ("down", "down")])
def test_transitions_of_a_free_host(client, admin_headers, sample_catalog, first, then):
    assert put_state(client, admin_headers, "host-002", first).status_code == 200

    response = put_state(client, admin_headers, "host-002", then, f"to {then}")

    assert response.status_code == 200, response.json
    assert response.json["host"]["state"] == then
    assert host_row(sample_catalog, "host-002").state == then


def test_forced_down_is_immediate(client, admin_headers, sample_catalog):
    update_host(sample_catalog, "host-003", heartbeat_at=utcnow())

    response = put_state(client, admin_headers, "host-003", "down", "fenced by hand")

    assert response.json["host"]["state"] == "down"
    assert listed(client, admin_headers, "?state=down") == ["host-003"]


@pytest.mark.parametrize("reason", ["disk \x1b[2Jfailing", "line one\nline two", "tab\there",
                                    "bell\x07", "c1 \x9b"])
def test_a_reason_with_control_characters_is_a_400_naming_it(client, admin_headers,
                                                              sample_catalog, reason):
    response = put_state(client, admin_headers, "host-002", "maintenance", reason)

    assert response.status_code == 400, response.json
    assert "'host.reason'" in details(response) and "control characters" in details(response)
    assert host_row(sample_catalog, "host-002").state_reason is None


@pytest.mark.parametrize("url, root", [(f"{HOSTS}/host-001/evacuate", "evacuate"),
                                       ("/v2/admin/evacuations", "evacuation")])
def test_an_evacuation_reason_with_control_characters_is_a_400_naming_it(
        client, admin_headers, sample_catalog, url, root):
    body = {"reason": "gone\x1b]0;owned\x07"}
    if root == "evacuation":
        body["hosts"] = ["host-001"]

    response = client.post(url, json={root: body}, headers=admin_headers)

    assert response.status_code == 400, response.json
    assert f"'{root}.reason'" in details(response)


# -- the placement trait ----------------------------------------------------------------------


@pytest.fixture
def cloud_client(small_cloud, api_services, conf, db, app):
    """A client of an app on the simulated cloud (placement and compute included)."""
    return app.test_client()


def provider_traits(cloud, name) -> list[str]:
    return cloud.placement.store.get_traits(cloud.host_uuid(name))[1]


@pytest.mark.parametrize("state", ["maintenance", "down", "disabled"])
def test_a_host_that_is_not_up_is_disabled_in_placement(small_cloud, cloud_client,
                                                        admin_headers, state):
    name = "z1-r1-h01"
    before = provider_traits(small_cloud, name)
    assert DISABLED_TRAIT not in before

    response = put_state(cloud_client, admin_headers, name, state)

    assert response.status_code == 200, response.json
    assert sorted(provider_traits(small_cloud, name)) == sorted([*before, DISABLED_TRAIT])
    assert DISABLED_TRAIT not in provider_traits(small_cloud, "z1-r1-h02")

    back = put_state(cloud_client, admin_headers, name, "up")
    assert back.status_code == 200
    assert sorted(provider_traits(small_cloud, name)) == sorted(before)


def test_setting_the_same_state_again_repairs_the_trait(small_cloud, cloud_client,
                                                        admin_headers):
    name = "z1-r2-h01"
    put_state(cloud_client, admin_headers, name, "maintenance")
    store = small_cloud.placement.store
    generation, traits = store.get_traits(small_cloud.host_uuid(name))
    store.set_traits(small_cloud.host_uuid(name), generation,
                     [t for t in traits if t != DISABLED_TRAIT])

    again = put_state(cloud_client, admin_headers, name, "maintenance")

    assert again.status_code == 200
    assert provider_traits(small_cloud, name).count(DISABLED_TRAIT) == 1


def test_disabled_hosts_get_no_allocation_candidates(small_cloud, cloud_client,
                                                     admin_headers):
    put_state(cloud_client, admin_headers, "z1-r1-h01", "disabled")
    candidates = small_cloud.placement.store.list_providers(
        resources={"VCPU": 1}, required=[f"!{DISABLED_TRAIT}"])

    names = {p["name"] for p in candidates}
    assert "z1-r1-h01" not in names and "z1-r1-h02" in names


def test_trait_sync_retries_a_lost_generation_race():
    from fleetflow.persistence.placement.errors import ProviderGenerationConflict

    class RacyStore:
        def __init__(self):
            self.generation, self.traits, self.losses = 3, ["HW_CPU_X86_AVX2"], 1

        def get_traits(self, _uuid):
            return self.generation, list(self.traits)

        def set_traits(self, _uuid, generation, traits):
            if self.losses:
                self.losses -= 1
                self.generation += 1  # someone else wrote first
                raise ProviderGenerationConflict("lost")
            assert generation == self.generation
            self.traits = list(traits)

    store = RacyStore()

    assert sync_disabled_trait(store, "rp", disabled=True) is True
    assert store.traits == [DISABLED_TRAIT, "HW_CPU_X86_AVX2"] and store.losses == 0


def test_a_host_without_provider_still_changes_state(sample_catalog, conf, db):
    from fleetflow.persistence.placement.store import PlacementStore

    ops = HostOps(conf, db, PlacementStore(db))

    assert ops.set_state("host-001", "maintenance", "no provider")["state"] == "maintenance"


# -- simulate ---------------------------------------------------------------------------------


def test_simulate_kills_and_revives_a_simulated_host(small_cloud, cloud_client, admin_headers,
                                                     db):
    name = "z1-r2-h02"
    url = f"{HOSTS}/{name}/simulate"

    dead = cloud_client.post(url, json={"simulate": {"dead": True}}, headers=admin_headers)

    assert dead.status_code == 200, dead.json
    assert dead.json["host"]["name"] == name and dead.json["faults"]["dead"] is True
    with pytest.raises(HostDead):
        small_cloud.compute.ping(name)
    # The operator's state is not the simulation's business.
    assert host_row(db, name).state == "up"

    alive = cloud_client.post(url, json={"simulate": {"dead": False}}, headers=admin_headers)

    assert alive.status_code == 200 and alive.json["faults"]["dead"] is False
    assert small_cloud.compute.ping(name)["alive"] is True
    # Twice the same is fine.
    again = cloud_client.post(url, json={"simulate": {"dead": False}}, headers=admin_headers)
    assert again.status_code == 200


def test_simulate_refusals(small_cloud, cloud_client, admin_headers, member_headers):
    url = f"{HOSTS}/z1-r1-h01/simulate"

    forbidden = cloud_client.post(url, json={"simulate": {"dead": True}},
                                  headers=member_headers)
    unknown = cloud_client.post(f"{HOSTS}/z9-r9-h99/simulate",
                                json={"simulate": {"dead": True}}, headers=admin_headers)
    no_flag = cloud_client.post(url, json={"simulate": {}}, headers=admin_headers)
    extra = cloud_client.post(url, json={"simulate": {"dead": True, "slow": 1}},
                              headers=admin_headers)

    assert forbidden.status_code == 403
    assert unknown.status_code == 404 and "z9-r9-h99" in details(unknown)
    assert no_flag.status_code == 400 and "'simulate.dead'" in details(no_flag)
    assert extra.status_code == 400 and "'simulate.slow'" in details(extra)
    assert small_cloud.compute.ping("z1-r1-h01")["alive"] is True


class AgentStub:
    """The hosts' RPC client, answering ping with ``answer``; records set_faults."""

    def __init__(self, answer):
        self.answer, self.faults = answer, []

    def ping(self, host, timeout=None):
        return dict(self.answer, host=host)

    def set_faults(self, host, timeout=None, **faults):
        self.faults.append((host, faults))
        return {"dead": faults.get("dead", False)}


def stub_client(conf, db, answer):
    from fleetflow.api.app import create_app

    agent = AgentStub(answer)
    app = create_app(conf, database=db, services={"hosts": HostOps(conf, db, None, agent)})
    return app.test_client(), agent


def test_a_real_host_is_not_simulated(conf, db, sample_catalog, admin_headers):
    client, agent = stub_client(conf, db, {"alive": True, "simulated": False})

    response = client.post(f"{HOSTS}/host-001/simulate", json={"simulate": {"dead": True}},
                           headers=admin_headers)

    assert response.status_code == 404 and code(response) == "NOT_SIMULATED"
    assert agent.faults == []


def test_an_agent_that_does_not_say_is_simulated(conf, db, sample_catalog, admin_headers):
    client, agent = stub_client(conf, db, {"alive": True})

    response = client.post(f"{HOSTS}/host-001/simulate", json={"simulate": {"dead": True}},
                           headers=admin_headers)

    assert response.status_code == 200
    assert agent.faults == [("host-001", {"dead": True})]


# -- who may ---------------------------------------------------------------------------------


@pytest.mark.parametrize("method, url, body", [
    ("get", HOSTS, None),
    ("get", f"{HOSTS}/host-001", None),
    ("put", f"{HOSTS}/host-001", {"host": {"state": "down"}}),
    ("post", f"{HOSTS}/host-001/simulate", {"simulate": {"dead": True}}),
])
def test_host_routes_are_for_administrators(client, member_headers, reader_headers,
                                            sample_catalog, method, url, body):
    for headers in (member_headers, reader_headers):
        response = getattr(client, method)(url, json=body, headers=headers)
        assert response.status_code == 403
    assert host_row(sample_catalog, "host-001").state == "up"
