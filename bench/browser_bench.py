"""Browser helpers for the benches, on top of harness.server (server start) and harness.browser (Chromium, waits)."""
from __future__ import annotations

import os
import time
from urllib.parse import urlencode, urlparse

from common import DEVICE_ENV

from harness.browser import CHART, CHART_SVG, EXCEPTION, IDLE_APP, launch_browser, wait_rendered  # noqa: F401
from harness.server import log_tail, start_app  # noqa: F401 - re-exported for the bench scripts

# A bench server: no file watcher (a file saved during a run must not pause every session with a
# "source changed" prompt), and the device the bench was asked for.
SERVER_ENV = {"STREAMLIT_SERVER_FILE_WATCHER_TYPE": "none", "STREAMLIT_BROWSER_GATHER_USAGE_STATS": "false"}
NAV = "[data-testid='stSidebarNav'] a[href$='/{path}']"
TEXTAREA = "[data-testid='stSidebar'] textarea"


def server_env() -> dict:
    env = dict(SERVER_ENV)
    if os.environ.get(DEVICE_ENV):
        env[DEVICE_ENV] = os.environ[DEVICE_ENV]
    return env


def root_url(url: str, **query) -> str:
    """The app's default page with URL state (text, tgt, model...), as a shared link brings a learner in."""
    return f"{url}/?{urlencode(query)}" if query else f"{url}/"


def nav(page, path: str) -> None:
    """Click the sidebar link of a page, as a learner does (keeps the session); wait for its URL."""
    page.click(NAV.format(path=path))
    page.wait_for_url(lambda u: urlparse(u).path.rstrip("/").endswith("/" + path if path else ""))


def count(page, selector: str) -> int:
    return page.locator(selector).count()


def visit(page, url: str, path: str, *, charts: bool = True, **state) -> float:
    """Open the app with URL state, go to a page by its link, wait until rendered (charts drawn); seconds."""
    start = time.perf_counter()
    page.goto(root_url(url, **state))
    wait_rendered(page)
    if path:
        nav(page, path)
        wait_rendered(page, charts=charts, chart_timeout=120_000)
    return time.perf_counter() - start
