"""``openstack fleet vcluster create|list|show|set|delete|add|remove``.

A cluster file is what ``fleetflow vclusters create -f`` reads: JSON
(``{"vcluster": {"instances": [...], "groupings": [...]}}`` or the inner object) or
the same document as ``<vcluster>`` XML; ``add`` reads ``{"instances", "groupings"}``.
"""

from __future__ import annotations

import pathlib

from fleetflow.cli import remote, views
from fleetflow.cli import vclusters as cli_vclusters
from fleetflow.osc import base


def _cluster_argument(parser):
    parser.add_argument("vcluster", metavar="<vcluster>", help="Virtual cluster id")


def _file_argument(parser, what: str):
    parser.add_argument("--file", required=True, type=pathlib.Path, metavar="<file>",
                        help=what)


def _wait_argument(parser):
    parser.add_argument("--wait", action="store_true",
                        help="Wait until the cluster settles; exit non-zero unless ACTIVE")


class _Accepting(base.ShowCommand):
    """A change the API takes at once (202): shown as it stands, or as it ended."""

    view = views.VCLUSTER

    def answer(self, parsed_args, client, accepted: dict):
        if not getattr(parsed_args, "wait", False):
            return self.shown(parsed_args, client.get_vcluster(accepted["id"]))
        final = cli_vclusters.watch(client, accepted["id"], base.POLL_SECONDS, live=False)
        if final["status"] != "ACTIVE":
            self.exit_status = remote.FAILED_EXIT
            self.log.error("vcluster %s ended %s", final["id"], final["status"])
        return self.shown(parsed_args, final)


class CreateVCluster(_Accepting):
    """Create a virtual cluster from a file: one flow places and builds every member"""

    rules = ("vclusters:create",)

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument("name", metavar="<name>", help="New cluster name")
        _file_argument(parser, "The cluster document (JSON, or XML: .xml or starting with <)")
        base.add_queue_arguments(parser)
        parser.add_argument("--dry-run", action="store_true",
                            help="Only say whether it fits now (exit 3 when it does not)")
        _wait_argument(parser)
        return parser

    def take_action(self, parsed_args):
        client = self.api()
        cluster = cli_vclusters.read_cluster(parsed_args.file, parsed_args.name,
                                             base.queue_fields(parsed_args))
        send = (client.create_vcluster_xml if isinstance(cluster, bytes)
                else client.create_vcluster)
        if parsed_args.dry_run:
            verdict = send(cluster, dry_run=True)
            self.exit_status = 0 if verdict.get("fits") else remote.DOES_NOT_FIT_EXIT
            return self.shown(parsed_args, verdict, [
                ("fits", verdict["fits"]), ("explanation", verdict.get("explanation")),
                ("instances", [f"{i['name']}@{views.where(i)}"
                               for i in verdict.get("instances") or []])])
        return self.answer(parsed_args, client, send(cluster))


class ListVCluster(base.ListCommand):
    """List the project's virtual clusters with their progress, newest first"""

    rules = ("vclusters:list",)
    view = views.VCLUSTER

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument("--status", metavar="<status>",
                            help="Only clusters in this status (any case)")
        return parser

    def take_action(self, parsed_args):
        status = parsed_args.status.upper() if parsed_args.status else None
        return self.listed(parsed_args, self.api().list_vclusters(status=status))


class ShowVCluster(base.ShowCommand):
    """Show a virtual cluster"""

    rules = ("vclusters:show",)
    view = views.VCLUSTER

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        _cluster_argument(parser)
        return parser

    def take_action(self, parsed_args):
        return self.shown(parsed_args, self.api().get_vcluster(parsed_args.vcluster))


class SetVCluster(base.ShowCommand):
    """Rename a virtual cluster (its members keep their names)"""

    rules = ("vclusters:update",)
    view = views.VCLUSTER

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        _cluster_argument(parser)
        parser.add_argument("--name", required=True, metavar="<name>", help="New name")
        return parser

    def take_action(self, parsed_args):
        return self.shown(parsed_args,
                          self.api().rename_vcluster(parsed_args.vcluster, parsed_args.name))


class AddVCluster(_Accepting):
    """Add members and groupings to a virtual cluster from a JSON file"""

    rules = ("vclusters:update",)

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        _cluster_argument(parser)
        _file_argument(parser, 'JSON: {"instances": [...], "groupings": [...]}')
        _wait_argument(parser)
        return parser

    def take_action(self, parsed_args):
        instances, groupings = cli_vclusters.read_members(parsed_args.file)
        client = self.api()
        return self.answer(parsed_args, client, client.add_vcluster_members(
            parsed_args.vcluster, instances, groupings))


class RemoveVCluster(_Accepting):
    """Remove one member from a virtual cluster (a volume is detached first)"""

    rules = ("vclusters:update",)

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        _cluster_argument(parser)
        parser.add_argument("member", metavar="<member>", help="Member name")
        _wait_argument(parser)
        return parser

    def take_action(self, parsed_args):
        client = self.api()
        return self.answer(parsed_args, client, client.remove_vcluster_member(
            parsed_args.vcluster, parsed_args.member))


class DeleteVCluster(base.ActionCommand):
    """Delete virtual clusters: a teardown flow deletes every member"""

    rules = ("vclusters:delete",)

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument("vclusters", metavar="<vcluster>", nargs="+",
                            help="Virtual cluster id(s)")
        return parser

    def take_action(self, parsed_args):
        client = self.api()
        for vcluster in parsed_args.vclusters:
            client.delete_vcluster(vcluster)
