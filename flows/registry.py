"""Flow factories registered by name, rebuildable by any conductor.

A flow must be rebuilt from plain data when another conductor resumes it, so a
factory is a module-level function taking JSON-safe keyword arguments (ids,
counts, specs) and never a client, a session or a context (docs/architecture.md,
"Flows are rebuilt from plain data"; docs/adding-a-flow.md)::

    @flow_factory("provision")
    def provision_flow(reservation_id: str, count: int) -> Flow: ...

    flow = build("provision", reservation_id="r-1", count=3)

A flow also declares the listeners its engine needs (``listeners=``): what the
flow's own tasks cannot see, such as the flow stopping or starting again, is
written by a listener, and the conductor that runs the flow attaches one of
each (:func:`listeners_of`). A listener factory is called as
``factory(engine, database, paused=...)``, ``paused`` telling whether the
engine's flow, once SUSPENDED, waits for an operator
(``flows.status_listener.ReservationStatusListener`` is one).

TaskFlow stores a factory as an importable function plus its arguments in the
flow detail (``save_factory_details``) and calls it again on resume
(``flow_from_detail``). We give it :func:`rebuild` — one fixed, importable
function — with the registered *name* and the factory's *module* as
positional arguments and the flow's keyword arguments as they are. The
resuming process imports that module (which registers the factory) and builds
the same flow again, with the same deterministic atom names.

A package of flows of its own registers them through the ``fleetflow.flows``
entry point group (:func:`load_entry_points`): a name not registered yet is
looked for there, once, so conductors and the test harness find the package's
flows without importing it first.

Building a flow of thousands of atoms takes a noticeable part of a second, and
the submitter builds it once already (to fail on bad arguments before posting
anything). When a conductor in the same process runs that flow next,
:func:`hand_over` passes the submitter's flow to :func:`rebuild` instead of
building it a second time. Each handed-over flow is taken at most once (one
engine per flow object), and only the last few are kept, so a process that
submits but never runs flows holds nothing for long.
"""

from __future__ import annotations

import collections
import importlib
import importlib.metadata
import json
import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

from taskflow import flow as tf_flow

from fleetflow.common.exceptions import InvalidInput

LOG = logging.getLogger(__name__)

Factory = Callable[..., tf_flow.Flow]
#: ``factory(engine, database, paused=callable)`` -> a TaskFlow listener.
ListenerFactory = Callable[..., Any]

_lock = threading.Lock()
_factories: dict[str, Factory] = {}
_listeners: dict[str, tuple[ListenerFactory, ...]] = {}
#: An older name of a factory -> the name it is registered under now.
_aliases: dict[str, str] = {}
HANDOVER_SLOTS = 8
_handed_over: collections.OrderedDict[tuple[str, str], tf_flow.Flow] = (
    collections.OrderedDict())
#: The entry point group through which installed packages register their flows.
ENTRY_POINT_GROUP = "fleetflow.flows"
_entry_points_lock = threading.Lock()
_entry_points_loaded = False
_broken: list[str] = []


def register(name: str, factory: Factory, listeners: Sequence[ListenerFactory] = (),
             aliases: tuple[str, ...] = ()) -> Factory:
    """Register ``factory`` under ``name``, with the listeners its engine needs; returns it.

    ``aliases`` are names the factory was registered under before: flows
    already saved name it so, and resuming them rebuilds by that name.
    """
    if not callable(factory):
        raise TypeError(f"flow factory {name!r} is not callable")
    qualname = getattr(factory, "__qualname__", "")
    if "<locals>" in qualname or "<lambda>" in qualname:
        # A conductor in another process could never import it again.
        raise TypeError(f"flow factory {name!r} must be a module-level function")
    with _lock:
        existing = _factories.get(name)
        if existing is not None and _identity(existing) != _identity(factory):
            raise ValueError(f"flow name {name!r} is already registered to "
                             f"{_identity(existing)}")
        if name in _aliases:
            raise ValueError(f"flow name {name!r} is already an alias of "
                             f"{_aliases[name]!r}")
        for alias in aliases:
            if alias in _factories or _aliases.get(alias, name) != name:
                raise ValueError(f"flow name {alias!r} is already taken")
        _factories[name] = factory
        _listeners[name] = tuple(listeners)
        _aliases.update(dict.fromkeys(aliases, name))
    return factory


def flow_factory(name: str, listeners: Sequence[ListenerFactory] = (),
                 aliases: tuple[str, ...] = ()) -> Callable[[Factory], Factory]:
    """Decorator form of :func:`register`."""
    def decorate(factory: Factory) -> Factory:
        return register(name, factory, listeners, aliases)
    return decorate


def listeners_of(name: str) -> tuple[ListenerFactory, ...]:
    """The listener factories flow ``name`` declared (none for an unknown name)."""
    with _lock:
        return _listeners.get(_aliases.get(name, name), ())


def get(name: str) -> Factory:
    """The factory registered as ``name`` (or with ``name`` as an alias); InvalidInput when
    there is none.

    A name not registered yet is looked for in the installed packages' flows
    (:func:`load_entry_points`) before it is refused.
    """
    with _lock:
        factory = _factories.get(_aliases.get(name, name))
    if factory is None:
        load_entry_points()
        with _lock:
            factory = _factories.get(_aliases.get(name, name))
    if factory is None:
        if _broken:
            raise FlowEntryPointError(f"unknown flow {name!r}, maybe one of a package that "
                                      f"could not register its flows: {'; '.join(_broken)}")
        raise InvalidInput(f"unknown flow {name!r}", flow_name=name)
    return factory


class FlowEntryPointError(RuntimeError):
    """An entry point of :data:`ENTRY_POINT_GROUP` that could not register its flows."""


def load_entry_points() -> None:
    """Register the flows of every installed package's ``fleetflow.flows`` entry point, once.

    An entry point names a module whose ``@flow_factory`` functions register
    its flows when it is imported (``canary = mypackage.canary``), or a
    function that registers them when called (``mypackage.flows:register``).
    One that fails is remembered by name and reported when a flow cannot be
    found; the others' flows are there all the same.
    """
    global _entry_points_loaded
    with _entry_points_lock:
        if _entry_points_loaded:
            return
        for entry_point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
            try:
                loaded = entry_point.load()
                if callable(loaded) and not _is_registered(loaded):
                    loaded()
            except Exception as exc:  # noqa: BLE001 - reported with the entry point's name
                _broken.append(f"flow entry point {entry_point.name!r} "
                               f"({entry_point.value}) of group {ENTRY_POINT_GROUP!r} "
                               f"failed: {type(exc).__name__}: {exc}")
                LOG.warning("%s", _broken[-1], exc_info=True)
        _entry_points_loaded = True


def _is_registered(factory) -> bool:
    with _lock:
        return any(factory is known for known in _factories.values())


def names() -> list[str]:
    """Registered flow names, sorted (not their aliases)."""
    with _lock:
        return sorted(_factories)


def check_json_safe(kwargs: dict[str, Any]) -> None:
    """Raise InvalidInput unless ``kwargs`` survive a JSON round trip unchanged."""
    try:
        again = json.loads(json.dumps(kwargs))
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"flow arguments are not JSON-safe: {exc}") from exc
    if again != kwargs:
        # Tuples become lists, int keys become strings: the rebuilt flow would
        # differ from the first one, and resume matches atoms by name.
        raise InvalidInput("flow arguments change in a JSON round trip "
                           "(use lists and string keys)")


def build(name: str, **kwargs: Any) -> tf_flow.Flow:
    """Build the flow registered as ``name`` from JSON-safe keyword arguments."""
    check_json_safe(kwargs)
    return get(name)(**kwargs)


def _handover_key(name: str, kwargs: dict[str, Any]) -> tuple[str, str]:
    return name, json.dumps(kwargs, sort_keys=True)


def hand_over(name: str, kwargs: dict[str, Any], flow: tf_flow.Flow) -> None:
    """Offer a just-built flow to the next :func:`rebuild` of the same name and arguments.

    The caller must not use ``flow`` afterwards: an engine may be running it.
    """
    with _lock:
        _handed_over[_handover_key(name, kwargs)] = flow
        while len(_handed_over) > HANDOVER_SLOTS:
            _handed_over.popitem(last=False)


def factory_details(name: str) -> tuple[Callable, list, dict]:
    """What to hand to ``save_factory_details``: the function, its args, nothing else.

    The keyword arguments are the caller's own flow kwargs (third element of
    ``save_factory_details``' arguments); this returns the fixed part.
    """
    factory = get(name)
    return rebuild, [name, factory.__module__], {}


def rebuild(name: str, module: str, /, **kwargs: Any) -> tf_flow.Flow:
    """Rebuild a flow after a restart: import ``module`` (it registers ``name``), build.

    This is the function TaskFlow stores in every flow detail; positional-only
    parameters keep a flow argument called ``name`` or ``module`` possible.
    """
    with _lock:
        known = _aliases.get(name, name) in _factories
        handed_over = _handed_over.pop(_handover_key(name, kwargs), None)
    if handed_over is not None:
        return handed_over
    if not known:
        importlib.import_module(module)
    return build(name, **kwargs)


def _identity(factory: Factory) -> str:
    return f"{factory.__module__}.{factory.__qualname__}"
