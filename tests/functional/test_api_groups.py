"""Server group routes in JSON and in XML."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from defusedxml import ElementTree as SafeET

from fleetflow.persistence import groups as group_rows
from fleetflow.persistence.models import ServerGroup

URL = "/v2/tenant-a/groups"
XML = "application/xml"
MEMBER = "0f0c8a34-5d1e-4c59-9a53-0d2f3e7d6a01"


def details(response) -> str:
    return " ".join(e["detail"] for e in response.json["errors"])


def group_count(db) -> int:
    with db.session() as session:
        return session.scalar(sa.select(sa.func.count()).select_from(ServerGroup))


@pytest.fixture
def create(client, member_headers):
    def _create(**fields):
        response = client.post(URL, json={"group": fields}, headers=member_headers)
        assert response.status_code == 201, response.json
        return response.json["group"]

    return _create


def add_member(db, group_id, instance_id=MEMBER, host="host-001"):
    with db.session() as session:
        group_rows.join(session, group_id, instance_id, host)


# -- JSON -------------------------------------------------------------------------


def test_create_answers_201_with_location_and_defaults(client, member_headers):
    response = client.post(URL, json={"group": {"name": "lb"}}, headers=member_headers)

    assert response.status_code == 201
    group = response.json["group"]
    assert response.headers["Location"].endswith(f"{URL}/{group['id']}")
    assert group["name"] == "lb" and group["tenant_id"] == "tenant-a"
    assert group["policies"] == [] and group["members"] == []
    assert group["scope"] == "host" and group["max_per_host"] is None
    assert group["metadata"] == {} and group["capabilities"] == {}


def test_create_with_every_attribute_and_show_it(client, member_headers, create):
    group = create(name="db", policies=["anti-affinity", "host-capabilities"], scope="rack",
                   max_per_host=2, metadata={"tier": "data"}, capabilities={"ssd": "true"},
                   tenant_id="tenant-a")

    shown = client.get(f"{URL}/{group['id']}", headers=member_headers).json["group"]
    assert shown == group
    assert shown["policies"] == ["anti-affinity", "host-capabilities"]
    assert shown["scope"] == "rack" and shown["max_per_host"] == 2
    assert shown["metadata"] == {"tier": "data"} and shown["capabilities"] == {"ssd": "true"}


@pytest.mark.parametrize("fields, named", [
    ({"members": [MEMBER]}, "'group.members'"),
    ({"id": MEMBER}, "'group.id'"),
    ({"policies": ["anti-affinity", "affinity"]}, "policies"),
    ({"policies": ["round-robin"]}, "policies"),
    ({"policies": ["host-capabilities"]}, "capabilities"),
    ({"scope": "planet"}, "'group.scope'"),
    ({"max_per_host": 0}, "'group.max_per_host'"),
    ({"metadata": {"k": {"nested": 1}}}, "'group.metadata.k.value'"),
    ({"tenant_id": "tenant-b"}, "'group.tenant_id'"),
    ({"colour": "red"}, "'group.colour'"),
])
def test_invalid_groups_are_400_naming_the_field(client, member_headers, db, fields, named):
    response = client.post(URL, json={"group": fields}, headers=member_headers)

    assert response.status_code == 400
    assert named in details(response)
    assert group_count(db) == 0


def test_members_are_read_only_and_explained(client, member_headers):
    response = client.post(URL, json={"group": {"members": []}}, headers=member_headers)

    assert "read-only" in details(response)


def test_list_is_the_tenants_groups_paginated(client, member_headers, make_headers, create,
                                              db):
    ids = [create(name=f"g{i}")["id"] for i in range(3)][::-1]
    with db.session() as session:
        group_rows.create(session, "tenant-b", "theirs", [])

    page = client.get(f"{URL}?limit=2", headers=member_headers).json
    assert [g["id"] for g in page["groups"]] == ids[:2]
    rest = client.get(page["links"][0]["href"], headers=member_headers).json
    assert [g["id"] for g in rest["groups"]] == ids[2:] and rest["links"] == []
    named = client.get(f"{URL}?name=g1", headers=member_headers).json["groups"]
    assert [g["name"] for g in named] == ["g1"]


def test_members_show_up_read_only(client, member_headers, create, db):
    group = create(name="web", policies=["anti-affinity"])
    add_member(db, group["id"])

    shown = client.get(f"{URL}/{group['id']}", headers=member_headers).json["group"]
    assert shown["members"] == [MEMBER]


def test_update_name_and_metadata_always(client, member_headers, create, db):
    group = create(name="web", policies=["anti-affinity"], metadata={"a": "1"})
    add_member(db, group["id"])

    response = client.put(f"{URL}/{group['id']}",
                          json={"group": {"name": "web2", "metadata": {"b": "2"}}},
                          headers=member_headers)

    assert response.status_code == 200
    updated = response.json["group"]
    assert updated["name"] == "web2" and updated["metadata"] == {"b": "2"}
    assert updated["policies"] == ["anti-affinity"] and updated["members"] == [MEMBER]


def test_policies_change_only_while_empty(client, member_headers, create, db):
    group = create(name="web", policies=["anti-affinity"])
    url = f"{URL}/{group['id']}"
    changed = client.put(url, json={"group": {"policies": ["affinity"]}},
                         headers=member_headers)
    assert changed.status_code == 200
    assert changed.json["group"]["policies"] == ["affinity"]

    add_member(db, group["id"])
    refused = client.put(url, json={"group": {"policies": ["soft-affinity"]}},
                         headers=member_headers)
    assert refused.status_code == 409
    assert client.put(url, json={"group": {"max_per_host": 3}},
                      headers=member_headers).status_code == 409
    shown = client.get(url, headers=member_headers).json["group"]
    assert shown["policies"] == ["affinity"] and shown["max_per_host"] is None


def test_putting_back_the_whole_group_with_unchanged_rules_works(client, member_headers,
                                                                 create, db):
    group = create(name="web", policies=["anti-affinity"], scope="rack", max_per_host=2)
    add_member(db, group["id"])
    document = {k: group[k] for k in ("policies", "scope", "max_per_host", "metadata",
                                      "capabilities", "tenant_id")}

    response = client.put(f"{URL}/{group['id']}",
                          json={"group": {**document, "name": "renamed"}},
                          headers=member_headers)

    assert response.status_code == 200, response.json
    assert response.json["group"]["name"] == "renamed"


def test_update_refuses_members_and_bad_policies(client, member_headers, create):
    group = create(name="web")
    url = f"{URL}/{group['id']}"

    members = client.put(url, json={"group": {"members": [MEMBER]}}, headers=member_headers)
    assert members.status_code == 400 and "'group.members'" in details(members)
    bad = client.put(url, json={"group": {"policies": ["nope"]}}, headers=member_headers)
    assert bad.status_code == 400 and "policies" in details(bad)


def test_delete_empty_group_only(client, member_headers, create, db):
    busy = create(name="busy")
    add_member(db, busy["id"])
    idle = create(name="idle")

    assert client.delete(f"{URL}/{busy['id']}", headers=member_headers).status_code == 409
    assert client.delete(f"{URL}/{idle['id']}", headers=member_headers).status_code == 204
    assert client.get(f"{URL}/{idle['id']}", headers=member_headers).status_code == 404
    assert client.get(f"{URL}/{busy['id']}", headers=member_headers).status_code == 200


def test_a_vcluster_owned_group_changes_only_with_its_cluster(client, member_headers,
                                                              create, db):
    owned = create(name="db/group-3")
    with db.session() as session:
        session.execute(sa.update(ServerGroup).where(ServerGroup.id == owned["id"])
                        .values(vcluster_id="vc-000000000001"))
    url = f"{URL}/{owned['id']}"

    for response in (client.put(url, json={"group": {"name": "x"}}, headers=member_headers),
                     client.delete(url, headers=member_headers)):
        assert response.status_code == 409
        assert "vc-000000000001" in details(response)
    assert client.get(url, headers=member_headers).json["group"]["name"] == "db/group-3"


def test_another_tenants_group_is_404(client, make_headers, create):
    group = create(name="mine")
    other = make_headers("tenant-b", "member", "reader")
    url = f"/v2/tenant-b/groups/{group['id']}"

    assert client.get(url, headers=other).status_code == 404
    assert client.put(url, json={"group": {"name": "x"}}, headers=other).status_code == 404
    assert client.delete(url, headers=other).status_code == 404
    assert client.get("/v2/tenant-b/groups", headers=other).json["groups"] == []


def test_unknown_group_is_404(client, member_headers):
    assert client.get(f"{URL}/not-a-uuid", headers=member_headers).status_code == 404
    assert client.get(f"{URL}/{MEMBER}", headers=member_headers).status_code == 404


def test_roles(client, reader_headers, admin_headers, create):
    group = create(name="web")

    assert client.get(f"{URL}/{group['id']}", headers=reader_headers).status_code == 200
    assert client.post(URL, json={"group": {}}, headers=reader_headers).status_code == 403
    assert client.put(f"{URL}/{group['id']}", json={"group": {"name": "x"}},
                      headers=reader_headers).status_code == 403
    assert client.delete(f"{URL}/{group['id']}", headers=reader_headers).status_code == 403
    assert client.put(f"{URL}/{group['id']}", json={"group": {"name": "x"}},
                      headers=admin_headers).status_code == 200


# -- XML --------------------------------------------------------------------------


def xml_headers(headers, body=False):
    extra = {"Accept": XML}
    if body:
        extra["Content-Type"] = XML
    return {**headers, **extra}


def test_show_in_xml(client, member_headers, create, db):
    group = create(name="db", policies=["anti-affinity", "host-capabilities"],
                   max_per_host=1, metadata={"tier": "data", "odd key<&>": "v\"1"},
                   capabilities={"ssd": "true"})
    add_member(db, group["id"])

    response = client.get(f"{URL}/{group['id']}", headers=xml_headers(member_headers))

    assert response.status_code == 200
    assert response.mimetype == XML
    assert "Accept" in response.headers["Vary"]
    root = SafeET.fromstring(response.data)
    assert root.tag == "group"
    assert root.get("id") == group["id"] and root.get("name") == "db"
    assert root.get("max_per_host") == "1" and root.get("tenant_id") == "tenant-a"
    assert [p.text for p in root.find("policies")] == ["anti-affinity", "host-capabilities"]
    assert {m.get("key"): m.text for m in root.find("metadata")} == {
        "tier": "data", "odd key<&>": "v\"1"}
    assert {c.get("key"): c.text for c in root.find("capabilities")} == {"ssd": "true"}
    assert [m.text for m in root.find("members")] == [MEMBER]


def test_list_in_xml(client, member_headers, create):
    create(name="a")
    create(name="b")

    root = SafeET.fromstring(client.get(f"{URL}?limit=1",
                                        headers=xml_headers(member_headers)).data)

    assert root.tag == "groups"
    assert [g.tag for g in root.findall("group")] == ["group"]
    (link,) = root.find("links")
    assert link.get("rel") == "next" and "marker=" in link.get("href")


def test_create_from_xml(client, member_headers):
    document = (b'<?xml version="1.0"?>'
                b'<group name="web" max_per_host="2" scope="rack">'
                b'<policies><policy>soft-anti-affinity</policy></policies>'
                b'<metadata><meta key="owner">ops</meta></metadata>'
                b'</group>')

    response = client.post(URL, data=document, headers=xml_headers(member_headers, True))

    assert response.status_code == 201, response.data
    root = SafeET.fromstring(response.data)
    assert root.get("name") == "web" and root.get("max_per_host") == "2"
    assert root.get("scope") == "rack"
    group = client.get(response.headers["Location"], headers=member_headers).json["group"]
    assert group["policies"] == ["soft-anti-affinity"] and group["max_per_host"] == 2
    assert group["metadata"] == {"owner": "ops"}


def test_xml_body_with_element_values_and_json_answer(client, member_headers):
    document = b"<group><name>web</name><policies/></group>"

    response = client.post(URL, data=document,
                           headers={**member_headers, "Content-Type": XML,
                                    "Accept": "application/json"})

    assert response.status_code == 201
    assert response.json["group"]["name"] == "web"


def test_update_from_xml(client, member_headers, create):
    group = create(name="web")
    document = b'<group name="api"><metadata><meta key="k">v</meta></metadata></group>'

    response = client.put(f"{URL}/{group['id']}", data=document,
                          headers=xml_headers(member_headers, True))

    assert response.status_code == 200
    root = SafeET.fromstring(response.data)
    assert root.get("name") == "api"
    assert root.find("metadata")[0].get("key") == "k"


def test_xml_members_are_refused_in_xml(client, member_headers, db):
    document = f"<group name='x'><members><member>{MEMBER}</member></members></group>"

    response = client.post(URL, data=document.encode(),
                           headers=xml_headers(member_headers, True))

    assert response.status_code == 400
    error = SafeET.fromstring(response.data).find("error")
    assert error.get("status") == "400" and "group.members" in error.get("detail")
    assert group_count(db) == 0


BILLION_LAUGHS = b"""<?xml version="1.0"?>
<!DOCTYPE lolz [
 <!ENTITY lol "lol">
 <!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
 <!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">
 <!ENTITY lol4 "&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;">
]>
<group name="&lol4;"/>"""

EXTERNAL_ENTITY = b"""<?xml version="1.0"?>
<!DOCTYPE group [<!ENTITY secret SYSTEM "file:///etc/passwd">]>
<group name="&secret;"/>"""


@pytest.mark.parametrize("document", [BILLION_LAUGHS, EXTERNAL_ENTITY],
                         ids=["billion-laughs", "external-entity"])
def test_malicious_xml_is_refused(client, member_headers, db, document):
    response = client.post(URL, data=document, headers=xml_headers(member_headers, True))

    assert response.status_code == 400
    error = SafeET.fromstring(response.data).find("error")
    assert "refused" in error.get("detail")
    assert group_count(db) == 0


@pytest.mark.parametrize("document, words", [
    (b"<group name='x'", "well-formed"),
    (b"<group><policies><rule>affinity</rule></policies></group>", "policy"),
    (b"<group><metadata><meta>no key</meta></metadata></group>", "key"),
])
def test_malformed_xml_is_400(client, member_headers, db, document, words):
    response = client.post(URL, data=document, headers=xml_headers(member_headers, True))

    assert response.status_code == 400
    assert words in SafeET.fromstring(response.data).find("error").get("detail")
    assert group_count(db) == 0


def test_errors_follow_the_accept_header(client, member_headers, make_headers):
    as_xml = client.get(f"{URL}/{MEMBER}", headers=xml_headers(member_headers))
    error = SafeET.fromstring(as_xml.data).find("error")
    assert as_xml.status_code == 404 and as_xml.mimetype == XML
    assert error.get("code") == "fleetflow.not_found"
    assert error.get("request_id") == as_xml.headers["X-OpenStack-Request-Id"]

    # Refused before the view runs (another tenant's path): XML all the same.
    foreign = client.get(URL, headers=xml_headers(make_headers("tenant-b", "member")))
    assert foreign.status_code == 403 and foreign.mimetype == XML

    as_json = client.get(f"{URL}/{MEMBER}", headers=member_headers)
    assert as_json.mimetype == "application/json"
    assert as_json.json["errors"][0]["code"] == "fleetflow.not_found"
