"""Configuration from defaults, a file and FLEETFLOW_<GROUP>_<OPTION> variables."""

import pathlib
import re

import pytest
from oslo_config import cfg

from fleetflow.common import config


def test_defaults_are_the_embedded_mode():
    conf = config.load(environ={})
    assert conf.state_dir == "fleetflow-state"
    assert conf.database.connection == "sqlite:///fleetflow-state/fleetflow.db"
    assert (conf.api.host, conf.api.port) == ("127.0.0.1", 8774)
    assert conf.api.auth_strategy == "noauth"
    assert conf.messaging.transport_url == "fake:"
    assert conf.jobboard.backend == "sql"


def test_the_default_database_follows_the_state_dir(tmp_path):
    conf = config.load(environ={"FLEETFLOW_STATE_DIR": str(tmp_path / "a")})
    assert conf.database.connection == f"sqlite:///{tmp_path}/a/fleetflow.db"
    config.set_state_dir(conf, str(tmp_path / "b"))
    assert conf.state_dir == str(tmp_path / "b")
    assert conf.database.connection == f"sqlite:///{tmp_path}/b/fleetflow.db"
    # '.' is the layout of earlier versions: everything in the working directory.
    assert config.load(environ={"FLEETFLOW_STATE_DIR": "."}).database.connection == \
        "sqlite:///./fleetflow.db"


def test_an_explicit_database_stays_where_it_is(tmp_path):
    conf = config.load(environ={"FLEETFLOW_DATABASE_CONNECTION": "sqlite:///x.db"})
    config.set_state_dir(conf, str(tmp_path))
    assert conf.database.connection == "sqlite:///x.db"


def test_config_file_is_read(tmp_path):
    path = tmp_path / "fleetflow.conf"
    path.write_text("[api]\nport = 9999\n[compute]\nboot_seconds = 1.5\n")
    conf = config.load(args=["--config-file", str(path)], environ={})
    assert conf.api.port == 9999
    assert conf.compute.boot_seconds == 1.5


def test_environment_overrides_file(tmp_path):
    path = tmp_path / "fleetflow.conf"
    path.write_text("[api]\nport = 9999\n")
    conf = config.load(args=["--config-file", str(path)],
                       environ={"FLEETFLOW_API_PORT": "8000",
                                "FLEETFLOW_DATABASE_CONNECTION": "sqlite:///x.db",
                                "FLEETFLOW_API_AUTH_STRATEGY": "keystone",
                                "FLEETFLOW_STATE_DIR": "/srv/ff"})
    assert conf.api.port == 8000
    assert conf.database.connection == "sqlite:///x.db"
    assert conf.api.auth_strategy == "keystone"
    assert conf.state_dir == "/srv/ff"


def test_bad_environment_value_names_the_variable():
    with pytest.raises(cfg.ConfigFileValueError, match="FLEETFLOW_API_PORT"):
        config.load(environ={"FLEETFLOW_API_PORT": "not-a-port"})


@pytest.mark.parametrize("down, beat", [(5, 10.0), (10, 10.0), (1, 1.5)])
def test_a_service_down_time_not_longer_than_the_heartbeat_is_refused(down, beat):
    conf = config.load(environ={"FLEETFLOW_COMPUTE_SERVICE_DOWN_TIME": str(down),
                                "FLEETFLOW_COMPUTE_HEARTBEAT_INTERVAL": str(beat)})
    with pytest.raises(config.ConflictingOptions) as refused:
        config.check(conf)
    for name in ("[compute] service_down_time", "[compute] heartbeat_interval",
                 "FLEETFLOW_COMPUTE_SERVICE_DOWN_TIME", "FLEETFLOW_COMPUTE_HEARTBEAT_INTERVAL"):
        assert name in str(refused.value)


def test_a_service_down_time_longer_than_the_heartbeat_is_accepted():
    config.check(config.load(environ={}))
    conf = config.load(environ={"FLEETFLOW_COMPUTE_SERVICE_DOWN_TIME": "11",
                                "FLEETFLOW_COMPUTE_HEARTBEAT_INTERVAL": "10"})
    config.check(conf)
    assert conf.compute.service_down_time == 11


def test_every_option_has_a_distinct_environment_name():
    names = [config.env_name(group, opt.dest)
             for group, opts in config.OPTS.items() for opt in opts]
    assert len(names) == len(set(names))


def test_max_reschedules_is_an_option_of_the_scheduler():
    assert config.load(environ={}).scheduler.max_reschedules == 3
    conf = config.load(environ={"FLEETFLOW_SCHEDULER_MAX_RESCHEDULES": "0"})
    assert conf.scheduler.max_reschedules == 0
    with pytest.raises(cfg.ConfigFileValueError, match="FLEETFLOW_SCHEDULER_MAX_RESCHEDULES"):
        config.load(environ={"FLEETFLOW_SCHEDULER_MAX_RESCHEDULES": "-1"})


def _registered_options() -> dict[str, set[str]]:
    return {group or "DEFAULT": {opt.dest for opt in opts} for group, opts in config.OPTS.items()}


def test_every_option_the_code_and_docs_cite_exists():
    # "[group] option" in a docstring, a comment, the README or docs/ names a
    # real option: a citation of one that does not exist sends readers astray.
    root = pathlib.Path(__file__).resolve().parents[2]
    registered = _registered_options()
    cited = re.compile(r"\[(\w+)\]\s*`{0,2}(\w+)")
    texts = [path for pattern in ("*.py", "*.md") for path in root.rglob(pattern)
             if not {".venv", ".git", "build", "tests"} & set(path.relative_to(root).parts)]
    found = [(str(path.relative_to(root)), group, option)
             for path in texts for group, option in cited.findall(path.read_text())
             if group in registered]
    assert len(found) >= 20
    assert [f for f in found if f[2] not in registered[f[1]]] == []
