"""An uploaded model file's tensors checked before they are allocated: a .safetensors header, or a .pt's zip directory
and pickle read by an unpickler that builds no tensor (see service.uploads for the three steps)."""
from __future__ import annotations

import collections
import io
import os
import pickle
import struct
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from math import prod

import torch
from safetensors.torch import load as load_safetensors

from transformer_core.errors import CheckpointError, ConfigError, reason_of

from .upload_json import MAX_HEADER_BYTES, parse_json

MAX_MODEL_UPLOAD_BYTES = 20 << 20  # equal to .streamlit/config.toml's maxUploadSize (a test reads both)
MAX_PICKLE_BYTES = 16 << 20
MAX_ZIP_ENTRIES = 10_000
MAX_DIMS = 8
SAFETENSORS_DTYPES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
                      "BOOL": 1}
TORCH_STORAGES = {"DoubleStorage": 8, "FloatStorage": 4, "HalfStorage": 2, "BFloat16Storage": 2, "LongStorage": 8,
                  "IntStorage": 4, "ShortStorage": 2, "CharStorage": 1, "ByteStorage": 1, "BoolStorage": 1}


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


def checked_state(state) -> dict[str, torch.Tensor]:
    if not isinstance(state, dict) or not all(isinstance(k, str) and isinstance(v, torch.Tensor)
                                              for k, v in state.items()):
        raise CheckpointError("checkpoint_not_tensors")
    total = sum(_check_tensor(k, v) for k, v in state.items())
    if total > budget_bytes():
        raise CheckpointError("upload_too_big_unpacked", mb=total // 2**20, limit=budget_bytes() // 2**20)
    return state


def inspect_safetensors(raw: bytes) -> Inspected:
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


def inspect_torch(raw: bytes) -> Inspected:
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
