"""TaskFlow's Redis jobboard with claims that expire: the distributed board.

Stock ``RedisJobBoard.claim`` sets no expiry unless asked, so a conductor
killed with ``kill -9`` keeps its jobs forever (measured: it never recovers).
This subclass claims with the board's ``claim_expiry`` and adds
:meth:`ExpiringRedisJobBoard.extend_claim`, the owner-checked extension that
the conductor's keep-alive calls.

While Redis is down an idle conductor polls the board every half second and
every poll fails: the board says so once (ERROR), then at most once a minute
with a count, and once (INFO) when a poll works again
(``common/log_throttle.py``).
"""

from __future__ import annotations

import logging

import redis
from redis import maint_notifications
from taskflow import exceptions as tf_exc
from taskflow.jobs.backends import impl_redis
from taskflow.utils import redis_utils

from fleetflow.common import metrics
from fleetflow.common.log_throttle import ConditionLog

LOG = logging.getLogger(__name__)

DEFAULT_CLAIM_EXPIRY = 30.0
CONNECT_TIMEOUT = 5.0


def make_client(url: str) -> redis.Redis:
    """A TaskFlow-compatible Redis client for ``redis://host:port/db``."""
    return redis_utils.RedisClient.from_url(
        url,
        # Bounded: a submitter posting to an unreachable Redis gives up (its
        # flow is posted later by the reconciler) instead of hanging the API.
        socket_connect_timeout=CONNECT_TIMEOUT,
        # Redis 7 does not know CLIENT MAINT_NOTIFICATIONS; skip redis-py's
        # probe of it on every new connection (TaskFlow does the same).
        maint_notifications_config=maint_notifications.MaintNotificationsConfig(enabled=False))


class ExpiringRedisJobBoard(impl_redis.RedisJobBoard):
    """Redis jobboard whose claims last ``conf['claim_expiry']`` seconds unless extended."""

    def __init__(self, name, conf, client=None, persistence=None):
        super().__init__(name, conf, client=client, persistence=persistence)
        self._claim_expiry = float(self._conf.get("claim_expiry", DEFAULT_CLAIM_EXPIRY))
        self.outage = ConditionLog(LOG, f"jobboard {name} (Redis) unreachable",
                                   f"jobboard {name} (Redis) reachable again")

    def _fetch_jobs(self):
        # Every poll of the board starts here: the one place that knows
        # whether Redis answers, for the conductor's loop and every other reader.
        try:
            jobs = super()._fetch_jobs()
        except tf_exc.JobFailure as error:
            self.outage.failed(error)
            raise
        self.outage.recovered()
        return jobs

    @property
    def claim_expiry(self) -> float:
        return self._claim_expiry

    def claim(self, job, who, expiry=None):
        try:
            return self._claim(job, who, expiry)
        except tf_exc.UnclaimableJob:
            metrics.CLAIM_CONFLICTS.labels(self.name).inc()
            raise

    def _claim(self, job, who, expiry=None):
        return super().claim(job, who, expiry=self._claim_expiry if expiry is None else expiry)

    def find_owner(self, job):
        """The owner of ``job``'s claim; None when nobody holds it.

        TaskFlow 6.5 decodes the missing owner key of an unclaimed job (or
        one whose claim just lapsed) and raises TypeError instead.
        """
        owner_key = self.join(job.key + self.OWNED_POSTFIX)
        with impl_redis._translate_failures():
            raw_owner = self._client.get(owner_key)
        return None if raw_owner is None else self._decode_owner(raw_owner)

    def job_exists(self, job) -> bool:
        """True while ``job`` is listed on the board.

        False after it was consumed or trashed, or when Redis lost it (a
        restart without persistence): what tells a keep-alive "the job is
        gone" from "someone else holds it".
        """
        with impl_redis._translate_failures():
            return bool(self._client.hexists(self.listings_key, job.key))

    def extend_claim(self, job, who: str, expiry: float | None = None) -> bool:
        """Extend ``who``'s claim on ``job``; False when someone else holds it or it is gone.

        TaskFlow's claim script, run by the owner itself, re-applies the
        expiry atomically and answers "already claimed" with the owner's name
        (and claims afresh when the claim lapsed and nobody took it). Plain
        ``RedisJob.extend_expiry`` would extend whoever owns the key now,
        hiding from a stale owner that it lost the job.
        """
        try:
            # Not claim(): an owner renewing is no conflict to count.
            self._claim(job, who, expiry=expiry)
        except tf_exc.UnclaimableJob:
            return self.find_owner(job) == who
        except tf_exc.NotFound:
            return False
        return True
