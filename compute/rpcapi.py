"""The client tasks use to talk to compute hosts.

Each method mirrors one agent method and takes the host name first. Calls time
out after ``[messaging] rpc_timeout`` (or ``timeout=`` per call); a timeout
raises :class:`OutcomeUnknown`, because the agent acknowledges a request before
running it: the build may have happened. Ask the host (``get_instance``) before
retrying, or use :meth:`ComputeAPI.ensure_built`, which does exactly that.

Errors raised on the host (StaleFence, CapacityExceeded, BuildFailed, HostDead,
InstanceNotFound, SourceAlive, LiveMigrationUnsupported, MoveFailed, VolumeInUse,
BackendUnreachable ...) arrive
as the same classes (oslo.messaging rebuilds them from the allowed remote
modules), so ``except CapacityExceeded`` works here.
"""

from __future__ import annotations

from collections.abc import Mapping

import oslo_messaging
from oslo_messaging.rpc import dispatcher

from fleetflow.common import states
from fleetflow.compute import build_batches, destroy_batches, messaging
from fleetflow.compute.exceptions import ComputeError, OutcomeUnknown
from fleetflow.compute.host_routes import HostRoutes


class ComputeAPI:
    """RPC client of the compute agents (thread-safe; share one per process)."""

    def __init__(self, conf, database=None, routes: HostRoutes | None = None,
                 transport_url: str | None = None, timeout: float | None = None):
        self.conf = conf
        self.transport = messaging.get_transport(conf, transport_url)
        self.timeout = timeout or conf.messaging.rpc_timeout
        self.routes = routes or HostRoutes(database)
        target = oslo_messaging.Target(topic=conf.messaging.topic,
                                       version=messaging.RPC_API_VERSION)
        self._client = oslo_messaging.get_rpc_client(self.transport, target,
                                                     timeout=self.timeout)
        self._batches = build_batches.BuildQueue(self.send_builds, self._remote_error,
                                                 self._unanswered_build)
        # Servers of agents older than batched builds: sent one build a call.
        self._unbatched: set[str] = set()

    # -- plumbing ----------------------------------------------------------

    def _prepare(self, host: str, timeout: float | None):
        return self._client.prepare(server=self.routes.server_for(host),
                                    timeout=timeout or self.timeout)

    def call(self, host: str, method: str, timeout: float | None = None, **kwargs):
        """Call ``method`` on ``host``'s agent and wait for its answer."""
        try:
            return self._prepare(host, timeout).call({}, method, host=host, **kwargs)
        except oslo_messaging.MessagingTimeout as exc:
            self.routes.invalidate(host)
            raise OutcomeUnknown(
                f"{method} on host {host}: no answer within {timeout or self.timeout}s; "
                "the host may or may not have done it", host=host, method=method) from exc
        except oslo_messaging.RemoteError as exc:
            # A failure whose class is not one of ours (a bug on the host).
            raise ComputeError(f"{method} on host {host} failed: {exc.exc_type}: {exc.value}",
                               host=host, method=method) from exc
        except oslo_messaging.MessagingException as exc:
            # The broker failed somewhere between us and the host: we cannot
            # tell whether the request got through.
            self.routes.invalidate(host)
            raise OutcomeUnknown(f"{method} on host {host}: {exc}", host=host,
                                 method=method) from exc

    def cast(self, host: str, method: str, **kwargs) -> None:
        """Send ``method`` to ``host``'s agent without waiting (fire and forget)."""
        try:
            self._prepare(host, None).cast({}, method, host=host, **kwargs)
        except oslo_messaging.MessagingException as exc:
            raise OutcomeUnknown(f"{method} on host {host}: {exc}", host=host,
                                 method=method) from exc

    def send_builds(self, server: str, builds: list[dict], answer_within: float,
                    timeout: float) -> list[dict]:
        """One ``build_instances`` call to agent ``server``: one answer a build
        (``build_batches``); :meth:`build` is what tasks call."""
        try:
            return self._client.prepare(
                server=server, timeout=max(0.001, timeout),
                version=messaging.BUILD_BATCH_VERSION,
            ).call({}, "build_instances", builds=builds, answer_within=answer_within)
        except (dispatcher.UnsupportedVersion, dispatcher.NoSuchMethod):
            return self._unbatch(server, builds)
        except oslo_messaging.MessagingTimeout as exc:
            self._reroute(builds)
            raise OutcomeUnknown(f"builds on agent {server}: no answer within {timeout:.1f}s; "
                                 "the hosts may or may not have done them",
                                 method="build_instance") from exc
        except oslo_messaging.RemoteError as exc:
            if exc.exc_type in ("UnsupportedVersion", "NoSuchMethod"):
                return self._unbatch(server, builds)
            raise ComputeError(f"builds on agent {server} failed: {exc.exc_type}: "
                               f"{exc.value}", method="build_instance") from exc
        except oslo_messaging.MessagingException as exc:
            self._reroute(builds)
            raise OutcomeUnknown(f"builds on agent {server}: {exc}",
                                 method="build_instance") from exc

    def _unbatch(self, server: str, builds: list[dict]) -> list:
        """An agent older than batched builds: its builds go one a call from now on."""
        self._unbatched.add(server)
        return [build_batches.UNBATCHED] * len(builds)

    def _reroute(self, builds: list[dict]) -> None:
        for build in builds:
            self.routes.invalidate(build["host"])

    @staticmethod
    def _remote_error(failure: str) -> Exception:
        return build_batches.remote_error(failure, "build_instance")

    def _unanswered_build(self, build: dict, timeout: float) -> Exception:
        self.routes.invalidate(build["host"])
        return OutcomeUnknown(
            f"build_instance on host {build['host']}: no answer within {timeout}s; "
            "the host may or may not have done it", host=build["host"],
            method="build_instance")

    def _send(self, host, method, timeout, cast, **kwargs):
        if cast:
            return self.cast(host, method, **kwargs)
        return self.call(host, method, timeout=timeout, **kwargs)

    # -- the agent's methods -------------------------------------------------

    def build_instance(self, host: str, uuid: str, resources: Mapping,
                       image: str | None = None, fence: Mapping | None = None,
                       timeout: float | None = None, cast: bool = False) -> dict | None:
        """Spawn ``uuid`` on ``host`` (idempotent); returns the guest."""
        return self._send(host, "build_instance", timeout, cast, uuid=uuid,
                          resources=dict(resources), image=image, fence=fence)

    def build(self, host: str, uuid: str, resources: Mapping, image: str | None = None,
              fence: Mapping | None = None, timeout: float | None = None) -> dict:
        """:meth:`build_instance`, sent with the other builds bound for the same agent
        (``build_batches``) unless ``[compute] batch_builds`` is off."""
        server = self.routes.server_for(host)
        if not self.conf.compute.batch_builds or server in self._unbatched:
            return self.build_instance(host, uuid, resources, image=image, fence=fence,
                                       timeout=timeout)
        request = {"host": host, "uuid": uuid, "resources": dict(resources),
                   "image": image, "fence": fence}
        guest = self._batches.build(server, request, timeout or self.timeout)
        if guest is build_batches.UNBATCHED:
            return self.build_instance(host, uuid, resources, image=image, fence=fence,
                                       timeout=timeout)
        return guest

    def build_all(self, builds: list[Mapping], fence: Mapping | None = None,
                  timeout: float | None = None) -> list[tuple]:
        """Builds (``host``, ``uuid``, ``resources``, ``image``) sent together, one caller
        waiting for all: one outcome each, ``(guest, None)`` or ``(None, error)``; an
        unanswered build's error is OutcomeUnknown (ask the host before sending it
        again, as ``ensure_built`` does). ``(build_batches.UNBATCHED, None)``: not
        sent (batches off, or an agent older than them); build it alone."""
        if not self.conf.compute.batch_builds:
            return [(build_batches.UNBATCHED, None)] * len(builds)
        items = [(self.routes.server_for(b["host"]),
                  {"host": b["host"], "uuid": b["uuid"], "resources": dict(b["resources"]),
                   "image": b.get("image"), "fence": fence}) for b in builds]
        outcomes: list[tuple] = [(build_batches.UNBATCHED, None)] * len(items)
        sent = [k for k, (server, _) in enumerate(items) if server not in self._unbatched]
        answered = self._batches.build_all([items[k] for k in sent], timeout or self.timeout)
        for k, outcome in zip(sent, answered, strict=True):
            outcomes[k] = outcome
        return outcomes

    def destroy_instance(self, host: str, uuid: str, fence: Mapping | None = None,
                         timeout: float | None = None, cast: bool = False) -> dict | None:
        return self._send(host, "destroy_instance", timeout, cast, uuid=uuid, fence=fence)

    def destroy_all(self, destroys: list[tuple[str, str]], fence: Mapping | None = None,
                    timeout: float | None = None) -> list:
        """``(host, uuid)`` destroys sent together (``destroy_batches``): an outcome
        each, None (destroyed), the error, or ``build_batches.UNBATCHED`` (not sent:
        an agent older than batched destroys; destroy it alone)."""
        return destroy_batches.destroy_all(self._client, self.routes, destroys, fence,
                                           timeout or self.timeout)

    def attach_volume(self, host: str, uuid: str, volume_id: str,
                      fence: Mapping | None = None, timeout: float | None = None,
                      cast: bool = False) -> dict | None:
        return self._send(host, "attach_volume", timeout, cast, uuid=uuid,
                          volume_id=volume_id, fence=fence)

    def detach_volume(self, host: str, uuid: str, volume_id: str,
                      fence: Mapping | None = None, timeout: float | None = None,
                      cast: bool = False) -> dict | None:
        return self._send(host, "detach_volume", timeout, cast, uuid=uuid,
                          volume_id=volume_id, fence=fence)

    def start_move(self, host: str, migration_id: str, kind: str, uuid: str,
                   source_host: str, resources: Mapping, image: str | None = None,
                   fence: Mapping | None = None, timeout: float | None = None) -> dict:
        """Start moving ``uuid`` from ``source_host`` to ``host`` (the destination).

        ``kind``: ``rebuild`` (``image`` is what it spawns from), ``live`` or
        ``cold``. Returns the move record at once; poll :meth:`get_move`.
        Idempotent by ``migration_id``, so after OutcomeUnknown send it again.
        """
        return self.call(host, "start_move", timeout=timeout, migration_id=migration_id,
                         kind=kind, uuid=uuid, source_host=source_host,
                         resources=dict(resources), image=image, fence=fence)

    def get_move(self, host: str, migration_id: str,
                 timeout: float | None = None) -> dict | None:
        """The move record on its destination ``host``, or None if it never arrived."""
        return self.call(host, "get_move", timeout=timeout, migration_id=migration_id)

    def confirm_move(self, host: str, migration_id: str, fence: Mapping | None = None,
                     timeout: float | None = None) -> dict:
        """End a completed move for good (idempotent; MoveFailed if it did not complete)."""
        return self.call(host, "confirm_move", timeout=timeout, migration_id=migration_id,
                         fence=fence)

    def revert_move(self, host: str, migration_id: str, fence: Mapping | None = None,
                    timeout: float | None = None) -> dict | None:
        """Undo a move not confirmed yet (idempotent); None if it never arrived."""
        return self.call(host, "revert_move", timeout=timeout, migration_id=migration_id,
                         fence=fence)

    def list_instances(self, host: str, timeout: float | None = None) -> list[dict]:
        return self.call(host, "list_instances", timeout=timeout)

    def get_instance(self, host: str, uuid: str, timeout: float | None = None) -> dict | None:
        """The guest, or None when ``host`` does not have it."""
        return self.call(host, "get_instance", timeout=timeout, uuid=uuid)

    def audit_cloud(self, instances: Mapping, members: Mapping) -> list:
        """Nothing more to compare: the simulated cloud's allocations are fleetflow's
        own ledger, which the audit reads itself."""
        return []

    def close_host(self, host: str, mode: str, reason: str) -> None:
        """Nothing: a simulated host has no service of its own to disable; the
        evacuation's rows close it to new builds (Nova's service is disabled,
        and fenced for a rebuild, in openstack mode)."""
        return None

    def ping(self, host: str, timeout: float | None = None) -> dict:
        return self.call(host, "ping", timeout=timeout)

    def set_faults(self, host: str, timeout: float | None = None, **faults) -> dict:
        """Inject faults: fail_next, fail_fraction, seed, dead, hang_seconds, fail_next_moves.

        ``dead=False`` also destroys the host's copies of servers rebuilt
        elsewhere meanwhile (``destroyed_copies`` in the answer).
        """
        return self.call(host, "set_faults", timeout=timeout, **faults)

    def set_server_faults(self, host: str, uuid: str, fail_move: bool | None = None,
                          live_migratable: bool | None = None,
                          timeout: float | None = None) -> dict:
        """Faults of one server's moves (any served ``host`` routes them; they hold on all)."""
        return self.call(host, "set_server_faults", timeout=timeout, uuid=uuid,
                         fail_move=fail_move, live_migratable=live_migratable)

    # -- block storage -------------------------------------------------------
    #
    # A storage backend has no agent: its calls go to the agent of a host that
    # reaches it, named first like every call's host. For a host-local backend
    # that is its ``host_name``; for a rack backend, any living host of its
    # rack (another one if that host is dead). A host that does not reach the
    # backend is refused with BackendUnreachable.

    def create_volume(self, host: str, backend: str, volume_id: str, size_gb: int,
                      volume_type: str | None = None, fence: Mapping | None = None,
                      timeout: float | None = None) -> dict:
        """Create ``volume_id`` on ``backend`` through ``host``; returns the volume.

        Idempotent by ``volume_id`` (at most one effective create), so after
        OutcomeUnknown send it again. Refusals: CapacityExceeded,
        VolumeTypeUnsupported, VolumeMismatch (the id exists elsewhere or with
        another size), BackendNotFound, VolumeCreateFailed (injected).
        """
        return self.call(host, "create_volume", timeout=timeout, backend=backend,
                         volume_id=volume_id, size_gb=int(size_gb),
                         volume_type=volume_type, fence=fence)

    def delete_volume(self, host: str, backend: str, volume_id: str,
                      fence: Mapping | None = None, timeout: float | None = None) -> dict:
        """Delete ``volume_id`` from ``backend`` through ``host`` (idempotent;
        ``deleted`` says whether this call did it). VolumeInUse if it is attached."""
        return self.call(host, "delete_volume", timeout=timeout, backend=backend,
                         volume_id=volume_id, fence=fence)

    def force_detach_volume(self, host: str, backend: str, volume_id: str,
                            fence: Mapping | None = None,
                            timeout: float | None = None) -> dict:
        """Clear ``volume_id``'s attachment at ``backend`` through ``host``, whatever
        the state of its guest's host (to delete a volume whose guest's host
        died). Idempotent: ``detached`` says whether this call cleared one."""
        return self.call(host, "force_detach_volume", timeout=timeout, backend=backend,
                         volume_id=volume_id, fence=fence)

    def list_volumes(self, host: str, backend: str, include_deleted: bool = False,
                     timeout: float | None = None) -> list[dict]:
        return self.call(host, "list_volumes", timeout=timeout, backend=backend,
                         include_deleted=include_deleted)

    # -- safe retries ------------------------------------------------------

    def ensure_built(self, host: str, uuid: str, resources: Mapping,
                     image: str | None = None, fence: Mapping | None = None,
                     timeout: float | None = None, attempts: int = 3) -> dict:
        """Build ``uuid`` on ``host``, retrying only after asking what the host has.

        After an unknown outcome the host is asked first: an ACTIVE guest is
        the answer; otherwise the build is sent again (the host's build is
        idempotent and waits for one still running, so at most one spawn).
        Raises OutcomeUnknown when every attempt went unanswered.
        """
        last: OutcomeUnknown | None = None
        for attempt in range(max(1, attempts)):
            if attempt:
                try:
                    guest = self.get_instance(host, uuid, timeout=timeout)
                except OutcomeUnknown as exc:
                    last = exc
                    continue
                if guest is not None and guest["state"] == states.ACTIVE:
                    return guest
            try:
                return self.build(host, uuid, resources, image=image, fence=fence,
                                  timeout=timeout)
            except OutcomeUnknown as exc:
                last = exc
        assert last is not None
        raise last

    def ensure_destroyed(self, host: str, uuid: str, fence: Mapping | None = None,
                         timeout: float | None = None, attempts: int = 3) -> dict:
        """Destroy ``uuid`` on ``host``; destroy is idempotent, so retrying is safe."""
        return _until_answered(lambda: self.destroy_instance(host, uuid, fence=fence,
                                                             timeout=timeout), attempts)

    def ensure_detached(self, host: str, uuid: str, volume_id: str,
                        fence: Mapping | None = None, timeout: float | None = None,
                        attempts: int = 3) -> dict | None:
        """Detach ``volume_id`` from ``uuid``, sent again after an unknown outcome
        (a detach of what is detached already does nothing)."""
        return _until_answered(lambda: self.detach_volume(host, uuid, volume_id, fence=fence,
                                                          timeout=timeout), attempts)

    def ensure_volume_deleted(self, host: str, backend: str, volume_id: str,
                              fence: Mapping | None = None, timeout: float | None = None,
                              attempts: int = 3) -> dict:
        """Delete ``volume_id``, sent again after an unknown outcome (idempotent by id)."""
        return _until_answered(lambda: self.delete_volume(host, backend, volume_id,
                                                          fence=fence, timeout=timeout),
                               attempts)

    def ensure_force_detached(self, host: str, backend: str, volume_id: str,
                              fence: Mapping | None = None, timeout: float | None = None,
                              attempts: int = 3) -> dict:
        """Force ``volume_id`` free, sent again after an unknown outcome (idempotent)."""
        return _until_answered(lambda: self.force_detach_volume(
            host, backend, volume_id, fence=fence, timeout=timeout), attempts)


def _until_answered(call, attempts: int):
    """``call()`` again after each OutcomeUnknown, ``attempts`` times in all.

    Only for idempotent calls. Undoing is where this matters: a revert whose
    one call went unanswered (a host busy past the RPC timeout) raises, and a
    revert that raises stops the whole flow's revert half way (FAILURE), with
    whatever the atoms before it hold left held.
    """
    last: OutcomeUnknown | None = None
    for _ in range(max(1, attempts)):
        try:
            return call()
        except OutcomeUnknown as exc:
            last = exc
    assert last is not None
    raise last
