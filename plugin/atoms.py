"""What fleetflow's own tasks and retries do faster than TaskFlow's atoms.

:class:`FastAtom` is mixed into ``flows.tasks.base.FleetTask`` and
``FleetRetry`` (so into every fleetflow atom, under either engine); TaskFlow's
own classes are not changed. The engine's own parts are beside this module
(docs/engine.md).

**Argument mappings per shape.** Every atom works out, for its ``execute`` and
its ``revert``, which names it requires, which it may take and what each
argument is bound to (``Atom._build_arg_mapping``, which asks
``oslo_utils.reflection`` for the function's arguments: ``inspect.signature``
four times per atom). This is most of the time it takes to build a
1,000-instance reservation's flow, about a tenth of a second of the POST, and
the answers repeat: the atoms of one kind differ only in the *values* of their
``rebind`` (``host`` bound to ``inst-0007.host``, ``inst-0008.host`` ...).

A rebind value only ever enters the answer as an opaque name: it becomes its
argument's bound name and a required name, and it is compared for equality
with the other names involved (duplicates merge, injected names drop out).
So when every value is a string different from all of those names (the
function's arguments, ``requires``, ``ignore_list``, the rebind keys and the
injected names), the answer is the one worked out for stand-in values, with
the stand-ins replaced by the real ones (values equal to each other merge
when the required names are collected again, as in stock).
:meth:`FastAtom._build_arg_mapping` keeps that answer per shape (function,
requires, rebind keys, auto_extract, ignore_list, injected names). Any other
call, and any shape whose answer is an error, is stock's. Since the reflection
now runs once per shape, caching its answers as well no longer measures a gain.

**Ordered sets built in C.** ``taskflow.types.sets.OrderedSet`` (an atom's
arguments and results) fills itself one ``setdefault`` call at a time in a
Python loop, and iterates through a generator; the engine iterates them tens
of thousands of times per flow. :class:`OrderedSet` is the same class with
``OrderedDict.fromkeys`` (which keeps the first position of a repeated item,
as the loop does) and the dict's own key iterator; set operations on it
return it again (``Set._from_iterable``). A fleetflow atom's ``provides``,
``requires``, ``optional`` and ``revert_optional`` are of this class.
"""

from __future__ import annotations

import collections

from taskflow import atom as tf_atom
from taskflow.types import sets as tf_sets

STOCK_BUILD_ARG_MAPPING = tf_atom.Atom._build_arg_mapping


class OrderedSet(tf_sets.OrderedSet):
    """TaskFlow's ``OrderedSet``, filled and iterated in C."""

    __slots__ = ()

    def __init__(self, iterable=None):
        self._data = collections.OrderedDict.fromkeys(() if iterable is None else iterable,
                                                      tf_sets._sentinel)

    def __iter__(self):
        return iter(self._data)

# Shapes come from code (task classes and how flows bind them), so there are
# few; the bound only guards against a program that makes shapes endlessly.
MAX_SHAPES = 4096

_shapes: dict = {}
_stand_ins: list[str] = []


def _stand_in(i: int) -> str:
    while len(_stand_ins) <= i:
        _stand_ins.append(f"\x00fleetflow-rebind-{len(_stand_ins)}\x00")
    return _stand_ins[i]


def _names(value) -> tuple | None:
    """``requires`` / ``ignore_list`` as a key (order kept), or None when not keyable."""
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return tuple(value)
    return None


def _key(atom, executor, requires, rebind, auto_extract, ignore_list):
    """The shape of a call as a cache key, or None when it is not one that can share."""
    function = getattr(executor, "__func__", None)
    if function is None:  # only methods: a lambda per task would never repeat
        return None
    required_names, ignored = _names(requires), _names(ignore_list)
    if required_names is None or ignored is None:
        return None
    if rebind is None:
        rebind = {}
    elif not isinstance(rebind, dict):
        return None
    inject = atom.inject
    return (function, required_names, tuple(rebind), bool(auto_extract), ignored,
            frozenset(inject) if inject else None)


class _Shape:
    """One shape's answer, worked out with stand-in values, and the names it involves."""

    __slots__ = ("involved", "stand_ins", "answer")

    def __init__(self, atom, executor, key, requires, auto_extract, ignore_list):
        function, required_names, rebind_keys, _auto, ignored, injected = key
        self.involved = set(tf_atom.reflection.get_callable_args(executor, required_only=False))
        self.involved.update(required_names, ignored, rebind_keys, injected or ())
        self.stand_ins = tuple(_stand_in(i) for i in range(len(rebind_keys)))
        self.answer = None
        if self.involved.isdisjoint(self.stand_ins):
            self.answer = STOCK_BUILD_ARG_MAPPING(
                atom, executor, requires=requires,
                rebind=dict(zip(rebind_keys, self.stand_ins, strict=True)) if rebind_keys else None,
                auto_extract=auto_extract, ignore_list=ignore_list)

    def answer_for(self, values: list):
        """The answer with the real values, or None when they are not all fresh names."""
        if self.answer is None:
            return None
        rebind, requires, optional = self.answer
        if not values:
            return (collections.OrderedDict(rebind), OrderedSet(requires), OrderedSet(optional))
        if not all(type(v) is str for v in values) or not self.involved.isdisjoint(values):
            return None
        real = dict(zip(self.stand_ins, values, strict=True)).get
        # Optional names are the function's own arguments: never a stand-in.
        return (collections.OrderedDict([(arg, real(bound, bound))
                                         for arg, bound in rebind.items()]),
                OrderedSet([real(name, name) for name in requires]),
                OrderedSet(optional))


def _stock(atom, executor, requires, rebind, auto_extract, ignore_list):
    rebind_map, required, optional = STOCK_BUILD_ARG_MAPPING(
        atom, executor, requires=requires, rebind=rebind, auto_extract=auto_extract,
        ignore_list=ignore_list)
    return rebind_map, OrderedSet(required), OrderedSet(optional)


class FastAtom:
    """Mixed into fleetflow's task and retry base classes (see the module's doc)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.provides = OrderedSet(self.provides)

    def _build_arg_mapping(self, executor, requires=None, rebind=None, auto_extract=True,
                           ignore_list=None):
        """``Atom._build_arg_mapping``, worked out once per shape."""
        key = _key(self, executor, requires, rebind, auto_extract, ignore_list)
        if key is not None:
            shape = _shapes.get(key)
            if shape is None:
                try:
                    shape = _Shape(self, executor, key, requires, auto_extract, ignore_list)
                except (ValueError, TypeError):
                    shape = None  # stock's error below, worded with the real names
                else:
                    if len(_shapes) >= MAX_SHAPES:
                        _shapes.clear()
                    _shapes[key] = shape
            if shape is not None:
                answer = shape.answer_for(list(rebind.values()) if rebind else [])
                if answer is not None:
                    return answer
        return _stock(self, executor, requires, rebind, auto_extract, ignore_list)
