"""``openstack fleet evacuation create|list|show|resume|skip|revert``,
``openstack fleet host list|show|set`` and ``openstack fleet queue list``
(administrators)."""

from __future__ import annotations

from fleetflow.cli import evacuations as cli_evacuations
from fleetflow.cli import remote, views
from fleetflow.cli.hosts import HOST_STATES
from fleetflow.osc import base


class CreateEvacuation(base.ShowCommand):
    """Move every server off hosts as one durable evacuation"""

    rules = ("evacuations:create",)
    view = views.EVACUATION

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument("hosts", metavar="<host>", nargs="+", help="Host(s) to evacuate")
        parser.add_argument("--mode", required=True, choices=cli_evacuations.MODES,
                            help="rebuild (dead hosts), live, cold, or drain")
        parser.add_argument("--on-error", choices=cli_evacuations.ON_ERROR, default="pause",
                            help="What a server that cannot be moved does to the rest "
                                 "(default: pause)")
        parser.add_argument("--max-parallel", type=int, default=8, metavar="<n>",
                            help="Moves under way at once (default: 8)")
        parser.add_argument("--fallback", choices=cli_evacuations.FALLBACKS, default="none",
                            help="drain: cold-migrate servers that cannot go live")
        parser.add_argument("--target-host", dest="target_hosts", action="append",
                            default=[], metavar="<host>",
                            help="An allowed destination; repeatable")
        parser.add_argument("--reason", metavar="<text>", help="Why")
        parser.add_argument("--wait", action="store_true",
                            help="Wait until it settles or pauses; exit non-zero unless DONE")
        return parser

    def take_action(self, parsed_args):
        client = self.api()
        body = {"hosts": parsed_args.hosts, "mode": parsed_args.mode,
                "on_error": parsed_args.on_error, "max_parallel": parsed_args.max_parallel,
                "fallback": parsed_args.fallback}
        if parsed_args.target_hosts:
            body["target_hosts"] = parsed_args.target_hosts
        if parsed_args.reason is not None:
            body["reason"] = parsed_args.reason
        accepted = client.evacuate(body)
        if not parsed_args.wait:
            return self.shown(parsed_args, client.get_evacuation(accepted["id"]))
        final = cli_evacuations.watch(client, accepted["id"], base.POLL_SECONDS, live=False)
        if final["status"] != "DONE":
            self.exit_status = remote.FAILED_EXIT
            self.log.error("evacuation %s ended %s", final["id"], final["status"])
        return self.shown(parsed_args, final)


class ListEvacuation(base.ListCommand):
    """List evacuations with their progress, newest first"""

    rules = ("evacuations:list",)
    view = views.EVACUATION

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument("--status", metavar="<status>", help="Only in this status")
        parser.add_argument("--host", metavar="<host>", help="Only evacuations of this host")
        return parser

    def take_action(self, parsed_args):
        status = parsed_args.status.upper() if parsed_args.status else None
        return self.listed(parsed_args, self.api().list_evacuations(status=status,
                                                                    host=parsed_args.host))


class _OneEvacuation(base.ShowCommand):
    view = views.EVACUATION

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument("evacuation", metavar="<evacuation>", help="Evacuation id")
        return parser


class ShowEvacuation(_OneEvacuation):
    """Show an evacuation"""

    rules = ("evacuations:show",)

    def take_action(self, parsed_args):
        return self.shown(parsed_args, self.api().get_evacuation(parsed_args.evacuation))


class ResumeEvacuation(_OneEvacuation):
    """Try the failed and pending servers of a paused evacuation again"""

    rules = ("evacuations:resume",)

    def take_action(self, parsed_args):
        return self.shown(parsed_args, self.api().resume_evacuation(parsed_args.evacuation))


class SkipEvacuation(_OneEvacuation):
    """Leave the named servers where they are and go on with the rest"""

    rules = ("evacuations:skip",)

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument("servers", metavar="<server>", nargs="+", help="Server uuid(s)")
        return parser

    def take_action(self, parsed_args):
        return self.shown(parsed_args, self.api().skip_evacuation(parsed_args.evacuation,
                                                                  parsed_args.servers))


class RevertEvacuation(_OneEvacuation):
    """End a paused evacuation where it stands (finished moves stay)"""

    rules = ("evacuations:revert",)

    def take_action(self, parsed_args):
        return self.shown(parsed_args, self.api().revert_evacuation(parsed_args.evacuation))


class ListHost(base.ListCommand):
    """List compute hosts with their effective state, instances and capacity"""

    rules = ("hosts:list",)
    view = views.HOST

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument("--status", choices=HOST_STATES, help="Only hosts in this state")
        for level in ("region", "zone", "rack"):
            parser.add_argument(f"--{level}", metavar=f"<{level}>",
                                help=f"Only hosts of this {level}")
        return parser

    def take_action(self, parsed_args):
        return self.listed(parsed_args, self.api().list_hosts(
            state=parsed_args.status, region=parsed_args.region, zone=parsed_args.zone,
            rack=parsed_args.rack))


class ListQueue(base.ListCommand):
    """List the requests waiting for capacity: position, priority and why each waits"""

    rules = ("queue:list",)
    view = views.QUEUE

    def take_action(self, parsed_args):
        return self.listed(parsed_args, self.api().list_queue())


class ShowHost(base.ShowCommand):
    """Show a compute host"""

    rules = ("hosts:show",)
    view = views.HOST

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument("host", metavar="<host>", help="Host name")
        return parser

    def take_action(self, parsed_args):
        return self.shown(parsed_args, self.api().get_host(parsed_args.host))


class SetHost(ShowHost):
    """Set a host up, down (at once: a forced down), maintenance or disabled"""

    rules = ("hosts:update",)

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument("--state", required=True, choices=HOST_STATES, help="New state")
        parser.add_argument("--reason", metavar="<text>", help="Why (shown with the host)")
        return parser

    def take_action(self, parsed_args):
        return self.shown(parsed_args, self.api().update_host(
            parsed_args.host, parsed_args.state, reason=parsed_args.reason))
