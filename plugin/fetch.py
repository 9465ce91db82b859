"""Injected values of the fleetflow engine's storage, found once.

Every time the engine schedules an atom, ``Storage.fetch_mapped_args`` finds
each of its arguments from scratch: a provider locator per argument, the
name's providers split into default ones (values injected into the flow's
store, transients) and atoms, then each default provider's atom detail
looked up and checked before its value is read. Most arguments of a
reservation's atoms are the flow's own values (the instance ids, the request
spec, the tenant): about 9,000 of the 14,000 look-ups before a 1,000-instance
reservation's first boot.

Where a name has a default provider, stock's search ends with the default
providers, so the value depends only on what was injected, and that changes
only through ``Storage.inject``, which always ends with
``Storage._set_result_mapping``. :func:`fetch_mapped_args` is stock's, except
that such a value, once found, is remembered per storage until the next
``_set_result_mapping`` (:class:`fleetflow.plugin.storage.Storage`
forgets them there); values found through atoms are looked up every time,
as stock does.
"""

from __future__ import annotations

import functools

import fasteners
from taskflow import exceptions as tf_exc
from taskflow import states as tf_states
from taskflow import storage as tf_storage

_MISSING = object()


@fasteners.read_locked
def fetch_mapped_args(self, args_mapping, atom_name=None, scope_walker=None,
                      optional_args=None):
    """``Storage.fetch_mapped_args``, remembering values found through default providers.

    A method of :class:`fleetflow.plugin.storage.Storage`.
    """
    if optional_args is None:
        optional_args = []
    if atom_name:
        source, _clone = self._atomdetail_by_name(atom_name)
        injected_sources = [s for s in (self._injected_args.get(atom_name, {}),
                                        source.meta.get(tf_storage.META_INJECTED, {})) if s]
        if scope_walker is None:
            scope_walker = self._scope_fetcher(atom_name)
    else:
        injected_sources = []
    if not args_mapping:
        return {}
    remembered = self.remembered_defaults
    defaults = (tf_storage._TRANSIENT_PROVIDER, self.injector_name)
    get_results = functools.partial(self._get, results_attr_name="last_results",
                                    fail_attr_name="failure",
                                    allowed_states=tf_storage._EXECUTE_STATES_WITH_RESULTS,
                                    fail_cache_key=tf_states.EXECUTE)
    mapped_args = {}
    for bound_name, name in args_mapping.items():
        for injected in injected_sources:
            if name in injected:
                mapped_args[bound_name] = injected[name]
                break
        else:
            value = remembered.get(name, _MISSING)
            if value is not _MISSING:
                mapped_args[bound_name] = value
                continue
            try:
                maybe_providers = self._reverse_mapping[name]
            except KeyError:
                if bound_name in optional_args:
                    continue
                raise tf_exc.NotFound(f"Name {name!r} is not mapped as a produced output"
                                      " by any providers") from None
            locator = tf_storage._ProviderLocator(
                self._transients,
                functools.partial(self._fetch_providers, providers=maybe_providers),
                get_results)
            searched_providers, providers = locator.find(name, scope_walker=scope_walker)
            if not providers:
                raise tf_exc.NotFound(
                    f"Mapped argument {bound_name!r} <= {name!r} was not produced by any"
                    f" accessible provider ({len(searched_providers)} possible providers"
                    " were scanned)")
            provider, value = tf_storage._item_from_first_of(providers, name)
            mapped_args[bound_name] = value
            if provider.name in defaults:
                # Found among the default providers: the search stopped there.
                remembered[name] = value
    return mapped_args
