"""Fixtures of the real-browser tests: Debian Chromium, a tab, a server shared by modules or one for a test."""
import time
from contextlib import ExitStack
from pathlib import Path

import pytest

from harness.browser import launch_browser, new_tab, require_browser
from harness.server import fresh_app

HERE = Path(__file__).resolve().parent


# The browser modules in two pytest-xdist groups of about the same length (each mostly waits on a server and a
# Chromium): the ones that start servers of their own, and the ones that share one.
OWN_SERVERS = ("test_browser_hostile.py", "test_browser_workshop.py", "test_browser_train.py", "test_browser_demos.py")


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own, which names the groups from these marks
def pytest_collection_modifyitems(config, items):
    """The browser tests in two pytest-xdist groups: in a parallel run (tests/conftest.py) each group runs one test
    after another in one worker, in file order, as in one process (module fixtures kept), beside the other group."""
    for item in items:
        path = Path(str(item.fspath)).resolve()
        if HERE in path.parents:
            item.add_marker(pytest.mark.xdist_group("browser-own" if path.name in OWN_SERVERS else "browser-shared"))


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
