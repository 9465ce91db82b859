"""``fleetflow quotas ...``, ``fleetflow flavors ...`` and ``fleetflow images ...`` against
a real API server thread on 127.0.0.1 (the sample catalog: m1.small, g1.large, cirros,
ubuntu-24.04)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from fleetflow.cli.main import cli

SMALL = "11111111-1111-1111-1111-111111111111"
CIRROS = "33333333-3333-3333-3333-333333333333"


@pytest.fixture
def run(live_server, sample_catalog):
    def _run(*args, options=("--project", "tenant-a")):
        return CliRunner().invoke(cli, ["--url", live_server, *options, *args],
                                  catch_exceptions=False)

    return _run


def run_json(run, *args, **kwargs):
    result = run(*args, "--json", **kwargs)
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_flavors_list_and_show_by_name_or_id(run):
    listed = run_json(run, "flavors", "list")
    table = run("flavors", "list")
    by_name = run_json(run, "flavors", "show", "m1.small")
    by_id = run("flavors", "show", SMALL)

    assert [f["name"] for f in listed] == ["g1.large", "m1.small"]
    assert table.exit_code == 0 and "g1.large" in table.output and SMALL in table.output
    assert by_name["id"] == SMALL and by_name["vcpus"] == 1 and by_name["ram_mb"] == 2048
    assert by_id.exit_code == 0 and "m1.small" in by_id.output
    missing = run("flavors", "show", "m9.huge")
    assert missing.exit_code == 1 and "404" in missing.output


def test_images_list_and_show_by_name_or_id(run):
    listed = run_json(run, "images", "list")
    shown = run_json(run, "images", "show", "cirros")
    table = run("images", "show", CIRROS)

    assert [i["name"] for i in listed] == ["cirros", "ubuntu-24.04"]
    assert shown == {"id": CIRROS, "name": "cirros", "min_disk_gb": 1, "min_ram_mb": 64}
    assert table.exit_code == 0 and "min_ram_mb" in table.output and "64" in table.output


def test_quotas_set_by_an_administrator_and_shown_to_the_project(run, conf):
    refused = run("quotas", "set", "tenant-a", "--instances", "5",
                  options=("--project", "tenant-a", "--roles", "member"))
    set_ = run_json(run, "quotas", "set", "tenant-a", "--instances", "5", "--vcpus", "-1",
                    options=())
    own = run_json(run, "quotas", "show")
    table = run("quotas", "show")
    other = run_json(run, "quotas", "show", "tenant-b", options=())

    assert refused.exit_code == 1 and "403" in refused.output
    assert set_["instances"] == 5 and set_["vcpus"] == -1 and set_["default"] is False
    assert own["tenant_id"] == "tenant-a" and own["instances"] == 5
    assert own["usage"]["instances"] == 0
    assert "unlimited" in table.output and "quota of tenant-a" in table.output
    assert other["default"] is True and other["instances"] == conf.quota.instances


def test_quotas_set_needs_a_limit(run):
    result = run("quotas", "set", "tenant-a", options=())

    assert result.exit_code == 2 and "nothing to set" in result.output
