"""The console in a real browser: the fleet, a reservation's graph, a paused evacuation,
and a member kept off the fleet page. Screenshots go to docs/images/ when asked
(FLEETFLOW_CONSOLE_SCREENSHOTS=1)."""

from __future__ import annotations

import os
import pathlib

import requests

from tests.console.conftest import ADMIN, DEMO

DOCS_IMAGES = pathlib.Path(__file__).resolve().parents[2] / "docs" / "images"


def _screenshot(page, name: str) -> None:
    if os.environ.get("FLEETFLOW_CONSOLE_SCREENSHOTS"):
        DOCS_IMAGES.mkdir(exist_ok=True)
        page.screenshot(path=str(DOCS_IMAGES / name), full_page=True)


def test_an_administrator_lands_on_the_fleet_and_sees_its_128_hosts(served, page):
    page.goto(f"{served}/console/?project=admin&roles=admin")
    page.wait_for_selector(".host")
    assert page.url.endswith("#/fleet")
    assert page.locator(".host").count() == 128
    assert page.locator(".host.up").count() == 128
    _screenshot(page, "console-fleet.png")
    page.locator(".host").first.click()
    page.wait_for_selector("h2:has-text('Host ')")
    assert page.locator("button[data-set-state='maintenance']").count() == 1


def test_a_reservation_is_watched_to_active_with_its_graph_all_green(served, page):
    answer = requests.post(f"{served}/v2/demo/reservations", headers=DEMO, timeout=30, json={
        "reservation": {"name": "watched", "count": 3, "flavor_ref": "m1.tiny",
                        "image_ref": "cirros"}})
    assert answer.status_code == 202, answer.text
    rid = answer.json()["reservation"]["id"]
    page.goto(f"{served}/console/?project=demo&roles=member#/reservation/{rid}")
    page.wait_for_selector("#status .state-ACTIVE")
    page.wait_for_selector("#flow-state .state-SUCCESS")
    states = page.locator("#flow-graph .atom").evaluate_all(
        "nodes => nodes.map(n => n.dataset.state)")
    # The lifecycle, schedule, claim, finish and three instances' chains.
    assert len(states) > 3 * 2 and set(states) == {"SUCCESS"}
    _screenshot(page, "console-flow-graph.png")


def _server_ids(served, rid):
    answer = requests.get(f"{served}/v2/demo/servers?reservation_id={rid}", headers=DEMO,
                          timeout=30)
    return {s["id"]: s for s in answer.json()["servers"]}


def test_a_paused_evacuation_is_resumed_from_the_console(served, page):
    import time

    group = requests.post(f"{served}/v2/demo/groups", headers=DEMO, timeout=30, json={
        "group": {"name": "apart", "policies": ["anti-affinity"]}}).json()["group"]
    rid = requests.post(f"{served}/v2/demo/reservations", headers=DEMO, timeout=30, json={
        "reservation": {"name": "pair", "count": 2, "flavor_ref": "m1.tiny",
                        "image_ref": "cirros", "group_id": group["id"]}}).json()[
        "reservation"]["id"]
    deadline = time.monotonic() + 60
    while requests.get(f"{served}/v2/demo/reservations/{rid}", headers=DEMO,
                       timeout=30).json()["reservation"]["status"] != "ACTIVE":
        assert time.monotonic() < deadline
        time.sleep(0.2)
    hosts = {}
    for sid in _server_ids(served, rid):
        shown = requests.get(f"{served}/v2/demo/servers/{sid}", headers=ADMIN, timeout=30)
        hosts[sid] = shown.json()["server"]["host"]
    (moved, source), (other, target) = hosts.items()
    # The only target holds the other member of the group: no room, the evacuation pauses.
    answer = requests.post(f"{served}/v2/admin/evacuations", headers=ADMIN, timeout=30, json={
        "evacuation": {"hosts": [source], "mode": "cold",
                       "target_hosts": [target], "on_error": "pause"}})
    assert answer.status_code == 202, answer.text
    eid = answer.json()["evacuation"]["id"]
    page.goto(f"{served}/console/?project=admin&roles=admin#/evacuation/{eid}")
    page.wait_for_selector("#status .state-PAUSED")
    # Make room, then resume from the console, through its confirmation.
    assert requests.delete(f"{served}/v2/demo/servers/{other}", headers=DEMO,
                           timeout=30).status_code in (202, 204)
    page.click("button[data-evac='resume']")
    page.click("#confirm-ok")
    page.wait_for_selector("#status .state-DONE")
    shown = requests.get(f"{served}/v2/demo/servers/{moved}", headers=ADMIN, timeout=30)
    assert shown.json()["server"]["host"] == target


def test_a_member_cannot_see_the_fleet_page(served, page):
    page.goto(f"{served}/console/?project=demo&roles=member#/fleet")
    refused = page.wait_for_selector("#refused")
    assert refused.text_content().startswith("403")
    assert page.locator(".host").count() == 0
    assert "fleet" not in page.locator("#nav").text_content()
