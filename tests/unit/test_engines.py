"""The engine factory: fleetflow's settings, the engine recorded, checkpoints in the logbook."""

from __future__ import annotations

import contextlib
import uuid

from taskflow import task
from taskflow.patterns import linear_flow
from taskflow.persistence import models

from fleetflow.engine import engines
from fleetflow.persistence.db import get_database


class Add(task.Task):
    def execute(self, x):
        return x + 1


def test_engine_options_follow_the_configuration(make_conf):
    conf = make_conf(conductor={"engine_workers": 7})
    assert engines.engine_options(conf) == {"engine": "fleetflow-parallel",
                                            "executor": "threads", "max_workers": 7}
    assert engines.engine_options(conf, engine="serial") == {"engine": "serial"}
    stock = make_conf(conductor={"engine_workers": 7, "engine": "parallel"})
    assert engines.engine_options(stock) == {"engine": "parallel", "executor": "threads",
                                             "max_workers": 7}


def test_engine_checkpoints_into_the_shared_database(conf, db):
    backend = engines.logbook_backend(conf)
    # The process-wide engine of this database (one pool per process and URL).
    assert backend.engine is get_database(conf).engine
    book = models.LogBook("book")
    fd = models.FlowDetail("flow", uuid=str(uuid.uuid4()))
    book.add(fd)
    with contextlib.closing(backend.get_connection()) as conn:
        conn.save_logbook(book)
    flow = linear_flow.Flow("f").add(Add("one", provides="y"),
                                     Add("two", rebind={"x": "y"}, provides="z"))
    eng = engines.make_engine(flow, fd, backend, conf, store={"x": 1})
    eng.run()
    with contextlib.closing(backend.get_connection()) as conn:
        stored = conn.get_flow_details(fd.uuid)
    assert stored.state == "SUCCESS"
    assert {ad.name: ad.results for ad in stored if ad.name in ("one", "two")} == \
        {"one": 2, "two": 3}
