"""Where a model comes from: every family (random-init presets, shipped and saved folders, GPT-2) is one module
in this package that defines `SOURCES`, a list of objects with the ModelSource protocol. A new family is one
new file here and nothing else.

Keys are "<kind>:<ref>" (e.g. "shipped:reverse", "preset:course-base@cl100k_base"): opaque, never a path.
"""
from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Protocol

from ..errors import ExplorerError, ModelSourceError
from ..model.footprint import measure
from ..model.transformer import Transformer

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Places:
    """Where the sources look (the server's settings fill this in; a notebook can use the defaults)."""

    shipped_dir: Path = ROOT / "assets" / "models"
    user_dir: Path = ROOT / "checkpoints"
    gpt2_weights: Path | None = None  # a GPT-2 file the server was given
    models_dir: Path | None = None  # the only folder GPT-2 files may be opened from by name
    hf_offline: bool = False


@dataclass(frozen=True)
class ModelEntry:
    key: str
    label: str
    kind: str  # the source's kind: preset, shipped, user, gpt2, hf
    card: dict = field(default_factory=dict, compare=False)  # arch, encoding, description, examples, figures

    @property
    def arch(self) -> str:
        return self.card.get("arch", "encoder_decoder")


class ModelSource(Protocol):
    kind: str

    def entries(self, places: Places) -> list[ModelEntry]:
        """The models this source offers now (cheap: reads cards, never weights)."""

    def load(self, ref: str, places: Places, device=None) -> tuple[Transformer, dict]:
        """(model in eval mode, its card) for the part of a key after "kind:"."""

    def load_bytes(self, ref: str, places: Places) -> int:
        """Memory its load takes while it runs, from what is on disk (cheap; 0 when it cannot tell)."""


@lru_cache(maxsize=1)
def modules() -> tuple:
    """Every module of this package, imported (a family is found by what its module defines)."""
    return tuple(importlib.import_module(f"{__name__}.{info.name}") for info in pkgutil.iter_modules(__path__))


@lru_cache(maxsize=1)
def sources() -> dict[str, ModelSource]:
    """kind -> source, from every module of this package that defines SOURCES."""
    return {source.kind: source for module in modules() for source in getattr(module, "SOURCES", ())}


def list_entries(places: Places = Places()) -> list[ModelEntry]:
    """Every model every source offers, in the sources' order of preference (shipped first)."""
    order = {"shipped": 0, "user": 1, "gpt2": 2, "hf": 3, "preset": 4}
    kinds = sorted(sources(), key=lambda k: order.get(k, 9))
    return [e for k in kinds for e in sources()[k].entries(places)]


def load_model(key: str, places: Places = Places(), device=None) -> tuple[Transformer, dict]:
    """Build or load the model a key names ("shipped:reverse", or just "reverse" for a shipped model, or
    "preset:course-base@cl100k_base", "gpt2:small"); returns (model in eval mode, its card)."""
    kind, ref = split_key(key)
    model, card = sources()[kind].load(ref, places, device)
    measure(model)  # its forward's memory, from the model itself: later estimates of its config need no meta run
    return model, card


def split_key(key: str) -> tuple[str, str]:
    """(kind, ref) of a key whose kind some source offers (ModelSourceError `model_unknown` otherwise)."""
    kind, _, ref = str(key).partition(":") if ":" in str(key) else ("shipped", "", str(key))
    if kind not in sources() or not ref:
        raise ModelSourceError("model_unknown")
    return kind, ref


def load_bytes(key: str, places: Places = Places()) -> int:
    """Memory loading a key takes while it runs, asked of its source (0 when it cannot tell: the load will say)."""
    try:
        kind, ref = split_key(key)
        return int(sources()[kind].load_bytes(ref, places))
    except (OSError, KeyError, ExplorerError, ValueError):
        return 0
