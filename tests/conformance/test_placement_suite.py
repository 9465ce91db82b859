"""OpenStack Placement's own functional suite against fleetflow's /placement.

Every gabbi YAML file shipped in the pinned ``openstack-placement`` wheel runs,
in its own order, against a live ``fleetflow serve`` configured as the file's
fixture configures Placement (conftest.py: the policy defaults, an open policy
file, CORS), with its fixtures re-created over HTTP (suite_fixtures.py).
``expected_failures.yaml`` beside this file lists, each with its reason, the
single tests that fail on purpose; every other test must pass, and a listed
test that starts passing fails the run too, so the list never goes stale.

The suite serves Placement at ``/``; fleetflow serves it at ``/placement``, and
links name that mount point as Placement's do when it is mounted there: the
expected links are computed with it (:func:`with_mount_point`).
"""

from __future__ import annotations

import importlib.resources
import importlib.util
import pathlib
import unittest

import pytest
import yaml
from gabbi import handlers, suitemaker, utils

HERE = pathlib.Path(__file__).parent
GABBITS = importlib.resources.files("placement") / "tests" / "functional" / "gabbits"
EXPECTED = yaml.safe_load((HERE / "expected_failures.yaml").read_text(encoding="utf-8"))
SKIPPED_FILES: dict[str, str] = EXPECTED.get("files") or {}
FAILING_TESTS: dict[str, dict[str, str]] = EXPECTED.get("tests") or {}
REASONS: dict[str, str] = EXPECTED.get("reasons") or {}
YAML_FILES = sorted(p.name for p in GABBITS.iterdir() if p.name.endswith(".yaml"))
# Files that need a server no other file wrote to, with the reason.
FRESH = {"allocations-bug-1779717.yaml":
         "it creates consumer 11111111-1111-1111-1111-111111111111 with a null generation, "
         "and allocations-1.28.yaml writes and empties that consumer; fleetflow keeps an "
         "emptied consumer's generation (no ABA, see persistence/placement/models.py "
         "Consumer), Placement's suite gives each file a new database"}
# The server (conftest.SERVERS) of each fixture that configures Placement.
SERVER_OF_FIXTURE = {"SecureRBACPolicyFixture": "secure", "OpenPolicyFixture": "open",
                     "CORSFixture": "open"}
# The collections of Placement's API: a link or Location names one at the root.
_COLLECTIONS = ("/resource_providers", "/resource_classes", "/traits", "/allocations",
                "/allocation_candidates", "/usages", "/reshaper")


def _load_fixtures():
    spec = importlib.util.spec_from_file_location("placement_suite_fixtures",
                                                  HERE / "suite_fixtures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    # gabbi looks the YAML's fixture names up as attributes of this module.
    for name, fixture_class in module.load().items():
        setattr(module, name, fixture_class)
    return module


FIXTURES = _load_fixtures()


class _Outcomes(unittest.TestResult):
    """Each test's outcome by its YAML name: pass, fail (with the reason) or skip.

    A file may name two tests alike: ``by_name`` keeps a failure of either, and
    ``states`` has one outcome per test.
    """

    def __init__(self):
        super().__init__()
        self.by_name: dict[str, tuple[str, str]] = {}
        self._state_of: dict[int, str] = {}  # by test object: one outcome each

    @property
    def states(self) -> list[str]:
        return list(self._state_of.values())

    def _record(self, test, state: str, why: str = "") -> None:
        name = self._name(test)
        if self._state_of.get(id(test)) != "fail":
            self._state_of[id(test)] = state
        if self.by_name.get(name, ("",))[0] != "fail":
            self.by_name[name] = (state, why)

    @staticmethod
    def _name(test) -> str:
        return getattr(test, "test_data", {}).get("name", str(test))

    def addSuccess(self, test):
        super().addSuccess(test)
        self._record(test, "pass")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._record(test, "fail", self.failures[-1][1])

    def addError(self, test, err):
        super().addError(test, err)
        self._record(test, "fail", self.errors[-1][1])

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        if reason == "fixture failure":  # gabbi skips a whole file whose fixture failed
            cause = self.errors[0][1] if self.errors else ""
            self._record(test, "fail", f"fixture failure:\n{cause}")
        else:
            self._record(test, "skip", reason)

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._record(test, "skip", "xfail in the YAML")

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._record(test, "pass")


def _fixture_names(suite_dict) -> list[str]:
    return [f if isinstance(f, str) else next(iter(f)) for f in suite_dict.get("fixtures", [])]


def server_of(name: str, suite_dict) -> str:
    """The server (conftest.SERVERS) a YAML file runs on."""
    if name in FRESH:
        return "fresh"
    named = [SERVER_OF_FIXTURE[f] for f in _fixture_names(suite_dict)
             if f in SERVER_OF_FIXTURE]
    return named[0] if named else "legacy"


def with_mount_point(suite_dict: dict, mount_point: str) -> dict:
    """``suite_dict`` whose expected root-relative links start with ``mount_point``.

    Only the expected JSON values that are paths of Placement's collections
    change (``/resource_providers/{uuid}``); requests, regular expressions
    (``/.../``) and everything else stay as the file says.
    """
    def mounted(value):
        if isinstance(value, str) and value.startswith(_COLLECTIONS) \
                and not (len(value) > 1 and value.endswith("/")):
            return mount_point + value
        return value

    for test in suite_dict.get("tests", []):
        paths = test.get("response_json_paths")
        if isinstance(paths, dict):
            test["response_json_paths"] = {path: mounted(value)
                                           for path, value in paths.items()}
    return suite_dict


def run_file(name: str, placement_url: str) -> _Outcomes:
    """Run one YAML file of the suite against ``placement_url``; its outcomes."""
    FIXTURES.Placement.url = placement_url
    host_port = placement_url.split("//", 1)[1].split("/", 1)[0]
    host, port = host_port.rsplit(":", 1)
    suite_dict = with_mount_point(utils.load_yaml(yaml_file=str(GABBITS / name)),
                                  "/placement")
    suite = suitemaker.test_suite_from_dict(
        unittest.TestLoader(), name.removesuffix(".yaml"), suite_dict, str(GABBITS), host,
        int(port), FIXTURES, None, prefix="/placement",
        handlers=[handler() for handler in handlers.RESPONSE_HANDLERS],
        test_loader_name="placement_conformance")
    outcomes = _Outcomes()
    suite.run(outcomes)
    return outcomes


def test_the_lists_name_real_files_and_every_fixture_is_known():
    assert set(SKIPPED_FILES) <= set(YAML_FILES)
    assert set(FRESH) <= set(YAML_FILES)
    assert set(FAILING_TESTS) <= set(YAML_FILES) - set(SKIPPED_FILES)
    for tests in FAILING_TESTS.values():
        for reason in tests.values():
            assert reason in REASONS or len(reason.split()) > 5, reason
    known = {name for name in dir(FIXTURES) if name.endswith("Fixture")}
    assert set(SERVER_OF_FIXTURE) <= FIXTURES.CONFIGURING
    for name in YAML_FILES:
        used = set(_fixture_names(utils.load_yaml(yaml_file=str(GABBITS / name))))
        assert used <= known, f"{name} uses {used - known}"


def test_expected_links_are_computed_with_the_mount_point():
    suite = {"tests": [{"response_json_paths": {
        "$.links[0].href": "/resource_providers/u", "$.name": "/resource_providers/",
        "$.uuid": "/^[a-f0-9-]+$/", "$.generation": 1, "$.other": "/elsewhere"}}]}
    assert with_mount_point(suite, "/placement")["tests"][0]["response_json_paths"] == {
        "$.links[0].href": "/placement/resource_providers/u",
        "$.name": "/resource_providers/", "$.uuid": "/^[a-f0-9-]+$/", "$.generation": 1,
        "$.other": "/elsewhere"}


@pytest.mark.parametrize("name", YAML_FILES)
def test_placement_gabbit(name, placement_urls, conformance_tally):
    if name in SKIPPED_FILES:
        pytest.skip(SKIPPED_FILES[name])
    server = server_of(name, utils.load_yaml(yaml_file=str(GABBITS / name)))
    outcomes = run_file(name, placement_urls[server])
    conformance_tally[name] = outcomes.states
    expected = FAILING_TESTS.get(name) or {}
    unknown = sorted(set(expected) - set(outcomes.by_name))
    failed = {test: why for test, (state, why) in outcomes.by_name.items() if state == "fail"}
    unexpected = {test: why for test, why in failed.items() if test not in expected}
    now_passing = sorted(test for test in expected
                         if outcomes.by_name.get(test, ("",))[0] == "pass")
    report = "".join(f"\n--- {test}\n{why[-1500:]}" for test, why in unexpected.items())
    assert not unknown, f"expected_failures.yaml names tests {name} does not have: {unknown}"
    assert not now_passing, f"listed as failing but they pass now: {now_passing}"
    assert not unexpected, f"{len(unexpected)} tests of {name} fail:{report}"
