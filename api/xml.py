"""XML bodies for the resources that speak it (groups, virtual clusters), beside JSON.

A blueprint opts in with :func:`enable` and an :class:`XmlShape`; then

- ``Accept: application/xml`` (or ``text/xml``) answers every response of the
  blueprint, errors included, in XML. Without a preference in ``Accept``
  (none, or ``*/*``) the answer follows the request's own body type;
- a body sent as ``Content-Type: application/xml`` is read with defusedxml
  (never the standard library's parser directly: it expands entities) and
  validated by the same marshmallow schemas as JSON, so both formats accept
  and refuse exactly the same documents.

The mapping is the same both ways and needs no per-field code::

    {"group": {"id": "9f..", "name": "web", "max_per_host": 2,
               "policies": ["anti-affinity"], "metadata": {"tier": "front"},
               "members": [], "fault": null}}

    <group id="9f.." name="web" max_per_host="2">
      <policies><policy>anti-affinity</policy></policies>
      <metadata><meta key="tier">front</meta></metadata>
      <members/>
    </group>

Scalars are attributes (``null`` leaves the attribute out; booleans are
``true``/``false``); lists are a container of item elements named by
``XmlShape.lists``; dictionaries with client-chosen keys (``XmlShape.keyed``)
are entries carrying a ``key`` attribute, so any key is safe in XML; other
dictionaries are nested elements. On input a scalar may also be a child
element (``<name>web</name>``); values arrive as strings and the schema converts
them (``max_per_host="2"`` loads as 2). Errors read::

    <errors><error status="404" code="fleetflow.not_found" title="Not Found"
                   detail="..." request_id="req-..."/></errors>

NOTE: errors raised before Flask knows the route (405 on an unknown method)
belong to no blueprint and stay JSON.
"""

from __future__ import annotations

import dataclasses
import json
import re
import xml.etree.ElementTree as ET  # noqa: S405 - building only; parsing uses defusedxml
from collections.abc import Mapping
from xml.sax.saxutils import quoteattr

import flask
from defusedxml import DefusedXmlException
from defusedxml import ElementTree as SafeET
from flask_smorest import abort
from webargs import core

from fleetflow.api.bodies import JSON_MIMETYPE, MAX_DEPTH, BodyParser

XML_MIMETYPE = "application/xml"
XML_MIMETYPES = (XML_MIMETYPE, "text/xml")

# What XML 1.0 can carry at all (no escape exists for the rest), and the names
# an element or attribute may safely have.
_NOT_XML_CHAR = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_XML_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")
# The entry of a dictionary whose key cannot be an XML name: <entry key="...">.
ENTRY_TAG = "entry"

# Containers every resource shares: the error list and pagination links.
COMMON_LISTS = {"errors": "error", "links": "link"}


@dataclasses.dataclass(frozen=True)
class XmlShape:
    """Names the XML needs that JSON does not have.

    ``lists``: container tag -> item tag (``{"policies": "policy"}``).
    ``keyed``: dictionaries of client-chosen keys -> entry tag
    (``{"metadata": "meta"}`` gives ``<meta key="k">v</meta>``).
    """

    lists: Mapping[str, str] = dataclasses.field(default_factory=dict)
    keyed: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def item_tag(self, container: str) -> str:
        return self.lists.get(container) or COMMON_LISTS.get(container) or "item"

    def is_list(self, tag: str) -> bool:
        return tag in self.lists or tag in COMMON_LISTS


class XmlError(ValueError):
    """A well-formed XML document that does not fit the resource's shape."""


# -- JSON -> XML ------------------------------------------------------------------


def _is_scalar(value) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


def _text(value) -> str:
    """Text XML can carry: characters it cannot (control characters, lone
    surrogates) become U+FFFD, so every document written is well-formed."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if _is_scalar(value):
        return _NOT_XML_CHAR.sub("\ufffd", str(value))
    # A non-scalar where only text fits (a metadata value that is a list):
    # keep it readable and lossless as JSON text.
    return json.dumps(value, sort_keys=True)


def _element(tag: str, value, shape: XmlShape) -> ET.Element:
    element = ET.Element(tag)
    if isinstance(value, Mapping):
        if tag in shape.keyed:
            for key, item in value.items():
                entry = ET.SubElement(element, shape.keyed[tag], key=_text(str(key)))
                entry.text = None if item is None else _text(item)
            return element
        for key, item in value.items():
            if not _XML_NAME.fullmatch(str(key)):
                # A key no element or attribute may be named after.
                entry = ET.SubElement(element, ENTRY_TAG, key=_text(str(key)))
                if _is_scalar(item):
                    entry.text = None if item is None else _text(item)
                else:
                    entry.append(_element(ENTRY_TAG, item, shape))
            elif _is_scalar(item):
                if item is not None:
                    element.set(key, _text(item))
            else:
                element.append(_element(key, item, shape))
    elif isinstance(value, list | tuple):
        item_tag = shape.item_tag(tag)
        for item in value:
            if _is_scalar(item):
                ET.SubElement(element, item_tag).text = None if item is None else _text(item)
            else:
                element.append(_element(item_tag, item, shape))
    elif value is not None:
        element.text = _text(value)
    return element


def to_xml(document: Mapping, shape: XmlShape) -> bytes:
    """Serialize a JSON document of the API.

    ``{"group": {...}}`` becomes ``<group ...>``. A document with more keys
    (a list page: ``{"groups": [...], "links": [...]}``) is rooted at its first
    key, the others becoming child containers of that root.
    """
    keys = list(document)
    if not keys:
        raise XmlError("an empty document has no root element")
    root = _element(keys[0], document[keys[0]], shape)
    for key in keys[1:]:
        value = document[key]
        if _is_scalar(value):
            if value is not None:
                root.set(key, _text(value))
        else:
            root.append(_element(key, value, shape))
    return ET.tostring(root, encoding="utf-8", xml_declaration=True)


# -- XML -> JSON ------------------------------------------------------------------


def _local(tag: str) -> str:
    """The tag without its namespace: clients may or may not use one."""
    return tag.rsplit("}", 1)[-1]


def _value(element: ET.Element, shape: XmlShape, depth: int = 1):
    tag = _local(element.tag)
    if depth > MAX_DEPTH:
        raise XmlError(f"elements nested deeper than {MAX_DEPTH} levels")
    children = list(element)
    if tag in shape.keyed:
        entries = {}
        for child in children:
            if _local(child.tag) != shape.keyed[tag] or "key" not in child.attrib:
                raise XmlError(f"{tag}: expected only <{shape.keyed[tag]} key=\"...\"> "
                               "entries")
            if len(child):
                # JSON's equivalent (an object as the value) is a 400 too; dropping
                # the element would store a value the client did not send.
                entry = f"<{shape.keyed[tag]} key={quoteattr(child.attrib['key'])}>"
                raise XmlError(f"{tag}: {entry} holds text only, not the element "
                               f"<{_local(child[0].tag)}>")
            entries[child.attrib["key"]] = child.text or ""
        return entries
    if shape.is_list(tag):
        item_tag = shape.item_tag(tag)
        items = []
        for child in children:
            if _local(child.tag) != item_tag:
                raise XmlError(f"{tag}: expected only <{item_tag}> items, "
                               f"not <{_local(child.tag)}>")
            items.append(_value(child, shape, depth + 1) if (len(child) or child.attrib)
                         else (child.text or "").strip())
        return items
    if not children and not element.attrib:
        return (element.text or "").strip()
    values: dict = {_local(name): value for name, value in element.attrib.items()}
    for child in children:
        name = _local(child.tag)
        if name in values:
            raise XmlError(f"{tag}: {name} is given twice")
        values[name] = _value(child, shape, depth + 1)
    return values


def from_xml(data: bytes, shape: XmlShape) -> dict:
    """Parse an XML request body into the JSON document it stands for.

    Raises :class:`XmlError` (shape), ``DefusedXmlException`` (a DTD, entity
    declarations or external references: the billion-laughs and XXE attacks)
    or ``ET.ParseError`` (not well-formed).
    """
    root = SafeET.fromstring(data, forbid_dtd=True, forbid_entities=True,
                             forbid_external=True)
    return {_local(root.tag): _value(root, shape)}


# -- Flask glue -------------------------------------------------------------------


def is_xml_request(request: flask.Request) -> bool:
    return request.mimetype in XML_MIMETYPES


def wants_xml(request: flask.Request) -> bool:
    """Whether to answer in XML: ``Accept`` decides, else the request body's type."""
    accept = request.accept_mimetypes
    xml_quality = max(accept.quality(m) for m in XML_MIMETYPES)
    json_quality = accept.quality(JSON_MIMETYPE)
    if xml_quality != json_quality:
        return xml_quality > json_quality
    return is_xml_request(request)


class XmlBodyParser(BodyParser):
    """webargs parser reading ``location="json"`` from an XML body as well."""

    MEDIA_TYPES = (JSON_MIMETYPE, XML_MIMETYPE)

    def __init__(self, shape: XmlShape, **kwargs):
        super().__init__(**kwargs)
        self.shape = shape

    def reads(self, request: flask.Request) -> bool:
        return is_xml_request(request) or super().reads(request)

    def _raw_load_json(self, req: flask.Request):
        if not is_xml_request(req):
            return super()._raw_load_json(req)
        data = req.get_data(cache=True)
        if not data:
            return core.missing
        try:
            return from_xml(data, self.shape)
        except DefusedXmlException as exc:
            abort(400, message=f"XML body refused: {type(exc).__name__} (DTDs, entity "
                               "declarations and external references are not allowed).")
        except ET.ParseError as exc:
            abort(400, message=f"XML body is not well-formed: {exc}.")
        except XmlError as exc:
            abort(400, message=f"XML body does not fit: {exc}.")


def enable(blueprint, shape: XmlShape) -> None:
    """Make ``blueprint`` read and answer XML. Call before its routes are declared.

    NOTE: the parser must be in place before ``@blp.arguments`` runs, which
    binds the parser at decoration time.
    """
    blueprint.ARGUMENTS_PARSER = XmlBodyParser(shape)

    @blueprint.after_request
    def answer_in_xml(response: flask.Response) -> flask.Response:
        # The answer depends on Accept (and the body's type): caches must know.
        response.vary.add("Accept")
        if response.mimetype != JSON_MIMETYPE or not wants_xml(flask.request):
            return response
        document = response.get_json(silent=True)
        if not isinstance(document, dict) or not document:
            return response
        response.set_data(to_xml(document, shape))
        response.mimetype = XML_MIMETYPE
        return response
