"""Will a retry controller absorb this failure? Asked before TaskFlow acts on it.

TaskFlow notifies an atom's FAILURE and only then asks the retry controller
around it what to do: try again (another host for an instance), or revert.
``on_error = pause`` must stop a flow at a failure that is final, not at one
the next try absorbs, so the pause listener asks the same question first.

Asking is safe: a retry controller's ``on_failure`` reads its history (the
tries so far), and TaskFlow's part records the failure in that history only
once per atom, so TaskFlow asking again right after gets the same answer and
writes nothing more.
"""

from __future__ import annotations

from taskflow import retry as tf_retry
from taskflow.engines.action_engine import compiler


def absorbed_by_retry(engine, atom_name: str, failure) -> bool:
    """True when a retry controller around ``atom_name`` will try again after ``failure``.

    Walks out through nested retries as TaskFlow does (``REVERT`` defers to
    the enclosing one); False when there is none, or when one decides to
    revert: the failure is final.
    """
    runtime = getattr(engine, "_runtime", None)
    if runtime is None or failure is None:
        return False
    node = _atoms(runtime).get(atom_name)
    while node is not None:
        retry = runtime.find_retry(node)
        if retry is None:
            return False
        strategy = runtime.fetch_action(retry).on_failure(retry, node, failure)
        if strategy == tf_retry.RETRY:
            return True
        if strategy != tf_retry.REVERT:
            return False
        node = retry
    return False


def _atoms(runtime) -> dict:
    atoms = getattr(runtime, "_fleetflow_atoms_by_name", None)
    if atoms is None:
        atoms = {node.name: node for node in runtime.iterate_nodes(compiler.ATOMS)}
        runtime._fleetflow_atoms_by_name = atoms
    return atoms
