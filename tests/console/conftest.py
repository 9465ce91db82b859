"""One ``fleetflow serve`` of the default fleet per module, and Chromium driven by Playwright.

The browser is the system's Chromium (Debian's ``chromium``), never a downloaded
one. Without it, or without Playwright, the tests skip, except under
FLEETFLOW_REQUIRE_SERVICES (CI), where they fail.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from tests.conftest import pick_free_port, skip_or_fail, stop_server

CHROMIUM = "/usr/bin/chromium"
FLEETFLOW = os.path.join(os.path.dirname(sys.executable), "fleetflow")
ADMIN = {"X-Project-Id": "admin", "X-Roles": "admin"}
DEMO = {"X-Project-Id": "demo", "X-Roles": "member"}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """``fleetflow serve`` with the default fleet (128 hosts); yields its URL."""
    import time

    import requests

    workdir = tmp_path_factory.mktemp("console")
    port = pick_free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETFLOW_")}
    env.update(FLEETFLOW_API_PORT=str(port), FLEETFLOW_STATE_DIR=str(workdir / "state"))
    log = open(workdir / "serve.log", "w")  # noqa: SIM115
    proc = subprocess.Popen([FLEETFLOW, "serve"], cwd=workdir, env=env, stdout=log,
                            stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    try:
        while True:
            assert proc.poll() is None, (workdir / "serve.log").read_text()
            try:
                if requests.get(f"{url}/v2/admin/hosts?limit=1", headers=ADMIN,
                                timeout=2).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            assert time.monotonic() < deadline, (workdir / "serve.log").read_text()
            time.sleep(0.3)
        yield url
    finally:
        stop_server(proc)
        log.close()


@pytest.fixture(scope="module")
def browser():
    if not os.path.exists(CHROMIUM) and not shutil.which("chromium"):
        skip_or_fail("Chromium is not installed (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        skip_or_fail("Playwright is not installed (the test extra)")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=CHROMIUM if os.path.exists(CHROMIUM) else shutil.which("chromium"),
            args=["--no-sandbox"])
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    page.set_default_timeout(60_000)
    yield page
    context.close()
