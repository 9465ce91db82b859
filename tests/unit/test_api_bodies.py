"""The request body decoder: where it draws its lines, and how it names the place."""

from __future__ import annotations

import json

import pytest

from fleetflow.api import bodies


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def test_nesting_up_to_the_limit_is_read_and_one_more_is_refused():
    assert bodies.decode(nested(bodies.MAX_DEPTH)) is not None
    with pytest.raises(bodies.BodyError, match="nested deeper"):
        bodies.decode(nested(bodies.MAX_DEPTH + 1))


def test_nesting_far_beyond_the_interpreters_recursion_limit_is_refused():
    with pytest.raises(bodies.BodyError, match="nested deeper"):
        bodies.decode(nested(100_000))


def test_integer_literals_up_to_the_limit_are_read_and_longer_ones_refused():
    longest = "9" * bodies.MAX_INTEGER_DIGITS
    assert bodies.decode(f"[-{longest}]") == [-int(longest)]
    with pytest.raises(bodies.BodyError, match="31 digits"):
        bodies.decode("[1" + longest + "]")
    with pytest.raises(bodies.BodyError, match="5000 digits"):
        bodies.decode("9" * 5000)


@pytest.mark.parametrize("text", ["NaN", "[Infinity]", "[-Infinity]", "[1e999]"])
def test_non_finite_numbers_are_refused(text):
    with pytest.raises(bodies.BodyError):
        bodies.decode(text)


@pytest.mark.parametrize("document,path", [
    ({"a": {"b": ["ok", "\udc80"]}}, ("a", "b", 1)),
    ({"a": {"\ud800": 1}}, ("a",)),
    ({"a": "x\x00y"}, ("a",)),
])
def test_strings_no_column_can_store_are_refused_where_they_are(document, path):
    with pytest.raises(bodies.BodyError) as caught:
        bodies.decode(json.dumps(document))
    assert caught.value.path == path
    assert ".".join(map(str, path)) in caught.value.describe()


def test_bytes_that_are_not_utf8_are_refused():
    with pytest.raises(bodies.BodyError, match="not UTF-8"):
        bodies.decode(b'{"a": "\xff"}')


def test_ordinary_documents_come_back_as_they_were():
    document = {"group": {"name": "web \u00e9\U0001f600", "max_per_host": 2, "ratio": 1.5,
                          "metadata": {"note": "a\nb\tc"}, "members": [], "x": None}}
    assert bodies.decode(json.dumps(document).encode()) == document
