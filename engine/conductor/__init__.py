"""Conductors: the workers that claim jobs from a jobboard and run their flows.

:mod:`.worker` is one conductor (TaskFlow's blocking conductor with leases,
fences and a pause), :mod:`.keepalive` extends its claims while it runs a
job, :mod:`.pause` stops a flow whose ``on_error`` is ``pause`` at its first
final failure, :mod:`.log` is what its TaskFlow loop logs through, and :mod:`.pool`
starts the conductors of one process, first releasing the claims a dead
process left behind (:mod:`.claim_owners`).
"""
