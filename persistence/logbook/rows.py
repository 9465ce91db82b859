"""TaskFlow's logbooks, flow and atom details to and from rows of the ``tf_`` tables.

The JSON columns (``models.JSON_COLUMNS``) are encoded here, not by a column
type: the backend compares the encoded text with what is stored to skip
rewriting atom details that did not change, so one detail must always encode
to the same text.
"""

from __future__ import annotations

import json

from oslo_serialization import jsonutils
from taskflow import states
from taskflow import storage as tf_storage
from taskflow.persistence import models

from fleetflow.persistence.logbook.models import ATOM_COLUMNS, JSON_COLUMNS

# jsonutils.dumps(value) is json.dumps(value, default=to_primitive), which builds
# a new encoder on every call (four per checkpoint); one encoder gives the same text.
_ENCODE = json.JSONEncoder(default=jsonutils.to_primitive).encode


def _dumps(value):
    return None if value is None else _ENCODE(value)


def _loads(text):
    return None if text is None else jsonutils.loads(text)


def atom_values(ad) -> dict:
    """The stored columns of an atom detail (JSON columns encoded)."""
    data = ad.to_dict()
    values = {c: (_dumps(data[c]) if c in JSON_COLUMNS else data.get(c))
              for c in ATOM_COLUMNS if c != "atom_type"}
    values["atom_type"] = models.atom_detail_type(ad)
    return values


# The atom detail TaskFlow keeps a flow's injected values in.
INJECTOR_NAME = tf_storage.Storage.injector_name


def atom_from_row(row):
    data = {c: (_loads(row[c]) if c in JSON_COLUMNS else row[c]) for c in ATOM_COLUMNS}
    data["uuid"] = row["uuid"]
    if data["results"] is None and data["name"] == INJECTOR_NAME:
        # NOTE: TaskFlow's Storage.inject saves a new injector detail in two writes:
        # the flow detail with the detail empty (no results, no state), then the
        # detail with its values and SUCCESS. A process killed between the two leaves
        # the empty one, and every later Storage() of the flow fails on
        # ``results.keys()``: the flow could never be resumed. Nothing was injected
        # yet, so it reads as the second write would have left it with nothing in
        # it, and the next inject (a conductor's fence token) fills it again.
        data["results"], data["state"] = {}, states.SUCCESS
    return models.atom_detail_class(row["atom_type"]).from_dict(data)


def flow_values(fd) -> dict:
    return {"name": fd.name, "state": fd.state, "meta": _dumps(fd.meta)}


def flow_from_row(row):
    return models.FlowDetail.from_dict({"name": row["name"], "uuid": row["uuid"],
                                        "state": row["state"], "meta": _loads(row["meta"])})


def book_values(book) -> dict:
    data = book.to_dict()
    return {"name": data["name"], "meta": _dumps(data["meta"]),
            "created_at": data["created_at"], "updated_at": data["updated_at"]}


def book_from_row(row):
    return models.LogBook.from_dict({"name": row["name"], "uuid": row["uuid"],
                                     "meta": _loads(row["meta"]),
                                     "created_at": row["created_at"],
                                     "updated_at": row["updated_at"]})
