"""``X-Auth-Token: PROJECT:ROLE[,ROLE]`` in noauth mode, and ``GET /v2/{tenant}/permissions``.

The token form is what the stock ``openstack`` client sends with ``--os-auth-type
admin_token``; the permissions route is what its ``fleet`` plugin asks to shape its help.
"""

from __future__ import annotations

import re

import pytest

from tests.functional.test_api_skeleton import assert_error


def _permissions(client, tenant, headers):
    response = client.get(f"/v2/{tenant}/permissions", headers=headers)
    assert response.status_code == 200, response.get_json()
    return response.get_json()["permissions"]


def test_a_project_role_token_is_that_identity(client, sample_catalog):
    member = {"X-Auth-Token": "tenant-a:member"}
    assert client.get("/v2/tenant-a/flavors", headers=member).status_code == 200
    # Another project's path, and an operator's route, are refused as for the headers.
    assert_error(client.get("/v2/tenant-b/flavors", headers=member), 403)
    assert_error(client.get("/v2/admin/hosts", headers=member), 403)
    admin = {"X-Auth-Token": "admin:admin,member"}
    assert client.get("/v2/admin/hosts", headers=admin).status_code == 200


@pytest.mark.parametrize("token", ["admin", ":member", "  "])
def test_a_token_without_a_project_is_no_identity(client, token):
    response = client.get("/v2/admin/hosts", headers={"X-Auth-Token": token})
    assert_error(response, 401, "fleetflow.unauthorized")
    assert "PROJECT:ROLE" in response.get_json()["errors"][0]["detail"]


def test_the_headers_win_over_a_token(client):
    headers = {"X-Auth-Token": "admin:admin", "X-Project-Id": "tenant-a",
               "X-Roles": "member"}
    assert _permissions(client, "tenant-a", headers)["roles"] == ["member"]
    assert_error(client.get("/v2/admin/hosts", headers=headers), 403)


def test_permissions_follow_the_roles(client):
    member = _permissions(client, "tenant-a", {"X-Auth-Token": "tenant-a:member"})
    assert member["project_id"] == "tenant-a" and member["roles"] == ["member"]
    assert {"reservations:create", "groups:delete", "flows:list"} <= set(member["allowed"])
    assert {"hosts:list", "evacuations:create", "flows:resume", "audit:run"} \
        <= set(member["denied"])
    assert not set(member["allowed"]) & set(member["denied"])

    reader = _permissions(client, "tenant-a", {"X-Auth-Token": "tenant-a:reader"})
    assert "reservations:list" in reader["allowed"]
    assert "reservations:create" in reader["denied"]

    admin = _permissions(client, "admin", {"X-Auth-Token": "admin:admin"})
    assert admin["denied"] == [] and "audit:run" in admin["allowed"]


def test_permissions_follow_the_policy_file(make_conf, db, tmp_path):
    from fleetflow.api.app import create_app

    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text('"reservations:create": "role:admin"\n')
    conf = make_conf()
    conf.set_override("policy_file", str(policy_file), group="api")
    client = create_app(conf, database=db).test_client()
    member = _permissions(client, "tenant-a", {"X-Auth-Token": "tenant-a:member"})
    assert "reservations:create" in member["denied"]


def test_permissions_of_another_project_are_refused(client):
    assert_error(client.get("/v2/tenant-b/permissions",
                            headers={"X-Auth-Token": "tenant-a:member"}), 403)


def test_a_caller_without_a_role_may_not_ask(client):
    assert_error(client.get("/v2/tenant-a/permissions", headers={"X-Auth-Token": "tenant-a:"}),
                 403)


OPERATORS_ONLY = re.compile(r"^/(placement|v2/admin)(/|$)")
#: Operations under those prefixes that a member may call: Placement's version documents.
OPEN_TO_ALL = {"GET /placement/"}


def test_a_member_is_refused_every_operators_and_placement_operation(client, member_headers):
    """Every documented operation of the operators' routes and Placement answers a
    member 403 whatever the request holds (which the API fuzzer counts on: it sends
    these only as an administrator)."""
    spec = client.get("/openapi.json").get_json()
    answers = {}
    for path, operations in spec["paths"].items():
        if not OPERATORS_ONLY.match(path):
            continue
        # 15 characters: the length a recovery id's converter asks for (any other fits).
        url = re.sub(r"{[^}]+}", "x" * 15, path)
        for method in set(operations) & {"get", "post", "put", "patch", "delete"}:
            for body in ({}, {"garbage": [1, None]}):
                response = client.open(url, method=method.upper(), json=body,
                                       headers=member_headers)
                answers.setdefault(f"{method.upper()} {path}", set()).add(
                    response.status_code)
    assert len(answers) >= 60
    refused = {op for op, codes in answers.items() if codes == {403}}
    assert set(answers) - refused == OPEN_TO_ALL, {
        op: codes for op, codes in answers.items() if op not in refused}
