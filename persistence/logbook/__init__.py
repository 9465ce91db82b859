"""fleetflow's TaskFlow persistence backend: logbooks, flow and atom details in SQL.

Registered as the ``fleetflow`` entry point of ``taskflow.persistence``, so
``taskflow.persistence.backends.fetch({"connection": "fleetflow+sqlite:///f.db"})``
(or ``fleetflow+postgresql://...``) returns a :class:`~.backend.LogbookBackend`.
"""
