"""The README's walkthrough of openstack mode, run as pasted against Nova's harness.

It starts its own harness and its own ``fleetflow serve`` (both in the background,
as a reader's shell would), so it runs in a session of its own in a temporary
directory, with the README's ``127.0.0.1:8774`` replaced by a free port; whatever it
leaves running is killed with that session.
"""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys

from tests.conftest import pick_free_port
from tests.functional.test_readme import PRELUDE, README, README_ADDRESS, sh_blocks

MARKER = "fleetflow.testing.openstack_cloud --hosts"
EXPECTED = ["synced 4 hosts (4 up, 0 down)", "DONE", "0 mismatches"]


def _walkthrough() -> str:
    section = README.read_text().split("## Driving an OpenStack cloud", 1)[1]
    section = section.split("\n## ", 1)[0]
    blocks = [block for block in sh_blocks(section) if MARKER in block]
    assert len(blocks) == 1, blocks
    return blocks[0]


def test_the_openstack_walkthrough_runs_as_pasted(tmp_path, openstack_cloud):
    # ``openstack_cloud`` only for its checks: Nova can be imported (else the layer
    # skips, or fails under CI); the walkthrough starts a harness of its own.
    port = pick_free_port()
    script = PRELUDE + _walkthrough().replace(README_ADDRESS, f"127.0.0.1:{port}")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLEETFLOW_", "OS_"))}
    env.update(FLEETFLOW_API_PORT=str(port), COLUMNS="160",
               PATH=os.pathsep.join([str(pathlib.Path(sys.executable).parent), env["PATH"]]))
    process = subprocess.Popen(["bash", "-c", script], cwd=tmp_path, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               start_new_session=True)
    try:
        output, _ = process.communicate(timeout=600)
    finally:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    logs = "".join((tmp_path / name).read_text()[-3000:] for name in ("serve.log",)
                   if (tmp_path / name).exists())
    assert process.returncode == 0, output + logs
    for expected in EXPECTED:
        assert expected in output, (expected, output)
