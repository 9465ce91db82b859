"""``openstack fleet group create|list|show|set|delete``: server groups."""

from __future__ import annotations

from fleetflow.cli import remote, views
from fleetflow.cli.groups import POLICIES, find_group
from fleetflow.osc import base


def _group_argument(parser):
    parser.add_argument("group", metavar="<group>", help="Group id or name")


class CreateGroup(base.ShowCommand):
    """Create an empty server group; instances join it through a reservation's --group"""

    rules = ("groups:create",)
    view = views.GROUP

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument("name", metavar="<name>", help="New group name")
        parser.add_argument("--policy", dest="policies", action="append", default=[],
                            choices=POLICIES, help="Placement rule; repeatable")
        parser.add_argument("--scope", choices=("host", "rack", "zone"), default="host",
                            help="Where (anti-)affinity applies (default: host)")
        parser.add_argument("--max-per-host", type=int, metavar="<n>",
                            help="Members per host at most")
        parser.add_argument("--property", dest="metadata", action="append", default=[],
                            metavar="<key=value>", help="Metadata; repeatable")
        parser.add_argument("--capability", dest="capabilities", action="append",
                            default=[], metavar="<key=value>",
                            help="Capability every member's host must have; repeatable")
        return parser

    def take_action(self, parsed_args):
        body = {"name": parsed_args.name, "policies": parsed_args.policies,
                "scope": parsed_args.scope,
                "metadata": remote.key_values(tuple(parsed_args.metadata), "--property"),
                "capabilities": remote.key_values(tuple(parsed_args.capabilities),
                                                  "--capability")}
        if parsed_args.max_per_host is not None:
            body["max_per_host"] = parsed_args.max_per_host
        return self.shown(parsed_args, self.api().create_group(body))


class ListGroup(base.ListCommand):
    """List the project's server groups"""

    rules = ("groups:list",)
    view = views.GROUP

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument("--name", metavar="<name>", help="Only groups of this name")
        return parser

    def take_action(self, parsed_args):
        return self.listed(parsed_args, self.api().list_groups(name=parsed_args.name))


class ShowGroup(base.ShowCommand):
    """Show a server group with its members"""

    rules = ("groups:show",)
    view = views.GROUP

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        _group_argument(parser)
        return parser

    def take_action(self, parsed_args):
        return self.shown(parsed_args, find_group(self.api(), parsed_args.group))


class SetGroup(base.ShowCommand):
    """Change a group's name or properties at any time; its rules only while it is empty"""

    rules = ("groups:update",)
    view = views.GROUP

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        _group_argument(parser)
        parser.add_argument("--name", metavar="<name>", help="New name")
        parser.add_argument("--property", dest="metadata", action="append", default=[],
                            metavar="<key=value>",
                            help="Replace the metadata with these pairs; repeatable")
        parser.add_argument("--no-property", action="store_true", help="Remove all metadata")
        parser.add_argument("--policy", dest="policies", action="append", default=[],
                            choices=POLICIES, help="Replace the policies (only while empty)")
        parser.add_argument("--max-per-host", type=int, metavar="<n>",
                            help="Members per host at most (only while empty)")
        return parser

    def take_action(self, parsed_args):
        changes: dict = {}
        if parsed_args.name is not None:
            changes["name"] = parsed_args.name
        if parsed_args.metadata or parsed_args.no_property:
            changes["metadata"] = remote.key_values(tuple(parsed_args.metadata), "--property")
        if parsed_args.policies:
            changes["policies"] = parsed_args.policies
        if parsed_args.max_per_host is not None:
            changes["max_per_host"] = parsed_args.max_per_host
        if not changes:
            raise base.exceptions.CommandError(
                "nothing to change: give --name, --property, --policy ...")
        client = self.api()
        group = find_group(client, parsed_args.group)
        return self.shown(parsed_args, client.update_group(group["id"], changes))


class DeleteGroup(base.ActionCommand):
    """Delete empty server groups"""

    rules = ("groups:delete",)

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument("groups", metavar="<group>", nargs="+", help="Group id(s) or name(s)")
        return parser

    def take_action(self, parsed_args):
        client = self.api()
        for group in parsed_args.groups:
            client.delete_group(find_group(client, group)["id"])
