"""``fleetflow quotas show|set``, ``fleetflow flavors list|show``, ``fleetflow images list|show``.

::

    fleetflow --project p1 quotas show               # the project's limits and usage
    fleetflow quotas show p2                         # any project's (administrators)
    fleetflow quotas set p2 --instances 20 --vcpus 40   # administrators; -1: no limit
    fleetflow --project p1 flavors list
    fleetflow --project p1 images show cirros        # by name or id

Another project's quota is an operator verb: as ``fleetflow flows`` does, the
API is then called as an administrator (``--project`` defaults to ``admin``
and, unless ``--roles`` or ``--token`` is given, the role is ``admin``).
"""

from __future__ import annotations

import click

from fleetflow.cli import remote

# The limits of a quota, in the API's words (the CLI does not import server code).
LIMITS = ("instances", "vcpus", "ram_mb", "volumes", "gigabytes")
UNLIMITED = -1


def _limit_text(value) -> str:
    return "unlimited" if value == UNLIMITED else str(value)


def _print_quota(quota: dict) -> None:
    usage = quota.get("usage") or {}
    source = "defaults" if quota.get("default") else "set for the project"
    remote.table(f"quota of {quota['tenant_id']} ({source})", ["resource", "limit", "used"],
                 [[name, _limit_text(quota.get(name)), usage.get(name)] for name in LIMITS])


@click.group("quotas")
def quotas() -> None:
    """Show a project's limits and usage; set them (administrators)."""


@quotas.command("show")
@click.argument("tenant", required=False)
@remote.api_command
def show_quota(tenant, as_json):
    """Show the project's limits and what it uses now (TENANT: any project's, as an
    administrator)."""
    quota = (remote.client().get_quota() if tenant is None
             else remote.admin_client().get_project_quota(tenant))
    if as_json:
        remote.print_json(quota)
    else:
        _print_quota(quota)


def _limit_option(name: str):
    return click.option(f"--{name.replace('_', '-')}", name, type=click.IntRange(min=UNLIMITED),
                        help=f"Most {name} the project may hold (-1: no limit).")


@quotas.command("set")
@click.argument("tenant")
@_limit_option("instances")
@_limit_option("vcpus")
@_limit_option("ram_mb")
@_limit_option("volumes")
@_limit_option("gigabytes")
@remote.api_command
def set_quota(tenant, as_json, **limits):
    """Set limits of TENANT (administrators); limits not given are kept."""
    given = {name: value for name, value in limits.items() if value is not None}
    if not given:
        raise click.UsageError("nothing to set: give --instances, --vcpus, --ram-mb, "
                               "--volumes or --gigabytes")
    quota = remote.admin_client().set_quota(tenant, **given)
    if as_json:
        remote.print_json(quota)
    else:
        _print_quota(quota)


# -- catalog ----------------------------------------------------------------------------

FLAVOR_FIELDS = ("name", "vcpus", "ram_mb", "disk_gb", "resources", "extra_specs")
IMAGE_FIELDS = ("name", "min_disk_gb", "min_ram_mb")


@click.group("flavors")
def flavors() -> None:
    """List and show the flavors instances are made of."""


@flavors.command("list")
@remote.api_command
def list_flavors(as_json):
    """List flavors, by name."""
    found = remote.client().list_flavors()
    if as_json:
        remote.print_json(found)
        return
    remote.table("flavors", ["id", *FLAVOR_FIELDS[:5]],
                 [[f["id"], *(remote.text(f.get(k)) for k in FLAVOR_FIELDS[:5])]
                  for f in found])


@flavors.command("show")
@click.argument("flavor")
@remote.api_command
def show_flavor(flavor, as_json):
    """Show one flavor (by name or id)."""
    found = remote.client().get_flavor(flavor)
    if as_json:
        remote.print_json(found)
    else:
        remote.fields(f"flavor {found['id']}", [(k, found.get(k)) for k in FLAVOR_FIELDS])


@click.group("images")
def images() -> None:
    """List and show the images instances boot from."""


@images.command("list")
@remote.api_command
def list_images(as_json):
    """List images, by name."""
    found = remote.client().list_images()
    if as_json:
        remote.print_json(found)
        return
    remote.table("images", ["id", *IMAGE_FIELDS], [[i["id"], *(i.get(k) for k in IMAGE_FIELDS)]
                                                   for i in found])


@images.command("show")
@click.argument("image")
@remote.api_command
def show_image(image, as_json):
    """Show one image (by name or id)."""
    found = remote.client().get_image(image)
    if as_json:
        remote.print_json(found)
    else:
        remote.fields(f"image {found['id']}", [(k, found.get(k)) for k in IMAGE_FIELDS])
