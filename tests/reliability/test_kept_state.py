"""What a failed crash test keeps: its cloud's directory, and a summary of what did not settle."""

from __future__ import annotations

import contextlib
import os

from taskflow import states as tf_states

from fleetflow.common import states
from fleetflow.engine import submit as submit_mod
from fleetflow.engine.jobboard.sql import SqlJobBoard
from fleetflow.persistence.db import Database
from fleetflow.persistence.logbook.backend import LogbookBackend
from fleetflow.persistence.models import VCluster


def test_the_cloud_is_kept_and_its_stranded_cluster_summed_up(tmp_path, vcluster_harness):
    import kept_state  # tests/reliability is on sys.path once a harness is loaded

    import fleetflow.flows.vcluster  # noqa: F401  (registers the flow)

    workdir = tmp_path / "cloud"
    database = Database(f"sqlite:///{workdir / 'fleetflow.db'}")
    database.upgrade()
    backend = LogbookBackend({"connection": database.url}, engine=database.engine)
    board = SqlJobBoard("kept", {}, database, persistence=backend)
    board.connect()
    servers = [{"index": 0, "name": "db-server-1", "id": "srv-0", "resources": {"VCPU": 1},
                "image_id": "img"}]
    flow_id = submit_mod.submit(board, backend, "vcluster-build", {
        "vcluster_id": "vc-1", "run": states.RUN_CREATE, "servers": servers, "volumes": []},
        store={"vcluster_id": "vc-1"})
    settled = submit_mod.submit(board, backend, "vcluster-build", {
        "vcluster_id": "vc-2", "run": states.RUN_CREATE, "servers": servers, "volumes": []},
        store={"vcluster_id": "vc-2"})
    with contextlib.closing(backend.get_connection()) as conn:
        for uuid, state in ((flow_id, tf_states.FAILURE), (settled, tf_states.REVERTED)):
            flow_detail = conn.get_flow_details(uuid)
            flow_detail.state = state
            conn.update_flow_details(flow_detail)
    with database.session() as session:
        session.add(VCluster(id="vc-1", tenant_id="t1", name="db", status=states.REVERTING,
                             flow_id=flow_id, request={}, runs=[]))
        session.add(VCluster(id="vc-2", tenant_id="t1", name="ok", status=states.REVERTED,
                             flow_id=settled, request={}, runs=[]))
    (workdir / "conductor-survivor-1.log").write_text("the survivor's log\n")
    board.close()
    database.dispose()

    kept = kept_state.keep(str(workdir), str(tmp_path / "kept"), "test_x-vcluster0")
    assert kept == str(tmp_path / "kept" / "test_x-vcluster0")
    assert open(os.path.join(kept, "conductor-survivor-1.log")).read() == "the survivor's log\n"
    assert kept_state.keep(str(workdir), str(tmp_path / "kept"), "test_x-vcluster0") \
        == kept + "-2"
    summary = kept_state.summary(os.path.join(kept, "fleetflow.db"))
    assert summary.splitlines()[0] == (f"vcluster vc-1 REVERTING: vcluster-build flow "
                                       f"{flow_id} FAILURE")
    assert "vc-2" not in summary
