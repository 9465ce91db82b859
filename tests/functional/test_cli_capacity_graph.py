"""``fleetflow capacity`` and ``fleetflow flows show ID --graph`` against a real API thread."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner

from fleetflow.cli.main import cli


@pytest.fixture
def run(live_server):
    def _run(*args):
        return CliRunner().invoke(cli, ["--url", live_server, *args], catch_exceptions=False)

    return _run


def test_capacity_by_rack_of_one_zone(small_cloud, run):
    small_cloud.boot("z1-r1-h01")
    result = run("capacity", "--zone", "z1", "--by", "rack")
    assert result.exit_code == 0, result.output
    rows = [line for line in result.output.splitlines() if "│" in line]
    fleet = next(r for r in rows if r.startswith("│ fleet "))
    assert "1/32" in fleet  # VCPU used/total of the four hosts
    racks = [r for r in rows if r.startswith("│ rack ")]
    assert len(racks) == 2 and any("/z1/r1" in r and "1/16" in r for r in racks)
    assert not any(r.startswith("│ host ") for r in rows)
    # The storage backends, one per rack, in their own table.
    assert "storage backends" in result.output
    assert sum(1 for r in rows if "-shared " in r and "/1000" in r) == 2

    by_host = json.loads(run("capacity", "--by", "host", "--json").output)
    hosts = [h for region in by_host["regions"] for zone in region["zones"]
             for rack in zone["racks"] for h in rack["hosts"]]
    assert {h["name"]: h["instances"] for h in hosts}["z1-r1-h01"] == 1


def test_capacity_refuses_a_member(small_cloud, run):
    result = run("capacity", "--project", "p1", "--roles", "member")
    assert result.exit_code == 1 and "403" in result.output


def test_flow_graph_as_a_tree_and_as_dot(flow_engine, run):
    from fleetflow.engine.submit import submit
    from fleetflow.flows import registry
    from fleetflow.tests.functional.test_api_flow_graph import nested_flow

    if "graph-nested" not in registry.names():
        registry.register("graph-nested", nested_flow)
    flow_id = submit(flow_engine.board, flow_engine.backend, "graph-nested", {"count": 2},
                     owner_tenant="tenant-a")
    assert flow_engine.run_until(flow_id, "SUCCESS") == "SUCCESS"

    tree = run("flows", "show", flow_id, "--graph")
    assert tree.exit_code == 0, tree.output
    lines = tree.output.splitlines()
    assert lines[1] == "linear nested  [SUCCESS 9]"
    # The retry first under its chain, the chain's tasks one level deeper than it.
    chain = lines.index("    linear chain-0  [SUCCESS 3]")
    assert lines[chain + 1].startswith("      retry chain-0-retry SUCCESS")
    # The fleetflow engine keeps each task's start and duration.
    assert re.fullmatch(r"      task chain-0-a SUCCESS started \S+ \(\d+\.\d{3} s\)",
                        lines[chain + 2]), lines[chain + 2]

    dot = run("flows", "show", flow_id, "--graph", "--format", "dot").output
    assert dot.startswith('digraph "graph-nested" {') and dot.rstrip().endswith("}")
    assert dot.count("subgraph cluster_") == 5  # nested, side, two chains, tail
    assert '"g-first" -> "g-second";' in dot
    # begin -> side: an edge into a cluster, drawn to its first atom, its head the box.
    assert '"begin" -> "chain-0-retry" [lhead=cluster_2];' in dot
    assert "fillcolor=palegreen" in dot and "fillcolor=white" not in dot

    member = run("flows", "show", flow_id, "--graph", "--json", "--project", "tenant-a",
                 "--roles", "member")
    assert json.loads(member.output)["root"]["name"] == "nested"
    assert run("flows", "show", flow_id, "--format", "dot").exit_code == 2
