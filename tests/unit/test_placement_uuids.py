"""Uuids the placement store is given come out in one canonical form, whatever their
spelling, and a malformed one is refused (as Placement does)."""

from __future__ import annotations

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


# Fixed values: parallel test workers must collect the same parameters.
SOME_UUID = "6f1c2b3a-4d5e-4f60-8a9b-0c1d2e3f4a5b"


@pytest.mark.parametrize("bad", ["", "not-a-uuid", "1234", SOME_UUID[:-1], SOME_UUID + "0",
                                 SOME_UUID + "\n", SOME_UUID.replace("-", "_"), None, 42])
def test_a_malformed_uuid_is_refused(bad):
    with pytest.raises(errors.BadRequest, match="Malformed consumer uuid"):
        canonical_uuid(bad, "consumer uuid")
