"""fleetflow atoms' OrderedSet, filled and iterated in C, gives stock's answers."""

from __future__ import annotations

import pickle

from hypothesis import given
from hypothesis import strategies as st
from taskflow.types.sets import OrderedSet as StockOrderedSet

from fleetflow.plugin.atoms import OrderedSet

items = st.lists(st.one_of(st.integers(-5, 5), st.sampled_from("abcdef")), max_size=12)


def _answers(ordered_set, a, b):
    left, right = ordered_set(a), ordered_set(b)
    empty = ordered_set()
    return [list(left), len(left), list(empty), list(ordered_set(iter(a))),
            list(left - right), list(left - set(b)), list(left & right), list(left | right),
            list(left ^ right), list(left.union(b, a)), list(left.intersection(right, b)),
            list(left.difference(right)), list(left.copy()), left == right,
            left <= right, left.issubset(right), left.issuperset(b),
            hash(left) == hash(ordered_set(a)), type(left | right) is ordered_set,
            repr(left), list(pickle.loads(pickle.dumps(left))), [x in left for x in b]]


@given(items, items)
def test_ordered_sets_answer_as_stock(a, b):
    assert _answers(OrderedSet, a, b) == _answers(StockOrderedSet, a, b)


def test_first_position_of_a_repeated_item_is_kept():
    assert list(OrderedSet(["b", "a", "b", "c", "a"])) == ["b", "a", "c"]
