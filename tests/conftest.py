"""Test setup: offline tiktoken through ../shared/tiktoken-cache (copied to a writable temp dir)."""
import os
import shutil
import tempfile
from pathlib import Path

import pytest
import torch

SHARED_CACHE = Path(__file__).resolve().parents[2] / "shared" / "tiktoken-cache"

if "TIKTOKEN_CACHE_DIR" not in os.environ and SHARED_CACHE.is_dir():
    tmp = Path(tempfile.mkdtemp(prefix="tiktoken-cache-"))
    for f in SHARED_CACHE.iterdir():
        shutil.copy(f, tmp / f.name)
    os.environ["TIKTOKEN_CACHE_DIR"] = str(tmp)

torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
# the pages' threads (one on a shared server) stay the process's in tests, which run one page at a time
os.environ.setdefault("TRANSFORMER_EXPLORER_PAGE_THREADS", str(torch.get_num_threads()))


@pytest.fixture
def one_torch_thread():
    """Tiny models gain nothing from threads, and on a busy 2-core machine threads wait on each other;
    threads started meanwhile (training jobs) take the process setting."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def browser():
    """One Debian Chromium per browser-test module (skips when Playwright or Chromium is missing)."""
    from browser_support import launch_browser, require_browser

    sync_api = require_browser()
    sync_api.expect.set_options(timeout=60_000)
    with sync_api.sync_playwright() as p:
        b = launch_browser(p)
        yield b
        b.close()


@pytest.fixture
def tab(browser):
    """A fresh English tab that records every JS dialog in `tab.dialogs` (none may open)."""
    ctx = browser.new_context(locale="en-US", viewport={"width": 1400, "height": 1000})
    page = ctx.new_page()
    page.set_default_timeout(60_000)
    page.dialogs = []
    page.on("dialog", lambda d: (page.dialogs.append(d.message), d.dismiss()))
    yield page
    ctx.close()


@pytest.fixture
def server_env(monkeypatch):
    """Set server settings (environment variables) for one test: server_env(TRANSFORMER_EXPLORER_X="1")."""
    from service import catalog
    from service.settings import settings

    def apply(**env):
        for k, v in env.items():
            monkeypatch.setenv(k, str(v))
        settings.cache_clear()
        catalog.refresh()

    yield apply
    settings.cache_clear()
    catalog.refresh()


@pytest.fixture
def user_dir(tmp_path, server_env):
    """A fresh folder for models trained or uploaded in this test."""
    folder = tmp_path / "user"
    server_env(TRANSFORMER_EXPLORER_CHECKPOINTS=folder)
    return folder
