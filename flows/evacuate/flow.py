"""The evacuate flow: one run over the servers of an evacuation still to move.

    evacuation-lifecycle      marks the evacuation FAILED on revert
    prepare-hosts             RUNNING; rebuild: every host still silent
    schedule                  every server placed in one pass (candidates each)
    claim-primaries           every groupless server's first destination, one write
    moves (unordered)
      lane-00 (linear)        ``lanes`` lanes: at most that many moves at once
        srv-0000 (retry srv-0000-retry: candidates, reschedules, then "no host")
          srv-0000-claim      group rule + one POST /allocations
          srv-0000-move       started on the destination, polled until it ends
          srv-0000-attach     volumes re-attached where reachable
          srv-0000-confirm    source allocation dropped, row switched, DONE
        srv-0000+lanes ...
      lane-01 ...
    finish                    DONE, PARTIAL, PAUSED or REVERTED

With ``batch`` (an evacuation of more servers than ``[conductor]
instances_per_atom``), each lane is a line of :class:`MoveServers` tasks
instead, ``batch-0000`` moving the lane's first ``batch`` servers one after
another, each as its chain would (batch.py).

Lanes make ``max_parallel`` a property of the graph: no semaphore to lose
in a crash, and a resumed flow throttles as the first run did. Atom names
depend only on the arguments, so any conductor rebuilds the same flow.
"""

from __future__ import annotations

from taskflow.patterns import linear_flow, unordered_flow

from fleetflow.flows import keys
from fleetflow.flows.evacuate.batch import MoveServers
from fleetflow.flows.evacuate.chain import ClaimMove, ConfirmMove, MoveServer, ReattachVolumes
from fleetflow.flows.evacuate.fastpath import ClaimPrimaryMoves
from fleetflow.flows.evacuate.retry import MoveHostRetry
from fleetflow.flows.evacuate.tasks import (
    FinishEvacuation,
    MarkEvacuationFailedOnRevert,
    PrepareHosts,
    ScheduleMoves,
)
from fleetflow.flows.registry import flow_factory

MAX_RESCHEDULES = 2


def server_prefix(index: int, count: int) -> str:
    return f"srv-{index:0{max(4, len(str(count - 1)))}d}"


def server_chain(index: int, count: int) -> linear_flow.Flow:
    """One server: its retry around claim -> move -> attach -> confirm."""
    prefix = server_prefix(index, count)
    host_key = keys.scoped(prefix, keys.HOST)
    chain = linear_flow.Flow(prefix, retry=MoveHostRetry(
        f"{prefix}-retry", index=index, provides=host_key, max_reschedules=MAX_RESCHEDULES))
    migration_key = keys.scoped(prefix, keys.MIGRATION)
    bind = {"host": host_key}
    moved = {"host": host_key, "migration": migration_key}
    inject = {"index": index}
    chain.add(ClaimMove(f"{prefix}-claim", rebind=bind, inject=inject,
                        provides=migration_key),
              MoveServer(f"{prefix}-move", rebind=moved, inject=inject),
              ReattachVolumes(f"{prefix}-attach", rebind=bind, inject=inject),
              ConfirmMove(f"{prefix}-confirm", rebind=moved, inject=inject))
    return chain


def lane_batches(lane: int, lanes: int, count: int, batch: int) -> list[MoveServers]:
    """The lane's servers in tasks of ``batch``, each named by its first server."""
    indexes = list(range(lane, count, lanes))
    width = max(4, len(str(count - 1)))
    return [MoveServers(f"batch-{indexes[k]:0{width}d}", indexes[k:k + batch],
                        MAX_RESCHEDULES)
            for k in range(0, len(indexes), batch)]


@flow_factory("evacuate")
def evacuate_flow(evacuation_id: str, count: int, lanes: int = 8,
                  run: int = 0, batch: int = 0) -> linear_flow.Flow:
    """Move ``count`` servers of one evacuation, at most ``lanes`` at once.

    ``batch``: servers per task (``[conductor] instances_per_atom``); flows
    submitted without it keep one chain a server.
    """
    flow = linear_flow.Flow(f"evacuate-{evacuation_id}-{run}")
    flow.add(MarkEvacuationFailedOnRevert("evacuation-lifecycle"),
             PrepareHosts("prepare-hosts"), ScheduleMoves("schedule"),
             ClaimPrimaryMoves("claim-primaries"))
    if count:
        lanes = max(1, min(int(lanes), count))
        moves = unordered_flow.Flow("moves")
        for lane in range(lanes):
            line = linear_flow.Flow(f"lane-{lane:02d}")
            if batch:
                line.add(*lane_batches(lane, lanes, count, batch))
            else:
                for index in range(lane, count, lanes):
                    line.add(server_chain(index, count))
            moves.add(line)
        flow.add(moves)
    flow.add(FinishEvacuation("finish"))
    return flow
