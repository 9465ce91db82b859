"""fleetflow's TaskFlow plugin: the ``fleetflow-parallel`` engine and the atoms' base.

Everything fleetflow plugs into TaskFlow without changing it lives here, below
the flows and the ``engine`` package that both use it:

- the engine, ``taskflow.engines.load(flow, engine="fleetflow-parallel")``,
  :class:`~.engine.FleetflowParallelEngine` (registered through the
  ``taskflow.engines`` entry point), with its own storage, runtime, compiler,
  selector and task pool;
- the half of it every fleetflow atom carries, whichever engine runs it
  (:mod:`.atoms`, mixed into ``flows.tasks.base``);
- what fleetflow and the engine record in a flow detail's ``meta``
  (:mod:`.flow_meta`).

Importing this package changes nothing in TaskFlow: every part is a subclass
used only by this engine or by fleetflow's atoms. ``docs/engine.md``
describes each speed-up, where it lives and its semantics.

The package is named for what it is to TaskFlow, a plugin: "parallel" is
already the name of TaskFlow's stock engine, which fleetflow also runs.
It imports TaskFlow, ``common`` and ``persistence`` (the database-outage
retries of :mod:`fleetflow.persistence.db_retry`), so its layer sits beside
``scheduler`` and ``compute``.
"""
