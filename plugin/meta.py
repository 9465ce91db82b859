"""Which engine and checkpoint semantics wrote a flow detail, recorded in its ``meta``.

The fleetflow engine stores checkpoints in batches (:mod:`.checkpoints`):
a state nobody acted on yet may reach the database a little later than
under TaskFlow's stock engine, which stores every change at once. Both leave
a flow detail that either engine can resume (see ``docs/engine.md``), but an
operator reading a flow detail, and any future engine whose semantics differ
more, must be able to tell which wrote it. So the first engine that runs a
flow records, in the flow detail's ``meta``:

- ``engine``: ``fleetflow-parallel/<version>`` or the stock engine's name
  (``parallel``, ``serial``);
- ``checkpoints``: ``batched`` or ``immediate``.

A later run under another engine keeps what was recorded and logs the
switch. The fleetflow engine refuses a flow written by a newer version of
itself (:class:`NewerEngineVersion`): its semantics are not known here.
"""

from __future__ import annotations

import logging
import re

LOG = logging.getLogger(__name__)

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


def record(storage, written_by: str, checkpoints: str) -> None:
    """Record the engine running the flow of ``storage``, unless a first one is recorded."""
    meta = storage._flowdetail.meta or {}
    first = meta.get(ENGINE_KEY)
    if first is None:
        storage.update_flow_metadata({ENGINE_KEY: written_by, CHECKPOINTS_KEY: checkpoints})
    elif first != written_by:
        LOG.info("flow %s was written by engine %s (%s checkpoints); it resumes under %s",
                 storage.flow_uuid, first, meta.get(CHECKPOINTS_KEY, "unknown"), written_by)
