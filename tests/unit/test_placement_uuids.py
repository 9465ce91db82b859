"""Uuids the placement store is given come out in one canonical form, whatever their
spelling, and a malformed one is refused (as Placement does)."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fleetflow.persistence.placement import errors
from fleetflow.persistence.placement.providers import canonical_uuid

SPELLINGS = [str, lambda u: str(u).upper(), lambda u: u.hex, lambda u: f"{{{u}}}",
             lambda u: u.urn, lambda u: u.hex.upper()]


@given(st.uuids(), st.sampled_from(SPELLINGS))
def test_every_spelling_gives_the_canonical_form(value, spell):
    assert canonical_uuid(spell(value)) == str(value)


@pytest.mark.parametrize("bad", ["", "not-a-uuid", "1234", str(uuid.uuid4())[:-1],
                                 str(uuid.uuid4()) + "0", str(uuid.uuid4()) + "\n",
                                 None, 42])
def test_a_malformed_uuid_is_refused(bad):
    with pytest.raises(errors.BadRequest, match="Malformed consumer uuid"):
        canonical_uuid(bad, "consumer uuid")
