"""Downloading a hub model (GPT-2 small, SmolLM2, Qwen2.5) once for the whole server, in the background, with
progress the page can show. One download per model key; the model's source knows what to fetch (`download`)."""
from __future__ import annotations

import io
import threading
import time
from dataclasses import dataclass, field

from transformer_core.errors import ModelSourceError, reason_of
from transformer_core.sources import sources

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
_current: dict[str, Download] = {}  # model key -> its download
GPT2 = "gpt2:small"


def current(key: str = GPT2) -> Download | None:
    """The server's download of a model (running or finished), if one was started."""
    return _current.get(key)


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


def start(key: str) -> Download:
    """Start downloading a hub model into the Hugging Face cache, unless its download is already running."""
    kind, _, ref = str(key).partition(":")
    source = sources().get(kind)
    if source is None or not hasattr(source, "download"):
        raise ModelSourceError("model_unknown")
    with _lock:
        running = _current.get(key)
        if running is not None and running.status == "running":
            return running
        dl = Download()

        def run() -> None:
            try:
                source.download(ref, progress=_progress_class(dl))
                dl.status = "done"
            except Exception as exc:  # noqa: BLE001 - shown to the learner as a message
                label = next((e.label for e in catalog.entries() if e.key == key), ref)
                dl.error = (ModelSourceError("gpt2_download_failed", reason=reason_of(exc)) if kind == "gpt2" else
                            ModelSourceError("hf_download_failed", model=label, reason=reason_of(exc)))
                dl.status = "error"
            finally:
                catalog.refresh()

        dl.thread = threading.Thread(target=run, name=f"download-{kind}-{ref}"[:60], daemon=True)
        _current[key] = dl
        dl.thread.start()
        return dl


def start_gpt2() -> Download:
    """Start downloading GPT-2 small (the first model this server could fetch; kept for its callers)."""
    return start(GPT2)
