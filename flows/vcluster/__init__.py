"""Virtual clusters: the build flow (create, add) and the teardown flow (remove, delete).

``build`` and ``teardown`` build the graphs (registered on import);
``build_tasks`` holds the build's run-wide atoms (lifecycle, schedule, claim,
finish), ``members`` each member's chain and the attachments,
``teardown_tasks`` the teardown's atoms, and ``storage_routes`` which host
carries a backend's calls. Where members go is the scheduler's
(``scheduler/vcluster/``).
"""

from fleetflow.flows.vcluster import build, teardown  # noqa: F401
