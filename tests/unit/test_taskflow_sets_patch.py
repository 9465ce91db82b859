"""TaskFlow patch 14: OrderedSet filled and iterated in C, with stock's answers."""

from __future__ import annotations

import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st
from taskflow.types.sets import OrderedSet

from fleetflow.engine import taskflow_sets_patch

pytestmark = pytest.mark.usefixtures("taskflow_patched")

items = st.lists(st.one_of(st.integers(-5, 5), st.sampled_from("abcdef")), max_size=12)


def _answers(a, b):
    left, right = OrderedSet(a), OrderedSet(b)
    empty = OrderedSet()
    return [list(left), len(left), list(empty), list(OrderedSet(iter(a))),
            list(left - right), list(left - set(b)), list(left & right), list(left | right),
            list(left ^ right), list(left.union(b, a)), list(left.intersection(right, b)),
            list(left.difference(right)), list(left.copy()), left == right,
            left <= right, left.issubset(right), left.issuperset(b),
            hash(left) == hash(OrderedSet(a)),
            repr(left), list(pickle.loads(pickle.dumps(left))), [x in left for x in b]]


@given(items, items)
def test_ordered_sets_answer_as_stock(a, b):
    assert taskflow_sets_patch.is_installed()
    patched = _answers(a, b)
    taskflow_sets_patch.uninstall()
    try:
        stock = _answers(a, b)
    finally:
        taskflow_sets_patch.install()
    assert patched == stock


def test_first_position_of_a_repeated_item_is_kept():
    assert list(OrderedSet(["b", "a", "b", "c", "a"])) == ["b", "a", "c"]
