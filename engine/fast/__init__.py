"""The fleetflow engine: TaskFlow's parallel engine, faster, as an engine of its own.

``taskflow.engines.load(flow, engine="fleetflow-parallel")`` loads
:class:`~.engine.FleetflowParallelEngine` (registered through the
``taskflow.engines`` entry point). Importing this package changes nothing in
TaskFlow: every part is a subclass used only by this engine. ``docs/engine.md``
describes each speed-up, where it lives and its semantics.
"""
