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


def test_every_key_is_used_by_the_package():
    # A key nothing puts into or reads from the store is a dead name that
    # invites the next flow to use it with a different meaning.
    import pathlib

    root = pathlib.Path(keys.__file__).resolve().parent.parent
    sources = "\n".join(path.read_text() for path in root.rglob("*.py")
                        if ".venv" not in path.parts and "tests" not in path.parts
                        and path.name != "keys.py")
    unused = [name for name in keys.all_keys() if f"keys.{name}" not in sources]
    assert unused == []
