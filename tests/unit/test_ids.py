"""Identifiers made many at a time are uuids like the ones made one at a time."""

from __future__ import annotations

import uuid

from fleetflow.common import ids


def test_many_uuids_at_once_are_distinct_version_4_uuids():
    made = ids.new_uuids(500)
    assert len(made) == len(set(made)) == 500
    for text in made:
        value = uuid.UUID(text)
        assert (value.version, value.variant, str(value)) == (4, uuid.RFC_4122, text)
    assert ids.new_uuids(0) == []
    single = uuid.UUID(ids.new_uuid())
    assert (single.version, single.variant) == (4, uuid.RFC_4122)


def test_each_call_reads_fresh_randomness():
    assert not set(ids.new_uuids(50)) & set(ids.new_uuids(50))
