"""Every osc-placement command family, with the real ``openstack`` client, against /placement.

Providers (a tree), inventories, resource classes, traits, aggregates, allocations, usages
and allocation candidates: each command as an operator types it, its output parsed.
"""

from __future__ import annotations

import json
import os
import uuid

import pytest

pytestmark = pytest.mark.slow


@pytest.fixture
def osc(live_server, openstack_command):
    """``osc(*args, version="1.39", parse=True)``: run ``openstack``, the JSON it printed."""
    def run(*args, version="1.39", parse=True):
        command = ["--os-auth-type", "admin_token", "--os-token", "admin",
                   "--os-endpoint", f"{live_server}/placement",
                   "--os-placement-api-version", version, *args]
        done = openstack_command.run(command + (["-f", "json"] if parse else []),
                                     env=dict(os.environ, OS_CLOUD=""))
        assert done.returncode == 0, f"{' '.join(args)}: {done.stderr}"
        return json.loads(done.stdout) if parse else done.stdout

    return run


def test_providers_inventories_classes_traits_aggregates(osc):
    compute = osc("resource", "provider", "create", "cn1")
    numa = osc("resource", "provider", "create", "cn1-numa0", "--parent-provider",
               compute["uuid"])
    assert numa["root_provider_uuid"] == compute["uuid"]
    renamed = osc("resource", "provider", "set", numa["uuid"], "--name", "cn1-numa-0",
                  "--parent-provider", compute["uuid"])
    assert renamed["name"] == "cn1-numa-0"
    tree = osc("resource", "provider", "list", "--in-tree", compute["uuid"])
    assert sorted(p["name"] for p in tree) == ["cn1", "cn1-numa-0"]

    osc("resource", "class", "create", "CUSTOM_FPGA", parse=False)
    assert "CUSTOM_FPGA" in {c["name"] for c in osc("resource", "class", "list")}
    assert osc("resource", "class", "show", "CUSTOM_FPGA")["name"] == "CUSTOM_FPGA"
    osc("resource", "provider", "inventory", "set", numa["uuid"], "--resource", "VCPU=8",
        "--resource", "CUSTOM_FPGA=2", "--resource", "MEMORY_MB:allocation_ratio=1.5",
        "--resource", "MEMORY_MB=4096")
    inventories = {i["resource_class"]: i for i in
                   osc("resource", "provider", "inventory", "list", numa["uuid"])}
    assert set(inventories) == {"VCPU", "CUSTOM_FPGA", "MEMORY_MB"}
    assert inventories["MEMORY_MB"]["allocation_ratio"] == 1.5
    osc("resource", "provider", "inventory", "class", "set", numa["uuid"], "CUSTOM_FPGA",
        "--total", "4")
    shown = osc("resource", "provider", "inventory", "show", numa["uuid"], "CUSTOM_FPGA")
    assert shown["total"] == 4
    osc("resource", "provider", "inventory", "delete", numa["uuid"], "--resource-class",
        "CUSTOM_FPGA", parse=False)
    osc("resource", "class", "delete", "CUSTOM_FPGA", parse=False)
    assert "CUSTOM_FPGA" not in {c["name"] for c in osc("resource", "class", "list")}

    osc("trait", "create", "CUSTOM_FAST", parse=False)
    assert osc("trait", "list", "--name", "startswith:CUSTOM_") == [{"name": "CUSTOM_FAST"}]
    osc("resource", "provider", "trait", "set", numa["uuid"], "--trait", "CUSTOM_FAST",
        "--trait", "HW_CPU_X86_AVX2")
    traits = osc("resource", "provider", "trait", "list", numa["uuid"])
    assert sorted(t["name"] for t in traits) == ["CUSTOM_FAST", "HW_CPU_X86_AVX2"]
    assert osc("trait", "list", "--associated") == [{"name": "CUSTOM_FAST"},
                                                   {"name": "HW_CPU_X86_AVX2"}]
    osc("resource", "provider", "trait", "delete", numa["uuid"], parse=False)
    osc("trait", "delete", "CUSTOM_FAST", parse=False)

    aggregate = str(uuid.uuid4())
    generation = osc("resource", "provider", "show", compute["uuid"])["generation"]
    osc("resource", "provider", "aggregate", "set", compute["uuid"], "--aggregate",
        aggregate, "--generation", str(generation))
    listed = osc("resource", "provider", "aggregate", "list", compute["uuid"])
    assert [a["uuid"] for a in listed] == [aggregate]
    members = osc("resource", "provider", "list", "--aggregate-uuid", aggregate)
    assert [p["name"] for p in members] == ["cn1"]

    osc("resource", "provider", "delete", numa["uuid"], parse=False)
    osc("resource", "provider", "delete", compute["uuid"], parse=False)
    assert osc("resource", "provider", "list") == []


def test_allocations_usages_and_candidates(osc):
    host = osc("resource", "provider", "create", "host-1")
    osc("resource", "provider", "inventory", "set", host["uuid"], "--resource", "VCPU=8",
        "--resource", "MEMORY_MB=4096")
    consumer, project, user = (str(uuid.uuid4()) for _ in range(3))
    osc("resource", "provider", "allocation", "set", consumer, "--allocation",
        f"rp={host['uuid']},VCPU=2,MEMORY_MB=512", "--project-id", project, "--user-id",
        user, "--consumer-type", "INSTANCE", version="1.38")
    shown = osc("resource", "provider", "allocation", "show", consumer, version="1.38")
    assert [(s["resource_provider"], s["resources"]) for s in shown] == [
        (host["uuid"], {"VCPU": 2, "MEMORY_MB": 512})]
    usage = {u["resource_class"]: u["usage"] for u in
             osc("resource", "provider", "usage", "show", host["uuid"])}
    assert usage == {"VCPU": 2, "MEMORY_MB": 512}
    totals = {u["resource_class"]: u["usage"] for u in
              osc("resource", "usage", "show", project, "--user-id", user, version="1.9")}
    assert totals == {"VCPU": 2, "MEMORY_MB": 512}
    fits = osc("allocation", "candidate", "list", "--resource", "VCPU=6")
    assert [c["resource provider"] for c in fits] == [host["uuid"]]
    assert osc("allocation", "candidate", "list", "--resource", "VCPU=7") == []
    osc("resource", "provider", "allocation", "unset", consumer, "--provider",
        host["uuid"], "--resource-class", "MEMORY_MB", version="1.38")
    shown = osc("resource", "provider", "allocation", "show", consumer, version="1.38")
    assert [s["resources"] for s in shown] == [{"VCPU": 2}]
    osc("resource", "provider", "allocation", "delete", consumer, parse=False)
    assert osc("resource", "provider", "allocation", "show", consumer) == []
