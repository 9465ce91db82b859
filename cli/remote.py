"""What every command that talks to the REST API shares: where, as whom, and output.

Global options (before the subcommand, or from the environment)::

    fleetflow --url http://cloud:8774 --project p1 --roles member,reader reservations list
    FLEETFLOW_URL=... FLEETFLOW_PROJECT=p1 fleetflow servers list --reservation r-...

``--project``/``--user``/``--roles`` are the noauth identity headers;
``--token`` is a Keystone token for an API running ``auth_strategy = keystone``.
Every command takes ``--json`` and then prints exactly the API's objects.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os

import click
import requests
from rich.console import Console
from rich.table import Table

from fleetflow.api.client import Client, FleetflowApiError

DEFAULT_URL = "http://127.0.0.1:8774"
META_KEY = "fleetflow.remote"


@dataclasses.dataclass
class Remote:
    """The endpoint and identity the API commands use."""

    url: str = DEFAULT_URL
    project: str | None = None
    user: str | None = None
    roles: str = "member,reader"
    token: str | None = None

    def client(self) -> Client:
        if not self.project and not self.token:
            raise click.UsageError("give --project (or FLEETFLOW_PROJECT), or --token")
        roles = [r.strip() for r in self.roles.split(",") if r.strip()]
        return Client(self.url, project_id=self.project, user_id=self.user, roles=roles,
                      token=self.token)


def _store(name: str):
    def callback(ctx: click.Context, _param, value):
        remote = ctx.meta.setdefault(META_KEY, Remote())
        if value is not None:
            setattr(remote, name, value)
        return value

    return callback


def global_options(command):
    """Add --url, --project, --user, --roles, --token to the top-level group.

    NOTE: the values go to ``ctx.meta`` (shared by every sub-context), not to
    the group's parameters, so the group keeps ``ctx.obj`` for the configuration.
    """
    options = [
        click.option("--url", envvar="FLEETFLOW_URL", default=DEFAULT_URL, show_default=True,
                     expose_value=False, callback=_store("url"),
                     help="fleetflow API endpoint (API commands)."),
        click.option("--project", envvar="FLEETFLOW_PROJECT", expose_value=False,
                     callback=_store("project"),
                     help="Project to act in (noauth X-Project-Id)."),
        click.option("--user", envvar="FLEETFLOW_USER", expose_value=False,
                     callback=_store("user"), help="User id (noauth X-User-Id)."),
        click.option("--roles", envvar="FLEETFLOW_ROLES", default="member,reader",
                     show_default=True, expose_value=False, callback=_store("roles"),
                     help="Comma separated roles (noauth X-Roles)."),
        click.option("--token", envvar="FLEETFLOW_TOKEN", expose_value=False,
                     callback=_store("token"), help="Keystone token (X-Auth-Token)."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def client() -> Client:
    """The API client of the current command line."""
    ctx = click.get_current_context()
    return ctx.meta.setdefault(META_KEY, Remote()).client()


json_option = click.option("--json", "as_json", is_flag=True,
                           help="Print the API's JSON instead of a table.")


def api_errors(command):
    """Turn API and connection failures into a one-line error and exit status 1."""
    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except FleetflowApiError as exc:
            raise click.ClickException(str(exc)) from None
        except requests.ConnectionError as exc:
            url = click.get_current_context().meta.get(META_KEY, Remote()).url
            raise click.ClickException(f"cannot reach the API at {url}: {exc}") from None

    return wrapper


def console() -> Console:
    # NOTE: built per call so that it writes to the stdout of the moment
    # (click's test runner swaps it); a wide default keeps ids unwrapped.
    return Console(width=int(os.environ.get("COLUMNS", "160")), soft_wrap=False)


def print_json(data) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=True, default=str))


def table(title: str | None, columns: list[str], rows: list[list]) -> None:
    grid = Table(title=title, show_lines=False)
    for column in columns:
        grid.add_column(column, overflow="fold")
    for row in rows:
        grid.add_row(*["" if v is None else str(v) for v in row])
    console().print(grid)


def fields(title: str, pairs: list[tuple[str, object]]) -> None:
    """One object as a two-column table."""
    table(title, ["field", "value"], [[k, _text(v)] for k, v in pairs])


def _text(value) -> str:
    if value is None:
        return ""
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items())
    if isinstance(value, list | tuple):
        return ", ".join(str(v) for v in value)
    return str(value)


def key_values(values: tuple[str, ...], option: str) -> dict[str, str]:
    """``("gpu=true", "region=north-america")`` -> dict; ``k>=4`` keeps its operator.

    ``--capability 'cores=>= 4'`` and ``--capability 'cores>=4'`` both mean
    ``{"cores": ">= 4"}``: an operator glued to the key is moved to the value.
    """
    result = {}
    for item in values:
        # The operator that comes first wins: "sticker=s== blue" is "=",
        # "cores>=4" is ">=".
        found = [(item.find(op), -len(op), op) for op in (">=", "<=", "!=", "s==", "=")
                 if item.find(op) > 0]
        if not found:
            raise click.BadParameter(f"{item!r}: expected KEY=VALUE", param_hint=option)
        index, _, operator = min(found)
        key, value = item[:index].strip(), item[index + len(operator):].strip()
        result[key] = value if operator == "=" else f"{operator} {value}"
    return result
