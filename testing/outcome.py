"""How a flow run by the fake cloud ended: its state, and what failed on the way.

A flow that fails is no error of the test's: its engine reverts it and raises
the atoms' failures, which :func:`of_failed` turns into an :class:`Outcome`
(``REVERTED`` with the failures). Anything else the engine raises (a flow
that cannot start for a missing requirement, a bug in the harness or in the
engine) is not the flow's outcome, and goes on to the test.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING

from taskflow import exceptions as tf_exc
from taskflow import states as tf_states

if TYPE_CHECKING:
    # Imported when a run fails: it costs the pytest plugin a twentieth of a second.
    from taskflow.types import failure as tf_failure

# The states a flow's engine ends in, having raised its atoms' failures.
_FAILED = (tf_states.REVERTED, tf_states.FAILURE)


@dataclasses.dataclass(frozen=True, eq=False)
class Outcome:
    """The end of one run of a flow.

    ``state`` is the flow's state as its logbook has it: ``SUCCESS``;
    ``REVERTED`` (an atom failed and the flow was rolled back); ``FAILURE`` (a
    revert failed too); ``RUNNING`` when a crash point armed with
    ``stop=True`` stopped it, for :meth:`FakeCloud.resume` to finish.
    ``failures`` maps the name of each atom whose execute failed to its
    TaskFlow ``Failure`` (``check(ExcType)``, ``exception_str``,
    ``traceback_str``); ``revert_failures`` the same for reverts. An atom
    whose failure its retry controller resolved by running it again is in
    neither. ``flow_id`` names the flow detail in the cloud's logbook.

    An outcome equals the string of its state, so ``cloud.run(job) ==
    "SUCCESS"`` reads as a state; when such an assertion fails, pytest shows
    the outcome's ``repr``, each failure's exception and message included.
    Two outcomes are equal when all their fields are.
    """

    state: str
    failures: Mapping[str, tf_failure.Failure] = dataclasses.field(default_factory=dict)
    revert_failures: Mapping[str, tf_failure.Failure] = dataclasses.field(
        default_factory=dict)
    flow_id: str | None = None

    def __eq__(self, other):
        if isinstance(other, str):
            return self.state == other
        if isinstance(other, Outcome):
            return dataclasses.astuple(self) == dataclasses.astuple(other)
        return NotImplemented

    def __hash__(self):
        return hash(self.state)

    def __str__(self):
        return self.state

    def __repr__(self):
        parts = [repr(self.state)]
        for field in ("failures", "revert_failures"):
            failures = getattr(self, field)
            if failures:
                shown = {name: _line(fail) for name, fail in failures.items()}
                parts.append(f"{field}={shown!r}")
        parts.append(f"flow_id={self.flow_id!r}")
        return f"Outcome({', '.join(parts)})"


def _line(fail) -> str:
    """``RuntimeError: the message``: what failed, on one line."""
    return str(fail).removeprefix("Failure: ")


def of(storage, detail) -> Outcome:
    """The outcome an engine's ``storage`` and its saved flow ``detail`` record.

    Every atom of ``detail`` that holds a failure is listed. (Storage's own
    failure lists leave out an atom that failed once the flow was already
    reverting, as the second of two failing side by side does.) Each failure
    is storage's copy when it has one, which still has its exception.
    """
    failures, revert_failures = {}, {}
    for atom in detail:
        if atom.failure is not None:
            failures[atom.name] = storage.get_execute_result(atom.name)
        if atom.revert_failure is not None:
            revert_failures[atom.name] = storage.get_revert_result(atom.name)
    return Outcome(storage.get_flow_state(), failures, revert_failures, detail.uuid)


def of_failed(storage, detail, error: Exception) -> Outcome | None:
    """The outcome of a run whose engine raised ``error``; None when no atom's failure did.

    The engine of a failed flow ends REVERTED (or FAILURE) and raises the
    failures its storage has cached: the only failure, or a
    ``WrappedFailure`` of them all. An error that is not among them did not come from an atom.
    """
    from taskflow.types import failure as tf_failure

    outcome = of(storage, detail)
    # The engine raises storage's failure cache, which can hold what the flow
    # detail no longer does: a boot that failed on one host, was retried on
    # another and failed again once the flow had begun to revert is cached
    # under its revert intention, and the first host's failure stays cached
    # under execute. Both are the atom's own.
    recorded = [*outcome.failures.values(), *outcome.revert_failures.values(),
                *storage.get_execute_failures().values(),
                *storage.get_revert_failures().values()]
    if isinstance(error, tf_exc.WrappedFailure):
        raised = list(error)
    else:
        raised = [tf_failure.Failure.from_exception(error)]
    if outcome.state in _FAILED and recorded and all(
            any(_same(one, known) for known in recorded) for one in raised):
        return outcome
    return None


def _same(raised, recorded) -> bool:
    if raised.exception is not None and raised.exception is recorded.exception:
        return True
    return raised is recorded or raised == recorded
