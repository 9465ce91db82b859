"""Dependencies point down: a package never imports one above it.

The layers (docs/architecture.md, "Packages and layers"), top first::

    osc -> api, cli -> services -> engine -> flows -> plugin, scheduler, compute
        -> persistence -> common

Every ``import`` and ``from ... import`` of the shipped packages is read with
``ast`` (function-level imports too: a lazy import is still a dependency).
``testing/`` is the flow-test harness and may use every layer.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

#: What each package may import besides itself and ``common``.
ALLOWED = {
    # Routes reach rows and the engine only through services; the scheduler's
    # requirement parser checks capabilities in request schemas.
    "api": {"services", "scheduler"},
    "cli": {"api", "services", "engine", "flows", "plugin", "scheduler", "compute",
            "persistence"},
    # The openstack plugin is a client like cli/, and shows objects and reads files
    # with cli/'s own code (one formatter for both commands).
    "osc": {"cli", "api", "services", "engine", "flows", "plugin", "scheduler", "compute",
            "persistence"},
    "services": {"engine", "flows", "plugin", "scheduler", "compute", "persistence"},
    "engine": {"flows", "plugin", "scheduler", "compute", "persistence"},
    "flows": {"plugin", "scheduler", "compute", "persistence"},
    "plugin": {"persistence"},
    "scheduler": {"persistence"},
    "compute": {"persistence"},
    "persistence": set(),
    "common": set(),
}
PACKAGES = sorted(ALLOWED) + ["testing"]


def _imported_packages(path: pathlib.Path) -> set[str]:
    """The fleetflow subpackages ``path`` imports, by their top-level name."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
            if node.module == "fleetflow":
                names = [f"fleetflow.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] == "fleetflow" and len(parts) > 1:
                found.add(parts[1])
    return found


def _modules(package: str) -> list[pathlib.Path]:
    return sorted((ROOT / package).rglob("*.py"))


def test_every_shipped_package_has_a_layer():
    shipped = {path.name for path in ROOT.iterdir()
               if (path / "__init__.py").exists() and path.name not in ("tests", "bench")}
    assert shipped == set(PACKAGES)


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_a_package_imports_only_the_layers_below_it(package):
    allowed = ALLOWED[package] | {package, "common"}
    upward = sorted(f"{path.relative_to(ROOT)} imports fleetflow.{target}"
                    for path in _modules(package)
                    for target in _imported_packages(path) - allowed)
    assert upward == []


def test_the_reader_sees_every_form_of_import(tmp_path):
    source = tmp_path / "sample.py"
    source.write_text(
        "import fleetflow.engine.conductor\n"
        "from fleetflow.services import audit\n"
        "from fleetflow import api\n"
        "def later():\n"
        "    from fleetflow.cli.main import main\n"
        "from . import sibling\n"
        "import taskflow\n")
    assert _imported_packages(source) == {"engine", "services", "api", "cli"}
