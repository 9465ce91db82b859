"""One openstacksdk connection to the cloud ``[openstack]`` names.

clouds.yaml is found as every OpenStack client finds it (OS_CLIENT_CONFIG_FILE,
./clouds.yaml, ~/.config/openstack/, /etc/openstack/), unless
``[openstack] clouds_yaml`` names the file; the cloud is ``[openstack] cloud``,
else OS_CLOUD.
"""

from __future__ import annotations

import os
import threading

from fleetflow.common.exceptions import InvalidInput

#: Hosts whose connections are pooled, and connections kept to each.
POOL_HOSTS = 10
POOL_CONNECTIONS = 64
_lock = threading.Lock()
_connections: dict[tuple, object] = {}


def cloud_name(conf) -> str | None:
    return conf.openstack.cloud or os.environ.get("OS_CLOUD")


def connect(conf):
    """The process's connection to the configured cloud (one per cloud; thread-safe:
    keystoneauth's session pools its HTTP connections)."""
    key = (conf.openstack.clouds_yaml, cloud_name(conf))
    with _lock:
        connection = _connections.get(key)
        if connection is None:
            connection = _connections[key] = _open(*key)
        return connection


def _open(clouds_yaml: str | None, name: str | None):
    import openstack
    from openstack import config as os_config

    if not name:
        raise InvalidInput("[cloud] driver = openstack needs a cloud: set [openstack] cloud "
                           "(FLEETFLOW_OPENSTACK_CLOUD) or OS_CLOUD")
    files = [clouds_yaml] if clouds_yaml else None
    try:
        region = os_config.OpenStackConfig(config_files=files).get_one(cloud=name)
    except Exception as exc:  # openstacksdk raises its own config errors
        raise InvalidInput(f"cloud {name!r}: {exc}") from exc
    connection = openstack.connection.Connection(config=region)
    _pool_connections(connection)
    return connection


def _pool_connections(connection) -> None:
    # NOTE: requests keeps 10 connections a host; a reservation's builds and an
    # evacuation's moves ask from up to one thread each, and the connections beyond
    # 10 were closed after each request and opened again for the next.
    from requests.adapters import HTTPAdapter

    session = connection.session.session
    for scheme in ("http://", "https://"):
        session.mount(scheme, HTTPAdapter(pool_connections=POOL_HOSTS,
                                          pool_maxsize=POOL_CONNECTIONS))


def forget() -> None:
    """Drop every connection (tests that start a new cloud)."""
    with _lock:
        _connections.clear()
