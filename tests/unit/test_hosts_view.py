"""The opaque ids and the hiding of place names (api/hosts_view.py), without an app."""

from __future__ import annotations

import hashlib

import pytest

from fleetflow.api.hosts_view import HostView, opaque_id


def test_the_id_is_novas_host_id():
    # Nova: hashlib.sha224((project_id + host).encode('utf-8')).hexdigest()
    expected = hashlib.sha224(b"tenant-az1-r1-h01").hexdigest()

    assert opaque_id("tenant-a", "z1-r1-h01") == expected
    assert opaque_id("tenant-b", "z1-r1-h01") != expected
    assert opaque_id("tenant-a", None) is None and opaque_id("tenant-a", "") is None


def test_hidden_names_become_ids_and_only_whole_names_are_replaced():
    loads = []

    def fleet():
        loads.append(1)
        return frozenset({"host-10", "rack-a"})

    view = HostView(project_id="p", names_visible=False, load_names=fleet)

    text = view.text("host-1 refused; host-10 in rack-a and host-1.old kept. Not host-1.",
                     ["host-1"])

    assert text == (f"{opaque_id('p', 'host-1')} refused; {opaque_id('p', 'host-10')} in "
                    f"{opaque_id('p', 'rack-a')} and host-1.old kept. Not "
                    f"{opaque_id('p', 'host-1')}.")
    assert view.place("host-1") == view.host_id("host-1") and view.name("host-1") is None
    assert view.fault({"code": "X", "message": "boot failed on host-1", "host": "host-1"}) == {
        "code": "X", "message": f"boot failed on {opaque_id('p', 'host-1')}", "host": None}
    # A fault without a host still loses the fleet's names.
    assert view.fault({"code": "X", "message": "rack-a is dark"}) == {
        "code": "X", "message": f"{opaque_id('p', 'rack-a')} is dark"}
    assert loads == [1]


def test_visible_names_are_left_alone():
    view = HostView(project_id="p", names_visible=True,
                    load_names=lambda: pytest.fail("names loaded for nothing"))
    fault = {"code": "X", "message": "boot failed on host-1", "host": "host-1"}

    assert view.fault(fault) == fault and view.place("host-1") == "host-1"
    assert view.text("host-1", ["host-1"]) == "host-1"
    assert view.host_id("host-1") == opaque_id("p", "host-1")
