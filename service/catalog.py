"""The model catalog: which models the app lists, which one it opens on, and loading one by key."""
from __future__ import annotations

import threading
import time

from transformer_core.sources import ModelEntry, list_entries, load_model
from transformer_core.sources.presets import preset_key

from .settings import settings

LIST_TTL_S = 2.0  # the sidebar lists models on every rerun: read the folders at most this often
_lock = threading.Lock()
_listed: tuple[float, list[ModelEntry]] = (0.0, [])


def entries() -> list[ModelEntry]:
    """Every model the server offers (shipped first), re-read from disk at most every LIST_TTL_S seconds."""
    global _listed
    with _lock:
        stamp, listed = _listed
        if time.monotonic() - stamp > LIST_TTL_S:
            listed = list_entries(settings().places)
            _listed = (time.monotonic(), listed)
        return list(listed)


def refresh() -> None:
    """Forget the listing (a model was just saved)."""
    global _listed
    with _lock:
        _listed = (0.0, [])


def entry(key: str) -> ModelEntry | None:
    return next((e for e in entries() if e.key == key), None)


def default_key() -> str:
    """The model the app opens on: the shipped one whose card says default, else the first shipped one."""
    shipped = [e for e in entries() if e.kind == "shipped"]
    chosen = [e for e in shipped if e.card.get("default")] or shipped
    return chosen[0].key if chosen else preset_key("course-base")


def load(key: str, device=None):
    """(model in eval mode, card) for a key."""
    return load_model(key, settings().places, device)
