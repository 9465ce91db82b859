"""A stored flow's atoms as operators see them: state, intention, attempts, failures.

The one view of a flow detail's atoms, for the two readers of them: the
operator actions (engine/actions.py, ``/v2/admin/flows``) and
``submit.load_status``.
"""

from __future__ import annotations

from taskflow import states as tf_states
from taskflow import storage as tf_storage
from taskflow.persistence import models as tf_models

# Atom states that say the atom's execute was never started.
_NEVER_RAN = frozenset({tf_states.PENDING, tf_states.IGNORE, None})


def atoms(flow_detail) -> list:
    """The atom details of ``flow_detail``, without TaskFlow's injector.

    The injector is where TaskFlow keeps the store values it injected; it is
    not an atom.
    """
    return [ad for ad in flow_detail if ad.name != tf_storage.Storage.injector_name]


def failure_view(failure, step: str) -> dict | None:
    """An atom's stored ``Failure`` as the API shows it: type, message, atom name."""
    if failure is None:
        return None
    # A Failure loaded from storage has no exception object, only type names.
    type_names = failure.to_dict(include_args=False).get("exc_type_names") or ["Exception"]
    return {"type": type_names[0].rsplit(".", 1)[-1], "message": failure.exception_str,
            "step": step}


def atom_view(atom) -> dict:
    """One atom: name, kind, state, intention, attempts, failure, revert_failure."""
    is_retry = isinstance(atom, tf_models.RetryDetail)
    if is_retry:
        attempts = len(atom.results)
    else:
        # NOTE: TaskFlow keeps no execution count for a task; we can only
        # tell whether it was started (a resumed task may have run twice).
        attempts = 0 if atom.state in _NEVER_RAN else 1
    return {
        "name": atom.name,
        "kind": "retry" if is_retry else "task",
        "state": atom.state,
        "intention": atom.intention,
        "attempts": attempts,
        "failure": failure_view(atom.failure, atom.name),
        "revert_failure": failure_view(atom.revert_failure, atom.name),
    }


def atom_views(flow_detail) -> list[dict]:
    """Every atom of ``flow_detail`` (:func:`atom_view`), by name."""
    return sorted((atom_view(ad) for ad in atoms(flow_detail)), key=lambda a: a["name"])
