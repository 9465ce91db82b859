"""flows/registry.py: factories by name, rebuildable from what TaskFlow saves."""

import pytest
from taskflow.engines import helpers as tf_helpers
from taskflow.persistence import models as tf_models

from fleetflow.common.exceptions import InvalidInput
from fleetflow.flows import registry


def test_build_makes_the_registered_flow_with_deterministic_names():
    flow = registry.build("toy-linear", count=3)
    names = [atom.name for atom, _ in flow.iter_nodes()]
    assert names == ["inst-0000-step", "inst-0001-step", "inst-0002-step"]
    again = registry.build("toy-linear", count=3)
    assert [atom.name for atom, _ in again.iter_nodes()] == names


def test_unknown_flow_name_is_invalid_input():
    with pytest.raises(InvalidInput):
        registry.build("no-such-flow")


def test_non_json_safe_arguments_are_refused():
    with pytest.raises(InvalidInput):
        registry.build("toy-linear", count=object())
    # A tuple would come back as a list on resume: a different flow.
    with pytest.raises(InvalidInput):
        registry.check_json_safe({"hosts": ("a", "b")})
    registry.check_json_safe({"hosts": ["a", "b"], "spec": {"vcpus": 2}})


def test_local_functions_and_lambdas_cannot_be_registered():
    def local_factory():
        return None

    with pytest.raises(TypeError):
        registry.register("local", local_factory)
    with pytest.raises(TypeError):
        registry.register("lambda", lambda: None)


def test_a_name_cannot_be_taken_by_another_factory():
    with pytest.raises(ValueError):
        registry.register("toy-linear", registry.rebuild)


def test_saved_factory_details_rebuild_the_same_flow():
    factory, args, _ = registry.factory_details("toy-linear")
    detail = tf_models.FlowDetail("toy-linear", uuid="f-1")
    tf_helpers.save_factory_details(detail, factory, args, {"count": 2, "fail_at": 1})
    assert detail.meta["factory"]["name"] == "fleetflow.flows.registry.rebuild"
    rebuilt = tf_helpers.flow_from_detail(detail)
    assert [a.name for a, _ in rebuilt.iter_nodes()] == ["inst-0000-step", "inst-0001-step"]


def test_rebuild_imports_the_factory_module_when_the_name_is_unknown(tmp_path, monkeypatch):
    (tmp_path / "late_flows.py").write_text(
        "from taskflow.patterns import linear_flow\n"
        "from fleetflow.flows import registry\n"
        "@registry.flow_factory('late-flow')\n"
        "def late(n):\n"
        "    return linear_flow.Flow(f'late-{n}')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "late-flow" not in registry.names()
    flow = registry.rebuild("late-flow", "late_flows", n=4)
    assert flow.name == "late-4"
    assert "late-flow" in registry.names()


def test_a_handed_over_flow_is_taken_once_by_rebuild():
    flow = registry.build("toy-linear", count=2)
    registry.hand_over("toy-linear", {"count": 2}, flow)
    other = registry.rebuild("toy-linear", "unused.module", count=3)
    assert other is not flow  # other arguments: built afresh
    assert registry.rebuild("toy-linear", "unused.module", count=2) is flow
    again = registry.rebuild("toy-linear", "unused.module", count=2)
    assert again is not flow
    assert [a.name for a, _ in again.iter_nodes()] == [a.name for a, _ in flow.iter_nodes()]


def test_only_the_last_handed_over_flows_are_kept():
    # Sizes no other test builds: the store is the process's, and a conductor
    # another test left running may take a hand-over of its own flow meanwhile.
    first = 71
    flows = {}
    for count in range(first, first + registry.HANDOVER_SLOTS + 1):
        flows[count] = registry.build("toy-linear", count=count)
        registry.hand_over("toy-linear", {"count": count}, flows[count])
    assert registry.rebuild("toy-linear", "unused.module", count=first) is not flows[first]
    for count in range(first + 1, first + registry.HANDOVER_SLOTS + 1):
        assert registry.rebuild("toy-linear", "unused.module", count=count) is flows[count]


def test_a_flow_saved_under_its_older_name_still_builds():
    # The reservation teardown was registered as "teardown": logbooks and jobs
    # saved before the rename name it so, and resume rebuilds by that name.
    from fleetflow.flows.provision import teardown

    kwargs = {"instance_ids": ["i-0", "i-1"], "reservation_id": "r-1"}
    assert registry.get("teardown") is teardown.teardown_flow
    assert "teardown" not in registry.names()
    assert "reservation-teardown" in registry.names()
    current = [a.name for a, _ in registry.build("reservation-teardown", **kwargs).iter_nodes()]
    assert [a.name for a, _ in registry.build("teardown", **kwargs).iter_nodes()] == current
    detail = tf_models.FlowDetail("teardown-r-1", uuid="f-old")
    tf_helpers.save_factory_details(detail, registry.rebuild,
                                    ["teardown", "fleetflow.flows.provision.teardown"], kwargs)
    rebuilt = tf_helpers.flow_from_detail(detail)
    assert [a.name for a, _ in rebuilt.iter_nodes()] == current


def test_an_alias_cannot_be_taken_by_another_factory():
    from fleetflow.flows.provision import teardown  # noqa: F401  (registers the alias)

    with pytest.raises(ValueError):
        registry.register("teardown", registry.rebuild)
    with pytest.raises(ValueError):
        registry.register("toy-other", registry.rebuild, aliases=("reservation-teardown",))
    assert "toy-other" not in registry.names()
