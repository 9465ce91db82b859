"""What fleetflow keeps in a flow detail's ``meta``, and the flow states it reads.

A flow detail's ``meta`` holds two things fleetflow writes, one section each
below:

**fleetflow's options.** They live under one key, :data:`META_KEY` (TaskFlow's
own entries sit beside it). The submitter writes them (``engine/submit.py``);
operators' actions change ``paused`` and ``on_error`` (``engine/actions.py``);
conductors, the reconciler, the audit and the status listener read them. The
fields:

- ``flow_name``, ``owner_tenant``, ``submitted_at``: who asked for what, when;
- ``on_error``: :data:`ON_ERROR_REVERT` (roll back on a failure) or
  :data:`ON_ERROR_PAUSE` (stop and wait for an operator);
- ``board``: the jobboard whose reconciler posts the flow again if its job is lost;
- ``paused``, ``paused_at``: set while a flow waits for an operator.

**Which engine wrote the flow detail.** The fleetflow engine stores
checkpoints in batches (:mod:`.checkpoints`): a state nobody acted on yet may
reach the database a little later than under TaskFlow's stock engine, which
stores every change at once. Both leave a flow detail that either engine can
resume (see ``docs/engine.md``), but an operator reading a flow detail, and
any future engine whose semantics differ more, must be able to tell which
wrote it. So the first engine that runs a flow records, beside the options:

- ``engine``: ``fleetflow-parallel/<version>`` or the stock engine's name
  (``parallel``, ``serial``);
- ``checkpoints``: ``batched`` or ``immediate``.

A later run under another engine keeps what was recorded and logs the
switch. The fleetflow engine refuses a flow written by a newer version of
itself (:class:`NewerEngineVersion`): its semantics are not known here.

This module sits in the plugin package, below every layer that reads or
writes these entries (the API, the services, the engine package, the flows'
listener and the fleetflow engine itself).
"""

from __future__ import annotations

import logging
import re

from taskflow import states as tf_states

LOG = logging.getLogger(__name__)

# -- fleetflow's options -------------------------------------------------------

#: Key of fleetflow's own options inside a flow detail's ``meta``.
META_KEY = "fleetflow"

ON_ERROR_REVERT = "revert"
ON_ERROR_PAUSE = "pause"
ON_ERROR_CHOICES = (ON_ERROR_REVERT, ON_ERROR_PAUSE)

#: Flow states a conductor never runs again on its own.
SETTLED_FLOW_STATES = frozenset({tf_states.SUCCESS, tf_states.REVERTED, tf_states.FAILURE})


def options(meta: dict | None) -> dict:
    """A copy of fleetflow's options in a flow detail's ``meta`` (empty when absent)."""
    return dict((meta or {}).get(META_KEY) or {})


def is_paused(meta: dict | None) -> bool:
    """True while the flow whose ``meta`` this is waits for an operator."""
    return bool(options(meta).get("paused"))


def with_options(meta: dict | None, options: dict) -> dict:
    """A copy of a flow detail's ``meta`` whose fleetflow options are ``options``."""
    return {**(meta or {}), META_KEY: options}


# -- which engine wrote the flow detail ----------------------------------------

ENGINE_KEY = "engine"
CHECKPOINTS_KEY = "checkpoints"
BATCHED = "batched"
IMMEDIATE = "immediate"


class NewerEngineVersion(RuntimeError):
    """A flow detail written by a newer version of the fleetflow engine than this one."""


def label(name: str, version: int | None = None) -> str:
    """How ``meta['engine']`` names an engine: ``name/version``, or the stock name."""
    return name if version is None else f"{name}/{version}"


def version_of(written_by: str | None, name: str) -> int | None:
    """The version of engine ``name`` in a ``meta['engine']`` label, None for another engine."""
    match = re.fullmatch(rf"{re.escape(name)}/(\d+)", written_by or "")
    return int(match[1]) if match else None


def record_engine(storage, written_by: str, checkpoints: str) -> None:
    """Record the engine running the flow of ``storage``, unless a first one is recorded."""
    meta = storage._flowdetail.meta or {}
    first = meta.get(ENGINE_KEY)
    if first is None:
        storage.update_flow_metadata({ENGINE_KEY: written_by, CHECKPOINTS_KEY: checkpoints})
    elif first != written_by:
        LOG.info("flow %s was written by engine %s (%s checkpoints); it resumes under %s",
                 storage.flow_uuid, first, meta.get(CHECKPOINTS_KEY, "unknown"), written_by)
