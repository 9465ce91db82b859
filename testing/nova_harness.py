"""Nova's own functional harness, served over real HTTP: loaded only in the harness's process.

Importing this module imports Nova, which chooses its concurrency (eventlet or native
threads) on import: only ``fleetflow.testing.openstack_cloud``'s ``main`` imports it, in a
process of its own, after it has set ``OS_NOVA_DISABLE_EVENTLET_PATCHING``.

:class:`ServedCloud` is one test of Nova's ``ProviderUsageBaseTestCase``: its ``setUp``
builds the cloud (databases, Placement, the API, conductor, scheduler, fakes of Glance,
Neutron and Cinder), its test method starts the computes, serves the API and Placement on
loopback ports and runs until it is told to stop. It is run by testtools' runner (see
:func:`serve`), never by calling ``setUp`` by hand.
"""

from __future__ import annotations

# NOTE: before every other Nova module: importing Nova's functional package applies the
# concurrency mode chosen by OS_NOVA_DISABLE_EVENTLET_PATCHING, which fails once another
# Nova module has imported eventlet (through futurist).
import nova.tests.functional  # noqa: F401

# isort: split

import concurrent.futures
import importlib.metadata
import json
import logging
import os
import queue
import socketserver
import sys
import threading
import time
from unittest import mock
from wsgiref import simple_server

import fixtures
import testtools
from nova import context as nova_context
from nova.tests.functional import integrated_helpers

from fleetflow.testing import harness_identity

LOG = logging.getLogger("fleetflow.testing.nova_harness")

#: Seconds between two heartbeats of every service, and after which one without a
#: heartbeat is down: short, so a stopped compute reads ``down`` within seconds, yet long
#: enough for a beat that is late because the machine is loaded. With 5 s, a host busy
#: with 40 builds, or a harness beside a test suite on 2 cores, was seen read down while
#: it ran, and Nova's scheduler then refused it.
REPORT_INTERVAL = 2
SERVICE_DOWN_TIME = 20
#: Where the control requests are answered, under the compute API's root.
CONTROL_PREFIX = "/_harness/"
#: Longest sleep of an idle RPC listener or pool thread. oslo.messaging's fake driver,
#: which Nova's services talk over in one process, wakes each listener every 50 ms to look
#: for a message, and futurist wakes each idle pool thread every second to see whether it
#: should stop: with 10 computes, some 20 listeners and 130 pool threads took 40% of a
#: core while the harness had nothing to do, time taken from the tests beside it. Here a
#: listener sleeps until a message is delivered (:class:`_Doorbell`) and a pool thread
#: until work or its stop arrives (:func:`_wait_for_work`); this is only how long either
#: sleeps when nothing comes.
IDLE_WAKE = 5.0
#: Threads of each RPC server's pool. oslo.messaging's default is 64, and futurist's
#: pool starts a new thread for every message until it has them all: after a few dozen
#: servers had come and gone, a harness of 10 hosts held some 500 threads. Nova's
#: handlers that wait on another service (a live migration's checks call the other
#: host) need a few; 8 keeps a pool from waiting on itself with the moves the tests and
#: bench run at once.
RPC_POOL_SIZE = 8


class _Doorbell:
    """Rung by every delivery of oslo.messaging's fake driver; its listeners sleep on it.

    A listener's poll loop checks its queues, then sleeps: it sleeps only if nothing was
    delivered since its previous sleep ended (before that check), so a message delivered
    between its check and its sleep wakes it at once.
    """

    def __init__(self) -> None:
        self._rung = threading.Condition()
        self._rings = 0
        self._seen = threading.local()

    def ring(self) -> None:
        with self._rung:
            self._rings += 1
            self._rung.notify_all()

    def sleep(self, _seconds: float) -> None:
        with self._rung:
            if getattr(self._seen, "rings", None) == self._rings:
                self._rung.wait(IDLE_WAKE)
            self._seen.rings = self._rings


_DOORBELL = _Doorbell()


class _ListenerClock:
    """``time`` as the fake driver sees it: a listener's idle pause is a doorbell wait."""

    time = staticmethod(time.time)
    sleep = staticmethod(_DOORBELL.sleep)


def _delivered(deliver):
    def deliver_and_ring(self, *args, **kwargs):
        try:
            return deliver(self, *args, **kwargs)
        finally:
            _DOORBELL.ring()
    return deliver_and_ring


def _stopped(stop):
    def stop_and_ring(self):
        stop(self)
        _DOORBELL.ring()  # its poll loop sees the stop now, not after IDLE_WAKE
    return stop_and_ring


#: Put in a pool's queue by each stopping worker, so that one waiting wakes at once.
_WAKE = object()


def _wait_for_work(self):
    """futurist's ThreadWorker._wait_for_work, sleeping until work, a stop or IDLE_WAKE."""
    from futurist import _thread

    self.idle = True
    while True:
        try:
            work = self.work_queue.get(True, IDLE_WAKE)
        except queue.Empty:
            work = None
        if work is _WAKE:
            self.work_queue.task_done()
            work = None
        if work is not None:
            self.idle = False
            return work
        if self._is_dying():
            raise _thread._Stopping()


def _stop_worker(self):
    self.should_stop = True
    self.work_queue.put(_WAKE)


class ServedCloud(integrated_helpers.ProviderUsageBaseTestCase):
    """Nova's functional cloud, kept up and served until :attr:`stop_requested` is set."""

    compute_driver = "fake.MediumFakeDriver"
    #: Set by :func:`serve` before the run.
    host_names: list[str] = []
    on_ready = None
    log_handler: logging.Handler | None = None
    stop_requested: threading.Event | None = None

    def setUp(self):
        self._sleep_until_woken()
        # NOTE: Nova's ServiceFixture leaves heartbeats as they are: every service beats
        # each report_interval (10 s) and reads down service_down_time (60 s) after its
        # last beat, so a stopped compute would read up for a minute. Set before the
        # base setUp: the servicegroup drivers read them when they are built, and every
        # service (conductor and scheduler too) must beat faster than it is declared down.
        self.flags(report_interval=REPORT_INTERVAL, service_down_time=SERVICE_DOWN_TIME)
        _register_messaging_options()
        self.flags(executor_thread_pool_size=RPC_POOL_SIZE)
        self.flags(api_paste_config=_api_paste_config(), group="wsgi")
        # NOTE: Nova's default quotas (10 instances, 20 cores a project) would refuse
        # the fleets the tests build; every project in the harness is unlimited.
        self.flags(instances=-1, cores=-1, ram=-1, server_groups=-1,
                   server_group_members=-1, group="quota")
        super().setUp()

    def _sleep_until_woken(self):
        from oslo_messaging._drivers import impl_fake

        for target, value in (
                ("oslo_messaging._drivers.impl_fake.time", _ListenerClock),
                ("oslo_messaging._drivers.impl_fake.FakeExchange.deliver_message",
                 _delivered(impl_fake.FakeExchange.deliver_message)),
                ("oslo_messaging._drivers.impl_fake.FakeListener.stop",
                 _stopped(impl_fake.FakeListener.stop)),
                ("futurist._thread.ThreadWorker._wait_for_work", _wait_for_work),
                ("futurist._thread.ThreadWorker.stop", _stop_worker)):
            self.useFixture(fixtures.MonkeyPatch(target, value))

    def test_serve(self):
        self._quiet_logs()
        self._identity_from_token()
        self._cells_without_global_switching()
        # NOTE: the DB servicegroup driver sends a service's first heartbeat 5 s after it
        # starts; a restarted compute would read down until then. Beat at once.
        self.useFixture(fixtures.MonkeyPatch(
            "nova.servicegroup.api.INITIAL_REPORTING_DELAY", 0))
        for name in self.host_names:
            self._start_compute(name)
        self.stopped: set[str] = set()
        self.controls: queue.Queue = queue.Queue()

        compute_app = self.api_fixture.app()
        placement_app = self._placement_app()
        compute_server = _serve_http(_ControlDispatcher(compute_app, self.controls))
        placement_server = _serve_http(placement_app)
        self.addCleanup(placement_server.shutdown)
        self.addCleanup(compute_server.shutdown)
        type(self).on_ready(_url(compute_server), _url(placement_server))
        # NOTE: host stops and starts are run here, on the test's own thread, where
        # every other fixture of the test was used; the HTTP threads only ask.
        while not self.stop_requested.is_set():
            try:
                action, host, answer = self.controls.get(timeout=0.2)
            except queue.Empty:
                continue
            try:
                answer.set_result(self._control(action, host))
            except Exception as error:  # the asking request reports it as a 500
                LOG.exception("harness control %s %s failed", action, host)
                answer.set_exception(error)

    def _quiet_logs(self):
        # NOTE: Nova's StandardLogging keeps every record in memory for a test's report;
        # a harness that runs for an hour would grow without end. Records go to the
        # handler the process chose (stderr or a log file) instead, from INFO up.
        root = logging.getLogger()
        root.handlers = [self.log_handler]
        root.setLevel(logging.INFO)

    def _identity_from_token(self):
        # NOTE: Nova 34 has no noauth: its harness builds the request context from
        # X-Auth-User/X-Auth-Project-Id headers a stock client never sends. Here the
        # token is ``user:project`` (admin roles when the user is admin). Patched inside
        # the test method so it wins over the OSAPIFixture's own patch.
        def context_from_token(env, **kwargs):
            token = env.get("HTTP_X_AUTH_TOKEN") or ""
            user_id, _, project_id = token.partition(":")
            if not user_id:
                user_id = None
            project_id = project_id or user_id
            roles = ["reader", "member"] + (["admin"] if user_id == "admin" else [])
            return nova_context.RequestContext(
                user_id, project_id, is_admin=user_id == "admin", roles=roles, **kwargs)

        self.useFixture(fixtures.MonkeyPatch(
            "nova.api.auth.NovaKeystoneContext._create_context", context_from_token))

    def _cells_without_global_switching(self):
        # NOTE: Nova's CellDatabases fixture points every untargeted database access at
        # the cell targeted last, switched under one process-wide reader-writer lock. With
        # 8 clients creating servers at once the API hung for good, its request threads
        # waiting on that lock's read side. Here, as in a real deployment, a targeted
        # context uses its cell's database and an untargeted one Nova's default database
        # (cell1, where every compute lives); nothing global changes, no lock is needed.
        cells = nova_context.target_cell.__self__
        default_cell = cells._default_ctxt_mgr

        def get_context_manager(context):
            return getattr(context, "db_connection", None) or default_cell

        self.useFixture(fixtures.MonkeyPatch(
            "nova.db.main.api.get_context_manager", get_context_manager))
        self.useFixture(fixtures.MonkeyPatch("nova.context.target_cell",
                                             cells._real_target_cell))

    def _placement_app(self):
        import wsgi_intercept

        for app_factory, script_name in wsgi_intercept._wsgi_intercept.values():
            if script_name == "/placement":
                return app_factory()
        raise RuntimeError("the Placement fixture installed no wsgi-intercept")

    def _control(self, action, host):
        if action == "list":
            return 200, {name: self._state(name) for name in self.computes}
        if host not in self.computes:
            return 404, {"error": f"no compute host {host}"}
        if action == "stop" and host not in self.stopped:
            # NOTE: Service.stop stops both RPC servers and the heartbeat timer: the
            # host takes no more RPC and os-services reads it down after
            # SERVICE_DOWN_TIME, as a dead nova-compute does.
            self.computes[host].stop()
            self.stopped.add(host)
        elif action == "start" and host in self.stopped:
            self._restart_compute(host)
            self.stopped.discard(host)
        return 200, {host: self._state(host)}

    def _restart_compute(self, host):
        # NOTE: a new Service and ComputeManager, as a restarted nova-compute has
        # (restart_compute_service's way, minus its stop, already done). The old fake
        # driver is handed over so the host's servers survive the restart.
        old_driver = self.computes[host].manager.driver
        cell_name = self.host_mappings[host].cell_mapping.name
        with mock.patch("nova.virt.driver.load_compute_driver", return_value=old_driver):
            self.computes[host] = self.start_service("compute", host=host, cell_name=cell_name)

    def _state(self, host):
        return "stopped" if host in self.stopped else "up"


def _register_messaging_options() -> None:
    # oslo.messaging registers its RPC servers' pool option when it builds the first one,
    # after setUp's flags are set: register it now, from the list it gives the config
    # generator (a copy: registering it again later is a no-op, not a duplicate).
    import nova.conf
    from oslo_messaging import opts

    for group, options in opts.list_opts():
        for option in options:
            if group is None and option.name == "executor_thread_pool_size":
                nova.conf.CONF.register_opt(option)


def _api_paste_config() -> str:
    # NOTE: the wheel installs api-paste.ini under <prefix>/etc/nova/, but Nova looks
    # under <site-packages>/etc/nova/ by default. The wheel's record says where it is.
    for installed in importlib.metadata.files("nova") or ():
        if installed.name == "api-paste.ini" and "etc" in installed.parts:
            return os.path.normpath(installed.locate())
    raise RuntimeError("the nova distribution has no etc/nova/api-paste.ini")


class _ControlDispatcher:
    """The compute API, with ``/_harness/`` and the identity service's tokens
    (``/identity/v3``) answered by the harness itself."""

    def __init__(self, nova_app, controls: queue.Queue):
        self.nova_app = nova_app
        self.controls = controls

    def __call__(self, environ, start_response):
        path = environ.get("PATH_INFO", "")
        headers = {}
        if path.startswith(harness_identity.PREFIX):
            status, headers, body = harness_identity.answer(environ)
        elif path.startswith(CONTROL_PREFIX):
            status, body = self._answer(environ["REQUEST_METHOD"], path[len(CONTROL_PREFIX):])
        else:
            return self.nova_app(environ, start_response)
        payload = json.dumps(body).encode()
        start_response(f"{status} {_REASONS[status]}",
                       [("Content-Type", "application/json"),
                        ("Content-Length", str(len(payload))), *headers.items()])
        return [payload]

    def _answer(self, method, route):
        parts = [part for part in route.split("/") if part]
        if parts == ["hosts"] and method == "GET":
            return self._ask("list", None)
        if len(parts) == 3 and parts[0] == "hosts" and parts[2] in ("stop", "start"):
            if method != "POST":
                return 405, {"error": "POST only"}
            return self._ask(parts[2], parts[1])
        return 404, {"error": f"no harness route {route}"}

    def _ask(self, action, host):
        answer = concurrent.futures.Future()
        self.controls.put((action, host, answer))
        try:
            return answer.result(timeout=120)
        except Exception as error:
            return 500, {"error": f"{type(error).__name__}: {error}"}


_REASONS = {200: "OK", 201: "Created", 401: "Unauthorized", 404: "Not Found",
            405: "Method Not Allowed", 500: "Internal Server Error"}


class _ThreadingWSGIServer(socketserver.ThreadingMixIn, simple_server.WSGIServer):
    # A request's thread must not keep the process alive at its exit.
    daemon_threads = True
    # socketserver's accept queue is 5: a reservation of 100 opening its connections
    # at once had them reset. A real API's front end (Apache, uWSGI) queues 100 or more.
    request_queue_size = 128


class _QuietHandler(simple_server.WSGIRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - the stdlib's signature
        LOG.debug("%s %s", self.address_string(), format % args)


def _serve_http(app):
    server = simple_server.make_server("127.0.0.1", 0, app, server_class=_ThreadingWSGIServer,
                                       handler_class=_QuietHandler)
    threading.Thread(target=server.serve_forever, name=f"http-{server.server_port}",
                     daemon=True).start()
    return server


def _url(server):
    return f"http://127.0.0.1:{server.server_port}"


def serve(host_names, on_ready, stop_requested, log_handler) -> bool:
    """Run :class:`ServedCloud` under testtools' runner until ``stop_requested`` is set.

    ``on_ready(compute_url, placement_url)`` is called once both are served. Returns
    whether the run went without an error (setUp's included).
    """
    ServedCloud.host_names = list(host_names)
    ServedCloud.on_ready = staticmethod(on_ready)
    ServedCloud.stop_requested = stop_requested
    ServedCloud.log_handler = log_handler
    test = ServedCloud("test_serve")
    result = testtools.TextTestResult(sys.stderr)
    result.startTestRun()
    test.run(result)
    result.stopTestRun()
    return result.wasSuccessful()
