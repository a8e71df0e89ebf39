"""Model files for the upload tests (tests/service/) and the hostile uploads (tests/browser/, bench/soak.py).

Written byte by byte: torch.save's zip layout with any declared size, a raw deflate stream of zeros, and the pickle
torch.save would write for tensors given only as records, so a test can declare gigabytes it never allocates.
Written by the library: a small model's single-file export, a .pt of any document, and the hostile model
files the Train page must refuse. torch is imported only when a model or a pickle is made."""
from __future__ import annotations

import io
import json
import pickle
import struct
import zipfile
import zlib
from pathlib import Path


def zip_file(entries: list[tuple[str, bytes, int, int, int]]) -> bytes:
    """A torch-style zip from (name, data as stored, method, crc, declared unpacked size), data written as given,
    plus the version and byte order records torch.load expects."""
    entries = [*entries, *((f"archive/{n}", d, 0, zlib.crc32(d), len(d)) for n, d in (("version", b"3\n"),
                                                                                     ("byteorder", b"little")))]
    out, central = io.BytesIO(), []
    for name, data, method, crc, size in entries:
        offset, raw_name = out.tell(), name.encode()
        out.write(struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, method, 0, 0, crc, len(data), size,
                              len(raw_name), 0) + raw_name + data)
        central.append(struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, method, 0, 0, crc, len(data), size,
                                   len(raw_name), 0, 0, 0, 0, 0, offset) + raw_name)
    start = out.tell()
    out.write(b"".join(central))
    out.write(struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(central), len(central), out.tell() - start, start, 0))
    return out.getvalue()


def deflated_zeros(chunks: int, chunk: int = 1 << 24) -> tuple[bytes, int]:
    """A raw deflate stream of chunks x chunk zero bytes (one compressed chunk repeated), and its CRC-32."""
    piece = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = piece.compress(bytes(chunk)) + piece.flush(zlib.Z_FULL_FLUSH)  # byte-aligned, dictionary reset
    crc, zeros = 0, bytes(chunk)
    for _ in range(chunks):
        crc = zlib.crc32(zeros, crc)
    return block * chunks + b"\x03\x00", crc  # then an empty final block


def pt_pickle_of(doc: dict, build=None) -> bytes:
    """The data.pkl torch.save would write for a doc whose tensors are given as (key, numel, size, stride)
    float records: a hand-made pickle, so a test can declare anything without allocating it. `build`: a state
    the pickle then sets on each tensor (a BUILD opcode after the rebuild call)."""
    class Rec:
        def __init__(self, key, numel, size, stride):
            self.key, self.numel, self.size, self.stride = key, numel, size, stride

    class Pickler(pickle.Pickler):
        def persistent_id(self, obj):
            return ("storage", FloatStorage, obj.key, "cpu", obj.numel) if isinstance(obj, _StorageRef) else None

        def reducer_override(self, obj):
            if isinstance(obj, Rec) and not isinstance(obj, _StorageRef):
                args = (_StorageRef(obj), 0, obj.size, obj.stride, False, {})
                return (rebuild, args) if build is None else (rebuild, args, build)
            return NotImplemented

    class _StorageRef(Rec):
        def __init__(self, rec):
            super().__init__(rec.key, rec.numel, rec.size, rec.stride)

    import torch

    FloatStorage, rebuild = torch.FloatStorage, torch._utils._rebuild_tensor_v2
    state = {k: Rec(*v) for k, v in doc["state_dict"].items()}
    buf = io.BytesIO()
    Pickler(buf, protocol=2).dump({**doc, "state_dict": state})
    return buf.getvalue()


# ---- a small model and its files (the upload tests, the hostile suite and bench/soak.py) ---------------------------

GiB = 2**30
VIEWER = "viewer-token-0123456789abcdef"  # the learner (session token) the upload tests import models as


def small_model(**changes):
    """A one-layer copy-task model (d_model 16, 2 heads), random weights; `changes` to its config."""
    from transformer_core.model.transformer import build_model
    from transformer_core.train.tasks import TASKS

    return build_model(TASKS["copy"].model_config(**{"d_model": 16, "n_heads": 2, "n_layers": 1, **changes}), "cpu")


def small_config(**changes) -> dict:
    """small_model()'s config as a dict with `changes` written over it (no check: a hostile file may say anything)."""
    return json.loads(small_model().cfg.to_json()) | changes


def exported(tmp_path, **changes) -> bytes:
    """The bytes of a small model's single-file export (what the Model page offers for download)."""
    from transformer_core.train.checkpoint import save_checkpoint

    folder = save_checkpoint(small_model(**changes), tmp_path / f"src-{len(changes)}-{changes.get('d_model', 0)}")
    return (folder / "model.safetensors").read_bytes()


def pt_bytes(doc) -> bytes:
    """torch.save(doc) as bytes."""
    import torch

    buf = io.BytesIO()
    torch.save(doc, buf)
    return buf.getvalue()


def save_pt(path, doc):
    """torch.save(doc) into a file; its path."""
    import torch

    torch.save(doc, path)
    return path


def save_safetensors(path, config):
    """A .safetensors model file as the Model page exports it: tensors, and the config (JSON text) as metadata."""
    from safetensors.torch import save_file

    state = {k: v.clone().contiguous() for k, v in small_model().state_dict().items()}
    save_file(state, str(path), metadata={"config": config if isinstance(config, str) else json.dumps(config)})
    return path


def zip_bomb_pt(path):
    """A .pt whose one tensor (960 MiB of float zeros, over 1 GB, declared so in its pickle and its zip directory) is
    stored deflated: under 1 MB on disk. torch.save never compresses, so a plain torch.load would inflate it all."""
    size = 960 << 20
    pkl = pt_pickle_of({"config": small_config(), "state_dict": {"decoder.embed.tok.weight": ("0", size // 4,
                                                                                              (size // 4,), (1,))}})
    bomb, crc = deflated_zeros(960, 1 << 20)
    raw = zip_file([("archive/data.pkl", pkl, 0, zlib.crc32(pkl), len(pkl)), ("archive/data/0", bomb, 8, crc, size)])
    with zipfile.ZipFile(io.BytesIO(raw)) as z:  # what a zip reader sees: over 1 GB declared
        assert sum(i.file_size for i in z.infolist()) > 10**9
        with z.open("archive/data/0") as f:  # and a real deflate stream of zeros
            assert f.read(1 << 16) == bytes(1 << 16)
    assert len(raw) < 10**6, len(raw)
    path.write_bytes(raw)
    return path


def hostile_model_files(folder) -> list[tuple[Path, str]]:
    """The hostile model files the Train page must refuse, written into `folder`: (path, a
    substring of the refusal's message) for a config of 200 000 layers (.pt and .safetensors), a zip bomb, a stride-0
    tensor of 2.5 GB, a config nested 400 deep, a float d_model, a path as encoding and a file of another kind."""
    import torch

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    state = small_model().state_dict()
    nested = []
    for _ in range(400):  # as deep as pickle itself writes
        nested = [nested]
    layers = "The setting n_layers must be between 1 and 256"
    return [
        (save_pt(folder / "layers.pt", {"config": small_config(n_layers=200_000), "state_dict": state}), layers),
        (save_safetensors(folder / "layers.safetensors", small_config(n_layers=200_000)), layers),
        (zip_bomb_pt(folder / "bomb.pt"), "Unpacked, the file would take 960 MB; the limit is 80 MB"),
        (save_pt(folder / "stride0.pt", {"config": small_config(), "state_dict": {
            "decoder.embed.tok.weight": torch.zeros(1).expand(625_000_000)}}),  # 4 bytes stored, 2.5 GB expanded
         "The tensor decoder.embed.tok.weight is a view that repeats or shares memory"),
        (save_pt(folder / "deep.pt", {"config": {"vocab_map": nested}, "state_dict": {}}),
         "The model settings are nested too deeply (more than 8 levels)."),
        (save_safetensors(folder / "deep.safetensors", "[" * 100_000 + "]" * 100_000),
         "The model settings are nested too deeply (more than 8 levels)."),
        (save_pt(folder / "float.pt", {"config": small_config(d_model=16.0), "state_dict": state}),
         "The model setting d_model has the wrong type or size."),
        (save_pt(folder / "enc.pt", {"config": small_config(encoding="../../../etc/passwd"), "state_dict": state}),
         "Unknown tokenizer encoding"),
        (_written(folder / "model.zip", b"PK\x03\x04" + bytes(64)), "Upload a .safetensors model file"),
    ]


def _written(path: Path, raw: bytes) -> Path:
    path.write_bytes(raw)
    return path
