"""Which TaskFlow releases fleetflow's speed-ups have been tested on.

The speed-ups replace private TaskFlow classes and methods; a release that
renames or reshapes one of them would break the engine, or silently undo a
speed-up. So they are installed only on the release series the tests pass on;
on any other the stock engine runs, and one log line says why.
"""

from __future__ import annotations

import importlib.metadata
import logging
import re

LOG = logging.getLogger(__name__)

# The (major, minor) series the speed-ups are tested on; setup.cfg pins the same.
SUPPORTED = (6, 5)

_warned = False


def installed_version() -> str | None:
    """The installed TaskFlow's version string, or None when it cannot be read."""
    try:
        return importlib.metadata.version("taskflow")
    except importlib.metadata.PackageNotFoundError:
        return None


def _series(version: str) -> tuple[int, int] | None:
    match = re.match(r"(\d+)\.(\d+)", version)
    return (int(match[1]), int(match[2])) if match else None


def is_supported(version: str | None) -> bool:
    """Whether ``version`` belongs to the tested series (a pre-release counts)."""
    return version is not None and _series(version) == SUPPORTED


def check() -> bool:
    """Whether the installed TaskFlow is in the tested range.

    When it is not, logs one warning per process saying so and that the stock
    engine runs instead.
    """
    global _warned
    version = installed_version()
    if is_supported(version):
        return True
    if not _warned:
        _warned = True
        LOG.warning("TaskFlow %s is not the tested %d.%d series: fleetflow's engine "
                    "speed-ups are not installed and flows run on stock TaskFlow",
                    version or "(version unknown)", *SUPPORTED)
    return False
