"""Downloading GPT-2 small once for the whole server, in the background, with progress the page can show."""
from __future__ import annotations

import io
import threading
import time
from dataclasses import dataclass, field

from transformer_core.errors import ModelSourceError, reason_of
from transformer_core.sources.gpt2 import hub_file

from . import catalog


@dataclass
class Download:
    status: str = "running"  # running, done, error
    done: int = 0  # bytes so far
    total: int | None = None
    error: BaseException | None = None
    started: float = field(default_factory=time.monotonic)
    thread: threading.Thread | None = field(default=None, repr=False)

    @property
    def fraction(self) -> float:
        return min(self.done / self.total, 1.0) if self.total else 0.0

    def wait(self, timeout: float | None = None) -> bool:
        if self.thread is not None:
            self.thread.join(timeout)
        return self.status != "running"


_lock = threading.Lock()
_current: Download | None = None


def current() -> Download | None:
    """The server's GPT-2 download (running or finished), if one was started."""
    return _current


def _progress_class(dl: Download):
    from tqdm.auto import tqdm

    class Progress(tqdm):
        """huggingface_hub's progress bar, reporting into `dl` instead of a terminal."""

        def __init__(self, *args, **kwargs):
            kwargs["file"] = io.StringIO()
            kwargs.pop("name", None)
            super().__init__(*args, **kwargs)
            dl.total = self.total

        def update(self, n=1):
            super().update(n)
            dl.done, dl.total = int(self.n), self.total

    return Progress


def start_gpt2() -> Download:
    """Start downloading GPT-2 small into the Hugging Face cache, unless a download is already running."""
    global _current
    with _lock:
        if _current is not None and _current.status == "running":
            return _current
        dl = Download()

        def run() -> None:
            try:
                hub_file(offline=False, progress=_progress_class(dl))
                dl.status = "done"
            except Exception as exc:  # noqa: BLE001 - shown to the learner as a message
                dl.error = ModelSourceError("gpt2_download_failed", reason=reason_of(exc))
                dl.status = "error"
            finally:
                catalog.refresh()

        dl.thread = threading.Thread(target=run, name="gpt2-download", daemon=True)
        _current = dl
        dl.thread.start()
        return dl
