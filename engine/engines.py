"""Build TaskFlow engines with fleetflow's settings, in one place.

Everything that runs a flow (conductor threads, ``fleetflow conductor``
processes, tests, the benchmark) should get its engine here so that:

- TaskFlow's compile fixes (:mod:`.taskflow_patches`) are installed first;
- the engine is TaskFlow's parallel engine on a thread pool of at most
  ``[conductor] engine_workers`` threads, started only when no worker is idle
  (boots block on hosts, so threads pay off; with trivial tasks the serial
  engine is faster, which is why ``engine`` can be overridden);
- checkpoints go to fleetflow's logbook backend
  (:class:`fleetflow.persistence.logbook.backend.LogbookBackend`) on the
  process's shared database engine.
"""

from __future__ import annotations

from taskflow import engines as tf_engines

from fleetflow.engine import taskflow_patches
from fleetflow.persistence.db import get_database
from fleetflow.persistence.logbook.backend import LogbookBackend

DEFAULT_WORKERS = 1024  # as [conductor] engine_workers


def engine_options(conf=None, workers: int | None = None, engine: str = "parallel") -> dict:
    """Keyword arguments for ``taskflow.engines.load*`` with fleetflow's settings.

    Also installs the TaskFlow patches, so callers that load engines
    themselves (``load_from_detail`` with a flow factory) get them too.
    """
    taskflow_patches.apply()
    if engine != "parallel":
        return {"engine": engine}
    if workers is None:
        workers = conf.conductor.engine_workers if conf is not None else DEFAULT_WORKERS
    return {"engine": "parallel", "executor": "threads", "max_workers": workers}


def make_engine(flow, flow_detail, backend, conf=None, *, store=None, workers=None,
                engine: str = "parallel", **options):
    """A TaskFlow engine running ``flow`` and checkpointing into ``flow_detail``.

    ``flow_detail`` must already be saved in ``backend`` (in a logbook); when
    it holds checkpoints of an earlier run, the engine resumes from them.
    Extra ``options`` (``defer_reverts=True``, ``never_resolve=True`` ...) go to
    TaskFlow unchanged.
    """
    kwargs = engine_options(conf, workers=workers, engine=engine)
    kwargs.update(options)
    return tf_engines.load(flow, flow_detail=flow_detail, backend=backend, store=store,
                           **kwargs)


def logbook_backend(conf) -> LogbookBackend:
    """fleetflow's logbook backend on the process's shared database engine.

    Sharing ``get_database(conf).engine`` keeps one connection pool (and, on
    SQLite, one WAL file handle set) per process. The schema comes from
    fleetflow's migrations (``fleetflow db upgrade`` / ``Database.upgrade``).
    """
    database = get_database(conf)
    return LogbookBackend({"connection": database.url}, engine=database.engine)
