"""Fenced checkpoints: a stale owner may not write the logbook either.

Side effects check the fencing token where they happen (persistence/fences.py).
That is not enough on its own: an owner that was paused past its claim (GC,
SIGSTOP, a VM migration) wakes up, its task fails with StaleFence, and its
engine would checkpoint FAILURE and start *reverting* a flow that the new
owner is running — overwriting the new owner's checkpoints with its own.

So every engine a conductor runs writes through :class:`FencedBackend`, which
checks the token before each flow or atom detail update and raises
:class:`StaleCheckpoint` once a newer owner exists. TaskFlow treats an error
while saving a completion as fatal to the run: the stale engine stops at
once, writes nothing more, and its conductor abandons (rather than consumes)
the job — an ``ExecutionFailure`` is one of the conductor's "do not consume"
errors, and unlike ``StorageFailure`` TaskFlow's storage does not retry it
(three times, five seconds apart). The check and the write are separate transactions, so a window of
one write remains; the side-effect fences close it for the effects that
matter, and a persistence backend that checks the fence inside its own write
transaction can close it for checkpoints too. While the conductor's claim
was extended less than half an expiry ago nobody else can hold the job, and
the look-up is skipped (engine/conductor/keepalive.py ``lease_valid``) — except
for a checkpoint that records a failure or a revert: a task fails with
StaleFence when a newer owner exists whatever the lease says, and reverting
on a lease's word would undo the newer owner's work, so those always look.

The look-up is a database read like the checkpoint it guards: a lost
connection is retried within the database's outage window
(``Database.retrying``), after which ``DatabaseUnavailable`` stops the engine
without its job being consumed.
"""

from __future__ import annotations

import logging

import sqlalchemy as sa
from taskflow import exceptions as tf_exc
from taskflow import states as tf_states
from taskflow.persistence import base as tf_persistence

from fleetflow.common.exceptions import StaleFence
from fleetflow.persistence.fences import Fence

LOG = logging.getLogger(__name__)

FENCE_TOKEN = sa.select(Fence.token).where(Fence.key == sa.bindparam("key"))
# States of a run going wrong: checkpointed only after the token was looked up.
UNDOING = frozenset({tf_states.FAILURE, tf_states.REVERTING, tf_states.REVERTED,
                     tf_states.REVERT_FAILURE})


def undoing(*details) -> bool:
    """Whether any flow or atom detail records a failure or a revert."""
    return any(d.state in UNDOING or getattr(d, "intention", None) == tf_states.REVERT
               for d in details)


class StaleCheckpoint(tf_exc.ExecutionFailure):
    """A checkpoint refused because its engine's owner no longer holds the job."""


class FencedBackend(tf_persistence.Backend):
    """Wraps a TaskFlow backend; its connections refuse writes from a stale owner."""

    def __init__(self, backend, database, fence: dict, lease=None):
        super().__init__(getattr(backend, "_conf", {}))
        self._backend = backend
        self._database = database
        self.fence = dict(fence)
        # lease() -> True while nobody else can hold the job (a fresh claim
        # extension, engine/conductor/keepalive.py): no need to look then.
        self._lease = lease

    @property
    def wrapped(self):
        return self._backend

    @property
    def retry_policy(self):
        """The outage window of the database behind the checkpoints (None: not known)."""
        return (getattr(self._backend, "retry_policy", None)
                or getattr(self._database, "retry_policy", None))

    def get_connection(self):
        return FencedConnection(self, self._backend.get_connection())

    def _current_token(self) -> int | None:
        retrying = getattr(self._database, "retrying", None)
        if retrying is None:
            return self._read_token()
        return retrying(self._read_token, f"checking the fence of {self.fence['key']}")

    def _read_token(self) -> int | None:
        engine = self._database.engine
        if engine.dialect.name != "sqlite":
            with self._database.session() as session:
                return session.execute(FENCE_TOKEN, {"key": self.fence["key"]}).scalar()
        # NOTE: on SQLite every SQLAlchemy transaction of fleetflow's engine
        # starts with BEGIN IMMEDIATE, the database's single write lock; one
        # per checkpoint made fenced runs 2-4x slower. A bare SELECT on the
        # DBAPI connection (autocommit) is a WAL read: no lock, no wait.
        raw = engine.raw_connection()
        try:
            cursor = raw.cursor()
            cursor.execute("SELECT token FROM fences WHERE key = ?", (self.fence["key"],))
            row = cursor.fetchone()
            cursor.close()
        finally:
            raw.close()
        return None if row is None else row[0]

    def check(self, undoing: bool = False) -> None:
        """Raise StaleCheckpoint (caused by StaleFence) if our token is no longer current.

        ``undoing``: the write records a failure or a revert; the token is looked
        up even under a lease.
        """
        if not undoing and self._lease is not None and self._lease():
            return
        current = self._current_token()
        if current is not None and current > int(self.fence["token"]):
            stale = StaleFence(f"job {self.fence['key']}: token {self.fence['token']} is "
                               f"stale (current {current})", key=self.fence["key"],
                               current=current)
            LOG.warning("refusing checkpoint of a stale owner: %s", stale)
            raise StaleCheckpoint(f"stale owner: {stale}", cause=stale) from stale

    def close(self):
        # The wrapped backend is shared by every engine of the process.
        pass


class FencedConnection(tf_persistence.Connection):
    """A TaskFlow persistence connection whose writes are fenced; reads pass through."""

    def __init__(self, backend: FencedBackend, connection):
        self._fenced_backend = backend
        self._conn = connection

    @property
    def backend(self):
        return self._fenced_backend

    def close(self):
        self._conn.close()

    def upgrade(self):
        self._conn.upgrade()

    def validate(self):
        self._conn.validate()

    def clear_all(self):
        raise tf_exc.StorageFailure("a running engine may not clear the logbooks")

    def update_atom_details(self, atom_detail):
        self._fenced_backend.check(undoing(atom_detail))
        return self._conn.update_atom_details(atom_detail)

    def update_atom_details_many(self, atom_details):
        """A batch of checkpoints (plugin.checkpoints): one fence check for all of them."""
        atom_details = list(atom_details)
        self._fenced_backend.check(undoing(*atom_details))
        many = getattr(self._conn, "update_atom_details_many", None)
        if many is not None:
            return many(atom_details)
        for atom_detail in atom_details:
            self._conn.update_atom_details(atom_detail)
        return None

    def update_flow_details(self, flow_detail):
        self._fenced_backend.check(undoing(flow_detail))
        return self._conn.update_flow_details(flow_detail)

    def update_flow_fields(self, flow_detail):
        """The flow's own fields alone (the fleetflow engine's storage), fenced as every write."""
        self._fenced_backend.check(undoing(flow_detail))
        fields = getattr(self._conn, "update_flow_fields", None)
        if fields is None:
            return self._conn.update_flow_details(flow_detail)
        return fields(flow_detail)

    def save_logbook(self, book):
        self._fenced_backend.check()
        return self._conn.save_logbook(book)

    def destroy_logbook(self, book_uuid):
        self._fenced_backend.check()
        return self._conn.destroy_logbook(book_uuid)

    def get_logbook(self, book_uuid, lazy=False):
        return self._conn.get_logbook(book_uuid, lazy=lazy)

    def get_logbooks(self, lazy=False):
        return self._conn.get_logbooks(lazy=lazy)

    def get_flows_for_book(self, book_uuid, **kwargs):
        return self._conn.get_flows_for_book(book_uuid, **kwargs)

    def get_flow_details(self, fd_uuid, lazy=False):
        return self._conn.get_flow_details(fd_uuid, lazy=lazy)

    def get_atom_details(self, ad_uuid):
        return self._conn.get_atom_details(ad_uuid)

    def get_atoms_for_flow(self, fd_uuid):
        return self._conn.get_atoms_for_flow(fd_uuid)
