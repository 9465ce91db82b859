"""Reservations: the provision flow and the teardown flow (registered on import).

``flow`` and ``teardown`` build the graphs; ``lifecycle`` holds the first and
last atoms of a provision, ``schedule`` its one-pass placement, ``retry``
which host an instance tries next, ``volume`` its data volume, and
``teardown_tasks`` the deletes. Claims and boots are shared with the other
operations (``flows/tasks/``).
"""

from fleetflow.flows.provision import flow, teardown  # noqa: F401
