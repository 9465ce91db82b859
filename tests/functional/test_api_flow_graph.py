"""GET /v2/{tenant}/flows/{id}/graph: a flow's nesting from its factory, states from its atoms."""

from __future__ import annotations

import datetime as dt

import pytest

from fleetflow.engine import flow_graph


def nested_flow(count: int):
    """A line of: a task, ``count`` retried chains side by side, a two-task graph."""
    from taskflow import retry, task
    from taskflow.patterns import graph_flow, linear_flow, unordered_flow

    class Step(task.Task):
        def execute(self):
            return self.name

    class Needs(task.Task):
        def execute(self, first):
            return first

    flow = linear_flow.Flow("nested")
    flow.add(Step("begin"))
    side = unordered_flow.Flow("side")
    for index in range(count):
        chain = linear_flow.Flow(f"chain-{index}", retry=retry.Times(2, f"chain-{index}-retry"))
        chain.add(Step(f"chain-{index}-a"), Step(f"chain-{index}-b"))
        side.add(chain)
    graph = graph_flow.Flow("tail")
    graph.add(Step("g-first", provides="first"), Needs("g-second"))
    flow.add(side, graph)
    return flow


nested_flow.__qualname__ = "nested_flow"


@pytest.fixture
def nested(flow_engine):
    from fleetflow.engine.submit import submit
    from fleetflow.flows import registry

    if "graph-nested" not in registry.names():
        registry.register("graph-nested", nested_flow)
    flow_id = submit(flow_engine.board, flow_engine.backend, "graph-nested", {"count": 3},
                     owner_tenant="tenant-a")
    return flow_id


def test_a_pending_flow_shows_its_nesting(nested, client, member_headers):
    answer = client.get(f"/v2/tenant-a/flows/{nested}/graph", headers=member_headers)
    assert answer.status_code == 200, answer.json
    graph = answer.json["graph"]
    root = graph["root"]
    assert (graph["id"], graph["state"]) == (nested, "PENDING")
    assert (root["kind"], root["name"]) == ("linear", "nested")
    assert [c["name"] for c in root["children"]] == ["begin", "side", "tail"]
    assert root["edges"] == [["begin", "side"], ["side", "tail"]]
    side = root["children"][1]
    assert side["kind"] == "unordered" and side["edges"] == []
    chain = side["children"][0]
    assert chain["retry"]["kind"] == "retry" and chain["retry"]["name"] == "chain-0-retry"
    assert [a["kind"] for a in chain["children"]] == ["task", "task"]
    # Three chains of two tasks and a retry, none run yet.
    assert side["counts"] == {"PENDING": 9}
    tail = root["children"][2]
    assert tail["kind"] == "graph" and tail["edges"] == [["g-first", "g-second"]]


def test_a_finished_flow_is_all_success(nested, flow_engine, client, admin_headers):
    assert flow_engine.run_until(nested, "SUCCESS") == "SUCCESS"
    graph = client.get(f"/v2/admin/flows/{nested}/graph", headers=admin_headers).json["graph"]
    states = {node["name"]: node["state"] for _depth, node in flow_graph.walk(graph["root"])
              if node["kind"] in ("task", "retry")}
    assert len(states) == 1 + 3 * 3 + 2
    assert set(states.values()) == {"SUCCESS"}
    assert graph["root"]["counts"] == {"SUCCESS": 12}
    # The fleetflow engine (the default) keeps each task's times with its states.
    tasks = [node for _depth, node in flow_graph.walk(graph["root"]) if node["kind"] == "task"]
    for task in tasks:
        started = dt.datetime.fromisoformat(task["started_at"])
        ended = dt.datetime.fromisoformat(task["ended_at"])
        assert started <= ended and task["duration"] == pytest.approx(
            (ended - started).total_seconds(), abs=1e-3)
        assert task["reverted_at"] is None


def test_another_tenant_cannot_see_the_graph(nested, client, make_headers):
    other = make_headers("tenant-b", "member")
    answer = client.get(f"/v2/tenant-b/flows/{nested}/graph", headers=other)
    assert answer.status_code == 404
    assert answer.json["errors"][0]["status"] == 404
    forbidden = client.get(f"/v2/admin/flows/{nested}/graph", headers=other)
    assert forbidden.status_code == 403
