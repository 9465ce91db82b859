"""``openstack fleet reservation create|list|show|delete``.

::

    openstack fleet reservation create web --count 10 --flavor m1.small \\
        --capability gpu=true --group web --wait
"""

from __future__ import annotations

from fleetflow.cli import remote, views
from fleetflow.cli import reservations as cli_reservations
from fleetflow.cli.groups import find_group
from fleetflow.osc import base

# What --wait counts as done; any other settled status is a non-zero exit.
WANTED = ("ACTIVE",)


class CreateReservation(base.ShowCommand):
    """Reserve N instances in one request: one flow places and boots them all"""

    rules = ("reservations:create",)
    view = views.RESERVATION

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument("name", metavar="<name>",
                            help="Name of the reservation (instances are NAME-0000, ...)")
        counts = parser.add_argument_group("count (give --count, or --min and/or --max)")
        counts.add_argument("--count", type=int, metavar="<n>", help="Exactly this many")
        counts.add_argument("--min", dest="min_count", type=int, metavar="<n>",
                            help="Fewest acceptable")
        counts.add_argument("--max", dest="max_count", type=int, metavar="<n>",
                            help="Most to build")
        parser.add_argument("--flavor", required=True, metavar="<flavor>",
                            help="Flavor name or id")
        parser.add_argument("--image", default="cirros", metavar="<image>",
                            help="Image name or id (default: cirros)")
        parser.add_argument("--capability", dest="capabilities", action="append", default=[],
                            metavar="<key=value>",
                            help="Host capability each instance needs (gpu=true, cores>=4); "
                                 "repeatable")
        parser.add_argument("--group", metavar="<group>",
                            help="Server group id or name (all instances join it)")
        parser.add_argument("--policy", choices=("all-or-nothing", "best-effort"),
                            default="all-or-nothing", help="What a failure does")
        parser.add_argument("--on-error", choices=("revert", "pause"),
                            help="When an instance runs out of hosts: revert (the default) "
                                 "or pause for an operator")
        parser.add_argument("--volume-gb", type=int, metavar="<gb>",
                            help="A data volume per instance")
        base.add_queue_arguments(parser)
        parser.add_argument("--dry-run", action="store_true",
                            help="Only say whether it fits now (exit 3 when it does not)")
        parser.add_argument("--wait", action="store_true",
                            help="Wait until it settles; exit non-zero unless ACTIVE")
        return parser

    def take_action(self, parsed_args):
        client = self.api()
        body = {"name": parsed_args.name, "flavor_ref": parsed_args.flavor,
                "image_ref": parsed_args.image, "policy": parsed_args.policy,
                "capabilities": remote.key_values(tuple(parsed_args.capabilities),
                                                  "--capability")}
        for key in ("count", "min_count", "max_count", "volume_gb", "on_error"):
            if getattr(parsed_args, key) is not None:
                body[key] = getattr(parsed_args, key)
        body.update(base.queue_fields(parsed_args))
        if parsed_args.group:
            body["group_id"] = find_group(client, parsed_args.group, "--group")["id"]
        if parsed_args.dry_run:
            verdict = client.reserve(body, dry_run=True)
            self.exit_status = 0 if verdict.get("fits") else remote.DOES_NOT_FIT_EXIT
            return self.shown(parsed_args, verdict, views.dry_run_fields(verdict))
        accepted = client.reserve(body)
        if not parsed_args.wait:
            return self.shown(parsed_args, client.get_reservation(accepted["id"]))
        final = cli_reservations.watch(client, accepted["id"], base.POLL_SECONDS,
                                       show_bar=False, instances=True)
        if final["status"] not in WANTED:
            self.exit_status = remote.FAILED_EXIT
            self.log.error("reservation %s ended %s", final["id"], final["status"])
        return self.shown(parsed_args, final)


class ListReservation(base.ListCommand):
    """List the project's reservations with their progress, newest first"""

    rules = ("reservations:list",)
    view = views.RESERVATION

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument("--status", metavar="<status>",
                            help="Only reservations in this status (any case)")
        return parser

    def take_action(self, parsed_args):
        status = parsed_args.status.upper() if parsed_args.status else None
        return self.listed(parsed_args, self.api().list_reservations(status=status))


class ShowReservation(base.ShowCommand):
    """Show a reservation"""

    rules = ("reservations:show",)
    view = views.RESERVATION

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument("reservation", metavar="<reservation>", help="Reservation id")
        return parser

    def take_action(self, parsed_args):
        return self.shown(parsed_args, self.api().get_reservation(parsed_args.reservation))


class DeleteReservation(base.ActionCommand):
    """Delete reservations: a teardown flow deletes every instance"""

    rules = ("reservations:delete",)

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument("reservations", metavar="<reservation>", nargs="+",
                            help="Reservation id(s)")
        return parser

    def take_action(self, parsed_args):
        client = self.api()
        for reservation in parsed_args.reservations:
            client.delete_reservation(reservation)
