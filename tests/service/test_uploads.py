"""Files learners bring: training texts, and models as one file (.safetensors with its config, or a .pt)."""
import json

import pytest
import torch
from safetensors.torch import save as save_safetensors

from harness.model_files import VIEWER, exported, pt_bytes, small_model
from service import catalog, uploads
from transformer_core.errors import CheckpointError, ConfigError, TrainingError
from transformer_core.train.checkpoint import load_checkpoint


def test_text_upload_limits():
    assert uploads.read_text_upload("héllo 你好".encode()) == "héllo 你好"
    assert uploads.read_text_upload(b"\xef\xbb\xbfbom") == "bom"
    with pytest.raises(TrainingError, match="not UTF-8 text"):
        uploads.read_text_upload(b"caf\xe9")
    with pytest.raises(TrainingError, match="larger than 1 MB"):
        uploads.read_text_upload(b"a" * (uploads.MAX_TEXT_UPLOAD_BYTES + 1))


def test_a_good_safetensors_upload_is_saved_clean_and_listed(tmp_path, user_dir):
    key = uploads.import_model(exported(tmp_path), "m.safetensors", "shared model",
                               {"example_src": "d a", "default": True, "x": [1]}, owner=VIEWER)
    assert key.startswith("user:") and (user_dir / key.split(":")[1]).is_dir()
    _, card = load_checkpoint(user_dir / key.split(":")[1])
    owner = catalog.owner_id(VIEWER)
    assert card == {"example_src": "d a", "name": "shared model", "uploaded": True, "owner": owner}  # unknown dropped
    assert VIEWER not in json.dumps(card)  # the card holds a hash of the token, never the token
    assert [e.label for e in catalog.entries(VIEWER) if e.kind == "user"] == ["shared model"]
    assert [e for e in catalog.entries() if e.kind == "user"] == []  # private: nobody else lists it


def test_a_pt_with_config_and_state_dict_is_accepted(tmp_path, user_dir):
    model = small_model()
    doc = {"config": json.loads(model.cfg.to_json()), "state_dict": model.state_dict()}
    key = uploads.import_model(pt_bytes(doc), "m.pt", "from torch", owner=VIEWER)
    loaded, _ = catalog.load(key, "cpu", viewer=VIEWER)
    assert torch.equal(loaded.decoder.embed.tok.weight, model.decoder.embed.tok.weight)


class Evil:
    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))  # unpickling this would create the file


def test_uploaded_pickle_with_code_is_refused_without_running_it(tmp_path, user_dir):
    side = tmp_path / "side-effect"
    with pytest.raises(CheckpointError, match="Nothing in it was run"):
        uploads.import_model(pt_bytes({"config": {}, "state_dict": {"w": Evil(side)}}), "evil.pt", "evil",
                             owner=VIEWER)
    assert not side.exists() and not user_dir.exists()


def test_uploaded_config_must_match_the_weights(tmp_path, user_dir):
    model = small_model()
    wider = json.loads(small_model(d_model=32).cfg.to_json())
    with pytest.raises(CheckpointError, match="do not fit"):
        uploads.import_model(pt_bytes({"config": wider, "state_dict": model.state_dict()}), "m.pt", "mismatch",
                             owner=VIEWER)
    huge = wider | {"d_model": 4096, "n_layers": 48, "d_ffn": 65536}  # counted on the meta device: no 50 GB
    with pytest.raises(CheckpointError, match="more parameters than this server allows"):
        uploads.import_model(pt_bytes({"config": huge, "state_dict": model.state_dict()}), "m.pt", "huge", owner=VIEWER)
    with pytest.raises(ConfigError):
        uploads.import_model(pt_bytes({"config": wider | {"d_model": 1.5}, "state_dict": {}}), "m.pt", "float",
                             owner=VIEWER)
    with pytest.raises(CheckpointError):
        uploads.import_model(b"{not json", "m.safetensors", "broken", owner=VIEWER)
    with pytest.raises(CheckpointError, match="Upload a .safetensors"):
        uploads.import_model(b"hello", "m.exe", "odd", owner=VIEWER)
    assert not user_dir.exists()


def test_safetensors_without_a_config_is_refused(tmp_path, user_dir):
    raw = save_safetensors({"w": torch.zeros(2)})
    with pytest.raises(CheckpointError, match="no config inside"):
        uploads.import_model(raw, "m.safetensors", "bare", owner=VIEWER)
