"""``fleetflow db upgrade`` against databases that are not there."""

from __future__ import annotations

import uuid

from click.testing import CliRunner

from fleetflow.cli.main import cli
from tests.conftest import PG_ADMIN_URL, need_service


def upgrade(tmp_path, connection: str):
    path = tmp_path / "fleetflow.conf"
    path.write_text(f"[database]\nconnection = {connection}\n")
    return CliRunner().invoke(cli, ["--config-file", str(path), "db", "upgrade"])


def test_a_missing_postgresql_database_is_one_line_naming_the_fix(tmp_path):
    need_service("postgresql")
    name = "fleetflow_never_made_" + uuid.uuid4().hex[:10]

    result = upgrade(tmp_path, PG_ADMIN_URL.rsplit("/", 1)[0] + "/" + name)

    assert result.exit_code == 1
    assert isinstance(result.exception, SystemExit), result.exception
    (line,) = result.output.strip().splitlines()
    assert f'database "{name}" does not exist' in line
    assert "createdb -h " in line and f'CREATE DATABASE "{name}";' in line


def test_an_unreachable_server_is_one_line_without_its_password(tmp_path):
    # Port 9 (discard) on the loopback: nothing listens there.
    result = upgrade(tmp_path, "postgresql://fleetflow:secret@127.0.0.1:9/fleetflow")

    assert result.exit_code == 1
    assert isinstance(result.exception, SystemExit), result.exception
    (line,) = result.output.strip().splitlines()
    assert line.startswith("Error: cannot reach the database at ")
    assert "secret" not in line


def test_a_new_sqlite_file_is_made_and_upgraded(tmp_path):
    result = upgrade(tmp_path, f"sqlite:///{tmp_path}/new.db")

    assert result.exit_code == 0, result.output
    assert "is up to date" in result.output and (tmp_path / "new.db").exists()
