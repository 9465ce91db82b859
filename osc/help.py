"""``openstack fleet``: the fleet commands the caller's roles may use.

``openstack fleet --help`` asks for this command's help, so it lists them too.
Without credentials (or when fleetflow cannot say), every command is listed.
"""

from __future__ import annotations

import argparse

from osc_lib.command import command


def _fleet_commands(app) -> list[tuple[str, str]]:
    """``(name, one line)`` of every fleet command the caller may use, sorted."""
    found = []
    for name, entry_point in sorted(app.command_manager):
        if not name.startswith("fleet "):
            continue
        factory = entry_point.load()
        cmd = factory(app, None, cmd_name=name)
        if not cmd.deprecated:
            found.append((name, cmd.get_description().split("\n")[0].rstrip(".")))
    return found


class FleetHelp(command.Command):
    """List the fleet commands your roles may use"""

    auth_required = False

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.formatter_class = argparse.RawDescriptionHelpFormatter
        parser.epilog = "Commands:\n" + self._listing()
        return parser

    def _listing(self) -> str:
        return "".join(f"  {name:<28}  {line}\n" for name, line in _fleet_commands(self.app))

    def take_action(self, parsed_args):
        self.app.stdout.write(self._listing())
        return 0
