"""Test setup for every layer: offline tiktoken through ../shared/tiktoken-cache (copied to a writable temp dir),
torch's threads, and the fixtures tests of more than one layer use. A layer's own fixtures are in its conftest.py
(core/, service/, ui/, browser/); helpers tests and benches share are in harness/."""
import os
from pathlib import Path

import pytest
import torch

from harness.server import tiktoken_cache

if "TIKTOKEN_CACHE_DIR" not in os.environ and (cache := tiktoken_cache()):
    os.environ["TIKTOKEN_CACHE_DIR"] = cache

# beside other pytest-xdist workers (the whole suite: see pytest_cmdline_main) each gets its share of the cores
torch.set_num_threads(max(1, min(2, (os.cpu_count() or 1) // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", 1)))))
# the pages' threads (one on a shared server) are the process's in tests, which run one page at a time, and in the
# servers a test starts: set by each process, not inherited (pytest-xdist's workers would keep the controller's 2,
# and their servers' traces would differ in the last bits from the worker's own, computed on 1)
os.environ["TRANSFORMER_EXPLORER_PAGE_THREADS"] = str(torch.get_num_threads())


TESTS = Path(__file__).resolve().parent


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    """The whole suite (`python3 -m pytest -q`, or the tests/ folder named) runs in pytest-xdist workers, a test file
    at a time (--dist loadfile: a browser module's server and its module fixtures start once, in one worker), so one
    worker's CPU work fills the other's browser waits. A run of some files or tests, -n (-n 0: one process), --pdb or
    a missing pytest-xdist keep pytest's one process."""
    if hasattr(config, "workerinput") or getattr(config.option, "numprocesses", 0) is not None:
        return  # a worker, no pytest-xdist, or -n given
    if config.getoption("usepdb", False) or config.getoption("collectonly", False):
        return
    paths = {Path(a.split("::", 1)[0]).resolve() for a in config.args}
    if paths and paths <= {TESTS, TESTS.parent}:
        config.option.numprocesses = max(2, min(4, os.cpu_count() or 1))
        config.option.dist = "loadfile"  # (workers parse only the command line: a per-test group mark set here
        # never reached them, and "loadgroup" spread the browser tests one by one over both workers)
        config.option.loadscopereorder = False  # the files go in pytest_collection_modifyitems' order


# The files that take longest (browser modules: minutes each), first: a worker takes the next file when it is done
# with one, so the longest first let both workers end together. In pytest-xdist's own order (most tests first) they
# came after the CPU modules, and one worker ran the last browser module alone for half a minute.
LONGEST_FIRST = ("test_browser_views", "test_browser_hostile", "test_browser_workshop", "test_browser_tools",
                 "test_browser_demos", "test_browser_e2e", "test_browser_train", "test_browser_grids")


def pytest_collection_modifyitems(config, items):
    """Longest files first (LONGEST_FIRST), then the others by their number of tests, most first (every worker
    sorts alike: pytest-xdist checks that their collections are the same)."""
    count: dict[str, int] = {}
    for item in items:
        count[item.path.stem] = count.get(item.path.stem, 0) + 1
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: (rank.get(item.path.stem, len(rank)), -count[item.path.stem], str(item.path)))


@pytest.fixture
def one_torch_thread():
    """Tiny models gain nothing from threads, and on a busy 2-core machine threads wait on each other;
    threads started meanwhile (training jobs) take the process setting."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


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


@pytest.fixture(scope="module")
def tiny():
    """The tiny encoder-decoder preset (d_model 16), random weights, on the CPU (one per test module)."""
    from transformer_core import build_model, preset

    return build_model(preset("tiny"), "cpu")


@pytest.fixture(scope="module")
def tiny_gpt():
    """The tiny decoder-only preset, random weights, on the CPU (one per test module)."""
    from transformer_core import build_model, preset

    return build_model(preset("tiny-gpt"), "cpu")
