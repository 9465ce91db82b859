"""What python-openstackclient looks for in a plugin (``openstack.cli.extension``).

OSC imports this module at start-up, adds :func:`build_option_parser`'s options
to its own, loads the commands of the ``openstack.fleet.v1`` entry points and
calls :func:`make_client` the first time a command needs ``client_manager.fleet``.
"""

from __future__ import annotations

from osc_lib import utils

API_NAME = "fleet"
API_VERSION_OPTION = "os_fleet_api_version"
API_VERSIONS = {"1": "fleetflow.osc.client.FleetClient"}
DEFAULT_API_VERSION = "1"
# The service type fleetflow is registered as in the Keystone catalog.
SERVICE_TYPE = "fleetflow"


def make_client(instance):
    """The fleetflow client of one invocation, over OSC's client manager ``instance``."""
    from fleetflow.osc.client import FleetClient

    return FleetClient(instance)


def build_option_parser(parser):
    parser.add_argument(
        "--os-fleet-api-version", metavar="<fleet-api-version>",
        default=utils.env("OS_FLEET_API_VERSION", default=DEFAULT_API_VERSION),
        help=f"fleetflow API version, default={DEFAULT_API_VERSION} "
             "(Env: OS_FLEET_API_VERSION)")
    parser.add_argument(
        "--os-fleetflow-url", metavar="<url>", default=utils.env("OS_FLEETFLOW_URL"),
        help=f"fleetflow API endpoint, instead of the catalog's {SERVICE_TYPE!r} service "
             "(Env: OS_FLEETFLOW_URL)")
    return parser
