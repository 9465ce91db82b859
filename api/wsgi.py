"""The WSGI entry point of the API: ``fleetflow.api.wsgi:application``.

For gunicorn, uwsgi or mod_wsgi (``docs/deployment.md``)::

    FLEETFLOW_CONFIG=/etc/fleetflow/fleetflow.conf \\
        gunicorn --workers 4 --threads 8 fleetflow.api.wsgi:application

The configuration is the file named by ``FLEETFLOW_CONFIG`` (several files:
separated by commas, read in that order), else :data:`DEFAULT_CONFIG_FILE`
when it exists, else the defaults; ``FLEETFLOW_<GROUP>_<OPTION>`` variables
override both, as for every fleetflow command.

Each worker process builds its app on its first request (never in a
server's master process before it forks: database pools, jobboard and RPC
connections do not survive a fork). The API process runs no conductors: a
request that starts a flow posts a job to the jobboard, and the
``fleetflow conductor`` processes run it. Nor does it change the schema:
``fleetflow db upgrade`` does, once, before the API starts.
"""

from __future__ import annotations

import logging
import os
import threading

CONFIG_ENV = "FLEETFLOW_CONFIG"
DEFAULT_CONFIG_FILE = "/etc/fleetflow/fleetflow.conf"

LOG = logging.getLogger(__name__)


def config_files(environ=None) -> list[str]:
    """The configuration files of the WSGI app, in the order they are read."""
    environ = os.environ if environ is None else environ
    named = environ.get(CONFIG_ENV, "").strip()
    if named:
        return [path.strip() for path in named.split(",") if path.strip()]
    return [DEFAULT_CONFIG_FILE] if os.path.exists(DEFAULT_CONFIG_FILE) else []


def build_app(conf):
    """The API app of a distributed deployment: no conductors, no schema changes."""
    from fleetflow.api.app import create_app
    from fleetflow.services import wiring

    database, services = wiring.build(conf)
    return create_app(conf, database, services=services)


class LazyApplication:
    """A WSGI callable that builds the app on its first call in each process."""

    def __init__(self, environ=None):
        self._environ = environ
        self._lock = threading.Lock()
        self._app = None
        self._pid = None

    def load(self):
        """The app of this process, built now if it is not yet."""
        if self._app is None or self._pid != os.getpid():
            with self._lock:
                if self._app is None or self._pid != os.getpid():
                    self._app = self._build()
                    self._pid = os.getpid()
        return self._app

    def _build(self):
        from fleetflow.common import config

        files = config_files(self._environ)
        conf = config.load(config_files=files, environ=self._environ)
        if not logging.getLogger().handlers:
            logging.basicConfig(level=logging.DEBUG if conf.debug else logging.INFO,
                                format="%(asctime)s %(process)d %(levelname)s "
                                       "%(name)s %(message)s")
        LOG.info("fleetflow API in process %d, configuration: %s", os.getpid(),
                 ", ".join(files) or "defaults and FLEETFLOW_* variables")
        return build_app(conf)

    def __call__(self, environ, start_response):
        return self.load()(environ, start_response)


application = LazyApplication()
