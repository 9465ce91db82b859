"""Many destroys in one call an agent: a reservation's teardown of hundreds of guests.

One ``destroy_instance`` call a guest cost the agent a request's dispatch and a
write of the hosts' state each, and the caller a call and a wait each: deleting
1,000 instances spent about 0.4 s of the agents' CPU on it. A group of a teardown
(``flows/provision/teardown_tasks.py``) sends its guests together instead,
``destroy_instances`` (agent API 1.2), one call to each agent that serves their
hosts; the agent destroys them in one write of its state where its driver can
(``destroy_at_once``), each of the others alone, and answers one outcome each.

What a caller cannot have in a batch it does alone, as before: a guest whose agent
is older than batched destroys (``UNBATCHED``), or whose batch was not answered
(OutcomeUnknown: ``ensure_destroyed``, idempotent, sends it again).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

import oslo_messaging
from oslo_messaging.rpc import dispatcher

from fleetflow.compute import messaging
from fleetflow.compute.build_batches import UNBATCHED, failure, remote_error
from fleetflow.compute.exceptions import ComputeError, OutcomeUnknown

# -- the agent's half ------------------------------------------------------------


def run(driver, destroys: Sequence[Mapping]) -> list[dict]:
    """Every destroy of ``destroys`` (``{"host", "uuid", "fence"}``): ``{"guest": what
    destroy_instance returns}`` or ``{"failure": the error as oslo.messaging sends it}``
    each, in order."""
    at_once = getattr(driver, "destroy_at_once", None)
    outcomes = at_once(destroys) if at_once is not None else [None] * len(destroys)
    answers = []
    for destroy, outcome in zip(destroys, outcomes, strict=True):
        if outcome is None:
            try:
                outcome = driver.destroy_instance(destroy["host"], destroy["uuid"],
                                                  fence=destroy.get("fence"))
            except Exception as exc:  # noqa: BLE001 - each answer carries its own error
                outcome = exc
        answers.append({"failure": failure(outcome)} if isinstance(outcome, BaseException)
                       else {"guest": outcome})
    return answers


# -- the client's half -----------------------------------------------------------


def destroy_all(client, routes, destroys: Sequence[tuple[str, str]], fence: Mapping | None,
                timeout: float) -> list:
    """``(host, uuid)`` destroys, one ``destroy_instances`` call to each agent (by
    ``routes``, on oslo.messaging's RPC ``client``): an outcome each, in order: None
    (destroyed), the error, or UNBATCHED (not sent: destroy it alone)."""
    by_server: dict[str, list[int]] = defaultdict(list)
    for k, (host, _uuid) in enumerate(destroys):
        by_server[routes.server_for(host)].append(k)
    outcomes: list = [UNBATCHED] * len(destroys)
    for server, indexes in by_server.items():
        items = [{"host": destroys[k][0], "uuid": destroys[k][1], "fence": fence}
                 for k in indexes]
        for k, outcome in zip(indexes, _send(client, routes, server, items, timeout),
                              strict=True):
            outcomes[k] = outcome
    return outcomes


def _send(client, routes, server: str, items: list[dict], timeout: float) -> list:
    try:
        answers = client.prepare(
            server=server, timeout=max(0.001, timeout),
            version=messaging.DESTROY_BATCH_VERSION,
        ).call({}, "destroy_instances", destroys=items)
    except (dispatcher.UnsupportedVersion, dispatcher.NoSuchMethod):
        return [UNBATCHED] * len(items)
    except oslo_messaging.RemoteError as exc:
        if exc.exc_type in ("UnsupportedVersion", "NoSuchMethod"):
            return [UNBATCHED] * len(items)
        error = ComputeError(f"destroys on agent {server} failed: {exc.exc_type}: "
                             f"{exc.value}", method="destroy_instance")
        return [error] * len(items)
    except oslo_messaging.MessagingException as exc:
        for item in items:
            routes.invalidate(item["host"])
        return [OutcomeUnknown(f"destroys on agent {server}: {exc}; the hosts may or may "
                               "not have done them", method="destroy_instance")] * len(items)
    return [None if "guest" in answer else remote_error(answer["failure"], "destroy_instance")
            for answer in answers]
