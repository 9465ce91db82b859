"""Fleet files: the shipped default, validation, loading and the generator."""

import pytest
import sqlalchemy as sa
import yaml
from click.testing import CliRunner

from fleetflow.cli.main import cli
from fleetflow.common.exceptions import InvalidInput
from fleetflow.persistence import fleet, models


def test_default_fleet_has_the_promised_shape():
    hosts = fleet.expand(fleet.read()).hosts
    assert len(hosts) >= 128
    regions = {h["region"] for h in hosts}
    assert regions == {"north-america", "europe"}
    na = [h for h in hosts if h["capabilities"]["region"] == "north-america"]
    both = [h for h in na if h["capabilities"].get("gpu") == "true"
            and h["capabilities"].get("sticker") == "blue"]
    assert len(both) >= 8
    assert all("GPU" in h["inventory"] for h in hosts if h["capabilities"].get("gpu") == "true")
    assert len({h["uuid"] for h in hosts}) == len(hosts)


def test_catalogs_include_the_default_flavors_and_cirros():
    doc = fleet.expand(fleet.read())
    names = {f["name"] for f in doc.flavors}
    assert {"m1.tiny", "m1.small", "m1.medium", "m1.large", "m1.xlarge", "g1.large"} <= names
    assert "cirros" in {i["name"] for i in doc.images}


def test_load_is_idempotent_and_keeps_operator_state(db):
    expanded = fleet.expand(fleet.read())
    with db.session() as s:
        assert fleet.is_empty(s)
        assert fleet.load(s, expanded)["hosts"] == len(expanded.hosts)
    with db.session() as s:
        host = s.scalars(sa.select(models.Host).limit(1)).one()
        host.state = "maintenance"
        name, uuid = host.name, host.uuid
    with db.session() as s:
        assert fleet.load(s, expanded)["hosts"] == 0
    with db.session() as s:
        host = s.scalars(sa.select(models.Host).where(models.Host.name == name)).one()
        assert (host.state, host.uuid) == ("maintenance", uuid)
        assert s.scalar(sa.select(sa.func.count()).select_from(models.Host)) == len(expanded.hosts)
        assert s.scalar(sa.select(sa.func.count()).select_from(models.StorageBackend)) == len(
            expanded.storage)


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d["regions"][0]["zones"][0]["racks"][0].update(profile="nope"), "unknown profile"),
    (lambda d: d["profiles"]["standard"]["inventory"].update(FPGA={"total": 1}),
     "unknown resource class"),
    (lambda d: d["profiles"]["standard"]["inventory"].pop("VCPU"), "needs VCPU"),
    (lambda d: d.update(regions=[]), "at least one host"),
])
def test_bad_fleet_files_are_refused_with_the_reason(mutate, message):
    doc = fleet.read()
    mutate(doc)
    with pytest.raises(InvalidInput, match=message):
        fleet.expand(doc)


def test_generator_makes_the_asked_number_of_unique_hosts():
    doc = fleet.generate(10_000, seed=7)
    hosts = fleet.expand(doc).hosts
    assert len(hosts) == 10_000
    assert len({h["name"] for h in hosts}) == 10_000
    assert any(h["capabilities"].get("gpu") == "true" for h in hosts)
    assert any(h["capabilities"].get("sticker") == "blue" for h in hosts)
    assert fleet.generate(50, seed=1) == fleet.generate(50, seed=1)


def test_cli_generate_then_load(tmp_path, conf, monkeypatch):
    monkeypatch.setenv("FLEETFLOW_DATABASE_CONNECTION", conf.database.connection)
    path = tmp_path / "big.yaml"
    runner = CliRunner()
    result = runner.invoke(cli, ["fleet", "generate", "--hosts", "300", "-o", str(path)])
    assert result.exit_code == 0, result.output
    assert len(fleet.expand(yaml.safe_load(path.read_text())).hosts) == 300
    result = runner.invoke(cli, ["fleet", "load", str(path)])
    assert result.exit_code == 0, result.output
    assert "300 hosts (300 new)" in result.output
