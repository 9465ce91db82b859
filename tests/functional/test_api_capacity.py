"""GET /v2/admin/capacity and /metrics: the fleet's capacity added up, scraped counters."""

from __future__ import annotations


def test_capacity_adds_up_hosts_racks_and_the_fleet(small_cloud, client, admin_headers):
    host = "z1-r1-h01"
    small_cloud.boot(host)
    answer = client.get("/v2/admin/capacity", headers=admin_headers)
    assert answer.status_code == 200, answer.json
    fleet = answer.json["capacity"]
    assert fleet["host_count"] == 4 and fleet["instances"] == 1
    assert fleet["resources"]["VCPU"] == {"used": 1, "total": 32, "free": 31}
    [region] = fleet["regions"]
    [zone] = region["zones"]
    racks = {rack["name"]: rack for rack in zone["racks"]}
    assert racks["r1"]["resources"]["VCPU"]["used"] == 1
    assert racks["r2"]["resources"]["VCPU"]["used"] == 0
    hosts = {h["name"]: h for rack in racks.values() for h in rack["hosts"]}
    assert hosts[host]["instances"] == 1 and hosts[host]["state"] == "up"
    assert hosts[host]["resources"]["MEMORY_MB"] == {"used": 2048, "total": 16384,
                                                     "free": 14336}
    assert {b["scope"] for b in fleet["backends"]} == {"rack"}

    by_rack = client.get("/v2/admin/capacity?by=rack&zone=z1", headers=admin_headers).json
    assert all("hosts" not in rack
               for rack in by_rack["capacity"]["regions"][0]["zones"][0]["racks"])
    assert client.get("/v2/admin/capacity?zone=nowhere",
                      headers=admin_headers).json["capacity"]["host_count"] == 0


def test_capacity_is_for_operators(client, member_headers):
    answer = client.get("/v2/admin/capacity", headers=member_headers)
    assert answer.status_code == 403
    bad = client.get("/v2/admin/capacity?by=shelf", headers={
        "X-Project-Id": "admin", "X-Roles": "admin"})
    assert bad.status_code == 400


def test_metrics_count_api_requests_by_route(client, admin_headers):
    from prometheus_client.parser import text_string_to_metric_families

    def requests_of(route: str) -> float:
        text = client.get("/metrics").get_data(as_text=True)
        return sum(sample.value for family in text_string_to_metric_families(text)
                   for sample in family.samples
                   if sample.name == "fleetflow_api_requests_total"
                   and sample.labels["route"] == route and sample.labels["status"] == "403")

    before = requests_of("/v2/admin/capacity")
    for _ in range(2):
        client.get("/v2/admin/capacity", headers={"X-Project-Id": "p", "X-Roles": "member"})
    assert requests_of("/v2/admin/capacity") == before + 2
    answer = client.get("/metrics")
    assert answer.status_code == 200 and answer.mimetype == "text/plain"
    assert "fleetflow_api_request_seconds_bucket" in answer.get_data(as_text=True)


def test_the_console_page_needs_no_identity(client):
    page = client.get("/console/")
    assert page.status_code == 200 and b"<title>fleetflow" in page.data
    script = client.get("/console/app.js")
    assert script.status_code == 200 and script.mimetype == "text/javascript"
    assert client.get("/console/nothing.js").status_code == 404
