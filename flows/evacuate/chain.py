"""One server's chain: a task for each step of its move (move.py), under its retry.

A task whose retry answered "no host" (``host`` None) does nothing: the
server is not moving in this run.
"""

from __future__ import annotations

from fleetflow.flows.evacuate import move
from fleetflow.flows.tasks.base import FleetTask


class ClaimMove(FleetTask):
    """Claim the destination (:func:`move.claim`).

    Revert: the instance gets the source back (:func:`move.unclaim`).
    """

    def execute(self, evacuation_id: str, instance_uuids: list, index: int,
                host: str | None, move_placements: dict, primary_moves_claimed: dict,
                fence=None) -> str | None:
        if host is None:
            return None
        return move.claim(evacuation_id, instance_uuids, index, host, move_placements,
                          primary_moves_claimed, fence)

    def revert(self, result, evacuation_id: str, instance_uuids: list, index: int,
               fence=None, **kwargs) -> None:
        # Whatever the result says: a crash may have come after the write.
        move.unclaim(evacuation_id, instance_uuids, index, fence)


class MoveServer(FleetTask):
    """Start the move on the destination and poll it until it ends (:func:`move.move`).

    Revert: the destination undoes the move (:func:`move.unmove`).
    """

    def execute(self, evacuation_id: str, instance_uuids: list, index: int,
                host: str | None, migration: str | None, move_placements: dict,
                fence=None) -> dict | None:
        if host is None:
            return None
        return move.move(evacuation_id, instance_uuids, index, host, migration,
                         move_placements, fence)

    def revert(self, result, evacuation_id: str, instance_uuids: list, index: int,
               fence=None, **kwargs) -> None:
        move.unmove(evacuation_id, instance_uuids, index, fence)


class ReattachVolumes(FleetTask):
    """Attach the volumes the destination can reach (:func:`move.reattach`).

    Revert: detaches the ones it attached (:func:`move.detach`).
    """

    def execute(self, evacuation_id: str, instance_uuids: list, index: int,
                host: str | None, move_placements: dict, fence=None) -> list | None:
        if host is None:
            return None
        return move.reattach(evacuation_id, instance_uuids, index, host, move_placements,
                             fence)

    def revert(self, result, evacuation_id: str, instance_uuids: list, index: int,
               fence=None, **kwargs) -> None:
        if isinstance(result, list):
            move.detach(evacuation_id, instance_uuids, index, result, fence)


class ConfirmMove(FleetTask):
    """End the move: confirmed, source allocation dropped, row DONE (:func:`move.confirm`).

    Revert: nothing; a confirmed move is finished and stays.
    """

    def execute(self, evacuation_id: str, instance_uuids: list, index: int,
                host: str | None, migration: str | None, move_placements: dict,
                fence=None) -> dict | None:
        if host is None:
            return None
        return move.confirm(evacuation_id, instance_uuids, index, host, migration,
                            move_placements, fence)
