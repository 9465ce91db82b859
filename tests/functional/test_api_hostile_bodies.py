"""Hostile bodies at every write route: never a 5xx, and a 4xx writes nothing.

The routes come from the app's url_map (every POST, PUT, PATCH and DELETE under
/v2 and /placement), so a new route is covered without touching this file.
Bodies are JSON and XML of arbitrary shapes, sizes, depths and code points,
built around the field names the API's own schemas use so that they get past
the first checks; each answer must be under 500 and, when it is a 4xx, every
table must hold the rows it held before.
"""

from __future__ import annotations

import json
import uuid
from xml.sax.saxutils import quoteattr

import marshmallow as ma
import pytest
import sqlalchemy as sa
from defusedxml import ElementTree as SafeET
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleetflow.api.xml import XmlBodyParser
from fleetflow.persistence.fleet import stable_uuid

WRITE_METHODS = {"POST", "PUT", "PATCH", "DELETE"}
TENANT = "tenant-a"
HOST = "z1-r1-h01"
PLACEMENT_KEYS = ["name", "uuid", "parent_provider_uuid", "resource_provider_generation",
                  "inventories", "total", "reserved", "min_unit", "max_unit", "step_size",
                  "allocation_ratio", "traits", "aggregates", "allocations", "resources",
                  "project_id", "user_id", "consumer_generation", "mappings", "VCPU",
                  "MEMORY_MB"]
CONTENT_TYPES = ["application/json", "application/json; charset=utf-8", "application/xml",
                 "text/xml", "text/plain", "application/x-www-form-urlencoded",
                 "application/foo+json", None]
HOSTILE_STRINGS = ["\udc80", "a\ud800b", "\x00", "\x01", "a\x0bb", "\ufffe", "\U0010ffff",
                   "", " ", "x" * 300, "</a>", "&amp;", "\"'", "${x}", "%s", "-1", "1e999"]
HOSTILE_NUMBERS = [0, -1, 1, 2**31 - 1, 2**31, 2**63 - 1, 2**63, -(2**63) - 1, 10**40,
                   1.5, -0.0, 1e308]
# Sizes around the limits (nesting 64, Python's recursion 1,000, int() 4,300 digits).
SIZES = st.one_of(st.sampled_from([30, 63, 64, 65, 999, 1000, 4300, 4301, 6000]),
                  st.integers(1, 6000))


@pytest.fixture
def services(small_cloud, flow_engine, api_services, conf, db):
    """Every service a write route reaches, jobs recorded instead of run."""
    from fleetflow.services.evacuations import EvacuationOps
    from fleetflow.services.hosts import HostOps
    from fleetflow.services.reservations import ReservationOps

    def submit(flow_name, flow_kwargs, **options):
        return options.get("flow_id") or "flow"

    # Hostile bodies, not scale: a count drawn up to the default limit (10,000) would
    # write that many instance rows for each accepted request.
    conf.set_override("max_reservation_count", 1000, group="api")

    hosts = HostOps(conf, db, small_cloud.placement.store, small_cloud.compute)
    api_services.update(
        reservations=ReservationOps(conf, db, submit=submit), hosts=hosts,
        evacuations=EvacuationOps(conf, db, submit, compute=small_cloud.compute,
                                  on_host_state=hosts.sync_placement))
    return api_services


@pytest.fixture
def hostile(services, app, db, make_headers):
    """What the tests need: the client, the write routes and a way to count rows."""
    client = app.test_client()
    member = make_headers(TENANT, "member", "reader")
    admin = make_headers("admin", "admin", "member", "reader", user="admin")
    # Admin and service: the reshaper is a service's (Placement's default).
    placement = dict(make_headers("admin", "admin", "service", user="admin"),
                     **{"OpenStack-API-Version": "placement latest"})
    group = client.post(f"/v2/{TENANT}/groups", json={"group": {"name": "g"}},
                        headers=member).json["group"]["id"]
    values = {"tenant_id": TENANT, "name": HOST, "group_id": group,
              "uuid": stable_uuid(HOST), "consumer_uuid": str(uuid.uuid4()),
              "resource_class": "VCPU", "member_name": "m"}
    routes, xml_routes, body_routes = [], [], []
    for rule in app.url_map.iter_rules():
        if not rule.rule.startswith(("/v2/", "/placement/")):
            continue
        url = rule.rule
        for arg in rule.arguments:
            url = url.replace(f"<{arg}>", values.get(arg, "no-such-" + arg))
            url = url.replace(f"<path:{arg}>", values.get(arg, "no-such-" + arg))
        headers = member if url.startswith(f"/v2/{TENANT}/") else \
            placement if url.startswith("/placement/") else admin
        found = [(method, url, headers) for method in sorted(rule.methods & WRITE_METHODS)]
        routes.extend(found)
        parser = getattr(app.blueprints.get(rule.endpoint.split(".")[0]), "ARGUMENTS_PARSER",
                         None)
        if isinstance(parser, XmlBodyParser):
            xml_routes.extend(found)
        body_routes.extend(route for route in found
                           if _reads_a_body(app, rule.endpoint, route[0], route[1]))
    assert len(routes) > 25 and xml_routes, routes
    hostile = Hostile(client, db, routes, xml_routes, vocabulary(app))
    hostile.body_routes = body_routes
    return hostile


def _reads_a_body(app, endpoint: str, method: str, url: str) -> bool:
    """Whether the route reads a JSON body: a /v2 view with a body argument, or a
    /placement write (at the latest version, all but the creation of a trait or of a
    resource class, whose PUT takes none since 1.7)."""
    if url.startswith("/placement/"):
        return method in ("POST", "PUT") and endpoint not in (
            "placement.create_trait", "placement.update_resource_class")
    view_class = getattr(app.view_functions[endpoint], "view_class", None)
    apidoc = getattr(getattr(view_class, method.lower(), None), "_apidoc", {})
    return any(parameter.get("in") not in ("query", "path")
               for parameter in (apidoc.get("arguments") or {}).get("parameters", []))


def vocabulary(app) -> list[str]:
    """Every field name of every /v2 body schema, and Placement's keys."""
    names = set(PLACEMENT_KEYS)
    for rule in app.url_map.iter_rules():
        view_class = getattr(app.view_functions[rule.endpoint], "view_class", None)
        for method in rule.methods & WRITE_METHODS if view_class else ():
            apidoc = getattr(getattr(view_class, method.lower(), None), "_apidoc", {})
            for parameter in (apidoc.get("arguments") or {}).get("parameters", []):
                if parameter.get("in") not in ("query", "path"):
                    names.update(_field_names(parameter["schema"]))
    return sorted(names)


def _field_names(schema) -> set[str]:
    schema = schema() if isinstance(schema, type) else schema
    names, pending = set(), list(schema.fields.items())
    while pending:
        name, field = pending.pop()
        names.add(field.data_key or name)
        if isinstance(field, ma.fields.Nested):
            pending.extend(field.schema.fields.items())
        elif isinstance(field, ma.fields.List) and isinstance(field.inner, ma.fields.Nested):
            pending.extend(field.inner.schema.fields.items())
    return names


class Hostile:
    def __init__(self, client, db, routes, xml_routes, names):
        self.client, self.db, self.names = client, db, names
        self.routes, self.xml_routes = routes, xml_routes

    def row_counts(self) -> dict:
        with self.db.engine.connect() as connection:
            tables = sa.inspect(connection).get_table_names()
            return {t: connection.scalar(sa.text(f'SELECT count(*) FROM "{t}"'))
                    for t in tables}

    def check(self, method, url, headers, body: bytes, content_type):
        """Send; assert no 5xx, a 4xx that wrote nothing, and XML that parses."""
        headers = dict(headers, **({"Content-Type": content_type} if content_type else {}))
        before = self.row_counts()
        response = self.client.open(url, method=method, data=body, headers=headers)
        where = f"{method} {url} {content_type} {body[:300]!r}"
        print("STATUS", response.status_code, method, url)
        assert response.status_code < 500, f"{where} -> {response.data[:500]!r}"
        if response.status_code >= 400:
            assert self.row_counts() == before, f"{where} -> {response.status_code} wrote rows"
        if response.mimetype == "application/xml":
            SafeET.fromstring(response.data)
        elif response.data:
            response.get_json(force=True)
        return response


# -- strategies -----------------------------------------------------------------------

_text = st.one_of(st.text(st.characters(exclude_categories=()), max_size=20),
                  st.sampled_from(HOSTILE_STRINGS))
_scalars = st.one_of(st.none(), st.booleans(), st.sampled_from(HOSTILE_NUMBERS),
                     st.integers(), st.floats(allow_nan=False, allow_infinity=False), _text)


def _documents(names):
    keys = st.one_of(st.sampled_from(names), _text)
    return st.recursive(_scalars, lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(keys, children, max_size=5)),
        max_leaves=16)


def _json_bodies(names):
    documents = _documents(names)
    wrapped = st.builds(lambda root, doc: {root: doc}, st.sampled_from(names), documents)
    return st.one_of(
        st.builds(lambda doc: json.dumps(doc).encode(), st.one_of(wrapped, documents)),
        st.builds(lambda root, n: (json.dumps({root: None}).replace("null", "9" * n)).encode(),
                  st.sampled_from(names), SIZES),
        st.builds(lambda n, o: ((o[0] * n) + (o[1] * n)).encode(),
                  SIZES, st.sampled_from([("[", "]"), ('{"a":', "}")])),
        st.binary(max_size=64))


def _xml_element(tag, value, depth=0) -> str:
    tag = tag if tag.isidentifier() and tag.isascii() else "item"
    if isinstance(value, dict):
        attributes = "".join(f" {k}={quoteattr(str(v))}" for k, v in value.items()
                             if k.isidentifier() and k.isascii()
                             and not isinstance(v, dict | list))
        children = "".join(_xml_element(k, v, depth + 1) for k, v in value.items()
                           if isinstance(v, dict | list))
        return f"<{tag}{attributes}>{children}</{tag}>"
    if isinstance(value, list):
        return f"<{tag}>" + "".join(_xml_element("item", v, depth + 1) for v in value) + \
            f"</{tag}>"
    text = "" if value is None else str(value)
    return f"<{tag}>{text.replace('&', '&amp;').replace('<', '&lt;')}</{tag}>"


def _xml_bodies(names):
    return st.one_of(
        st.builds(lambda root, doc: _xml_element(root, doc).encode("utf-8", "surrogatepass"),
                  st.sampled_from(names), _documents(names)),
        st.builds(lambda n: ("<group>" + "<a>" * n + "</a>" * n + "</group>").encode(),
                  SIZES),
        st.sampled_from([b"<group", b"<!DOCTYPE x [<!ENTITY a 'b'>]><group name='&a;'/>",
                         b"<group name='&#1;'/>", b"<group>\xff</group>",
                         b'<group name="g"><metadata><meta key="k"><a/></meta></metadata>'
                         b'</group>']))


def valid_bodies(host_uuid: str) -> dict:
    """Bodies the routes accept, by (method, url suffix): hostile values go inside them,
    so that they reach the fields' own checks and the writes behind them."""
    server = {"name": "s1", "type": "server",
              "spec": {"imageRef": "cirros", "flavorRef": "m1.small"}}
    volume = {"name": "v1", "type": "volume", "spec": {"size": 1, "attachTo": "s1"}}
    return {
        ("POST", "/reservations"): {"reservation": {
            "name": "r", "count": 1, "flavor_ref": "m1.small", "image_ref": "cirros",
            "capabilities": {"gpu": "true"}, "policy": "best-effort"}},
        ("POST", "/groups"): {"group": {"name": "g", "policies": ["anti-affinity"],
                                        "max_per_host": 2, "metadata": {"k": "v"},
                                        "capabilities": {"gpu": "true"}}},
        ("PUT", "/groups/{group_id}"): {"group": {"name": "h", "metadata": {"k": "v"}}},
        ("POST", "/vclusters"): {"vcluster": {"name": "c", "instances": [server, volume],
                                              "groupings": [{"name": "a", "membersRef":
                                                             ["s1", "v1"],
                                                             "spec": {"rule": "affinity"}}]}},
        ("PUT", "/quotas/tenant_id"): {"quota": {"instances": 10, "ram_mb": 4096}},
        ("PUT", "/hosts/name"): {"host": {"state": "up", "reason": "fine"}},
        ("POST", "/evacuations"): {"evacuation": {"hosts": [HOST], "mode": "cold",
                                                  "max_parallel": 2}},
        ("POST", "/resource_providers"): {"name": "rp", "uuid": str(uuid.uuid4())},
        ("PUT", "/inventories"): {"resource_provider_generation": 1, "inventories": {
            "VCPU": {"total": 8, "allocation_ratio": 1.0, "max_unit": 8}}},
        ("PUT", "/aggregates"): {"resource_provider_generation": 1,
                                 "aggregates": [str(uuid.UUID(int=1))]},
        ("PUT", "/traits"): {"resource_provider_generation": 1,
                             "traits": ["HW_CPU_X86_AVX2"]},
        ("POST", "/reshaper"): {"inventories": {host_uuid: {
            "resource_provider_generation": 1, "inventories": {"VCPU": {"total": 8}}}},
            "allocations": {}},
        ("PUT", "/allocations/consumer_uuid"): {
            "allocations": {host_uuid: {"resources": {"VCPU": 1}}}, "project_id": "p",
            "user_id": "u", "consumer_generation": None, "consumer_type": "INSTANCE"},
    }


def _with_hostile_value(document, data, names):
    """``document`` with one value (anywhere in it) or one new key made hostile."""
    places = []
    pending = [(document, None)]
    while pending:
        value, _ = pending.pop()
        if isinstance(value, dict):
            places.extend((value, key) for key in value)
            places.append((value, None))
            pending.extend((item, None) for item in value.values())
        elif isinstance(value, list):
            places.extend((value, index) for index in range(len(value)))
            pending.extend((item, None) for item in value)
    container, key = data.draw(st.sampled_from(places), label="place")
    hostile = data.draw(st.one_of(_scalars, _documents(names)), label="value")
    if key is None:
        container[data.draw(_text, label="new key")] = hostile
    else:
        container[key] = hostile
    return document


# -- the tests ------------------------------------------------------------------------


def hostile_settings(examples: int):
    """Bounded runs of the hostile-body tests; one fixture serves all examples of a test."""
    return settings(max_examples=examples, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow, HealthCheck.data_too_large])


@hostile_settings(150)
@given(data=st.data())
def test_hostile_json_at_every_write_route(hostile, data):
    method, url, headers = data.draw(st.sampled_from(hostile.routes), label="route")
    body = data.draw(_json_bodies(hostile.names), label="body")
    content_type = data.draw(st.sampled_from(CONTENT_TYPES[:2] + [None]), label="type")
    hostile.check(method, url, headers, body, content_type)


@hostile_settings(80)
@given(data=st.data())
def test_hostile_xml_at_every_write_route(hostile, data):
    # Half of them where XML is read, so that the bodies get past the media type.
    method, url, headers = data.draw(st.one_of(st.sampled_from(hostile.xml_routes),
                                               st.sampled_from(hostile.routes)), label="route")
    body = data.draw(_xml_bodies(hostile.names), label="body")
    content_type = data.draw(st.one_of(st.sampled_from(["application/xml", "text/xml"]),
                                       st.sampled_from(CONTENT_TYPES)), label="type")
    hostile.check(method, url, headers, body, content_type)


@hostile_settings(150)
@given(data=st.data())
def test_hostile_values_inside_valid_bodies(hostile, data):
    bodies = valid_bodies(stable_uuid(HOST))
    routes = [(route, body) for route in hostile.routes for (method, suffix), body
              in bodies.items() if route[0] == method and route[1].endswith(
                  suffix.replace("{group_id}", route[1].rsplit("/", 1)[-1])
                  .replace("tenant_id", TENANT).replace("name", HOST)
                  .replace("consumer_uuid", route[1].rsplit("/", 1)[-1]))]
    assert len(routes) >= len(bodies), routes
    (method, url, headers), body = data.draw(st.sampled_from(routes), label="route")
    body = _with_hostile_value(json.loads(json.dumps(body)), data, hostile.names)
    xml_too = (method, url, headers) in hostile.xml_routes and data.draw(st.booleans())
    if xml_too:
        root = next(iter(body))  # XML has one root: other top-level keys are left out
        encoded = _xml_element(root, body[root]).encode("utf-8", "surrogatepass")
        hostile.check(method, url, headers, encoded, "application/xml")
    else:
        hostile.check(method, url, headers, json.dumps(body).encode(), "application/json")


def test_a_type_that_only_ends_in_json_is_a_415_wherever_a_body_is_read(hostile):
    """JSON under another media type (``application/foo+json``) is not read as JSON."""
    assert len(hostile.body_routes) > 10, hostile.body_routes
    for method, url, headers in hostile.body_routes:
        response = hostile.check(method, url, headers, b"{}", "application/foo+json")
        assert response.status_code == 415, (method, url, response.data[:300])


CANNED = {
    "json nested 1000 deep": ('{"a": ' * 1000 + "1" + "}" * 1000, "application/json"),
    "xml nested 1000 deep": ("<a>" * 1000 + "</a>" * 1000, "application/xml"),
    "an integer of 5000 digits": ('{"x": ' + "9" * 5000 + "}", "application/json"),
    "a lone surrogate": ('{"x": "\\udc80"}', "application/json"),
    "no content type": ('{"x": 1}', None),
}


@pytest.mark.parametrize("case", sorted(CANNED))
def test_each_known_hostile_body_at_every_write_route(hostile, case):
    """Known hostile bodies (deep nesting, huge numbers, a lone surrogate, no content
    type) at every route, beside the random ones above."""
    body, content_type = CANNED[case]
    for method, url, headers in hostile.routes:
        hostile.check(method, url, headers, body.encode(), content_type)
