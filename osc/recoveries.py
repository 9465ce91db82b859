"""``openstack fleet recovery list|show|pause|resume`` and ``openstack fleet capacity``
(administrators)."""

from __future__ import annotations

from fleetflow.cli import views
from fleetflow.osc import base

BASE = "/v2/admin/recoveries"


class ListRecovery(base.ListCommand):
    """List the recovery monitor's detections of dead hosts, newest first"""

    rules = ("recoveries:list",)
    view = views.RECOVERY

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument("--status", metavar="<status>", help="Only in this status")
        parser.add_argument("--host", metavar="<host>", help="Only recoveries of this host")
        return parser

    def take_action(self, parsed_args):
        status = parsed_args.status.upper() if parsed_args.status else None
        found = list(self.api().iterate(BASE, "recoveries", status=status,
                                        host=parsed_args.host))
        return self.listed(parsed_args, found)


class ShowRecovery(base.ShowCommand):
    """Show one recovery with its timeline"""

    rules = ("recoveries:show",)
    view = views.RECOVERY

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument("recovery", metavar="<recovery>", help="Recovery id")
        return parser

    def take_action(self, parsed_args):
        recovery = self.api().get(f"{BASE}/{parsed_args.recovery}")["recovery"]
        timeline = "\n".join(" ".join(views.text(v) for v in views.timeline_row(event))
                             for event in recovery.get("timeline") or [])
        return self.shown(parsed_args, recovery,
                          [*self.view.fields(recovery), ("timeline", timeline)])


class _Switch(base.ShowCommand):
    action: str

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument("--reason", metavar="<text>", help="Why (a maintenance window)")
        return parser

    def take_action(self, parsed_args):
        body = {"recovery": {"reason": parsed_args.reason}} if parsed_args.reason else {}
        switch = self.api().post(f"{BASE}/{self.action}", body)["recovery"]
        return self.shown(parsed_args, switch, [
            ("enabled", switch.get("enabled")), ("paused", switch.get("paused")),
            ("reason", switch.get("reason")), ("storm guard", views.switch_text(switch))])


class PauseRecovery(_Switch):
    """Stop automatic fencing and evacuation cluster-wide; detection goes on"""

    rules = ("recoveries:pause",)
    action = "pause"


class ResumeRecovery(_Switch):
    """Let the recovery monitor act again"""

    rules = ("recoveries:resume",)
    action = "resume"


class ShowCapacity(base.ListCommand):
    """Capacity of the fleet: used/total per region, zone, rack and host"""

    rules = ("capacity:show",)

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument("--region", metavar="<region>", help="Only this region")
        parser.add_argument("--zone", metavar="<zone>", help="Only this zone")
        parser.add_argument("--by", choices=("region", "zone", "rack", "host"),
                            default="zone", help="The deepest level listed (default: zone)")
        return parser

    def take_action(self, parsed_args):
        report = self.api().capacity(region=parsed_args.region, zone=parsed_args.zone,
                                     by=parsed_args.by)
        columns = views.CAPACITY_COLUMNS
        rows = views.capacity_rows(report)
        if base.raw(parsed_args):
            return columns, rows
        return columns, [[views.text(v) for v in row] for row in rows]
