"""Every model the app can show, by key: random-init presets, saved checkpoints, GPT-2 from a local file.

Keys: "preset:course-base@cl100k_base", "ckpt:<path without suffix>", "gpt2:<path to weights>".
"""
from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path

from .checkpoint import load_checkpoint
from .config import PRESETS, preset
from .model import Transformer, build_model
from .tokenizer import load_encoding

ROOT = Path(__file__).resolve().parents[1]
SHIPPED_DIR = ROOT / "assets" / "checkpoints"
USER_DIR = Path(os.environ.get("TRANSFORMER_EXPLORER_CHECKPOINTS", ROOT / "checkpoints"))
GPT2_ENV = "GPT2_WEIGHTS"
APP_PRESETS = ("course-base", "course-base-scaled", "course-gpt")
GPT2_META = {"arch": "decoder_only", "encoding": "r50k_base"}
_GPT2_PATHS: list[str] = []  # GPT-2 weights registered at runtime (the Train page's "load"), process-wide
_GPT2_LOCK = threading.Lock()


@dataclass(frozen=True)
class ModelEntry:
    key: str
    label: str
    kind: str  # "trained" (shipped), "user" (trained here), "preset" (random init), "gpt2"
    meta: dict


def preset_key(name: str, encoding: str = "cl100k_base") -> str:
    return f"preset:{name}@{encoding}"


def _checkpoints(folder: Path, kind: str) -> list[ModelEntry]:
    entries = []
    for js in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        if not js.with_suffix(".pt").is_file():
            continue
        try:
            doc = json.loads(js.read_text(encoding="utf-8"))
            meta = {**doc.get("meta", {}), "arch": doc["config"]["arch"], "encoding": doc["config"]["encoding"]}
        except (OSError, ValueError, KeyError, TypeError):
            continue
        entries.append(ModelEntry(f"ckpt:{js.with_suffix('')}", meta.get("name", js.stem), kind, meta))
    return entries


def list_models() -> list[ModelEntry]:
    """Shipped trained checkpoints first, then models trained here, the random presets, GPT-2 if configured."""
    entries = _checkpoints(SHIPPED_DIR, "trained") + _checkpoints(USER_DIR, "user")
    entries += [ModelEntry(preset_key(p), p, "preset", {"arch": PRESETS[p].arch}) for p in APP_PRESETS]
    gpt2 = os.environ.get(GPT2_ENV)
    if gpt2:
        entries.append(ModelEntry(f"gpt2:{gpt2}", "GPT-2", "gpt2", GPT2_META | {"path": gpt2}))
    with _GPT2_LOCK:
        added = [p for p in _GPT2_PATHS if p != gpt2]
    entries += [ModelEntry(f"gpt2:{p}", f"GPT-2 · {Path(p).name}", "gpt2", GPT2_META | {"path": p})
                for p in added]
    return entries


def add_gpt2_path(path: str | Path) -> str:
    """Register GPT-2 weights loaded at runtime so list_models() shows them; returns their model key."""
    path = str(path)
    with _GPT2_LOCK:
        if path not in _GPT2_PATHS:
            _GPT2_PATHS.append(path)
    return f"gpt2:{path}"


def default_key() -> str:
    """The app opens on a trained model when one is shipped, else the course's base preset."""
    trained = _checkpoints(SHIPPED_DIR, "trained")
    preferred = [e for e in trained if e.meta.get("default")]
    return (preferred or trained or [ModelEntry(preset_key("course-base"), "", "preset", {})])[0].key


def load_model(key: str, device=None) -> tuple[Transformer, dict]:
    """Build or load the model a key names; returns (model in eval mode, meta)."""
    kind, _, rest = key.partition(":")
    if kind == "preset":
        name, _, encoding = rest.partition("@")
        if name not in PRESETS:
            raise ValueError(f"unknown preset {name!r}")
        encoding = encoding or "cl100k_base"
        cfg = preset(name, encoding=encoding, vocab_size=load_encoding(encoding).n_vocab)
        return build_model(cfg, device), {"name": name, "kind": "preset"}
    if kind == "ckpt":
        return load_checkpoint(rest, device)
    if kind == "gpt2":
        from .gpt2 import load_gpt2

        model, meta = load_gpt2(rest, device=device)
        return model, {**meta, "name": "GPT-2", "kind": "gpt2", "path": rest}
    raise ValueError(f"unknown model key {key!r}")
