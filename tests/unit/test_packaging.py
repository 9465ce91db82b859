"""setup.cfg lists every package of the tree, so a non-editable install is complete."""

import configparser
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NOT_SHIPPED = ("tests", "bench", ".git", "build", ".ci")


def test_every_package_directory_is_listed_in_setup_cfg():
    parser = configparser.ConfigParser()
    parser.read(os.path.join(ROOT, "setup.cfg"))
    listed = {p.strip() for p in parser["options"]["packages"].splitlines() if p.strip()}
    found = set()
    for directory, subdirs, files in os.walk(ROOT):
        rel = os.path.relpath(directory, ROOT)
        subdirs[:] = [d for d in subdirs if d not in NOT_SHIPPED and not d.startswith(".")
                      and d != "__pycache__" and not d.endswith(".egg-info")]
        if "__init__.py" in files:
            found.add("fleetflow" if rel == "." else "fleetflow." + rel.replace(os.sep, "."))
    assert found == listed
