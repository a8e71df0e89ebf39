"""Files learners bring: a training text, or a model as one file. Everything is checked before it is used, and
nothing a file declares is allocated before it was checked.

A model file is a `.safetensors` whose metadata holds the config (what the Model page exports), or a `.pt`
holding {"config": {...}, "state_dict": {...}}. Neither is unpickled as code: safetensors has no code, and a
`.pt` is checked in three steps before torch ever reads it:

1. its zip directory: entries stored uncompressed (as torch.save writes them), declared sizes within the budget, so
   a zip bomb is refused before anything is unpacked;
2. its pickle, read by an unpickler that builds no tensor and knows only the names a state_dict uses: every tensor's
   storage record (dtype, element count, zip entry), shape, strides and offset. Each tensor must own exactly its
   storage (contiguous, offset 0, numel x itemsize == the storage's bytes == its zip entry's size), so a stride-0
   (expanded) tensor or overlapping views that would inflate in memory are refused without materialising them;
3. the config (bounds on every field, nesting depth, a known encoding, parameter count and memory within the
   server's limits); only then torch.load(weights_only=True, mmap=True) from a temporary file, so even the
   storages it reads are file-backed, and every loaded tensor is checked again.
"""
from __future__ import annotations

import warnings

import torch

from transformer_core.errors import CheckpointError, ConfigError, TrainingError, reason_of
from transformer_core.model.config import TransformerConfig
from transformer_core.model.memory import param_bytes
from transformer_core.model.transformer import Transformer, build_model
from transformer_core.train.checkpoint import load_state_into, save_checkpoint

from . import budget, catalog
from .training_run import check_disk, new_folder
from .upload_json import check_config
from .upload_tensors import (
    MAX_MODEL_UPLOAD_BYTES,
    Inspected,
    budget_bytes,
    checked_state,
    inspect_safetensors,
    inspect_torch,
)

MAX_TEXT_UPLOAD_BYTES = 1 << 20
CARD_TEXT_FIELDS = ("task", "example_src", "example_tgt", "accuracy_metric")


def read_text_upload(raw: bytes) -> str:
    """An uploaded .txt file as text; TrainingError when it is too large, not UTF-8 or holds no text."""
    if len(raw) > MAX_TEXT_UPLOAD_BYTES:
        raise TrainingError("upload_text_too_large", mb=MAX_TEXT_UPLOAD_BYTES // 2**20)
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise TrainingError("upload_text_not_utf8", byte=exc.start) from exc
    if not text.strip():  # said of the file: "the training text is empty" beside "training on the uploaded file"
        raise TrainingError("upload_text_empty")
    return text


def inspect_model_upload(raw: bytes, filename: str) -> tuple[TransformerConfig, Inspected]:
    """Every check of an uploaded model file that needs no tensor memory; CheckpointError / ConfigError /
    budget.MemoryBudgetError with a message otherwise."""
    if len(raw) > MAX_MODEL_UPLOAD_BYTES:
        raise CheckpointError("upload_too_large", mb=MAX_MODEL_UPLOAD_BYTES // 2**20)
    suffix = "." + str(filename).rsplit(".", 1)[-1].lower()
    reader = {".safetensors": inspect_safetensors, ".pt": inspect_torch}.get(suffix)
    if reader is None:
        raise CheckpointError("upload_format")
    found = reader(raw)
    if found.tensor_bytes > budget_bytes():
        raise CheckpointError("upload_too_big_unpacked", mb=found.tensor_bytes // 2**20,
                              limit=budget_bytes() // 2**20)
    return check_config(found.config), found


def read_model_upload(raw: bytes, filename: str) -> tuple[TransformerConfig, dict[str, torch.Tensor]]:
    """The config and tensors of an uploaded model file, every check passed; CheckpointError otherwise."""
    cfg, found = inspect_model_upload(raw, filename)
    return cfg, checked_state(found.load())


def import_model(raw: bytes, filename: str, name: str, card: dict | None = None, *, owner: str) -> str:
    """Check an uploaded model file and save a clean copy in the user folder, private to `owner` (the browser's
    viewer token: required, so no upload is ever public by accident) and named by catalog.name_for(name, owner);
    returns its catalog key. Holds the memory it needs in the server's budget while it works."""
    if catalog.owner_id(owner) is None:
        raise TypeError("import_model needs the viewer's token as owner")
    cfg, found = inspect_model_upload(raw, filename)
    check_disk(param_bytes(cfg))
    with budget.reserve(found.tensor_bytes + 2 * param_bytes(cfg), "upload"):
        state = checked_state(found.load())
        try:
            with torch.device("meta"), warnings.catch_warnings():
                warnings.simplefilter("ignore")  # copying into meta tensors is a no-op, and torch says so
                load_state_into(Transformer(cfg), state)  # shapes only: raises CheckpointError on a mismatch
            model = load_state_into(build_model(cfg, "cpu"), state)
        except (ConfigError, RuntimeError) as exc:
            raise CheckpointError("checkpoint_mismatch", problems=reason_of(exc)) from exc
        del state
        clean = {k: str(card[k])[:500] for k in CARD_TEXT_FIELDS if isinstance((card or {}).get(k), str)}
        clean |= {"name": catalog.name_for(name, owner), "uploaded": True, "owner": catalog.owner_id(owner)}
        folder = save_checkpoint(model, new_folder(name), clean)
    catalog.refresh()
    return f"user:{folder.name}"
