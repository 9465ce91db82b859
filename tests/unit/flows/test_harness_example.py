"""The example of docs/testing.md, as written there, passes with the public harness.

The example's module and tests are taken from the document and run by pytest
in a directory of their own, outside this repository's tests: the harness
reaches them the way it reaches any project, through the ``pytest11`` entry
point of the installed package.
"""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

import pytest

DOC = pathlib.Path(__file__).resolve().parents[3] / "docs" / "testing.md"
# A code block whose info string names the file it is: ```python canary.py
FILE_BLOCK = re.compile(r"^```python (\S+\.py)\n(.*?)^```$", re.M | re.S)


def example_files() -> dict[str, str]:
    return {name: body for name, body in FILE_BLOCK.findall(DOC.read_text())}


def test_the_document_holds_a_flow_module_and_its_tests():
    files = example_files()
    assert set(files) == {"canary.py", "test_canary.py"}
    assert "@flow_factory" in files["canary.py"]
    # A flow's module needs nothing but the public harness.
    assert [line for line in files["canary.py"].splitlines()
            if line.startswith(("from fleetflow", "import fleetflow"))] == [
        "from fleetflow.testing import FleetTask, flow_factory, runtime"]
    assert "fleetflow_cloud" in files["test_canary.py"]
    assert ".resume(" in files["test_canary.py"]


@pytest.mark.slow  # a pytest of its own, in a subprocess
def test_the_example_passes_with_the_public_harness(tmp_path):
    for name, body in example_files().items():
        (tmp_path / name).write_text(body)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path, capture_output=True, text=True, timeout=300)
    report = result.stdout + result.stderr
    assert result.returncode == 0, report
    assert re.search(r"\b4 passed\b", report), report
