"""Build TaskFlow engines with fleetflow's settings, in one place.

Everything that runs a flow (conductor threads, ``fleetflow conductor``
processes, tests, the benchmark) should get its engine here so that:

- the engine is the one ``[conductor] engine`` names: ``fleetflow-parallel``
  (:mod:`fleetflow.plugin`, the default) or TaskFlow's stock
  ``parallel``; on a TaskFlow release the fleetflow engine is not tested on,
  ``parallel`` runs instead (:func:`engine_name`, one warning per process);
- it runs on a thread pool of at most ``[conductor] engine_workers`` threads
  (boots block on hosts, so threads pay off; with trivial tasks the serial
  engine is faster, which is why ``engine`` can be overridden);
- the flow detail records which engine and checkpoint semantics first ran it
  (:mod:`fleetflow.plugin.flow_meta`);
- checkpoints go to fleetflow's logbook backend
  (:class:`fleetflow.persistence.logbook.backend.LogbookBackend`) on the
  process's shared database engine.
"""

from __future__ import annotations

from taskflow import engines as tf_engines
from taskflow.engines.action_engine import engine as tf_action_engine

from fleetflow.persistence.db import get_database
from fleetflow.persistence.logbook.backend import LogbookBackend
from fleetflow.plugin import compat, flow_meta
from fleetflow.plugin.engine import NAME as FLEETFLOW_ENGINE
from fleetflow.plugin.engine import FleetflowParallelEngine

STOCK_ENGINE = "parallel"
DEFAULT_ENGINE = FLEETFLOW_ENGINE  # as [conductor] engine
DEFAULT_WORKERS = 1024  # as [conductor] engine_workers
_PARALLEL_ENGINES = (FLEETFLOW_ENGINE, STOCK_ENGINE)


def engine_name(requested: str | None = None, conf=None) -> str:
    """The engine to load: ``requested``, else ``[conductor] engine``, else the default.

    ``fleetflow-parallel`` on an untested TaskFlow becomes ``parallel``.
    """
    name = requested or (conf.conductor.engine if conf is not None else DEFAULT_ENGINE)
    if name == FLEETFLOW_ENGINE and not compat.check():
        return STOCK_ENGINE
    return name


def engine_options(conf=None, workers: int | None = None, engine: str | None = None) -> dict:
    """Keyword arguments for ``taskflow.engines.load*`` with fleetflow's settings."""
    name = engine_name(engine, conf)
    if name not in _PARALLEL_ENGINES:
        return {"engine": name}
    if workers is None:
        workers = conf.conductor.engine_workers if conf is not None else DEFAULT_WORKERS
    return {"engine": name, "executor": "threads", "max_workers": workers}


def record_engine(engine) -> None:
    """Record a stock engine in its flow detail (the fleetflow engine records itself)."""
    if not isinstance(engine, FleetflowParallelEngine):
        flow_meta.record_engine(engine.storage, flow_meta.label(engine_label(engine)),
                                  flow_meta.IMMEDIATE)


def engine_label(engine) -> str:
    """The name a loaded stock engine is registered under (``parallel``, ``serial``)."""
    if isinstance(engine, tf_action_engine.ParallelActionEngine):
        return STOCK_ENGINE
    if isinstance(engine, tf_action_engine.SerialActionEngine):
        return "serial"
    return type(engine).__name__


def make_engine(flow, flow_detail, backend, conf=None, *, store=None, workers=None,
                engine: str | None = None, **options):
    """A TaskFlow engine running ``flow`` and checkpointing into ``flow_detail``.

    ``flow_detail`` must already be saved in ``backend`` (in a logbook); when
    it holds checkpoints of an earlier run, the engine resumes from them.
    Extra ``options`` (``defer_reverts=True``, ``never_resolve=True`` ...) go to
    TaskFlow unchanged.
    """
    kwargs = engine_options(conf, workers=workers, engine=engine)
    kwargs.update(options)
    loaded = tf_engines.load(flow, flow_detail=flow_detail, backend=backend, store=store,
                             **kwargs)
    record_engine(loaded)
    return loaded


def load_from_detail(flow_detail, backend, conf=None, *, store=None, workers=None,
                     engine: str | None = None, **options):
    """An engine for the flow a saved ``flow_detail`` names (rebuilt by its factory)."""
    kwargs = engine_options(conf, workers=workers, engine=engine)
    kwargs.update(options)
    loaded = tf_engines.load_from_detail(flow_detail, store=store, backend=backend, **kwargs)
    record_engine(loaded)
    return loaded


def logbook_backend(conf) -> LogbookBackend:
    """fleetflow's logbook backend on the process's shared database engine.

    Sharing ``get_database(conf).engine`` keeps one connection pool (and, on
    SQLite, one WAL file handle set) per process. The schema comes from
    fleetflow's migrations (``fleetflow db upgrade`` / ``Database.upgrade``).
    """
    database = get_database(conf)
    return LogbookBackend({"connection": database.url}, engine=database.engine)
