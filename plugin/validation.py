"""Validation of the fleetflow engine: once per engine, each argument looked up once.

``ActionEngine.run_iter`` validates the flow (every atom's arguments against
every provider in scope: two walks per atom) each time it starts, and a
conductor validates once more itself just before. Validation depends on the
compiled graph, fixed once compiled, and on injected arguments, which can
only be added, so a flow that validated stays valid: the engine skips the
repeat. Within the one validation, stock looks up every atom's ``revert``
arguments separately from its ``execute`` arguments, though most are the
same names (a revert takes what the execute took); :func:`validate` asks
storage only about the revert arguments the execute did not already settle,
and answers those questions in bulk (:class:`_ValidationLookups`): stock
builds a provider locator and walks the atom's scopes once per argument, and
looks into the injected values again for every atom.
"""

from __future__ import annotations

from taskflow import exceptions as tf_exc
from taskflow import states as tf_states
from taskflow import storage as tf_storage
from taskflow.engines.action_engine import compiler


class _ValidationLookups:
    """Stock ``Storage.fetch_unsatisfied_args``'s answers for one validation, in bulk.

    Stock answers each (atom, name) on its own: a provider locator per call, the
    atom's scopes walked level by level, and every default (injected) provider's
    results looked into again. Over a whole flow those answers repeat: whether
    a default provider holds a name does not depend on the atom asking, and an
    atom's visible atoms do not depend on the name. Both are remembered here
    for the length of one validation, under the storage's read lock.
    """

    def __init__(self, storage):
        self._storage = storage
        self._locator = tf_storage._ProviderLocator(
            storage._transients, storage._fetch_providers,
            lambda atom_name: storage._get(atom_name, "last_results", "failure",
                                           tf_storage._EXECUTE_STATES_WITH_RESULTS,
                                           tf_states.EXECUTE))
        self._default_holds: dict = {}

    def _default_provides(self, provider, name) -> bool:
        # As stock's find_potentials: a default provider counts only when its
        # results hold the name now.
        key = (provider, name)
        held = self._default_holds.get(key)
        if held is None:
            try:
                self._locator._try_get_results(name, provider, find_potentials=True)
                held = True
            except tf_exc.NotFound:
                held = False
            self._default_holds[key] = held
        return held

    def missing(self, atom, args_mapping, optional_args) -> set:
        """The bound names of ``args_mapping`` nothing can provide to ``atom``."""
        storage = self._storage
        source, _clone = storage._atomdetail_by_name(atom.name)
        injected = [s for s in (storage._injected_args.get(atom.name, {}),
                                source.meta.get(tf_storage.META_INJECTED, {})) if s]
        visible = None
        missing = set()
        for bound, name in args_mapping.items():
            if bound in optional_args or any(name in s for s in injected):
                continue
            defaults, atom_providers = storage._fetch_providers(name)
            if any(self._default_provides(p, name) for p in defaults):
                continue
            if atom_providers:
                if visible is None:
                    visible = set().union(*storage._scope_fetcher(atom.name))
                if any(p.name in visible for p in atom_providers):
                    continue
            missing.add(bound)
        return missing


def _unsatisfied(lookups: _ValidationLookups, atom) -> tuple[set, set]:
    """(missing execute arguments, missing revert arguments) of ``atom``.

    As two ``fetch_unsatisfied_args`` calls would answer: an argument's
    answer depends only on the atom and the name it is bound to.
    """
    exec_missing = lookups.missing(atom, atom.rebind, atom.optional)
    settled = {bound: name for bound, name in atom.rebind.items()
               if bound not in atom.optional}
    to_ask, revert_missing = {}, set()
    for bound, name in atom.revert_rebind.items():
        if settled.get(bound) != name:
            to_ask[bound] = name
        elif bound in exec_missing and bound not in atom.revert_optional:
            revert_missing.add(bound)
    if to_ask:
        revert_missing |= lookups.missing(atom, to_ask, atom.revert_optional)
    return exec_missing, revert_missing


def validate(engine) -> None:
    """Stock ``ActionEngine.validate``'s checks and errors, each name of an atom looked up once.

    The caller holds the engine's lock and checked its preconditions.
    """
    missing, last_cause, last_node, missing_nodes = set(), None, None, 0
    with engine.storage._lock.read_lock():
        lookups = _ValidationLookups(engine.storage)
        for atom in engine._runtime.iterate_nodes(compiler.ATOMS):
            exec_missing, revert_missing = _unsatisfied(lookups, atom)
            for method, method_missing in (("execute", exec_missing),
                                           ("revert", revert_missing)):
                if method_missing:
                    last_cause = tf_exc.MissingDependencies(
                        atom, sorted(method_missing), cause=last_cause, method=method)
                    last_node = atom
                    missing_nodes += 1
                    missing.update(method_missing)
    if missing:
        if missing_nodes == 1 and last_node is engine._flow:
            raise last_cause
        raise tf_exc.MissingDependencies(engine._flow, sorted(missing), cause=last_cause)
