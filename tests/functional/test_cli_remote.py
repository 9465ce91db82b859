"""What every API command shares: where it goes, as whom, --json, --watch and --dry-run.

The API runs on 127.0.0.1 (werkzeug, the ``live_server`` fixture); the CLI finds
it through the options, the environment or the configuration, never by default.
"""

from __future__ import annotations

import json
import urllib.parse

import pytest
from click.testing import CliRunner

from fleetflow.cli import evacuations as evacuations_cli
from fleetflow.cli import remote
from fleetflow.cli import reservations as reservations_cli
from fleetflow.cli import vclusters as vclusters_cli
from fleetflow.cli.main import cli

# Nothing listens here: a command that goes to it fails to connect.
NOWHERE = "http://127.0.0.1:9"
# Every variable that could point the CLI somewhere, unset unless a test sets it.
CLEAN = {"FLEETFLOW_URL": None, "FLEETFLOW_API_HOST": None, "FLEETFLOW_API_PORT": None,
         "FLEETFLOW_PROJECT": None, "FLEETFLOW_USER": None, "FLEETFLOW_ROLES": None,
         "FLEETFLOW_TOKEN": None}


@pytest.fixture
def port(live_server) -> str:
    return str(urllib.parse.urlsplit(live_server).port)


def invoke(*args, **env):
    return CliRunner().invoke(cli, list(args), env={**CLEAN, **env}, catch_exceptions=False)


def test_the_api_port_of_the_environment_is_used(port, sample_catalog):
    result = invoke("groups", "create", "--name", "g1", "--json",
                    FLEETFLOW_API_PORT=port, FLEETFLOW_PROJECT="tenant-a")

    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["name"] == "g1"


def test_the_api_port_of_the_config_file_is_used(port, sample_catalog, tmp_path):
    conf_file = tmp_path / "fleetflow.conf"
    conf_file.write_text(f"[api]\nhost = 127.0.0.1\nport = {port}\n")

    result = invoke("--config-file", str(conf_file), "--project", "tenant-a",
                    "groups", "list", "--json")

    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == []


def test_url_wins_over_fleetflow_url_which_wins_over_the_configuration(live_server,
                                                                       sample_catalog):
    by_option = invoke("--url", live_server, "--project", "tenant-a", "groups", "list",
                       FLEETFLOW_URL=NOWHERE, FLEETFLOW_API_PORT="9")
    by_env = invoke("--project", "tenant-a", "groups", "list",
                    FLEETFLOW_URL=live_server, FLEETFLOW_API_PORT="9")
    by_conf = invoke("--project", "tenant-a", "groups", "list", FLEETFLOW_API_PORT="9")

    assert by_option.exit_code == 0, by_option.output
    assert by_env.exit_code == 0, by_env.output
    assert by_conf.exit_code == 1 and "cannot reach the API at http://127.0.0.1:9" in \
        by_conf.output


def test_identity_and_url_after_the_subcommand(live_server, sample_catalog):
    after = invoke("groups", "create", "--name", "late", "--json", "--url", live_server,
                   "--project", "tenant-b")
    # After the subcommand wins over before it, which wins over the environment.
    both = invoke("--project", "tenant-a", "groups", "list", "--json", "--project",
                  "tenant-b", FLEETFLOW_URL=live_server, FLEETFLOW_PROJECT="tenant-c")
    before = invoke("--project", "tenant-a", "groups", "list", "--json",
                    FLEETFLOW_URL=live_server, FLEETFLOW_PROJECT="tenant-c")

    assert after.exit_code == 0, after.output
    assert json.loads(after.stdout)["tenant_id"] == "tenant-b"
    assert [g["name"] for g in json.loads(both.stdout)] == ["late"]
    assert json.loads(before.stdout) == []


def test_the_project_from_the_environment(live_server, sample_catalog):
    result = invoke("groups", "create", "--name", "env", "--json",
                    FLEETFLOW_URL=live_server, FLEETFLOW_PROJECT="tenant-a")

    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["tenant_id"] == "tenant-a"


def test_help_lists_the_environment_and_the_output_rules():
    text = invoke("--help").output

    for variable in ("FLEETFLOW_URL", "FLEETFLOW_API_HOST", "FLEETFLOW_API_PORT",
                     "FLEETFLOW_PROJECT", "FLEETFLOW_ROLES", "FLEETFLOW_TOKEN"):
        assert variable in text
    assert "--json prints the object" in text


def test_help_gives_every_exit_status_one_meaning():
    text = invoke("--help").output
    codes = text[text.index("Exit status:"):]

    for line in ("0    done as asked", "2    usage error", "3    --dry-run",
                 "4    --watch: the operation settled in a failed state",
                 "5    --watch: the operation stopped PAUSED", "130  --watch interrupted"):
        assert line in codes, line


def test_version_is_the_packages():
    import fleetflow

    result = invoke("--version")

    assert result.exit_code == 0
    assert result.output == f"fleetflow {fleetflow.__version__}\n"


def test_api_url_of_the_configuration():
    from fleetflow.common import config

    wildcard = config.load(environ={"FLEETFLOW_API_HOST": "0.0.0.0",
                                    "FLEETFLOW_API_PORT": "9001"})
    ipv6 = config.load(environ={"FLEETFLOW_API_HOST": "::1"})

    assert remote.api_url(wildcard) == "http://127.0.0.1:9001"
    assert remote.api_url(ipv6) == "http://[::1]:8774"


# -- watching ---------------------------------------------------------------------------


class ScriptedReservations:
    """Answers get_reservation from a script; Ctrl-C once the script runs out."""

    def __init__(self, *answers):
        self.answers = list(answers)

    def get_reservation(self, reservation_id, instances=True):
        if not self.answers:
            raise KeyboardInterrupt
        return self.answers.pop(0)


def reservation(status, active, reverted=0, total=2):
    return {"id": "r-1", "status": status,
            "progress": {"total": total, "active": active, "building": total - active - reverted,
                         "error": 0, "reverted": reverted}}


def test_ctrl_c_says_the_reservation_goes_on_and_how_to_watch_it(capsys):
    client = ScriptedReservations(reservation("BUILDING", 1))

    with pytest.raises(SystemExit) as exited:
        reservations_cli.watch(client, "r-1", interval=0, show_bar=False)

    assert exited.value.code == remote.INTERRUPTED_EXIT
    err = capsys.readouterr().err
    assert "r-1 goes on" in err and "fleetflow reservations watch r-1" in err


def test_the_bar_of_a_reverted_reservation_is_not_full(monkeypatch):
    seen = []
    real_update = reservations_cli.Progress.update

    def update(self, task, **fields):
        seen.append((fields["completed"], fields["total"]))
        return real_update(self, task, **fields)

    monkeypatch.setattr(reservations_cli.Progress, "update", update)
    client = ScriptedReservations(reservation("BUILDING", 1),
                                  reservation("REVERTED", 0, reverted=2))

    final = reservations_cli.watch(client, "r-1", interval=0, show_bar=True)

    assert final["status"] == "REVERTED"
    assert seen == [(1, 2), (0, 2)]


class Interrupted:
    """A client whose every call is a Ctrl-C."""

    def __getattr__(self, name):
        def call(*args, **kwargs):
            raise KeyboardInterrupt

        return call


@pytest.mark.parametrize(("watch", "again"), [
    (vclusters_cli.watch, "fleetflow vclusters watch vc-1"),
    (evacuations_cli.watch, "fleetflow evacuations watch vc-1"),
])
def test_ctrl_c_while_watching_clusters_and_evacuations(watch, again, capsys):
    with pytest.raises(SystemExit) as exited:
        watch(Interrupted(), "vc-1", 0)

    assert exited.value.code == remote.INTERRUPTED_EXIT
    err = capsys.readouterr().err
    assert "vc-1 goes on" in err and again in err
