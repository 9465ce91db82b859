"""Who a request is, project- or system-scoped, under noauth and keystone."""

from fleetflow.api.auth import Identity, keystone_identity, noauth_identity

SYSTEM = {"OpenStack-System-Scope": "all"}


def test_noauth_system_scope_has_no_project():
    placement = noauth_identity({"X-Auth-Token": "user", "X-Roles": "admin", **SYSTEM},
                                "/placement/resource_providers")
    assert placement == Identity(None, "user", ("admin",), "all")
    v2 = noauth_identity({"X-User-Id": "op", "X-Roles": "admin", **SYSTEM}, "/v2/admin/hosts")
    assert v2 == Identity(None, "op", ("admin",), "all")


def test_noauth_a_project_wins_over_the_system_scope_header():
    found = noauth_identity({"X-Project-Id": "p", "X-Roles": "member", **SYSTEM}, "/v2/p/servers")
    assert found == Identity("p", None, ("member",))


def test_keystone_project_and_system_tokens():
    confirmed = {"X-Identity-Status": "Confirmed", "X-User-Id": "u", "X-Roles": "Reader"}
    assert keystone_identity(dict(confirmed, **{"X-Project-Id": "p"})) == Identity(
        "p", "u", ("reader",))
    assert keystone_identity(dict(confirmed, **SYSTEM)) == Identity(None, "u", ("reader",),
                                                                    "all")
    # Scoped to neither (a domain token, or none): fleetflow has no rule for it.
    assert keystone_identity(confirmed) is None
    assert keystone_identity({"X-Identity-Status": "Invalid", **SYSTEM}) is None
