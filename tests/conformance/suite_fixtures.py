"""OpenStack Placement's gabbi fixtures, re-created over HTTP.

Placement's own fixtures (``placement/tests/functional/fixtures/gabbits.py``)
build their providers, inventories, traits, aggregates and allocations with
Placement's database objects, in process. Here the same ``start_fixture``
code runs unchanged (read from the pinned wheel) against a stand-in for
``placement.tests.functional.db.test_base`` that makes the same objects
through ``/placement`` of a live server. Every fixture first empties the
server over HTTP, so each YAML file starts from nothing, as it does there.
"""

from __future__ import annotations

import ast
import importlib.resources
import os
import uuid as uuidlib

import os_resource_classes
import os_traits
import requests
from gabbi import fixture as gabbi_fixture
from oslo_utils import uuidutils

ADMIN = {"X-Auth-Token": "admin", "OpenStack-API-Version": "placement latest",
         "Accept": "application/json"}
# The fixtures that change Placement's configuration in its process: here the server
# a file runs on is configured so (conftest.SERVERS), and the fixture only empties it.
CONFIGURING = {"CORSFixture", "OpenPolicyFixture", "SecureRBACPolicyFixture",
               "LegacyRBACPolicyFixture"}
# os.environ names APIFixture sets for every file (Placement's own list).
_RANDOM_ENV = ("RP_UUID", "RP_NAME", "RP_UUID1", "RP_NAME1", "RP_UUID2", "RP_NAME2",
               "PROJECT_ID", "ADMIN_PROJECT_ID", "SERVICE_PROJECT_ID", "USER_ID",
               "PROJECT_ID_ALT", "USER_ID_ALT", "INSTANCE_UUID", "MIGRATION_UUID",
               "CONSUMER_UUID", "PARENT_PROVIDER_UUID", "ALT_PARENT_PROVIDER_UUID")


class _UUIDSentinel:
    """``oslo_utils.fixture.uuidsentinel``: one random uuid per attribute name."""

    def __init__(self):
        self._uuids: dict[str, str] = {}

    def __getattr__(self, name: str) -> str:
        if name.startswith("_"):
            raise AttributeError(name)
        return self._uuids.setdefault(name, str(uuidlib.uuid4()))


uuidsentinel = _UUIDSentinel()


class Placement:
    """The /placement endpoint the fixtures write to (set by the test module)."""

    url = ""

    @classmethod
    def call(cls, method: str, path: str, json=None, ok=(200, 201, 204),
             version: str = "latest") -> requests.Response:
        headers = dict(ADMIN, **{"OpenStack-API-Version": f"placement {version}"})
        response = requests.request(method, cls.url + path, json=json, headers=headers,
                                    timeout=30)
        if response.status_code not in ok:
            raise AssertionError(f"fixture: {method} {path} answered "
                                 f"{response.status_code}: {response.text[:500]}")
        return response


def empty_the_server() -> None:
    """Delete every allocation, provider, custom trait and custom resource class."""
    providers = Placement.call("GET", "/resource_providers").json()["resource_providers"]
    consumers = set()
    for rp in providers:
        found = Placement.call("GET", f"/resource_providers/{rp['uuid']}/allocations")
        consumers.update(found.json()["allocations"])
    for consumer in sorted(consumers):
        Placement.call("DELETE", f"/allocations/{consumer}", ok=(204, 404))
    remaining = {rp["uuid"]: rp.get("parent_provider_uuid") for rp in providers}
    while remaining:
        parents = set(remaining.values())
        leaves = [u for u in remaining if u not in parents]
        for leaf in leaves:
            Placement.call("DELETE", f"/resource_providers/{leaf}", ok=(204, 404))
            del remaining[leaf]
    traits = Placement.call("GET", "/traits?name=startswith:CUSTOM_").json()["traits"]
    for name in traits:
        Placement.call("DELETE", f"/traits/{name}", ok=(204, 404, 405))
    classes = Placement.call("GET", "/resource_classes", ok=(200, 404))
    if classes.status_code == 200:
        for rc in classes.json()["resource_classes"]:
            if rc["name"].startswith("CUSTOM_"):
                Placement.call("DELETE", f"/resource_classes/{rc['name']}", ok=(204, 404))


class Provider:
    """What Placement's ``ResourceProvider`` object offers the fixtures."""

    def __init__(self, rp_uuid: str, name: str):
        self.uuid = rp_uuid
        self.name = name

    def set_aggregates(self, aggregates) -> None:
        generation = Placement.call("GET", f"/resource_providers/{self.uuid}").json()[
            "generation"]
        Placement.call("PUT", f"/resource_providers/{self.uuid}/aggregates",
                       {"aggregates": list(aggregates), "resource_provider_generation":
                        generation})


class Owner:
    """A user or project of the fixtures: only its external id travels over HTTP."""

    def __init__(self, context=None, external_id=None):
        self.external_id = external_id

    def create(self) -> None:
        """Nothing to store: Placement creates users and projects with allocations."""


class Consumer:
    def __init__(self, consumer_uuid: str, user: Owner, project: Owner):
        self.uuid = consumer_uuid
        self.user = user
        self.project = project


class TestBase:
    """``placement.tests.functional.db.test_base`` over HTTP."""

    @staticmethod
    def create_provider(context, name, *aggs, **kwargs) -> Provider:
        rp_uuid = kwargs.get("uuid", getattr(uuidsentinel, name))
        body = {"name": name, "uuid": rp_uuid}
        if kwargs.get("parent"):
            body["parent_provider_uuid"] = kwargs["parent"]
        Placement.call("POST", "/resource_providers", body)
        provider = Provider(rp_uuid, name)
        if aggs:
            provider.set_aggregates(aggs)
        return provider

    @staticmethod
    def ensure_rc(context, name) -> None:
        if name.startswith("CUSTOM_"):
            Placement.call("PUT", f"/resource_classes/{name}", ok=(201, 204))

    @staticmethod
    def add_inventory(rp: Provider, rc, total, **kwargs) -> None:
        TestBase.ensure_rc(None, rc)
        kwargs.setdefault("max_unit", total)
        generation = Placement.call("GET", f"/resource_providers/{rp.uuid}").json()[
            "generation"]
        Placement.call("POST", f"/resource_providers/{rp.uuid}/inventories",
                       {"resource_class": rc, "total": total,
                        "resource_provider_generation": generation, **kwargs})

    @staticmethod
    def set_traits(rp: Provider, *traits) -> list[str]:
        for name in traits:
            if name.startswith("CUSTOM_"):
                Placement.call("PUT", f"/traits/{name}", ok=(201, 204))
        generation = Placement.call("GET", f"/resource_providers/{rp.uuid}").json()[
            "generation"]
        Placement.call("PUT", f"/resource_providers/{rp.uuid}/traits",
                       {"traits": list(traits), "resource_provider_generation": generation})
        return list(traits)

    @staticmethod
    def ensure_consumer(ctx, user, project, consumer_id=None) -> Consumer:
        return Consumer(consumer_id or uuidutils.generate_uuid(), user, project)

    @staticmethod
    def set_allocation(ctx, rp: Provider, consumer: Consumer, rc_used_dict) -> None:
        # 1.28: consumer generations, and no consumer type (Placement's fixtures set none).
        current = Placement.call("GET", f"/allocations/{consumer.uuid}", version="1.28").json()
        allocations = current["allocations"]
        allocations[rp.uuid] = {"resources": dict(rc_used_dict)}
        Placement.call("PUT", f"/allocations/{consumer.uuid}", {
            "allocations": {u: {"resources": a["resources"]} for u, a in allocations.items()},
            "project_id": consumer.project.external_id,
            "user_id": consumer.user.external_id,
            "consumer_generation": current.get("consumer_generation")}, version="1.28")

    @staticmethod
    def create_user_and_project(ctx, prefix="fake") -> tuple[Owner, Owner]:
        return Owner(external_id=f"{prefix}-user"), Owner(external_id=f"{prefix}-project")


class ResourceClassObject:
    """``placement.objects.resource_class.ResourceClass`` as the fixtures use it."""

    def __init__(self, context=None, name=None):
        self.name = name

    def create(self) -> None:
        Placement.call("PUT", f"/resource_classes/{self.name}", ok=(201,))


class _Objects:
    User = Owner
    Project = Owner
    ResourceClass = ResourceClassObject


class APIFixture(gabbi_fixture.GabbiFixture):
    """Placement's APIFixture: an empty server and the suite's environment names."""

    context = None

    def start_fixture(self):
        empty_the_server()
        for name in _RANDOM_ENV:
            os.environ[name] = str(uuidlib.uuid4())
        os.environ["CUSTOM_RES_CLASS"] = "CUSTOM_IRON_NFV"
        os.environ["CUSTOM_RES_CLASS1"] = "CUSTOM_IRON_NFV1"
        os.environ["CUSTOM_RES_CLASS2"] = "CUSTOM_IRON_NFV2"

    def stop_fixture(self):
        pass


def _placement_fixture_source() -> str:
    return (importlib.resources.files("placement") / "tests" / "functional" / "fixtures"
            / "gabbits.py").read_text(encoding="utf-8")


def load() -> dict[str, type]:
    """Every data fixture of the pinned Placement, its own code bound to HTTP."""
    namespace = {"os": os, "tb": TestBase, "uuidutils": uuidutils, "uuids": uuidsentinel,
                 "orc": os_resource_classes, "ot": os_traits, "user_obj": _Objects,
                 "project_obj": _Objects, "rc_obj": _Objects, "APIFixture": APIFixture}
    tree = ast.parse(_placement_fixture_source())
    fixtures = {"APIFixture": APIFixture}
    for node in tree.body:
        if not isinstance(node, ast.ClassDef) or node.name in fixtures:
            continue
        if node.name in CONFIGURING:
            fixtures[node.name] = type(node.name, (APIFixture,), {})
            continue
        bases = [b.id for b in node.bases if isinstance(b, ast.Name)]
        if not bases or not all(b in fixtures for b in bases):
            continue
        node.body = [n for n in node.body if not isinstance(n, ast.Expr)] or [ast.Pass()]
        module = ast.Module(body=[node], type_ignores=[])
        exec(compile(ast.fix_missing_locations(module), "placement-fixtures", "exec"),
             namespace)
        fixtures[node.name] = namespace[node.name]
    return fixtures
