"""flows/keys.py: one name per key, and scoping."""

import pytest

from fleetflow.flows import keys


def test_every_key_value_is_unique():
    values = list(keys.all_keys().values())
    assert len(values) > 10
    duplicates = {v for v in values if values.count(v) > 1}
    assert duplicates == set()


def test_bare_keys_contain_no_scope_separator():
    assert [k for k in keys.all_keys().values() if keys.SCOPE_SEP in k] == []


def test_scoped_key_names_its_scope_and_key():
    assert keys.scoped("inst-0003", keys.HOST) == "inst-0003.host"
    assert keys.scoped("inst-0003", keys.HOST) != keys.scoped("inst-0004", keys.HOST)


def test_scoped_rejects_empty_scope_and_double_scoping():
    with pytest.raises(ValueError):
        keys.scoped("", keys.HOST)
    with pytest.raises(ValueError):
        keys.scoped("a", keys.scoped("b", keys.HOST))
