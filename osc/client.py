"""The fleetflow API client of one ``openstack`` invocation, and what the caller may do.

The endpoint is ``--os-fleetflow-url`` (``OS_FLEETFLOW_URL``), else the Keystone
catalog's ``fleetflow`` service, else (``--os-auth-type admin_token``) the
``--os-endpoint`` given. The token is OSC's: a Keystone token, or in fleetflow's
``noauth`` mode ``PROJECT:ROLE[,ROLE]``. The caller's permissions are asked once
per invocation (``GET /v2/{project}/permissions``) and kept.
"""

from __future__ import annotations

import logging

import requests

from fleetflow.api.client import Client, FleetflowApiError

LOG = logging.getLogger(__name__)


class NoCredentials(Exception):
    """The command line names no identity (or no endpoint) to ask fleetflow with."""


class FleetClient:
    def __init__(self, manager):
        self.manager = manager
        self._api: Client | None = None
        self._permissions: dict | None = None
        self._asked = False

    def authenticate_for_help(self, app) -> None:
        """Load the auth plugin that help commands skip, so that help can ask too.

        OSC validates the credentials only for commands that need them; help does
        not, and its client manager then has no auth plugin. Credentials that do not
        validate leave it so: help then hides nothing.
        """
        manager = self.manager
        if self._api is not None or manager._auth_required:
            return
        try:
            manager._cli_options = app.cloud_config.get_one(
                cloud=app.options.cloud, argparse=app.options, validate=True)
        except Exception as exc:  # noqa: BLE001 - no usable credentials: show everything
            LOG.debug("help without credentials: %s", exc)
            return
        manager._auth_required = True

    # -- the API client ---------------------------------------------------------------

    def api(self) -> Client:
        """fleetflow's own API client, authenticated as OSC is (raises NoCredentials)."""
        if self._api is None:
            self._api = self._connect()
        return self._api

    def _connect(self) -> Client:
        manager = self.manager
        try:
            manager.setup_auth()
            token = manager.session.get_token()
        except Exception as exc:  # noqa: BLE001 - any auth failure: no identity to ask with
            raise NoCredentials(f"no credentials: {exc}") from exc
        url = self.endpoint()
        if not url:
            raise NoCredentials("no fleetflow endpoint: give --os-fleetflow-url, or register "
                                "the 'fleetflow' service in the catalog")
        return Client(url, project_id=self._project(), token=token)

    def endpoint(self) -> str | None:
        from fleetflow.osc.plugin import SERVICE_TYPE

        manager = self.manager
        url = manager._cli_options.config.get("fleetflow_url")
        if url:
            return url
        return manager.get_endpoint_for_service_type(
            SERVICE_TYPE, region_name=manager.region_name, interface=manager.interface)

    def _project(self) -> str | None:
        """The token's project from Keystone; None for ``admin_token``, whose noauth
        token (``PROJECT:ROLE[,ROLE]``) names it (the API client reads it there)."""
        manager = self.manager
        try:
            return manager.auth.get_project_id(manager.session)
        except Exception:  # noqa: BLE001 - a plugin without a project (admin_token)
            return None

    # -- what the caller may do ---------------------------------------------------------

    def permissions(self) -> dict | None:
        """``{"allowed": [...], "denied": [...], "roles": [...]}``, or None when it cannot
        be known (no credentials, an API without the route): then nothing is hidden."""
        if not self._asked:
            self._asked = True
            try:
                self._permissions = self.api().get_permissions()
            except (NoCredentials, FleetflowApiError, requests.RequestException,
                    ValueError) as exc:
                LOG.debug("permissions unknown: %s", exc)
        return self._permissions

    def may(self, rules: tuple[str, ...]) -> bool | None:
        """Whether any of ``rules`` is allowed (None: unknown)."""
        if not rules:
            return None
        known = self.permissions()
        if known is None:
            return None
        return any(rule in known["allowed"] for rule in rules)

    def roles(self) -> str:
        known = self.permissions() or {}
        return ",".join(known.get("roles") or ()) or "none"
