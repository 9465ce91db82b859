"""What every command that talks to the REST API shares: where, as whom, and output.

Where and as whom, before or after the subcommand, or from the environment::

    fleetflow --url http://cloud:8774 --project p1 --roles member,reader reservations list
    fleetflow reservations list --project p1
    FLEETFLOW_URL=... FLEETFLOW_PROJECT=p1 fleetflow servers list --reservation r-...

The endpoint is resolved one way for every command: ``--url``, else
``FLEETFLOW_URL``, else ``http://<[api] host>:<[api] port>`` of the configuration
(file, then ``FLEETFLOW_API_HOST`` / ``FLEETFLOW_API_PORT``). A value given after
the subcommand wins over one given before it.

``--project``/``--user``/``--roles`` are the noauth identity headers;
``--token`` is a Keystone token for an API running ``auth_strategy = keystone``.

``--json`` prints the object a command is about, without the API's envelope
(``{"id": ...}``, never ``{"reservation": {...}}``): create, show, update,
delete, an action, a dry run's verdict; ``list`` prints a JSON list of them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os

import click
import requests
from rich.console import Console
from rich.live import Live
from rich.table import Table

from fleetflow.api.client import Client, FleetflowApiError
from fleetflow.cli import views
from fleetflow.cli.views import text  # noqa: F401 - commands' cells

META_KEY = "fleetflow.remote"
DEFAULT_ROLES = "member,reader"
# Exit statuses: one meaning each, so a script can tell a typo (2, click's usage
# errors) from an operation that ended badly. EXIT_STATUS_HELP lists them.
ERROR_EXIT = 1
USAGE_EXIT = 2
# A --dry-run whose answer is "does not fit".
DOES_NOT_FIT_EXIT = 3
# A --watch whose operation settled in a failed state (ERROR, PARTIAL, REVERTED ...).
FAILED_EXIT = 4
# A --watch whose operation stopped PAUSED: it waits for an operator.
PAUSED_EXIT = 5
# A --watch interrupted by Ctrl-C (the shell's 128 + SIGINT).
INTERRUPTED_EXIT = 130

ENVIRONMENT_HELP = """\b
Environment:
  FLEETFLOW_URL        API endpoint (default: http://[api] host:[api] port)
  FLEETFLOW_API_HOST   [api] host, when FLEETFLOW_URL is unset (127.0.0.1)
  FLEETFLOW_API_PORT   [api] port, when FLEETFLOW_URL is unset (8774)
  FLEETFLOW_PROJECT    --project
  FLEETFLOW_USER       --user
  FLEETFLOW_ROLES      --roles
  FLEETFLOW_TOKEN      --token
  FLEETFLOW_<GROUP>_<OPTION>  any configuration option (wins over the file)

\b
--url, --project, --user, --roles and --token may also follow the subcommand.
--json prints the object a command is about, without the API's envelope;
list commands print a JSON list of such objects.
Lists come newest first (hosts, flavors, images: by name); --status filters
a list, its value in any case."""

EXIT_STATUS_HELP = """\b
Exit status:
  0    done as asked
  1    error: the API refused the request or could not be reached
       (audit: mismatches found)
  2    usage error: a bad option or argument (audit: it could not run)
  3    --dry-run: the request does not fit now
  4    --watch: the operation settled in a failed state (ERROR, PARTIAL,
       FAILED, REVERTED ...)
  5    --watch: the operation stopped PAUSED and waits for an operator
  130  --watch interrupted by Ctrl-C (the operation goes on)"""


def api_url(conf) -> str:
    """``http://<[api] host>:<[api] port>``: where this configuration's API listens."""
    host = conf.api.host
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    elif ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{conf.api.port}"


@dataclasses.dataclass
class Remote:
    """The endpoint and identity the API commands use (``url`` None: the configuration's)."""

    url: str | None = None
    project: str | None = None
    user: str | None = None
    # None: not given (DEFAULT_ROLES for a tenant's command, admin for an operator's).
    given_roles: str | None = None
    token: str | None = None

    @property
    def roles_given(self) -> bool:
        # NOTE: given, even if equal to the default: --roles member,reader on an
        # operator's command must act as a member, not fall back to admin.
        return self.given_roles is not None

    @property
    def roles(self) -> str:
        return DEFAULT_ROLES if self.given_roles is None else self.given_roles

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


IDENTITY_OPTIONS = (
    ("--project", "project", "FLEETFLOW_PROJECT", "Project to act in (noauth X-Project-Id)."),
    ("--user", "user", "FLEETFLOW_USER", "User id (noauth X-User-Id)."),
    ("--roles", "given_roles", "FLEETFLOW_ROLES",
     f"Comma separated roles (noauth X-Roles; default {DEFAULT_ROLES})."),
    ("--token", "token", "FLEETFLOW_TOKEN", "Keystone token (X-Auth-Token)."),
)
URL_HELP = "fleetflow API endpoint (default: FLEETFLOW_URL, else [api] host:port)."


def _add(command, options):
    for option in reversed(options):
        command = option(command)
    return command


def global_options(command):
    """Add --url, --project, --user, --roles, --token to the top-level group.

    NOTE: the values go to ``ctx.meta`` (shared by every sub-context), not to
    the group's parameters, so the group keeps ``ctx.obj`` for the configuration.
    """
    options = [click.option("--url", envvar="FLEETFLOW_URL", expose_value=False,
                            callback=_store("url"), help=URL_HELP)]
    options += [click.option(flag, envvar=envvar, expose_value=False, callback=_store(name),
                             help=text) for flag, name, envvar, text in IDENTITY_OPTIONS]
    return _add(command, options)


def subcommand_options(command, url: bool = True):
    """The same options after the subcommand (``fleetflow servers list --project p1``).

    NOTE: no environment variable and no default here: the group already read
    those, and only a value typed after the subcommand may override them.
    """
    rows = ([("--url", "url", None, URL_HELP)] if url else []) + list(IDENTITY_OPTIONS)
    return _add(command, [click.option(flag, expose_value=False, callback=_store(name),
                                       help=text) for flag, name, _, text in rows])


def identity_options(command):
    """--project, --user, --roles, --token after a subcommand that has its own --url."""
    return subcommand_options(command, url=False)


def settings() -> Remote:
    """Endpoint and identity of the current command line, the endpoint resolved."""
    ctx = click.get_current_context()
    given = ctx.meta.setdefault(META_KEY, Remote())
    if given.url:
        return given
    conf = ctx.find_root().obj
    if conf is None:
        from fleetflow.common import config

        conf = config.load(args=[])
    return dataclasses.replace(given, url=api_url(conf))


def client() -> Client:
    """The API client of the current command line."""
    return settings().client()


def admin_client(url: str | None = None, **kwargs) -> Client:
    """The client of operator verbs: project ``admin`` and role ``admin`` unless told
    otherwise (``--roles`` or ``--token``)."""
    given = settings()
    roles = given.roles if (given.token or given.roles_given) else "admin"
    return Client(url or given.url, project_id=given.project or "admin",
                  user_id=given.user or "admin",
                  roles=[r.strip() for r in roles.split(",") if r.strip()], token=given.token,
                  **kwargs)


json_option = click.option("--json", "as_json", is_flag=True,
                           help="Print JSON instead of a table: the object itself "
                                "(a list of them for list commands).")


def status_option(help_text: str, choices: tuple[str, ...] = (), lower: bool = False,
                  state_alias: bool = False):
    """``--status``, the one filter flag of every list: any case, sent as the API spells it
    (upper case; ``lower`` for hosts). ``state_alias`` keeps the ``--state`` of earlier
    versions, hidden."""
    def normalise(_ctx, _param, value):
        if value is None or choices:
            return value
        return value.lower() if lower else value.upper()

    kind = click.Choice(choices, case_sensitive=False) if choices else None

    def decorate(command):
        if state_alias:
            command = _merged_state(command)
            command = click.option("--state", "deprecated_state", type=kind, hidden=True,
                                   callback=normalise)(command)
        return click.option("--status", type=kind, callback=normalise, help=help_text)(command)

    return decorate


def _merged_state(command):
    @functools.wraps(command)
    def wrapper(*args, deprecated_state=None, **kwargs):
        if deprecated_state is not None:
            click.echo("--state is deprecated: use --status", err=True)
            if kwargs.get("status") not in (None, deprecated_state):
                raise click.UsageError("give --status only (--state is its old name)")
            kwargs["status"] = deprecated_state
        return command(*args, **kwargs)

    return wrapper


def api_errors(command):
    """Turn API and connection failures into a one-line error and exit status 1."""
    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except FleetflowApiError as exc:
            raise click.ClickException(str(exc)) from None
        except requests.ConnectionError as exc:
            raise click.ClickException(
                f"cannot reach the API at {settings().url}: {exc}") from None

    return wrapper


def api_command(command):
    """What every API command takes: --json, the endpoint and identity options, and
    one-line errors."""
    return json_option(subcommand_options(api_errors(command)))


@contextlib.contextmanager
def interruptible(kind: str, ident: str, again: str):
    """Ctrl-C during a --watch: say that the operation goes on, and how to watch it again."""
    try:
        yield
    except KeyboardInterrupt:
        click.echo(f"\nstopped watching; {kind} {ident} goes on. Watch it again with: "
                   f"fleetflow {again} {ident}", err=True)
        raise SystemExit(INTERRUPTED_EXIT) from None


def accepted(kind: str, obj: dict, as_json: bool, watching: bool) -> None:
    """The first answer to a change the API took (202): its id, before any watching.

    With --json and --watch stdout keeps only the final object, so the id goes to stderr.
    """
    links = [link["href"] for link in obj.get("links") or ()]
    line = f"{kind} {obj['id']} {obj['status']}" + (f": {links[0]}" if links else "")
    if as_json and not watching:
        print_json(obj)
    else:
        click.echo(line, err=as_json)


def settled_exit(status: str, wanted: tuple[str, ...]) -> None:
    """The exit status of a --watch that saw its operation settle in ``status``."""
    if status in wanted:
        return
    raise SystemExit(PAUSED_EXIT if status == "PAUSED" else FAILED_EXIT)


def verdict_exit(verdict: dict) -> None:
    """A dry run's answer "does not fit" is a non-zero exit status."""
    if not verdict.get("fits"):
        raise SystemExit(DOES_NOT_FIT_EXIT)


@contextlib.contextmanager
def live(renderable):
    """A view redrawn in place by ``update(..., refresh=True)``, ending with a line end.

    NOTE: written to a file or a pipe, rich prints the last view without a line
    end, so what comes next (the shell's prompt) would land on its last line.
    """
    screen = console()
    with Live(renderable, console=screen, auto_refresh=False) as view:
        yield view
    if not screen.is_terminal:
        screen.line()


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
    table(title, ["field", "value"], [[k, text(v)] for k, v in pairs])


def show(view: views.View, item: dict) -> None:
    """One object as its view shows it."""
    fields(view.title(item), view.fields(item))


def listing(title: str, view: views.View, items: list[dict]) -> None:
    """A list of objects, one row each, as their view shows them."""
    table(title, list(view.columns), [view.row(item) for item in items])


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
