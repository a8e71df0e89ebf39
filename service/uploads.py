"""Files learners bring: a training text, or a model as one file. Everything is checked before it is used.

A model file is a `.safetensors` whose metadata holds the config (what the Model page exports), or a `.pt`
holding {"config": {...}, "state_dict": {...}}. Neither is unpickled as code: safetensors has no code, and a
`.pt` is opened with weights_only=True only after its zip directory's declared sizes were checked; every
tensor must own exactly its bytes (no stride-0 or overlapping views that would inflate in memory).
"""
from __future__ import annotations

import io
import json
import struct
import zipfile

import torch
from safetensors.torch import load as load_safetensors

from transformer_core.errors import CheckpointError, ConfigError, TrainingError
from transformer_core.model.config import TransformerConfig
from transformer_core.model.transformer import Transformer, build_model
from transformer_core.train.checkpoint import load_state_into, save_checkpoint

from . import catalog
from .jobs import NAME_CHARS, new_folder, param_count, safe_name
from .settings import settings

MAX_TEXT_UPLOAD_BYTES = 1 << 20
MAX_MODEL_UPLOAD_BYTES = 20 << 20  # equal to .streamlit/config.toml's maxUploadSize
MAX_HEADER_BYTES = 1 << 20
CARD_TEXT_FIELDS = ("task", "example_src", "example_tgt", "accuracy_metric")


def read_text_upload(raw: bytes) -> str:
    """An uploaded .txt file as text; TrainingError when it is too large or not UTF-8."""
    if len(raw) > MAX_TEXT_UPLOAD_BYTES:
        raise TrainingError("upload_text_too_large", mb=MAX_TEXT_UPLOAD_BYTES // 2**20)
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise TrainingError("upload_text_not_utf8", byte=exc.start) from exc


def _check_tensor(name: str, t: torch.Tensor) -> int:
    """Bytes a tensor really needs; refuses views that share or repeat storage (stride 0, overlaps)."""
    need = t.numel() * t.element_size()
    if not t.is_contiguous() or t.untyped_storage().nbytes() != need or t.storage_offset() != 0:
        raise CheckpointError("upload_tensor_view", name=name[:60])
    return need


def _safetensors(raw: bytes) -> tuple[dict[str, torch.Tensor], dict]:
    if len(raw) < 8:
        raise CheckpointError("upload_format")
    (n,) = struct.unpack("<Q", raw[:8])
    if n > MAX_HEADER_BYTES or 8 + n > len(raw):
        raise CheckpointError("upload_format")
    try:
        header = json.loads(raw[8 : 8 + n])
        meta = header.pop("__metadata__", {}) or {}
        config = json.loads(meta.get("config", "null"))
        state = load_safetensors(raw)
    except Exception as exc:
        raise CheckpointError("checkpoint_refused", reason=type(exc).__name__) from exc
    return state, config


def _torch(raw: bytes) -> tuple[dict[str, torch.Tensor], dict]:
    if not zipfile.is_zipfile(io.BytesIO(raw)):
        raise CheckpointError("upload_format")
    with zipfile.ZipFile(io.BytesIO(raw)) as z:
        declared = sum(i.file_size for i in z.infolist())  # before anything is unpacked
    if declared > budget_bytes():
        raise CheckpointError("upload_too_big_unpacked", mb=declared // 2**20, limit=budget_bytes() // 2**20)
    try:
        doc = torch.load(io.BytesIO(raw), map_location="cpu", weights_only=True)
    except Exception as exc:
        raise CheckpointError("checkpoint_refused", reason=type(exc).__name__) from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("state_dict"), dict):
        raise CheckpointError("upload_pt_layout")
    return doc["state_dict"], doc.get("config")


def budget_bytes() -> int:
    """Most tensor bytes one uploaded model may hold."""
    return 4 * MAX_MODEL_UPLOAD_BYTES


def read_model_upload(raw: bytes, filename: str) -> tuple[TransformerConfig, dict[str, torch.Tensor]]:
    """The config and tensors of an uploaded model file, every check passed; CheckpointError otherwise."""
    if len(raw) > MAX_MODEL_UPLOAD_BYTES:
        raise CheckpointError("upload_too_large", mb=MAX_MODEL_UPLOAD_BYTES // 2**20)
    reader = {".safetensors": _safetensors, ".pt": _torch}.get("." + str(filename).rsplit(".", 1)[-1].lower())
    if reader is None:
        raise CheckpointError("upload_format")
    state, config = reader(raw)
    if not isinstance(state, dict) or not all(isinstance(k, str) and isinstance(v, torch.Tensor)
                                              for k, v in state.items()):
        raise CheckpointError("checkpoint_not_tensors")
    total = sum(_check_tensor(k, v) for k, v in state.items())
    if total > budget_bytes():
        raise CheckpointError("upload_too_big_unpacked", mb=total // 2**20, limit=budget_bytes() // 2**20)
    if not isinstance(config, dict):
        raise CheckpointError("upload_no_config")
    cfg = TransformerConfig.from_dict(config)
    return cfg, state


def import_model(raw: bytes, filename: str, name: str, card: dict | None = None) -> str:
    """Check an uploaded model file and save a clean copy in the user folder; returns its catalog key."""
    cfg, state = read_model_upload(raw, filename)
    if param_count(cfg) > settings().max_train_params:
        raise CheckpointError("upload_too_many_params", limit=f"{settings().max_train_params:,}")
    try:
        with torch.device("meta"):
            load_state_into(Transformer(cfg), state)  # shapes only: raises CheckpointError on a mismatch
        model = load_state_into(build_model(cfg, "cpu"), state)
    except (ConfigError, RuntimeError) as exc:
        raise CheckpointError("checkpoint_mismatch", problems=type(exc).__name__) from exc
    clean = {k: str(card[k])[:500] for k in CARD_TEXT_FIELDS if isinstance((card or {}).get(k), str)}
    folder = save_checkpoint(model, new_folder(name), {**clean, "name": safe_name(name)[:NAME_CHARS],
                                                       "uploaded": True})
    catalog.refresh()
    return f"user:{folder.name}"
