"""Host evacuation: the evacuate flow (registered on import) and everything only it runs.

``flow`` builds the graph; ``tasks`` holds the evacuation-wide atoms
(lifecycle, prepare-hosts, schedule, finish), ``fastpath`` the one-write claim
of every first destination, ``move`` the steps of one server's move (claim,
move, attach, confirm, each with its undo), ``chain`` a task per step under
the server's retry, ``batch`` a task moving several servers of a lane with
the same steps, and ``retry`` which host a server tries next. ``rows``,
``writes`` and ``gone`` are what those read and write. Where servers go is
the scheduler's (``scheduler/moves/``).
"""

from fleetflow.flows.evacuate import flow  # noqa: F401
