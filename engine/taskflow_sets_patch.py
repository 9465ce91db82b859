"""TaskFlow patch 14 (see :mod:`fleetflow.engine.taskflow_patches`): ordered sets built in C.

``taskflow.types.sets.OrderedSet`` holds its items as the keys of an
``OrderedDict``. Its constructor adds them one ``setdefault`` call at a time
in a Python loop, and it iterates through a generator (``yield from``). Every
atom builds a dozen of these for its arguments, and compiling and running a
flow iterates them tens of thousands of times: building the flow of a
1,000-instance reservation spent a third of its time in that loop.

``OrderedDict.fromkeys`` keeps the first position of a repeated item exactly
as the ``setdefault`` loop does, and the dict's own key iterator yields what
the generator yielded. The class and its other methods are unchanged.
"""

from __future__ import annotations

import collections

from taskflow.types import sets as tf_sets

from fleetflow.engine.taskflow_patch_table import Replacements

STOCK_INIT = tf_sets.OrderedSet.__init__
STOCK_ITER = tf_sets.OrderedSet.__iter__


def ordered_set_init(self, iterable=None):
    self._data = collections.OrderedDict.fromkeys(() if iterable is None else iterable,
                                                  tf_sets._sentinel)


def ordered_set_iter(self):
    return iter(self._data)


_REPLACEMENTS = Replacements(
    (tf_sets.OrderedSet, "__init__", ordered_set_init, STOCK_INIT),
    (tf_sets.OrderedSet, "__iter__", ordered_set_iter, STOCK_ITER),
)
install, uninstall, is_installed = (_REPLACEMENTS.install, _REPLACEMENTS.uninstall,
                                    _REPLACEMENTS.is_installed)
