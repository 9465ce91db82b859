"""Capability requirement syntax: every operator, missing keys, lists, bad input."""

import pytest

from fleetflow.common.exceptions import InvalidInput
from fleetflow.scheduler import capabilities as caps

HOST = {"gpu": "true", "region": "north-america", "sticker": "blue", "cores": 64,
        "ratio": "1.5", "volume_types": ["ssd", "nvme"], "flag": True}


def ok(key, requirement, host=HOST):
    return caps.parse_requirement(key, requirement).matches(host)


def test_a_gpu_in_north_america_with_a_blue_sticker():
    wanted = caps.parse_requirements({"gpu": "true", "region": "north-america",
                                      "sticker": "blue"})
    assert caps.matches_all(wanted, HOST)
    assert not caps.matches_all(wanted, {**HOST, "sticker": "red"})
    assert not caps.matches_all(wanted, {k: v for k, v in HOST.items() if k != "gpu"})


@pytest.mark.parametrize("requirement,expected", [
    ("blue", True), ("red", False),
    ("= blue", True), ("=red", False),
    ("!= red", True), ("!= blue", False),
    ("s== blue", True), ("s== Blue", False),
    ("s!= blue", False), ("s!= red", True),
    ("in red blue", True), ("in red,green", False), ("in red, blue", True),
    ("<in> green blue", True), ("<or> red <or> blue", True), ("<or> red <or> green", False),
])
def test_string_operators(requirement, expected):
    assert ok("sticker", requirement) is expected


@pytest.mark.parametrize("requirement,expected", [
    ("64", True), ("= 64", True), ("= 64.0", True), ("= 32", False),
    ("== 64", True), ("== 63", False),
    (">= 64", True), (">= 65", False), ("<= 64", True), ("<= 63", False),
    ("> 63", True), ("> 64", False), ("< 65", True), ("< 64", False),
    ("!= 64.0", False), ("!= 32", True),
    ("s== 64", True), ("s== 64.0", False),
])
def test_numeric_operators(requirement, expected):
    assert ok("cores", requirement) is expected


def test_numeric_operator_on_a_non_number_does_not_match():
    assert not ok("sticker", ">= 1")
    assert ok("ratio", ">= 1.25")


def test_missing_key_fails_everything_but_negations():
    assert not ok("color", "blue")
    assert not ok("color", ">= 1")
    assert not ok("color", "in a b")
    assert ok("color", "!= blue")
    assert ok("color", "s!= blue")


def test_list_valued_capability_matches_any_element():
    assert ok("volume_types", "ssd")
    assert ok("volume_types", "in hdd nvme")
    assert not ok("volume_types", "hdd")
    assert not ok("volume_types", "!= ssd")
    assert ok("volume_types", "!= hdd")


def test_non_string_values_are_normalised():
    assert ok("flag", "true")
    assert ok("gpu", True)
    assert ok("cores", 64)


def test_words_starting_like_operators_are_plain_values():
    host = {"name": "inside", "other": "in"}
    assert ok("name", "inside", host)
    assert ok("other", "in", host)


@pytest.mark.parametrize("requirement", [">= many", ">=", "<in>", "== x", "<or>"])
def test_malformed_requirement_names_the_key(requirement):
    with pytest.raises(InvalidInput) as err:
        caps.parse_requirement("cores", requirement)
    assert "capabilities.cores" in str(err.value)
    assert err.value.details["field"] == "capabilities.cores"
