"""What every ``openstack fleet`` command shares: its rules, its errors, its output.

Each command names the policy rules it needs (``rules``: any one of them will
do). When the caller's permissions are known (:mod:`fleetflow.osc.client`), a
command none of whose rules is allowed is hidden from ``openstack help`` and
refuses to run with "not allowed for your roles" rather than calling the API.

Output: in ``table``/``value`` form, what the ``fleetflow`` command shows, from its
views (:mod:`fleetflow.cli.views`); in ``json``/``yaml``, the API's objects as they
came (every key, nested values kept).
"""

from __future__ import annotations

import click
import requests
from osc_lib import exceptions
from osc_lib.command import command

from fleetflow.api.client import FleetflowApiError
from fleetflow.cli import views
from fleetflow.osc.client import NoCredentials

# Formatters that print the API's objects as they are.
RAW_FORMATS = ("json", "yaml")
# Seconds between polls of --wait.
POLL_SECONDS = 0.5


class FleetCommand(command.Command):
    """The base of every ``openstack fleet`` command."""

    #: The policy rules this command needs, any one of them (empty: always shown).
    rules: tuple[str, ...] = ()

    @property
    def fleet(self):
        return self.app.client_manager.fleet

    @property
    def deprecated(self) -> bool:
        # NOTE: cliff's help leaves out deprecated commands: a command the caller's
        # roles cannot use is left out the same way. Unknown permissions hide nothing.
        manager = getattr(self.app, "client_manager", None)
        if manager is None or not self.rules:
            return False
        try:
            manager.fleet.authenticate_for_help(self.app)
            return manager.fleet.may(self.rules) is False
        except Exception:  # noqa: BLE001 - help never fails because fleetflow cannot answer
            return False

    def api(self):
        try:
            return self.fleet.api()
        except NoCredentials as exc:
            raise exceptions.CommandError(str(exc)) from None

    def run(self, parsed_args) -> int:
        self.exit_status = 0
        if self.fleet.may(self.rules) is False:
            raise exceptions.CommandError(self._not_allowed())
        try:
            result = super().run(parsed_args)
        except FleetflowApiError as exc:
            if exc.status == 403:
                raise exceptions.CommandError(f"{self._not_allowed()}: {exc}") from None
            raise exceptions.CommandError(str(exc)) from None
        except requests.ConnectionError as exc:
            raise exceptions.CommandError(
                f"cannot reach fleetflow at {self.fleet.endpoint()}: {exc}") from None
        except click.ClickException as exc:
            # A file or an option read the way the fleetflow command reads it.
            raise exceptions.CommandError(exc.format_message()) from None
        return self.exit_status or result

    def _not_allowed(self) -> str:
        name = getattr(self, "cmd_name", None) or type(self).__name__
        return (f"openstack {name} is not allowed for your roles ({self.fleet.roles()}): "
                f"it needs {' or '.join(self.rules)}")


def raw(parsed_args) -> bool:
    return getattr(parsed_args, "formatter", None) in RAW_FORMATS


def add_queue_arguments(parser) -> None:
    """``--queue``, ``--queue-timeout``, ``--priority`` (as ``fleetflow reserve`` has them)."""
    parser.add_argument("--queue", action="store_true",
                        help="When it does not fit now, wait QUEUED (holding nothing) until "
                             "all of it fits at once, instead of failing")
    parser.add_argument("--queue-timeout", type=float, metavar="<seconds>",
                        help="With --queue: seconds it may wait; then it ends EXPIRED")
    parser.add_argument("--priority", type=int, metavar="<n>",
                        help="With --queue: higher first (0 to the cloud's maximum)")


def queue_fields(parsed_args) -> dict:
    """The request's ``when_full``, ``queue_timeout``, ``priority`` the arguments give."""
    if not parsed_args.queue and (parsed_args.queue_timeout is not None
                                  or parsed_args.priority is not None):
        raise exceptions.CommandError("--queue-timeout and --priority go with --queue")
    fields = {"when_full": "queue"} if parsed_args.queue else {}
    for key in ("queue_timeout", "priority"):
        if getattr(parsed_args, key) is not None:
            fields[key] = getattr(parsed_args, key)
    return fields


class ShowCommand(FleetCommand, command.ShowOne):
    """One object: its view's fields, or the API's object as it is."""

    view: views.View

    def shown(self, parsed_args, item: dict, pairs=None):
        if raw(parsed_args):
            return tuple(item), tuple(item.values())
        pairs = self.view.fields(item) if pairs is None else pairs
        return tuple(k for k, _ in pairs), tuple(views.text(v) for _, v in pairs)


class ListCommand(FleetCommand, command.Lister):
    """A list: its view's columns and rows, or the API's objects as they are."""

    view: views.View

    def listed(self, parsed_args, items: list[dict], columns=None, row=None):
        """``columns`` and ``row`` default to the command's view."""
        columns = self.view.columns if columns is None else columns
        if raw(parsed_args):
            keys = list(dict.fromkeys(key for item in items for key in item)) or list(columns)
            return keys, [[item.get(key) for key in keys] for item in items]
        row = self.view.row if row is None else row
        return columns, [[views.text(v) for v in row(item)] for item in items]


class ActionCommand(FleetCommand):
    """A command that prints nothing when it succeeds (delete)."""
