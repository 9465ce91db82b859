"""Every policy rule fleetflow registers is checked by some route.

(The other direction, every route names a registered rule, is checked with the
application in tests/functional/test_api_skeleton.py.)
"""

import pathlib

from fleetflow.api import policy


def test_every_route_rule_is_enforced_somewhere_in_the_api():
    api = pathlib.Path(policy.__file__).resolve().parent
    sources = "\n".join(path.read_text() for path in api.rglob("*.py")
                        if path.name != "policy.py")
    rules = [name for name, *_ in policy.ROUTE_RULES]
    assert len(rules) > 10
    unenforced = [name for name in rules if f'"{name}"' not in sources]
    assert unenforced == []
