"""plugin/flow_meta.py: fleetflow's options inside a flow detail's ``meta``."""

from fleetflow.plugin import flow_meta


def test_options_are_a_copy_and_empty_when_absent():
    meta = {flow_meta.META_KEY: {"on_error": "pause"}, "store": {"x": 1}}
    options = flow_meta.options(meta)
    options["paused"] = True
    assert meta[flow_meta.META_KEY] == {"on_error": "pause"}
    assert flow_meta.options(None) == {} and flow_meta.options({"store": {}}) == {}


def test_a_flow_is_paused_only_when_its_options_say_so():
    assert flow_meta.is_paused({flow_meta.META_KEY: {"paused": True, "paused_at": "a"}})
    assert not flow_meta.is_paused({flow_meta.META_KEY: {"on_error": "pause"}})
    assert not flow_meta.is_paused(None)


def test_with_options_replaces_fleetflows_options_and_keeps_taskflows_entries():
    meta = {flow_meta.META_KEY: {"paused": True}, "store": {"x": 1}}
    changed = flow_meta.with_options(meta, {"on_error": "revert"})
    assert changed == {flow_meta.META_KEY: {"on_error": "revert"}, "store": {"x": 1}}
    assert meta[flow_meta.META_KEY] == {"paused": True}
