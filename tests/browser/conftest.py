"""Fixtures of the real-browser tests: Debian Chromium, a tab, a server shared by modules or one for a test."""
import time
from contextlib import ExitStack

import pytest

from harness.browser import browser_context, launch_browser, new_tab, require_browser
from harness.server import fresh_app


@pytest.fixture(scope="session")
def browser():
    """One Debian Chromium for every browser test of a worker (skips when Playwright or Chromium is missing); each
    test gets its own tab (`tab`: a new learner), and `new_tab(browser)` opens another browser (a context of its own:
    cookies, storage) where a test needs two learners at once."""
    sync_api = require_browser()
    sync_api.expect.set_options(timeout=60_000)
    with sync_api.sync_playwright() as p:
        b = launch_browser(p)
        yield b
        b.close()


@pytest.fixture(scope="session")
def learners(browser):
    """The browser context the tests' own tabs open in: one, so that its tabs share a renderer process that a blank
    tab keeps alive (a tab in a new context, or in a context with no tab open, starts a process of its own and
    compiles the app's scripts afresh: about 2 s more CPU per tab, twice that of a tab here, on a 2-core machine).
    Each `tab` starts with no cookies and leaves no storage: to the server, a new learner."""
    context = browser_context(browser)
    context.keeper = context.new_page()  # a blank tab that keeps the renderer process (and its compiled scripts) alive
    yield context
    context.close()


@pytest.fixture
def tab(learners):
    """A fresh English tab that records every JS dialog in `tab.dialogs` (none may open); a learner of its own (no
    cookies; what the app kept in the browser's storage for the origins it visited is cleared after the test). A
    second tab of the same browser: `tab.context.new_page()`; another learner: `new_tab(browser)`."""
    learners.clear_cookies()
    page = new_tab(learners.browser, learners)
    origins = set()

    def visited(frame) -> None:
        if frame.url.startswith("http"):
            origins.add("/".join(frame.url.split("/", 3)[:3]))  # scheme://host:port

    page.on("framenavigated", visited)
    yield page
    try:
        cdp = learners.new_cdp_session(page)
        for origin in origins:
            cdp.send("Storage.clearDataForOrigin", {"origin": origin, "storageTypes": "all"})
        cdp.detach()
    except Exception:  # noqa: BLE001 - a page the test closed, or a browser that went away: nothing left to clear
        pass
    for opened in learners.pages:  # this test's tabs (a second tab of the same browser too)
        if opened is not learners.keeper:
            opened.close()


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
