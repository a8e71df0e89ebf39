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


@pytest.fixture
def one_torch_thread():
    """Tiny models gain nothing from threads, and on a busy 2-core machine threads wait on each other;
    threads started meanwhile (training jobs) take the process setting."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
