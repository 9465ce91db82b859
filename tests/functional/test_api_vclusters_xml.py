"""/v2/{tenant_id}/vclusters in XML: the examples of docs/vcluster.md in, the same shape out.

The small cloud's ``vclusters`` service posts its jobs to ``small_cloud.posted``;
:func:`settle` runs them on TaskFlow's serial engine, as a conductor would. The
last test sends the two servers apart with their volumes to the embedded cloud of
``fleetflow serve`` (conductor threads, the SQL jobboard) and polls until it settles.
"""

from __future__ import annotations

import threading
import time

import pytest
import sqlalchemy as sa
import taskflow.engines
import yaml
from defusedxml import ElementTree as SafeET

from fleetflow.flows import registry
from fleetflow.persistence.models import VCluster

URL = "/v2/tenant-a/vclusters"
XML = "application/xml"

# A server with its volume: the first example of docs/vcluster.md, as written there.
SERVER_WITH_VOLUME = (b'<vcluster name="db"><instances><instance name="db-server-1" type="server">'
            b'<spec imageRef="cirros" flavorRef="1"/></instance><instance name="db-vol-1" '
            b'type="volume"><spec size="10" volume_type="ssd"/></instance></instances>'
            b'<groupings><grouping name="group-1"><membersRef><member>db-server-1</member>'
            b'<member>db-vol-1</member></membersRef><spec rule="affinity"/></grouping>'
            b'</groupings></vcluster>')


def _server(name: str) -> str:
    return (f'<instance name="{name}" type="server">'
            '<spec imageRef="cirros" flavorRef="m1.small"/></instance>')


def _volume(name: str) -> str:
    return f'<instance name="{name}" type="volume"><spec size="10"/></instance>'


def _grouping(name: str, members: list[str], rule: str) -> str:
    refs = "".join(f"<member>{m}</member>" for m in members)
    return (f'<grouping name="{name}"><membersRef>{refs}</membersRef>'
            f'<spec rule="{rule}"/></grouping>')


# Two servers apart, each with its volume beside it (the second example of docs/vcluster.md).
TWO_SERVERS_APART = ('<?xml version="1.0" encoding="UTF-8"?>\n<vcluster name="db2"><instances>'
            + _server("db-server-1") + _volume("db-vol-1") + _server("db-server-2")
            + _volume("db-vol-2") + "</instances><groupings>"
            + _grouping("group-1", ["db-server-1", "db-vol-1"], "affinity")
            + _grouping("group-2", ["db-server-2", "db-vol-2"], "affinity")
            + _grouping("group-3", ["db-server-1", "db-server-2"], "anti-affinity")
            + _grouping("group-4", ["db-vol-1", "db-vol-2"], "anti-affinity")
            + "</groupings></vcluster>").encode()


def settle(cloud) -> None:
    while cloud.posted:
        flow_name, kwargs, store = cloud.posted.pop(0)
        engine = taskflow.engines.load(registry.build(flow_name, **kwargs),
                                       store=dict(store or {}), engine="serial")
        try:
            engine.run()
        except Exception:  # noqa: BLE001 - a reverted flow raises; its state says so
            pass


def xml_headers(headers: dict, body: bool = True) -> dict:
    return {**headers, "Accept": XML, **({"Content-Type": XML} if body else {})}


def vcluster_count(db) -> int:
    with db.session() as session:
        return session.scalar(sa.select(sa.func.count()).select_from(VCluster))


def error_detail(response) -> str:
    assert response.mimetype == XML
    return " ".join(e.get("detail") for e in SafeET.fromstring(response.data).iter("error"))


@pytest.fixture
def post_xml(small_cloud, client, member_headers):
    def _post(document: bytes, url: str = URL, headers=None):
        return client.post(url, data=document, headers=xml_headers(headers or member_headers))

    return _post


@pytest.fixture
def show_xml(small_cloud, client, member_headers):
    """Run what was posted, then GET the cluster in XML; its root element."""
    def _show(url: str):
        settle(small_cloud)
        response = client.get(url, headers=xml_headers(member_headers, body=False))
        assert response.status_code == 200 and response.mimetype == XML
        return SafeET.fromstring(response.data)

    return _show


def members(root) -> dict:
    return {i.get("name"): i for i in root.find("instances").findall("instance")}


def groupings(root) -> dict:
    return {g.get("name"): g for g in root.find("groupings").findall("grouping")}


def test_a_server_with_its_volume_in_xml_builds_and_shows_in_xml(post_xml, show_xml):
    response = post_xml(SERVER_WITH_VOLUME)

    assert response.status_code == 202 and response.mimetype == XML
    accepted = SafeET.fromstring(response.data)
    assert accepted.tag == "vcluster" and accepted.get("status") == "PENDING"
    assert accepted.find("links/link").get("href") == response.headers["Location"]
    root = show_xml(response.headers["Location"])
    assert root.get("status") == "ACTIVE" and root.get("name") == "db"
    assert root.get("id") == accepted.get("id")
    found = members(root)
    assert found["db-server-1"].get("type") == "server"
    assert found["db-server-1"].get("host").startswith("z1-")
    assert found["db-vol-1"].get("backend").endswith("-shared")
    assert found["db-vol-1"].get("attached_to") == "db-server-1"
    group = groupings(root)["group-1"]
    assert group.get("satisfied") == "true" and group.get("rule") == "affinity"
    assert [m.text for m in group.find("membersRef")] == ["db-server-1", "db-vol-1"]
    domains = {d.get("key"): d.text for d in group.find("domains").findall("domain")}
    assert domains == {"db-server-1": found["db-server-1"].get("host"),
                       "db-vol-1": found["db-vol-1"].get("backend")}
    progress = root.find("progress")
    assert (progress.get("total"), progress.get("active")) == ("2", "2")


def test_two_servers_apart_with_their_volumes_in_xml_keep_every_grouping(post_xml, show_xml, client,
                                                      member_headers):
    response = post_xml(TWO_SERVERS_APART)

    assert response.status_code == 202, response.data
    root = show_xml(response.headers["Location"])
    assert root.get("status") == "ACTIVE"
    found = members(root)
    assert found["db-server-1"].get("host") != found["db-server-2"].get("host")
    assert found["db-vol-1"].get("backend") != found["db-vol-2"].get("backend")
    assert {name: g.get("satisfied") for name, g in groupings(root).items()} == {
        f"group-{i}": "true" for i in (1, 2, 3, 4)}
    # The same cluster in JSON.
    shown = client.get(response.headers["Location"], headers=member_headers)
    assert shown.mimetype == "application/json"
    assert [m["name"] for m in shown.json["vcluster"]["instances"]] == list(found)


def test_element_values_capabilities_and_a_json_answer(small_cloud, client, member_headers):
    document = (b"<vcluster><name>gpu</name><instances><instance><name>a</name>"
                b"<type>server</type><spec><imageRef>cirros</imageRef><flavorRef>1</flavorRef>"
                b'<capabilities><capability key="gpu">true</capability></capabilities>'
                b"</spec></instance></instances></vcluster>")

    response = client.post(URL, data=document, headers={**member_headers,
                                                         "Content-Type": XML,
                                                         "Accept": "application/json"})

    assert response.status_code == 202 and response.mimetype == "application/json"
    vcluster_id = response.json["vcluster"]["id"]
    settle(small_cloud)
    view = client.get(f"{URL}/{vcluster_id}", headers=member_headers).json["vcluster"]
    assert view["name"] == "gpu" and view["status"] == "ACTIVE"
    # Only rack r1's hosts have a GPU.
    assert view["instances"][0]["host"].startswith("z1-r1-")


def test_dry_run_and_list_in_xml(post_xml, client, member_headers, small_cloud, db):
    verdict = post_xml(TWO_SERVERS_APART, url=f"{URL}?dry_run=true")

    assert verdict.status_code == 200
    root = SafeET.fromstring(verdict.data)
    assert root.tag == "dry_run" and root.get("fits") == "true"
    assert all(i.get("host") or i.get("backend") for i in members(root).values())
    assert vcluster_count(db) == 0

    post_xml(SERVER_WITH_VOLUME)
    newest = post_xml(TWO_SERVERS_APART)
    page = client.get(f"{URL}?limit=1", headers=xml_headers(member_headers, body=False))
    listed = SafeET.fromstring(page.data)
    assert listed.tag == "vclusters"
    (item,) = listed.findall("vcluster")
    assert item.get("id") == SafeET.fromstring(newest.data).get("id")  # newest first
    assert item.find("progress").get("total") == "4"
    assert listed.find("links/link").get("rel") == "next"


def test_add_rename_and_remove_in_xml(post_xml, show_xml, client, member_headers):
    url = post_xml(SERVER_WITH_VOLUME).headers["Location"]
    show_xml(url)
    document = ("<vcluster><instances>" + _server("db-server-2") + "</instances><groupings>"
                + _grouping("apart", ["db-server-1", "db-server-2"], "anti-affinity")
                + "</groupings></vcluster>").encode()

    added = post_xml(document, url=f"{url}/instances")

    assert added.status_code == 202, added.data
    assert SafeET.fromstring(added.data).get("status") == "UPDATING"
    root = show_xml(url)
    assert root.get("status") == "ACTIVE"
    assert groupings(root)["apart"].get("satisfied") == "true"

    renamed = client.put(url, data=b'<vcluster name="db-renamed"/>',
                         headers=xml_headers(member_headers))
    assert renamed.status_code == 200
    assert SafeET.fromstring(renamed.data).get("name") == "db-renamed"

    removed = client.delete(f"{url}/instances/db-server-2",
                            headers=xml_headers(member_headers, body=False))
    assert removed.status_code == 202 and removed.mimetype == XML
    assert "db-server-2" not in members(show_xml(url))


def test_idempotency_key_compares_xml_and_json_bodies_alike(post_xml, client,
                                                            member_headers):
    import json

    headers = {**member_headers, "Idempotency-Key": "k-1"}
    first = post_xml(SERVER_WITH_VOLUME, headers=headers)
    body = {"name": "db", "instances": [
        {"name": "db-server-1", "type": "server",
         "spec": {"imageRef": "cirros", "flavorRef": "1"}},
        {"name": "db-vol-1", "type": "volume", "spec": {"size": 10, "volume_type": "ssd"}}],
        "groupings": [{"name": "group-1", "membersRef": ["db-server-1", "db-vol-1"],
                       "spec": {"rule": "affinity"}}]}

    replay = client.post(URL, data=json.dumps({"vcluster": body}),
                         headers={**headers, "Content-Type": "application/json"})
    other = post_xml(SERVER_WITH_VOLUME.replace(b'size="10"', b'size="11"'), headers=headers)

    assert replay.status_code == 202 and replay.headers["Idempotent-Replayed"] == "true"
    assert replay.json["vcluster"]["id"] == SafeET.fromstring(first.data).get("id")
    assert other.status_code == 422 and "instances" in error_detail(other)


BILLION_LAUGHS = b"""<?xml version="1.0"?>
<!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;&lol;">]>
<vcluster name="&lol2;"/>"""


@pytest.mark.parametrize("document, words", [
    (b'<vcluster name="db"', "well-formed"),
    (BILLION_LAUGHS, "refused"),
    (b'<vcluster name="db"><instances><server name="a"/></instances></vcluster>', "instance"),
    (b'<vcluster name="db"><instances><instance name="a" type="server"><spec imageRef="c" '
     b'flavorRef="1"><capabilities><capability>x</capability></capabilities></spec>'
     b"</instance></instances></vcluster>", "key"),
    (b'<vcluster name="db"><instances><instance name="v" type="volume"><spec size="ten"/>'
     b"</instance></instances></vcluster>", "'vcluster.instances.0.spec.size'"),
    (b'<vcluster name="db"><instances><instance name="v" type="volume"><spec/></instance>'
     b"</instances></vcluster>", "'vcluster.instances.0.spec'"),
    (b'<vcluster name="db"><instances/></vcluster>', "'vcluster.instances'"),
    (b'<vcluster name="db" colour="blue"><instances><instance name="v" type="volume">'
     b'<spec size="1"/></instance></instances></vcluster>', "'vcluster.colour'"),
    (b'<cluster name="db"/>', "'vcluster'"),
    (SERVER_WITH_VOLUME.replace(b"<member>db-vol-1</member>", b"<member>ghost</member>"), "ghost"),
])
def test_bad_xml_is_400_in_xml(post_xml, small_cloud, db, document, words):
    response = post_xml(document)

    assert response.status_code == 400
    assert words in error_detail(response)
    assert small_cloud.posted == [] and vcluster_count(db) == 0


def test_errors_answer_in_xml(small_cloud, client, member_headers):
    missing = client.get(f"{URL}/vc-000000000000",
                         headers=xml_headers(member_headers, body=False))

    assert missing.status_code == 404
    error = SafeET.fromstring(missing.data).find("error")
    assert error.get("code") == "fleetflow.not_found"
    assert error.get("request_id") == missing.headers["X-OpenStack-Request-Id"]


# -- fleetflow serve ----------------------------------------------------------------


@pytest.fixture
def served(make_conf, tmp_path):
    """The embedded cloud of ``fleetflow serve`` on two racks with a shared backend each."""
    from fleetflow.cli.serve import Cloud
    from fleetflow.compute import messaging

    doc = {"profiles": {"small": {"inventory": {
        "VCPU": {"total": 8, "allocation_ratio": 1.0},
        "MEMORY_MB": {"total": 16384, "allocation_ratio": 1.0},
        "DISK_GB": {"total": 200, "allocation_ratio": 1.0}}}},
        "rack_storage": {"capacity_gb": 1000, "volume_types": ["ssd"]},
        "regions": [{"name": "north-america", "zones": [{"name": "z1", "racks": [
            {"name": "r1", "hosts": 2, "profile": "small"},
            {"name": "r2", "hosts": 2, "profile": "small"}]}]}],
        "flavors": [{"id": "1", "name": "m1.small", "vcpus": 1, "ram_mb": 2048,
                     "disk_gb": 20}],
        "images": [{"id": "8a6f3b56-0bd6-4c4e-9a0e-5a4c1f0c7a01", "name": "cirros"}]}
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(yaml.safe_dump(doc))
    conf = make_conf(api={"port": 0}, conductor={"workers": 2}, fleet={"file": str(fleet)},
                     compute={"agent_processes": 0},
                     jobboard={"claim_expiry": 10, "keepalive_interval": 1.0})
    cloud = Cloud(conf).start()
    threading.Thread(target=cloud.serve_forever, daemon=True).start()
    yield cloud
    cloud.stop()
    messaging.forget_transport(conf)


def test_served_cloud_builds_and_deletes_two_servers_apart_with_their_volumes(served):
    client = served.server.app.test_client()
    headers = {"X-Project-Id": "tenant-a", "X-Roles": "member"}

    def poll(url: str, *wanted: str) -> dict:
        deadline = time.monotonic() + 120
        while True:
            body = client.get(url, headers=headers).json["vcluster"]
            if body["status"] in wanted:
                return body
            assert time.monotonic() < deadline, body
            time.sleep(0.1)

    response = client.post(URL, data=TWO_SERVERS_APART, headers={**headers, "Content-Type": XML})
    assert response.status_code == 202, response.data
    url = response.headers["Location"]
    view = poll(url, "ACTIVE", "ERROR", "REVERTED", "PAUSED")
    assert view["status"] == "ACTIVE", view["fault"]
    assert all(g["satisfied"] for g in view["groupings"]), view["groupings"]
    assert client.delete(url, headers=headers).status_code == 202
    assert poll(url, "DELETED", "ERROR", "PAUSED")["status"] == "DELETED"
