"""Which TaskFlow releases the fleetflow engine has been tested on.

The engine's parts subclass TaskFlow's private classes, and a few of its
methods are TaskFlow 6.5's own bodies with one thing changed
(``FlowCompiler.compile``, ``Runtime.compile``). A release that renames or
reshapes one of them could break the engine, or silently drop an upstream
fix. So the engine runs only on the release series the tests pass on; on any
other, asking for it logs one line and the stock ``parallel`` engine runs
(:func:`fleetflow.engine.engines.engine_name`), and loading it by its entry
point name raises :class:`UnsupportedTaskFlow`.
"""

from __future__ import annotations

import functools
import importlib.metadata
import logging
import re

LOG = logging.getLogger(__name__)

# The (major, minor) series the engine is tested on; setup.cfg pins the same.
SUPPORTED = (6, 5)

_warned = False


class UnsupportedTaskFlow(RuntimeError):
    """The installed TaskFlow is not the series the fleetflow engine is tested on."""


@functools.cache
def installed_version() -> str | None:
    """The installed TaskFlow's version string, or None when it cannot be read.

    Read once a process: every engine load asks, and reading it walks the
    installed distributions."""
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


def unsupported_reason() -> str | None:
    """Why the fleetflow engine cannot run here, or None when it can."""
    version = installed_version()
    if is_supported(version):
        return None
    return (f"TaskFlow {version or '(version unknown)'} is not the {SUPPORTED[0]}.{SUPPORTED[1]} "
            "series the fleetflow-parallel engine is tested on")


def check() -> bool:
    """Whether the installed TaskFlow is in the tested series.

    When it is not, logs one warning per process saying so and that the stock
    ``parallel`` engine runs instead.
    """
    global _warned
    reason = unsupported_reason()
    if reason is None:
        return True
    if not _warned:
        _warned = True
        LOG.warning("%s: flows run on TaskFlow's stock parallel engine instead", reason)
    return False
