"""Model files written byte by byte for the upload tests (tests/test_service_uploads.py, the browser's hostile
suite and bench/soak.py): torch.save's zip layout with any declared size, a raw deflate stream of zeros, and the
pickle torch.save would write for tensors given only as records, so a test can declare gigabytes it never allocates.
torch is imported only when a pickle is written."""
from __future__ import annotations

import io
import pickle
import struct
import zlib


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
