"""``openstack fleet flow list|show|resume|revert`` and ``openstack fleet audit``.

Flows: an administrator sees every flow (``/v2/admin/flows``), a member the
project's own; resume and revert are an administrator's. Which one the caller
is comes from the permissions fleetflow answered.
"""

from __future__ import annotations

from fleetflow.cli import flows as cli_flows
from fleetflow.cli import views
from fleetflow.osc import base


class _FlowCommand(base.ShowCommand):
    view = views.FLOW

    def operator(self) -> bool:
        return bool(self.fleet.may(("flows:admin_list",)))


class ListFlow(base.ListCommand):
    """List flows (a member: the project's own), newest first"""

    rules = ("flows:list", "flows:admin_list")
    view = views.FLOW

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument("--status", choices=cli_flows.STATES, type=str.upper,
                            help="Only flows in this state (PAUSED: waiting for an operator)")
        parser.add_argument("--project", metavar="<project>",
                            help="Only this project's flows (administrators)")
        return parser

    def take_action(self, parsed_args):
        client = self.api()
        if self.fleet.may(("flows:admin_list",)):
            found = client.list_flows(state=parsed_args.status, tenant=parsed_args.project)
        else:
            if parsed_args.project:
                raise base.exceptions.CommandError(
                    "--project is for administrators: a member lists the project's own flows")
            found = client.list_project_flows(state=parsed_args.status)
        return self.listed(parsed_args, found)


class ShowFlow(_FlowCommand):
    """Show a flow and its failure"""

    rules = ("flows:show", "flows:admin_show")

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument("flow", metavar="<flow>", help="Flow id")
        return parser

    def take_action(self, parsed_args):
        client = self.api()
        flow = (client.get_flow(parsed_args.flow) if self.operator()
                else client.get_project_flow(parsed_args.flow))
        return self.shown(parsed_args, flow)


class ResumeFlow(ShowFlow):
    """Resume a stopped flow (crashed, suspended, paused on error) from its checkpoint"""

    rules = ("flows:resume",)

    def take_action(self, parsed_args):
        return self.shown(parsed_args, self.api().resume_flow(parsed_args.flow))


class RevertFlow(ShowFlow):
    """Revert a paused, suspended or failed flow"""

    rules = ("flows:revert",)

    def take_action(self, parsed_args):
        return self.shown(parsed_args, self.api().revert_flow(parsed_args.flow))


class Audit(base.ListCommand):
    """List every mismatch between placement, rows, hosts, groups and flows"""

    rules = ("audit:run",)

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument("--strict", action="store_true",
                            help="Flows have settled: transitional states are mismatches too")
        parser.add_argument("--host", dest="hosts", action="append", default=[],
                            metavar="<host>", help="Ask only this host; repeatable")
        return parser

    def take_action(self, parsed_args):
        params = {"strict": "true" if parsed_args.strict else "false"}
        if parsed_args.hosts:
            params["host"] = parsed_args.hosts
        result = self.api().get("/v2/admin/audit", **params)["audit"]
        if not result["clean"]:
            # As fleetflow audit: a mismatch is exit status 1.
            self.exit_status = 1
        self.app.stderr.write(views.audit_summary(result) + "\n")
        return self.listed(parsed_args, result["mismatches"], views.MISMATCH_COLUMNS,
                           views.mismatch_row)
