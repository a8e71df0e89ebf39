"""Fixtures of the real-browser tests: Debian Chromium, a tab, a server shared by modules or one for a test."""
import time
from contextlib import ExitStack

import pytest

from harness.browser import launch_browser, new_tab, require_browser
from harness.server import fresh_app


@pytest.fixture(scope="session")
def browser():
    """One Debian Chromium for every browser test (skips when Playwright or Chromium is missing); each test gets its
    own tab in a context of its own (another browser profile: cookies, storage)."""
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


@pytest.fixture(scope="session")
def app(tmp_path_factory):
    """One server (harness.server.App) for every module that needs no server of its own (tools, train, views: each
    names its models in its URLs, and what one trains is its owner's only), its checkpoints folder a temporary one."""
    t0 = time.monotonic()
    with fresh_app(tmp_path_factory.mktemp("user-models")) as running:
        yield running
    print(f"\nthe browser modules' shared server: up for {time.monotonic() - t0:.1f} s")


@pytest.fixture
def fresh(tmp_path):
    """fresh(**settings) -> harness.server.App: a new server for this test, tmp_path/checkpoints its folder."""
    with ExitStack() as stack:
        yield lambda folder=None, **env: stack.enter_context(fresh_app(folder or tmp_path / "checkpoints", **env))
