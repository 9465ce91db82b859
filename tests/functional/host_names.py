"""What tests of host visibility share: the restricting policy file, the fleet's names,
and a walk of a whole answer for any of them."""

from __future__ import annotations

import re

import sqlalchemy as sa

# What an operator writes to keep every place name to administrators.
RESTRICTED = '"servers:show_host": "role:admin"\n'
_TOKEN = re.compile(r"[A-Za-z0-9_.-]+")


def restrict_show_host(conf) -> None:
    """Write the policy file the app reads (picked up on the next request)."""
    with open(conf.api.policy_file, "w") as f:
        f.write(RESTRICTED)


def fleet_names(db) -> set[str]:
    """Every host, rack, zone, region and storage backend name of the fleet."""
    from fleetflow.persistence.models import Host, StorageBackend

    with db.session() as session:
        names = set()
        for row in session.execute(sa.select(Host.name, Host.rack, Host.zone, Host.region)):
            names.update(row)
        for row in session.execute(sa.select(StorageBackend.name, StorageBackend.rack,
                                             StorageBackend.zone, StorageBackend.region)):
            names.update(row)
    assert names
    return names


def names_in(body, names: set[str]) -> set[str]:
    """The fleet names found anywhere in ``body`` (keys and values, JSON or XML text)."""
    found: set[str] = set()
    if isinstance(body, dict):
        for key, value in body.items():
            found |= names_in(key, names) | names_in(value, names)
    elif isinstance(body, list | tuple):
        for item in body:
            found |= names_in(item, names)
    elif isinstance(body, str):
        found |= {t for t in _TOKEN.findall(body) if t in names}
    return found
