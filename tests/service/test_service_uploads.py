"""Uploads that cannot hurt: a zip bomb, stride-0 and overlapping tensors, lying storage records, hostile configs
(nesting, floats, huge sizes, paths as encodings) and impersonating names. Every refusal is a message with a code,
and nothing a file declares is allocated before it was checked."""
import io
import json
import re
import struct
import tomllib
import zipfile
import zlib
from pathlib import Path

import pytest
import torch
from safetensors.torch import save as save_safetensors

from harness.model_files import (
    VIEWER,
    deflated_zeros,
    exported,
    hostile_model_files,
    pt_bytes,
    pt_pickle_of,
    small_config,
    small_model,
    zip_file,
)
from service import catalog, upload_json, uploads
from transformer_core.errors import CheckpointError, ConfigError, ExplorerError
from transformer_core.model.config import TransformerConfig
from transformer_core.model.transformer import build_model

ROOT = Path(__file__).resolve().parents[2]
GiB = 2**30


@pytest.fixture
def no_unpacking(monkeypatch):
    """Fail the test if anything unpacks a tensor's storage from the zip or hands the file to torch.load (reading
    the small pickle that describes the tensors is allowed)."""
    real_open = zipfile.ZipFile.open

    def open_pickle_only(self, name, *args, **kwargs):
        if not str(getattr(name, "filename", name)).endswith("/data.pkl"):
            raise AssertionError(f"the upload's {name} was unpacked")
        return real_open(self, name, *args, **kwargs)

    def refuse(*args, **kwargs):
        raise AssertionError("the upload was given to torch.load")

    monkeypatch.setattr(zipfile.ZipFile, "open", open_pickle_only)
    monkeypatch.setattr(torch, "load", refuse)


def test_the_upload_limit_equals_the_servers():
    server = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text(encoding="utf-8"))["server"]
    assert server["maxUploadSize"] * 2**20 == uploads.MAX_MODEL_UPLOAD_BYTES
    nginx = (ROOT / "deploy" / "nginx.conf").read_text(encoding="utf-8")
    assert re.search(r"client_max_body_size\s+(\d+)m;", nginx).group(1) == str(server["maxUploadSize"])
    with pytest.raises(CheckpointError, match="larger than 20 MB"):
        uploads.import_model(b"\0" * (uploads.MAX_MODEL_UPLOAD_BYTES + 1), "m.pt", "big", owner=VIEWER)


def test_the_zip_bomb_helper_makes_a_real_deflate_stream():
    data, crc = deflated_zeros(3, 1 << 16)
    out = zlib.decompressobj(-15).decompress(data)
    assert out == bytes(3 << 16) and zlib.crc32(out) == crc


def test_a_zip_bomb_pt_is_refused_from_its_directory_before_anything_is_unpacked(no_unpacking, user_dir):
    pickle_doc = pt_pickle_of({"config": small_config(), "state_dict": {"w": ("0", GiB // 4, (GiB // 4,), (1,))}})
    bomb, crc = deflated_zeros(GiB >> 24)
    raw = zip_file([("archive/data.pkl", pickle_doc, 0, zlib.crc32(pickle_doc), len(pickle_doc)),
                    ("archive/data/0", bomb, 8, crc, GiB)])
    assert len(raw) < 2**20  # under 1 MB on disk, 1 GB declared unpacked
    with pytest.raises(CheckpointError) as info:
        uploads.import_model(raw, "bomb.pt", "bomb", owner=VIEWER)
    assert info.value.code == "upload_too_big_unpacked" and "1024 MB" in str(info.value)
    assert not user_dir.exists()


def test_the_hand_made_pickle_reads_like_torch_save(tmp_path):
    raw = pt_pickle_of({"config": {"a": 1}, "state_dict": {"w": ("0", 4, (2, 2), (2, 1))}})
    data = torch.arange(4, dtype=torch.float32).numpy().tobytes()
    pt = zip_file([("archive/data.pkl", raw, 0, zlib.crc32(raw), len(raw)),
                   ("archive/data/0", data, 0, zlib.crc32(data), len(data))])
    (tmp_path / "x.pt").write_bytes(pt)
    loaded = torch.load(tmp_path / "x.pt", weights_only=True)
    assert loaded["config"] == {"a": 1} and loaded["state_dict"]["w"].tolist() == [[0.0, 1.0], [2.0, 3.0]]


def test_a_pickle_cannot_rewrite_a_checked_record():
    raw = pt_pickle_of({"config": small_config(), "state_dict": {"w": ("0", 4, (4,), (1,))}},
                       build={"size": "huge", "offset": None})
    data = bytes(16)
    pt = zip_file([("archive/data.pkl", raw, 0, zlib.crc32(raw), len(raw)),
                   ("archive/data/0", data, 0, zlib.crc32(data), len(data))])
    with pytest.raises(CheckpointError) as info:
        uploads.import_model(pt, "m.pt", "rebuilt", owner=VIEWER)
    assert info.value.code == "checkpoint_refused"


def vm_peak_growth(fn) -> int:
    """Bytes the process's resident high-water mark grew by while fn ran (Linux; 0 elsewhere)."""
    status = Path("/proc/self/status")
    if not status.is_file():
        fn()
        return 0

    def rss(key):
        return next(int(line.split()[1]) * 1024 for line in status.read_text().splitlines() if line.startswith(key))

    try:
        Path("/proc/self/clear_refs").write_text("5")  # the high-water mark starts again at the current RSS
    except OSError:
        pass
    before = rss("VmHWM:")
    fn()
    return rss("VmHWM:") - before


def test_a_stride_zero_tensor_is_refused_without_materialising_it(no_unpacking, user_dir):
    expanded = torch.zeros(1).expand(625_000_000)  # 4 bytes of storage, 2.5 GB as a plain tensor
    raw = pt_bytes({"config": small_config(), "state_dict": {"decoder.embed.tok.weight": expanded}})
    assert len(raw) < 8_000
    refused = []

    def attempt():
        with pytest.raises(CheckpointError) as info:
            uploads.import_model(raw, "stride0.pt", "stride0", owner=VIEWER)
        refused.append(info.value)

    assert vm_peak_growth(attempt) < 200 * 2**20
    assert refused[0].code == "upload_tensor_view" and "decoder.embed.tok.weight" in str(refused[0])
    assert not user_dir.exists()  # nothing written, nothing listed


@pytest.mark.parametrize("state", [
    {"a": (base := torch.arange(16.0)), "b": base[2:]},  # two tensors over one storage, at different offsets
    {"a": torch.arange(16.0).as_strided((4, 4), (1, 1))},  # overlapping rows
    {"a": torch.arange(16.0)[::2]},  # a strided view (half its storage unused)
    {"a": torch.arange(16.0).view(4, 4).t()},  # transposed: not contiguous
])
def test_overlapping_and_strided_views_are_refused_before_loading(state, no_unpacking):
    with pytest.raises(CheckpointError) as info:
        uploads.import_model(pt_bytes({"config": small_config(), "state_dict": state}), "views.pt", "views",
                             owner=VIEWER)
    assert info.value.code == "upload_tensor_view"


def rezip(raw: bytes, change) -> bytes:
    """A torch.save file with its entries rewritten by change(name, data) -> (data, method)."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(raw)) as src, zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            data, method = change(info.filename, src.read(info))
            dst.writestr(zipfile.ZipInfo(info.filename), data, compress_type=method)
    return out.getvalue()


def test_a_storage_whose_stored_bytes_do_not_match_its_record_is_refused():
    raw = pt_bytes({"config": small_config(), "state_dict": {"w": torch.zeros(64)}})
    short = rezip(raw, lambda n, d: (d[:4] if n.endswith("/data/0") else d, zipfile.ZIP_STORED))
    packed = rezip(raw, lambda n, d: (d, zipfile.ZIP_DEFLATED))
    for bad in (short, packed):
        with pytest.raises(CheckpointError) as info:
            uploads.import_model(bad, "m.pt", "lying", owner=VIEWER)
        assert info.value.code == "upload_pt_storage" and str(info.value).startswith("The stored data of tensor w")


def test_tied_weights_saved_by_torch_are_accepted(user_dir):
    model = build_model(TransformerConfig(arch="decoder_only", d_model=16, n_heads=2, n_layers=1, d_ffn=32,
                                          vocab_size=50, max_len=16, tie_embeddings=True, output_bias=False), "cpu")
    state = model.state_dict()
    assert state["out.weight"].data_ptr() == state["decoder.embed.tok.weight"].data_ptr()  # one storage, two names
    key = uploads.import_model(pt_bytes({"config": json.loads(model.cfg.to_json()), "state_dict": state}), "t.pt",
                               "tied", owner=VIEWER)
    loaded, _ = catalog.load(key, "cpu", viewer=VIEWER)
    assert torch.equal(loaded.out.weight, model.out.weight)


def safetensors_with_config(config_text: str) -> bytes:
    return save_safetensors({"w": torch.zeros(2)}, metadata={"config": config_text})


@pytest.mark.parametrize("depth", [50, 100_000])
def test_deeply_nested_json_is_a_clear_error_never_a_recursion_error(depth):
    nested = "[" * depth + "]" * depth
    for attempt in (lambda: uploads.import_model(safetensors_with_config(nested), "m.safetensors", "deep",
                                                 owner=VIEWER),
                    lambda: upload_json.check_config(nested),
                    lambda: uploads.import_model(safetensors_with_config(json.dumps({"d_model": json.loads(
                        "[" * 40 + "]" * 40)})), "m.safetensors", "deep", owner=VIEWER)):
        with pytest.raises(ExplorerError) as info:
            attempt()
        assert info.value.code == "config_too_deep" and "nested too deeply" in str(info.value)
    header = json.dumps({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, "x": json.loads(
        "[" * 100 + "]" * 100)}).encode()
    with pytest.raises(CheckpointError) as info:  # the safetensors header itself nested too deeply
        uploads.import_model(struct.pack("<Q", len(header)) + header + bytes(4), "m.safetensors", "deep",
                             owner=VIEWER)
    assert info.value.code == "checkpoint_refused"


def test_a_deeply_nested_config_inside_a_pt_is_refused():
    nested = []
    for _ in range(400):  # as deep as pickle itself can write
        nested = [nested]
    with pytest.raises(ConfigError) as info:
        uploads.import_model(pt_bytes({"config": {"vocab_map": nested}, "state_dict": {}}), "m.pt", "deep",
                             owner=VIEWER)
    assert info.value.code == "config_too_deep"


@pytest.mark.parametrize(("changes", "code"), [
    ({"d_model": 16.0}, "config_type"),  # a float where an int belongs: a message, never a TypeError
    ({"d_model": "16"}, "config_type"),
    ({"n_layers": True}, "config_type"),
    ({"n_layers": 200_000}, "config_range"),  # hung the server for minutes while its memory climbed
    ({"vocab_size": 10**40}, "config_range"),
    ({"dropout": float("nan")}, "config_range"),
    ({"seed": 10**30}, "config_range"),
    ({"seed": -1}, "config_range"),
    ({"encoding": "../../../etc/passwd"}, "encoding_unknown"),
    ({"encoding": "x" * 5000}, "config_type"),
    ({"vocab_map": [10**6] * 10, "vocab_size": 10}, "config_vocab_map"),  # ids beyond cl100k_base
    ({"d_model": 4096, "n_layers": 48, "d_ffn": 65_536}, "upload_too_many_params"),
    ({"arch": "decoder_only", "d_model": 2048, "n_heads": 8, "n_layers": 1, "d_ffn": 1, "max_len": 100_000,
      "vocab_size": 10, "vocab_map": []}, "memory_too_big"),  # 21 M parameters, but 0.8 GB of sine/cosine table, twice
    ({"surprise": 1}, "config_unknown_keys"),
])
def test_config_bounds_give_clear_errors(changes, code):
    import time

    start = time.monotonic()
    for make in (lambda c: safetensors_with_config(json.dumps(c)), lambda c: pt_bytes({"config": c,
                                                                                      "state_dict": {}})):
        with pytest.raises(ExplorerError) as info:
            uploads.import_model(make(small_config() | changes), "m." + ("pt" if make(
                {}).startswith(b"PK") else "safetensors"), "bounds", owner=VIEWER)
        assert info.value.code == code and "{" not in str(info.value) and info.value.text("zh")
    assert time.monotonic() - start < 10  # nothing was built


def test_json_depth_counts_brackets_outside_strings_only():
    assert upload_json.json_depth('{"a": "[[[[[[[[[[[[[["}') == 1
    assert upload_json.json_depth('{"a": [1, {"b": [2]}]}') == 4
    assert upload_json.json_depth(r'{"a": "\"[[[[[[[[[["}') == 1


@pytest.mark.parametrize(("raw", "taken", "expected"), [
    ("\u202egnp.exe", (), "gnp.exe"),  # right-to-left override: the name would read backwards
    ("my\u200bmodel\u2066x\u2069", (), "mymodelx"),  # zero-width space, isolates
    ("a\x00b\x1b[31mc\nd\te", (), "ab31mc d e"),  # controls and a terminal colour code
    ("**bold** [link](x) <b>$x$", (), "bold link(x) bx"),  # markup a page would render
    ("reverse", {"reverse"}, "reverse-2"),  # a shipped model's own label
    ("REVERSE", {"reverse"}, "REVERSE-2"),
    ("ｒｅｖｅｒｓｅ", {"reverse"}, "reverse-2"),  # full-width letters are the same name
    ("mine", {"mine", "mine-2"}, "mine-3"),
    ("   ", (), "model"),
    ("\u202e", (), "model"),
    ("我的 模型", (), "我的 模型"),
    ({"x": 1}, (), "model"),  # a damaged card's or record's name that is not text
    (["a"], (), "model"),
    (7, (), "model"),
    ("x" * 100, {"x" * 40}, "x" * 38 + "-2"),
])
def test_clean_name(raw, taken, expected):
    got = catalog.clean_name(raw, taken)
    assert got == expected and len(got) <= catalog.NAME_CHARS


def test_an_upload_never_takes_a_shipped_models_label_or_the_viewers_own(tmp_path, user_dir):
    raw = exported(tmp_path)
    shipped = {e.label for e in catalog.entries() if e.kind == "shipped"}
    assert "reverse" in shipped
    keys = [uploads.import_model(raw, "m.safetensors", name, owner=VIEWER) for name in ("reverse", "\u202emine",
                                                                                        "mine", "MINE")]
    labels = [catalog.entry(k, VIEWER).label for k in keys]
    assert labels == ["reverse-2", "mine", "mine-2", "MINE-3"]
    other = uploads.import_model(raw, "m.safetensors", "mine", owner="another-viewer-token-0123456789")
    assert catalog.entry(other, "another-viewer-token-0123456789").label == "mine"  # others' names are not seen


def test_import_model_needs_the_viewers_token():
    with pytest.raises(TypeError):
        uploads.import_model(b"", "m.pt", "x")  # a missing owner is a programming error, not a learner's
    with pytest.raises(TypeError):
        uploads.import_model(b"", "m.pt", "x", owner="")


def test_the_browser_suites_hostile_files_are_refused_by_the_service_with_their_messages(tmp_path, user_dir):
    for path, message in hostile_model_files(tmp_path):
        with pytest.raises(ExplorerError) as info:
            uploads.import_model(path.read_bytes(), path.name, path.stem, owner=VIEWER)
        assert message in str(info.value), (path.name, str(info.value))
    assert not user_dir.exists() or not any(user_dir.iterdir())


def _safetensors_with_header(header: dict, data: bytes = b"") -> bytes:
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + data


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_refusals_name_the_problem_in_words_never_an_exception_class(lang, user_dir):
    """A 4 TB tensor in a 16-byte file, a .pt whose pickle is cut short, a .pt that is a broken zip: each refused
    with a reason a learner can read in their language, and never "UnpicklingError", "SafetensorError", ..."""
    model = small_model()
    config = {"__metadata__": {"config": model.cfg.to_json()}}
    huge = _safetensors_with_header({**config, "decoder.embed.tok.weight": {
        "dtype": "F32", "shape": [2**40], "data_offsets": [0, 2**42]}}, b"\0" * 16)
    good = pt_bytes({"config": json.loads(model.cfg.to_json()), "state_dict": model.state_dict()})
    cut = bytearray(good)
    start = good.index(b"data.pkl") + 40
    cut[start : start + 64] = b"\xff" * 64  # the pickle's bytes damaged in place: the zip's layout still reads
    files = {"huge.safetensors": huge, "cut.pt": bytes(cut), "zip.pt": b"PK\x03\x04" + b"\0" * 200}
    for name, raw in files.items():
        with pytest.raises(ExplorerError) as info:
            uploads.import_model(raw, name, "x", owner=VIEWER)
        text = info.value.text(lang)
        assert not re.search(r"[A-Z][a-z]+(Error|Exception|File)\b", text), (name, text)
        assert "{" not in text, (name, text)
    with pytest.raises(ExplorerError) as info:
        uploads.import_model(huge, "huge.safetensors", "x", owner=VIEWER)
    assert info.value.code == "upload_tensor_outside"  # not "a view that repeats or shares memory"


def test_every_reason_reads_in_both_languages():
    import pickle
    import zipfile as zf

    from transformer_core.errors import Reason, message, reason_of

    cases = {ConnectionError(): "network", TimeoutError(): "timeout", pickle.UnpicklingError(): "damaged",
             zf.BadZipFile(): "damaged", MemoryError(): "too_large", PermissionError(): "file",
             KeyError("x"): "format", json.JSONDecodeError("x", "y", 0): "damaged", RuntimeError(): "unknown"}
    for exc, reason in cases.items():
        assert reason_of(exc) == reason, exc
        for lang in ("en", "zh"):
            text = message("checkpoint_refused", lang, reason=Reason(reason))
            assert "{" not in text and "reason" not in text
