"""Fixtures of the real-browser tests: Debian Chromium, a tab, a server for the module or for one test."""
import time
from contextlib import ExitStack

import pytest

from harness.browser import launch_browser, new_tab, require_browser
from harness.server import fresh_app


@pytest.fixture(scope="module")
def browser():
    """One Debian Chromium per browser-test module (skips when Playwright or Chromium is missing)."""
    sync_api = require_browser()
    sync_api.expect.set_options(timeout=60_000)
    with sync_api.sync_playwright() as p:
        b = launch_browser(p)
        yield b
        b.close()


@pytest.fixture
def tab(browser):
    """A fresh English tab that records every JS dialog in `tab.dialogs` (none may open)."""
    page = new_tab(browser)
    yield page
    page.context.close()


@pytest.fixture(scope="module")
def app(request, tmp_path_factory):
    """One server for the module (harness.server.App), its checkpoints folder a temporary one."""
    t0 = time.monotonic()
    with fresh_app(tmp_path_factory.mktemp("user-models")) as running:
        yield running
    print(f"\n{request.module.__name__.rpartition('.')[2]}: server up for {time.monotonic() - t0:.1f} s")


@pytest.fixture
def fresh(tmp_path):
    """fresh(**settings) -> harness.server.App: a new server for this test, tmp_path/checkpoints its folder."""
    with ExitStack() as stack:
        yield lambda folder=None, **env: stack.enter_context(fresh_app(folder or tmp_path / "checkpoints", **env))
