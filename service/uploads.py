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

import collections
import io
import json
import os
import pickle
import re
import struct
import tempfile
import warnings
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from math import prod

import torch
from safetensors.torch import load as load_safetensors

from transformer_core.errors import CheckpointError, ConfigError, EncodingUnavailable, TrainingError, reason_of
from transformer_core.model.config import TransformerConfig
from transformer_core.model.memory import param_bytes, param_count
from transformer_core.model.transformer import Transformer, build_model
from transformer_core.text.tokenizer import ENCODINGS, load_encoding
from transformer_core.train.checkpoint import load_state_into, save_checkpoint

from . import budget, catalog
from .jobs import check_disk, new_folder
from .settings import settings

MAX_TEXT_UPLOAD_BYTES = 1 << 20
MAX_MODEL_UPLOAD_BYTES = 20 << 20  # equal to .streamlit/config.toml's maxUploadSize (a test reads both)
MAX_HEADER_BYTES = 1 << 20
MAX_PICKLE_BYTES = 16 << 20
MAX_JSON_DEPTH = 8  # a config is an object holding one list; a safetensors header is three levels deep
MAX_ZIP_ENTRIES = 10_000
MAX_DIMS = 8
SEED_MAX = 2**63 - 1
CARD_TEXT_FIELDS = ("task", "example_src", "example_tgt", "accuracy_metric")
SAFETENSORS_DTYPES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
                      "BOOL": 1}
TORCH_STORAGES = {"DoubleStorage": 8, "FloatStorage": 4, "HalfStorage": 2, "BFloat16Storage": 2, "LongStorage": 8,
                  "IntStorage": 4, "ShortStorage": 2, "CharStorage": 1, "ByteStorage": 1, "BoolStorage": 1}


def read_text_upload(raw: bytes) -> str:
    """An uploaded .txt file as text; TrainingError when it is too large or not UTF-8."""
    if len(raw) > MAX_TEXT_UPLOAD_BYTES:
        raise TrainingError("upload_text_too_large", mb=MAX_TEXT_UPLOAD_BYTES // 2**20)
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise TrainingError("upload_text_not_utf8", byte=exc.start) from exc


# ---- JSON and configs ------------------------------------------------------------------------------------------

_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)


def json_depth(text: str) -> int:
    """How deeply JSON text nests arrays and objects, counted without recursion (strings skipped)."""
    depth = most = 0
    for m in re.finditer(r"[\[\]{}]", _JSON_STRING.sub("", text)):
        depth += 1 if m.group() in "[{" else -1
        most = max(most, depth)
    return most


def parse_json(text: str | bytes, max_bytes: int = MAX_HEADER_BYTES, max_depth: int = MAX_JSON_DEPTH):
    """json.loads with limits: ConfigError `config_too_large`, `config_too_deep` (never a RecursionError) or
    `config_not_json`."""
    if len(text) > max_bytes:
        raise ConfigError("config_too_large", kb=max_bytes // 1024)
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigError("config_not_json") from exc
    if json_depth(text) > max_depth:
        raise ConfigError("config_too_deep", depth=max_depth)
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ConfigError("config_not_json") from exc


def object_depth(obj, max_depth: int = MAX_JSON_DEPTH) -> int:
    """How deeply a Python object nests lists, tuples and dicts (iterative; stops counting past max_depth + 1)."""
    most, stack = 0, [(obj, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (list, tuple, dict)):
            most = max(most, depth)
            if depth > max_depth:
                return depth
            stack.extend((v, depth + 1) for v in (item.values() if isinstance(item, dict) else item))
    return most


def check_config(data) -> TransformerConfig:
    """A config from data a file brought, every bound checked: types and ranges of every field (ConfigError),
    nesting depth, a known encoding, the seed, the vocabulary map against the encoding, the parameter count
    (CheckpointError upload_too_many_params) and the memory to build it (budget.MemoryBudgetError)."""
    if data is None:
        raise CheckpointError("upload_no_config")
    if isinstance(data, (str, bytes)):
        data = parse_json(data)
    if object_depth(data) > MAX_JSON_DEPTH:
        raise ConfigError("config_too_deep", depth=MAX_JSON_DEPTH)
    cfg = TransformerConfig.from_dict(data)
    if cfg.encoding not in ENCODINGS:
        raise ConfigError("encoding_unknown", name=cfg.encoding[:40], choices=", ".join(ENCODINGS))
    if not 0 <= cfg.seed <= SEED_MAX:
        raise ConfigError("config_range", field="seed", lo=0, hi=SEED_MAX)
    if cfg.vocab_map:
        try:
            n_vocab = load_encoding(cfg.encoding).n_vocab
        except EncodingUnavailable:
            n_vocab = None  # the pages will say the encoding is missing; the map is checked when it can be
        if n_vocab is not None and max(cfg.vocab_map) >= n_vocab:
            raise ConfigError("config_vocab_map")
    if param_count(cfg) > settings().max_train_params:
        raise CheckpointError("upload_too_many_params", limit=f"{settings().max_train_params:,}")
    if 2 * param_bytes(cfg) > budget.task_limit():  # the model, and the clean copy that is saved
        raise budget.MemoryBudgetError("memory_too_big", mb=budget.to_mb(2 * param_bytes(cfg)),
                                       limit=budget.to_mb(budget.task_limit()), setting=budget.SETTING_NAME)
    return cfg


# ---- tensors ---------------------------------------------------------------------------------------------------

def _check_tensor(name: str, t: torch.Tensor) -> int:
    """Bytes a tensor really needs; refuses views that share or repeat storage (stride 0, overlaps)."""
    need = t.numel() * t.element_size()
    if not t.is_contiguous() or t.untyped_storage().nbytes() != need or t.storage_offset() != 0:
        raise CheckpointError("upload_tensor_view", name=name[:60])
    return need


def _contiguous(size: tuple[int, ...], stride: tuple[int, ...]) -> bool:
    expect, step = [], 1
    for s in reversed(size):
        expect.append(step)
        step *= max(s, 1)
    return all(st == ex for s, st, ex in zip(size, stride, reversed(expect), strict=True) if s != 1)


def budget_bytes() -> int:
    """Most tensor bytes one uploaded model may hold."""
    return 4 * MAX_MODEL_UPLOAD_BYTES


@dataclass
class Inspected:
    """A model file that passed every check that needs no tensor memory."""

    config: object  # the config as the file holds it (checked by check_config)
    tensor_bytes: int  # what its tensors will take once loaded
    load: Callable[[], dict[str, torch.Tensor]]


def _state_ok(state) -> dict[str, torch.Tensor]:
    if not isinstance(state, dict) or not all(isinstance(k, str) and isinstance(v, torch.Tensor)
                                              for k, v in state.items()):
        raise CheckpointError("checkpoint_not_tensors")
    total = sum(_check_tensor(k, v) for k, v in state.items())
    if total > budget_bytes():
        raise CheckpointError("upload_too_big_unpacked", mb=total // 2**20, limit=budget_bytes() // 2**20)
    return state


def _safetensors(raw: bytes) -> Inspected:
    if len(raw) < 8:
        raise CheckpointError("upload_format")
    (n,) = struct.unpack("<Q", raw[:8])
    if n > MAX_HEADER_BYTES or 8 + n > len(raw):
        raise CheckpointError("upload_format")
    try:
        header = parse_json(raw[8 : 8 + n])
    except ConfigError as exc:
        raise CheckpointError("checkpoint_refused", reason=exc.code) from exc
    if not isinstance(header, dict):
        raise CheckpointError("checkpoint_not_tensors")
    meta = header.pop("__metadata__", None) or {}
    if not isinstance(meta, dict):
        raise CheckpointError("upload_no_config")
    total, data_len = 0, len(raw) - 8 - n
    for name, info in header.items():
        try:
            itemsize = SAFETENSORS_DTYPES[info["dtype"]]
            shape, (lo, hi) = info["shape"], info["data_offsets"]
            ok = (isinstance(shape, list) and len(shape) <= MAX_DIMS and all(_int(s) and s >= 0 for s in shape)
                  and _int(lo) and _int(hi) and 0 <= lo <= hi)
            outside = ok and (hi > data_len or prod(shape) * itemsize > data_len)  # claims more than the file has
            ok = ok and prod(shape) * itemsize == hi - lo
        except (KeyError, TypeError, ValueError):
            ok, outside = False, False
        if outside:
            raise CheckpointError("upload_tensor_outside", name=str(name)[:60])
        if not ok:
            raise CheckpointError("upload_tensor_view", name=str(name)[:60])
        total += hi - lo
    config = meta.get("config")

    def load() -> dict[str, torch.Tensor]:
        try:
            return load_safetensors(raw)
        except Exception as exc:
            raise CheckpointError("checkpoint_refused", reason=reason_of(exc)) from exc

    return Inspected(config, total, load)


def _int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


class _Record:
    def __setstate__(self, state):  # a pickle's BUILD must not rewrite a checked record
        raise pickle.UnpicklingError("records take no state")


@dataclass(frozen=True)
class _StorageType(_Record):
    name: str


@dataclass(frozen=True)
class _Storage(_Record):
    key: str
    itemsize: int
    numel: int


@dataclass(frozen=True)
class _TensorRecord(_Record):
    storage: _Storage
    offset: int
    size: tuple
    stride: tuple


def _rebuild_tensor(storage, offset, size, stride, *_rest) -> _TensorRecord:
    if not (isinstance(storage, _Storage) and _int(offset) and isinstance(size, tuple) and isinstance(stride, tuple)
            and len(size) == len(stride) <= MAX_DIMS and all(map(_int, size + stride)) and min(size, default=0) >= 0):
        raise pickle.UnpicklingError("malformed tensor record")
    return _TensorRecord(storage, offset, size, stride)


def _rebuild_parameter(data, *_rest) -> _TensorRecord:
    if not isinstance(data, _TensorRecord):
        raise pickle.UnpicklingError("malformed parameter record")
    return data


class _RecordUnpickler(pickle.Unpickler):
    """Reads a torch.save pickle into records: it knows the few names a state_dict uses and builds no tensor."""

    NAMES = {("collections", "OrderedDict"): collections.OrderedDict,
             ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
             ("torch._utils", "_rebuild_parameter"): _rebuild_parameter}

    def find_class(self, module: str, name: str):
        if (module, name) in self.NAMES:
            return self.NAMES[(module, name)]
        if module == "torch" and name in TORCH_STORAGES:
            return _StorageType(name)
        raise pickle.UnpicklingError(f"{module}.{name} is not allowed")

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"
                and isinstance(pid[1], _StorageType) and isinstance(pid[2], str) and _int(pid[4]) and pid[4] >= 0):
            raise pickle.UnpicklingError("malformed storage record")
        return _Storage(pid[2], TORCH_STORAGES[pid[1].name], pid[4])


def _torch(raw: bytes) -> Inspected:
    if not zipfile.is_zipfile(io.BytesIO(raw)):
        raise CheckpointError("upload_format")
    try:
        with zipfile.ZipFile(io.BytesIO(raw)) as z:
            infos = z.infolist()  # the central directory only: nothing is unpacked yet
            declared = sum(i.file_size for i in infos)
            if declared > budget_bytes() or len(infos) > MAX_ZIP_ENTRIES:
                raise CheckpointError("upload_too_big_unpacked", mb=declared // 2**20, limit=budget_bytes() // 2**20)
            pickles = [i for i in infos if i.filename.endswith("/data.pkl") and i.filename.count("/") == 1]
            if len(pickles) != 1 or pickles[0].file_size > MAX_PICKLE_BYTES:
                raise CheckpointError("upload_pt_layout")
            prefix = pickles[0].filename[: -len("data.pkl")]
            entries = {i.filename: i for i in infos}
            with z.open(pickles[0]) as f:
                doc = _RecordUnpickler(io.BytesIO(f.read(MAX_PICKLE_BYTES + 1))).load()
    except CheckpointError:
        raise
    except Exception as exc:  # UnpicklingError for code or unknown objects; BadZipFile, EOFError when corrupt
        raise CheckpointError("checkpoint_refused", reason=reason_of(exc)) from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("state_dict"), dict):
        raise CheckpointError("upload_pt_layout")
    state = doc["state_dict"]
    if not all(isinstance(k, str) and isinstance(v, _TensorRecord) for k, v in state.items()):
        raise CheckpointError("checkpoint_not_tensors")
    total, owners = 0, {}
    for name, rec in state.items():
        st = rec.storage
        entry = entries.get(f"{prefix}data/{st.key}")
        nbytes = prod(rec.size) * st.itemsize
        if entry is None or entry.compress_type != zipfile.ZIP_STORED or not (
                entry.file_size == entry.compress_size == st.numel * st.itemsize):
            raise CheckpointError("upload_pt_storage", name=name[:60])  # as torch.save writes: stored, exact size
        if nbytes != st.numel * st.itemsize or rec.offset != 0 or not _contiguous(rec.size, rec.stride):
            raise CheckpointError("upload_tensor_view", name=name[:60])
        if owners.setdefault(st.key, rec) != rec:  # one storage, two different tensors: overlapping views
            raise CheckpointError("upload_tensor_view", name=name[:60])
        total += nbytes  # tied weights (the same tensor twice) count twice: they are copied apart later
    if total > budget_bytes():
        raise CheckpointError("upload_too_big_unpacked", mb=total // 2**20, limit=budget_bytes() // 2**20)

    def load() -> dict[str, torch.Tensor]:
        fd, path = tempfile.mkstemp(suffix=".pt", prefix="upload-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(raw)
            loaded = torch.load(path, map_location="cpu", weights_only=True, mmap=True)  # storages stay in the file
        except Exception as exc:
            raise CheckpointError("checkpoint_refused", reason=reason_of(exc)) from exc
        finally:
            os.unlink(path)  # the mapping outlives the name
        if not isinstance(loaded, dict) or not isinstance(loaded.get("state_dict"), dict):
            raise CheckpointError("upload_pt_layout")
        return loaded["state_dict"]

    return Inspected(doc.get("config"), total, load)


def inspect_model_upload(raw: bytes, filename: str) -> tuple[TransformerConfig, Inspected]:
    """Every check of an uploaded model file that needs no tensor memory; CheckpointError / ConfigError /
    budget.MemoryBudgetError with a message otherwise."""
    if len(raw) > MAX_MODEL_UPLOAD_BYTES:
        raise CheckpointError("upload_too_large", mb=MAX_MODEL_UPLOAD_BYTES // 2**20)
    reader = {".safetensors": _safetensors, ".pt": _torch}.get("." + str(filename).rsplit(".", 1)[-1].lower())
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
    return cfg, _state_ok(found.load())


def import_model(raw: bytes, filename: str, name: str, card: dict | None = None, *, owner: str) -> str:
    """Check an uploaded model file and save a clean copy in the user folder, private to `owner` (the browser's
    viewer token: required, so no upload is ever public by accident) and named by catalog.name_for(name, owner);
    returns its catalog key. Holds the memory it needs in the server's budget while it works."""
    if catalog.owner_id(owner) is None:
        raise TypeError("import_model needs the viewer's token as owner")
    cfg, found = inspect_model_upload(raw, filename)
    check_disk(param_bytes(cfg))
    with budget.reserve(found.tensor_bytes + 2 * param_bytes(cfg), "upload"):
        state = _state_ok(found.load())
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
