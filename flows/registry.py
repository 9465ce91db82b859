"""Flow factories registered by name, rebuildable by any conductor.

A flow must be rebuilt from plain data when another conductor resumes it, so a
factory is a module-level function taking JSON-safe keyword arguments (ids,
counts, specs) and never a client, a session or a context (docs/architecture.md,
"Flows are rebuilt from plain data"; docs/adding-a-flow.md)::

    @flow_factory("provision")
    def provision_flow(reservation_id: str, count: int) -> Flow: ...

    flow = build("provision", reservation_id="r-1", count=3)

TaskFlow stores a factory as an importable function plus its arguments in the
flow detail (``save_factory_details``) and calls it again on resume
(``flow_from_detail``). We give it :func:`rebuild` — one fixed, importable
function — with the registered *name* and the factory's *module* as
positional arguments and the flow's keyword arguments as they are. The
resuming process imports that module (which registers the factory) and builds
the same flow again, with the same deterministic atom names.

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
import json
import threading
from collections.abc import Callable
from typing import Any

from taskflow import flow as tf_flow

from fleetflow.common.exceptions import InvalidInput

Factory = Callable[..., tf_flow.Flow]

_lock = threading.Lock()
_factories: dict[str, Factory] = {}
#: An older name of a factory -> the name it is registered under now.
_aliases: dict[str, str] = {}
HANDOVER_SLOTS = 8
_handed_over: collections.OrderedDict[tuple[str, str], tf_flow.Flow] = (
    collections.OrderedDict())


def register(name: str, factory: Factory, aliases: tuple[str, ...] = ()) -> Factory:
    """Register ``factory`` under ``name``; returns it (usable as a decorator body).

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
        _aliases.update(dict.fromkeys(aliases, name))
    return factory


def flow_factory(name: str, aliases: tuple[str, ...] = ()) -> Callable[[Factory], Factory]:
    """Decorator form of :func:`register`."""
    def decorate(factory: Factory) -> Factory:
        return register(name, factory, aliases)
    return decorate


def get(name: str) -> Factory:
    """The factory registered as ``name`` (or with ``name`` as an alias); InvalidInput when
    there is none."""
    with _lock:
        factory = _factories.get(_aliases.get(name, name))
    if factory is None:
        raise InvalidInput(f"unknown flow {name!r}", flow_name=name)
    return factory


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


def atom_name(index: int, step: str, prefix: str = "inst") -> str:
    """Deterministic atom name for step ``step`` of item ``index``: ``inst-0003-boot``.

    Resume matches atoms by name, so names come from the operation's own data
    (an index), never from fresh uuids. Four digits sort well up to 9,999
    items and stay unique beyond.
    """
    if index < 0:
        raise ValueError("index must not be negative")
    if not step or "-" in prefix:
        raise ValueError("step must be set and prefix must not contain '-'")
    return f"{prefix}-{index:04d}-{step}"


def _identity(factory: Factory) -> str:
    return f"{factory.__module__}.{factory.__qualname__}"
