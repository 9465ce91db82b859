"""OpenStack Placement's own functional suite against fleetflow's /placement.

Every gabbi YAML file shipped in the pinned ``openstack-placement`` wheel runs,
in its own order, against a live ``fleetflow serve`` (see conftest.py), with its
fixtures re-created over HTTP (suite_fixtures.py). ``expected_failures.yaml``
beside this file lists, each with its reason, the files that cannot run against
a remote server and the single tests that fail on purpose; every other test
must pass, and a listed test that starts passing fails the run too, so the
list never goes stale.
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
# Reasons whose tests may pass when a file runs alone (they depend on an earlier file).
NOT_STRICT = {"shared-consumer"}
YAML_FILES = sorted(p.name for p in GABBITS.iterdir() if p.name.endswith(".yaml"))


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
    """Each test's outcome by its YAML name: pass, fail (with the reason) or skip."""

    def __init__(self):
        super().__init__()
        self.by_name: dict[str, tuple[str, str]] = {}

    @staticmethod
    def _name(test) -> str:
        return getattr(test, "test_data", {}).get("name", str(test))

    def addSuccess(self, test):
        super().addSuccess(test)
        self.by_name[self._name(test)] = ("pass", "")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self.by_name[self._name(test)] = ("fail", self.failures[-1][1])

    def addError(self, test, err):
        super().addError(test, err)
        self.by_name[self._name(test)] = ("fail", self.errors[-1][1])

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        if reason == "fixture failure":  # gabbi skips a whole file whose fixture failed
            cause = self.errors[0][1] if self.errors else ""
            self.by_name[self._name(test)] = ("fail", f"fixture failure:\n{cause}")
        else:
            self.by_name[self._name(test)] = ("skip", reason)

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self.by_name[self._name(test)] = ("skip", "xfail in the YAML")

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self.by_name[self._name(test)] = ("pass", "")


def _fixture_names(suite_dict) -> list[str]:
    return [f if isinstance(f, str) else next(iter(f)) for f in suite_dict.get("fixtures", [])]


def run_file(name: str, placement_url: str) -> _Outcomes:
    """Run one YAML file of the suite against ``placement_url``; its outcomes."""
    FIXTURES.Placement.url = placement_url
    host_port = placement_url.split("//", 1)[1].split("/", 1)[0]
    host, port = host_port.rsplit(":", 1)
    suite_dict = utils.load_yaml(yaml_file=str(GABBITS / name))
    suite = suitemaker.test_suite_from_dict(
        unittest.TestLoader(), name.removesuffix(".yaml"), suite_dict, str(GABBITS), host,
        int(port), FIXTURES, None, prefix="/placement",
        handlers=[handler() for handler in handlers.RESPONSE_HANDLERS],
        test_loader_name="placement_conformance")
    outcomes = _Outcomes()
    suite.run(outcomes)
    return outcomes


def test_the_skip_list_names_real_files_and_every_in_process_fixture():
    assert set(SKIPPED_FILES) <= set(YAML_FILES)
    assert set(FAILING_TESTS) <= set(YAML_FILES) - set(SKIPPED_FILES)
    for tests in FAILING_TESTS.values():
        for reason in tests.values():
            assert reason in REASONS or len(reason.split()) > 5, reason
    for name in YAML_FILES:
        used = set(_fixture_names(utils.load_yaml(yaml_file=str(GABBITS / name))))
        if used & FIXTURES.IN_PROCESS_ONLY:
            assert name in SKIPPED_FILES, f"{name} uses {used & FIXTURES.IN_PROCESS_ONLY}"


@pytest.mark.parametrize("name", YAML_FILES)
def test_placement_gabbit(name, placement_url, conformance_tally):
    if name in SKIPPED_FILES:
        pytest.skip(SKIPPED_FILES[name])
    outcomes = run_file(name, placement_url)
    conformance_tally[name] = outcomes.by_name
    expected = FAILING_TESTS.get(name) or {}
    unknown = sorted(set(expected) - set(outcomes.by_name))
    failed = {test: why for test, (state, why) in outcomes.by_name.items() if state == "fail"}
    unexpected = {test: why for test, why in failed.items() if test not in expected}
    now_passing = sorted(test for test, reason in expected.items()
                         if outcomes.by_name.get(test, ("",))[0] == "pass"
                         and reason not in NOT_STRICT)
    report = "".join(f"\n--- {test}\n{why[-1500:]}" for test, why in unexpected.items())
    assert not unknown, f"expected_failures.yaml names tests {name} does not have: {unknown}"
    assert not now_passing, f"listed as failing but they pass now: {now_passing}"
    assert not unexpected, f"{len(unexpected)} tests of {name} fail:{report}"
