"""With a real TaskFlow 6.0 installed, the fleetflow engine refuses and the stock one runs.

TaskFlow 6.0.0 is installed (without its dependencies, which 6.5's cover) into
a directory of its own that a child interpreter puts first on its path, so
that it shadows this environment's TaskFlow; the child then asks for
``fleetflow-parallel`` as fleetflow does and by name. It downloads from the
package index, so it runs only when asked (FLEETFLOW_NETWORK_TESTS=1 or
``-m network``), and is skipped when the index cannot be reached.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

pytestmark = [pytest.mark.slow, pytest.mark.network]

_CHILD = textwrap.dedent('''
    import importlib.metadata, json, logging, warnings
    warnings.simplefilter("ignore")
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logging.getLogger("fleetflow").addHandler(handler)
    import taskflow.engines
    from taskflow import exceptions, task
    from taskflow.patterns import linear_flow
    from fleetflow.engine import engines

    class Add(task.Task):
        def execute(self, x):
            return x + 1

    def flow():
        return linear_flow.Flow("f").add(Add("a", provides="y"))

    chosen = engines.engine_options(workers=2)["engine"]
    ran = engines.make_engine(flow(), None, None, store={"x": 1}, workers=2)
    ran.run()
    try:
        taskflow.engines.load(flow(), store={"x": 1}, engine="fleetflow-parallel")
        refusal = None
    except exceptions.NotFound as exc:
        refusal = f"{type(exc.cause).__name__}: {exc.cause}"
    print(json.dumps({
        "taskflow": importlib.metadata.version("taskflow"),
        "taskflow_file": taskflow.__file__,
        "chosen": chosen, "engine": type(ran).__name__, "result": ran.storage.fetch("y"),
        "refusal": refusal,
        "warnings": [r.getMessage() for r in records if r.levelno >= logging.WARNING],
    }))
''')


@pytest.fixture(scope="module")
def taskflow_6_0(tmp_path_factory):
    target = tmp_path_factory.mktemp("taskflow-6.0")
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                           "--disable-pip-version-check", "--target", str(target),
                           "taskflow==6.0.0"], capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        pytest.skip(f"taskflow 6.0.0 could not be installed: {proc.stderr[-500:]}")
    return str(target)


def test_on_taskflow_6_0_the_fleetflow_engine_refuses_and_the_stock_engine_runs(taskflow_6_0):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [taskflow_6_0, *filter(None, [os.environ.get("PYTHONPATH")])])}
    proc = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["taskflow"] == "6.0.0"
    assert result["taskflow_file"].startswith(taskflow_6_0)
    assert result["chosen"] == "parallel"
    assert result["engine"] == "ParallelActionEngine" and result["result"] == 2
    assert result["refusal"].startswith("UnsupportedTaskFlow: TaskFlow 6.0.0 is not the 6.5")
    assert len(result["warnings"]) == 1
    assert "TaskFlow 6.0.0" in result["warnings"][0] and "stock" in result["warnings"][0]
