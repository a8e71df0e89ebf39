"""Learners' pages take turns: one server computes at most `page_runs` pages at once (TRANSFORMER_EXPLORER_PAGE_RUNS);
a run that arrives while they are busy waits (about in order of arrival) before its sidebar and page.

Streamlit runs each session's script in its own thread, all under the one interpreter lock, which the running threads
pass round every 5 ms; the server's event loop, which sends every finished page, is one of them. Twenty learners'
pages computed at once each took as long as all of them together, and the finished ones waited for the loop. Under
20 learners on this 2-core machine (bench/protocol_load.py, one server): p95 2.7-3.9 s with no limit, 1.1-1.6 s with
two at a time, 1.3 s with one, 1.5 s with three, and a fifth more actions served. Two, so one page's tensor work
(outside the lock) overlaps another's Python. Background work (a training, a download, a fragment's refresh, a
widget's callback) never waits here.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager, nullcontext

from .settings import settings

_made = threading.Lock()
_turns: list = []  # [the semaphore, or a null context for no limit], made on first use from the settings


def _gate():
    with _made:
        if not _turns:
            n = settings().page_runs
            _turns.append(threading.BoundedSemaphore(n) if n > 0 else nullcontext())
        return _turns[0]


@contextmanager
def page_turn():
    """Hold one of the server's turns while this run computes its page (released however the run ends: a rerun, a
    page switch or an error raise through here)."""
    with _gate():
        yield
