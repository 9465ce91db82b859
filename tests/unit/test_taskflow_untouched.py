"""Importing fleetflow changes nothing in TaskFlow; the retry fix is the one explicit change.

Each check runs in a fresh interpreter: every TaskFlow module that imports is
imported first, a fingerprint of every attribute of every TaskFlow module and
class is taken, then every fleetflow module is imported (and, once, fleetflow
engines are loaded and run) and the fingerprint is taken again.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_PROBE = textwrap.dedent('''
    import configparser, importlib, json, os, pkgutil, sys, warnings
    warnings.simplefilter("ignore")
    import taskflow

    def import_all(package_name, names=None):
        package = importlib.import_module(package_name)
        names = names or [m.name for m in pkgutil.walk_packages(package.__path__,
                                                                package_name + ".")]
        for name in names:
            try:
                importlib.import_module(name)
            except Exception:  # optional dependencies TaskFlow does not require
                pass

    def fingerprint():
        seen = {}
        for name, module in sorted(sys.modules.items()):
            if not (name == "taskflow" or name.startswith("taskflow.")) or module is None:
                continue
            for attr, value in vars(module).items():
                seen[f"{name}.{attr}"] = id(value)
                if isinstance(value, type) and value.__module__ == name:
                    for key, member in vars(value).items():
                        seen[f"{name}.{attr}.{key}"] = id(member)
        return seen

    ALEMBIC_SCRIPTS = {"fleetflow.persistence.migrations.env"}
    import_all("taskflow")
    before = fingerprint()
    parser = configparser.ConfigParser()
    parser.read(os.path.join(sys.argv[1], "setup.cfg"))
    packages = parser["options"]["packages"].split()
    modules = []
    for package in packages:
        path = os.path.join(sys.argv[1], *package.split(".")[1:])
        modules.append(package)
        # Alembic's env.py runs only inside an alembic command.
        modules += [f"{package}.{m.name}" for m in pkgutil.iter_modules([path])
                    if not m.ispkg and f"{package}.{m.name}" not in ALEMBIC_SCRIPTS]
    failed = []
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as exc:
            failed.append(f"{name}: {exc!r}")
    if sys.argv[2] == "run":
        from taskflow import task
        from taskflow.patterns import linear_flow
        from fleetflow.engine import engines, taskflow_retry_fix

        class Add(task.Task):
            def execute(self, x):
                return x + 1

        for engine in ("fleetflow-parallel", "parallel"):
            engines.make_engine(linear_flow.Flow("f").add(Add("a")), None, None,
                                engine=engine, store={"x": 1}, workers=2).run()
        taskflow_retry_fix.apply()
    after = fingerprint()
    changed = sorted(k for k in before if after.get(k) != before[k])
    print(json.dumps({"changed": changed, "failed": failed, "modules": len(modules)}))
''')


def _probe(mode: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", _PROBE, ROOT, mode], capture_output=True,
                          text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow  # a fresh interpreter
def test_importing_every_fleetflow_module_changes_nothing_in_taskflow():
    result = _probe("import")
    assert result["failed"] == []
    assert result["modules"] > 100
    assert result["changed"] == []


@pytest.mark.slow  # a fresh interpreter
def test_running_both_engines_changes_only_what_the_retry_fix_changes():
    result = _probe("run")
    assert result["changed"] == ["taskflow.persistence.models.RetryDetail.from_dict"]
