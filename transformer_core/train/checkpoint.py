"""A saved model is a folder: model.safetensors (weights), config.json (the TransformerConfig) and
card.json (its model card: where it came from and what it measures). Loading never unpickles code.

Writes are atomic: the folder is written under a temporary name and renamed into place, so a crash never
leaves a half-written model that a list would show.
"""
from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from ..errors import CheckpointError, ConfigError, reason_of
from ..model.config import TransformerConfig
from ..model.transformer import Transformer, build_model

WEIGHTS, CONFIG, CARD = "model.safetensors", "config.json", "card.json"
MAX_CHECKPOINT_BYTES = 200 * 1024 * 1024
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def _state_to_save(model: Transformer, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """The state_dict as contiguous CPU tensors; a tied output weight is stored once (as the embedding)."""
    state = {k: v.detach().to("cpu", dtype if v.is_floating_point() else v.dtype).contiguous().clone()
             for k, v in model.state_dict().items()}
    if model.cfg.tie_embeddings:
        state.pop("out.weight", None)
    return state


def save_checkpoint(model: Transformer, folder: str | Path, card: dict | None = None, *,
                    dtype: str = "float32") -> Path:
    """Write FOLDER/{model.safetensors, config.json, card.json} atomically; returns the folder."""
    folder = Path(folder)
    if folder.exists():
        raise CheckpointError("checkpoint_exists", name=folder.name)
    tmp = folder.with_name(f".tmp-{folder.name}-{uuid.uuid4().hex[:8]}")
    tmp.mkdir(parents=True)
    try:
        # the config rides in the weights file too, so one .safetensors file is a whole model (uploads)
        save_file(_state_to_save(model, DTYPES[dtype]), str(tmp / WEIGHTS),
                  metadata={"dtype": dtype, "config": model.cfg.to_json()})
        (tmp / CONFIG).write_text(model.cfg.to_json(), encoding="utf-8")
        write_card(tmp, card or {})
        os.replace(tmp, folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return folder


def write_card(folder: str | Path, card: dict) -> None:
    """Write or replace a model folder's card atomically (a temporary file, then a rename)."""
    folder = Path(folder)
    tmp = folder / f".{CARD}.{uuid.uuid4().hex[:8]}.tmp"
    try:
        tmp.write_text(json.dumps(card, indent=2, ensure_ascii=False), encoding="utf-8")
        os.replace(tmp, folder / CARD)
    finally:
        tmp.unlink(missing_ok=True)


def read_state_dict(path: str | Path) -> dict[str, torch.Tensor]:
    """Tensors of a .safetensors file, or of a .pt file read with weights_only=True (code is refused, never run)."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError("checkpoint_missing")
    if path.stat().st_size > MAX_CHECKPOINT_BYTES:
        raise CheckpointError("checkpoint_too_large", mb=MAX_CHECKPOINT_BYTES // 2**20)
    try:
        if path.suffix == ".safetensors":
            state = load_file(str(path), device="cpu")
        else:
            state = torch.load(path, map_location="cpu", weights_only=True)
    except (SafetensorError, Exception) as exc:
        raise CheckpointError("checkpoint_refused", reason=reason_of(exc)) from exc
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise CheckpointError("checkpoint_not_tensors")
    return state


def load_state_into(model: Transformer, state: dict[str, torch.Tensor], assign: bool = False) -> Transformer:
    """Copy a state_dict in, refusing missing, unexpected or mis-shaped tensors with a clear error.

    A tied model's output weight may be absent (it is the token embedding). assign: the model's parameters become
    the given (float32) tensors, no copy (a model built on the "meta" device: a big model is never held twice)."""
    own = model.state_dict()
    optional = {"out.weight"} if model.cfg.tie_embeddings else set()
    problems = [f"missing {k}" for k in own if k not in state and k not in optional]
    problems += [f"unexpected {k}" for k in state if k not in own]
    problems += [
        f"{k}: {tuple(state[k].shape)} ≠ {tuple(v.shape)}"
        for k, v in own.items() if k in state and state[k].shape != v.shape
    ]
    if problems:
        more = f" (+{len(problems) - 6})" if len(problems) > 6 else ""
        raise CheckpointError("checkpoint_mismatch", problems="; ".join(problems[:6]) + more)
    state = {k: v.float() if v.is_floating_point() else v for k, v in state.items()}
    model.load_state_dict(state, strict=False, assign=assign)
    if assign and model.cfg.tie_embeddings:  # one matrix for both again (assign gave each its own Parameter)
        model.out.weight = model.decoder.embed.tok.weight
    return model


def read_config(folder: str | Path) -> TransformerConfig:
    """The TransformerConfig of a model folder."""
    try:
        return TransformerConfig.from_dict(json.loads((Path(folder) / CONFIG).read_text(encoding="utf-8")))
    except ConfigError:
        raise
    except (OSError, ValueError, TypeError) as exc:
        raise CheckpointError("checkpoint_config", reason=reason_of(exc)) from exc


def read_card(folder: str | Path) -> dict:
    """The model card of a folder ({} when it has none)."""
    path = Path(folder) / CARD
    if not path.is_file():
        return {}
    try:
        card = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CheckpointError("checkpoint_card", reason=reason_of(exc)) from exc
    return card if isinstance(card, dict) else {}


def load_checkpoint(folder: str | Path, device=None) -> tuple[Transformer, dict]:
    """Build the model from FOLDER/config.json and load its weights; returns (model in eval mode, card)."""
    folder = Path(folder)
    model = build_model(read_config(folder), "cpu")
    load_state_into(model, read_state_dict(folder / WEIGHTS))
    return model.to(device or "cpu").eval(), read_card(folder)
