"""Fix for TaskFlow 6.5's ``RetryDetail.from_dict``: retry values lost on reload.

A retry's history is a list of ``(value, {atom name: Failure})``. Decoding it,
TaskFlow reuses the name ``data`` for the failures' dicts inside the loop over
the history, so every history entry that holds a failure comes back with that
failure's dict as its *value*. Any flow detail read back from persistence
(every backend decodes atom details with ``from_dict``, the in-memory one too)
then hands the retry's consumers a dict instead of what the retry provided:
the provision flow resumed after a failed boot passed ``{"exception_str": ...}``
as the host name. Nothing in a flow that is never reloaded sees it, which is
why plain runs work.

:func:`apply` replaces ``from_dict`` with the same decoding minus the shadowing
(idempotent); :func:`remove` restores TaskFlow's. It corrects every reader of a
flow detail, whichever engine runs it, so it cannot live in an engine of its
own: it is the one change fleetflow makes to TaskFlow, made explicitly where a
process gets its persistence backend (``engine/backend.py``) or reads a flow
for an operator (``engine/actions.py``), never on import (docs/engine.md).
"""

from __future__ import annotations

from taskflow.persistence import models as tf_models
from taskflow.types import failure as tf_failure

STOCK_FROM_DICT = tf_models.RetryDetail.__dict__["from_dict"]


def _decode_history(results) -> list:
    history = []
    for value, failures in results or []:
        history.append((value, {name: tf_failure.Failure.from_dict(encoded)
                                for name, encoded in failures.items()}))
    return history


@classmethod
def _from_dict(cls, data):
    """``RetryDetail.from_dict`` keeping each history entry's value."""
    # AtomDetail.from_dict (the base's shared decoding), then our history.
    obj = super(tf_models.RetryDetail, cls).from_dict(data)
    obj.results = _decode_history(obj.results)
    return obj


def apply() -> None:
    """Install the fixed decoding (idempotent)."""
    tf_models.RetryDetail.from_dict = _from_dict


def remove() -> None:
    """Restore TaskFlow's own ``from_dict``."""
    tf_models.RetryDetail.from_dict = STOCK_FROM_DICT


def is_applied() -> bool:
    return tf_models.RetryDetail.__dict__["from_dict"] is _from_dict
