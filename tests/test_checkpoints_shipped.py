"""The shipped checkpoints load, keep their accuracy on fresh examples, and bad checkpoints are refused."""
import json
import pickle
import shutil
from pathlib import Path

import pytest
import torch

from transformer_core import registry
from transformer_core.alignment import alignment_mass
from transformer_core.checkpoint import CheckpointError, load_checkpoint
from transformer_core.corpus import TEXT
from transformer_core.generation import Sampling, generate
from transformer_core.pipeline import prepare, token_labels
from transformer_core.tasks import TASKS
from transformer_core.tokenizer import load_encoding
from transformer_core.trace import run_with_trace

ASSETS = Path(__file__).resolve().parents[1] / "assets" / "checkpoints"
NAMES = ("copy", "reverse", "sort", "repeat", "count", "corpus-gpt")
FRESH_SEED = 31337  # not the seed make_assets measured with
MARGIN = 0.03


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # conftest.py


@pytest.fixture(scope="module")
def shipped():
    return {name: load_checkpoint(ASSETS / name) for name in NAMES}


def test_every_checkpoint_is_shipped_and_all_together_stay_under_20_mb():
    files = sorted(p.name for p in ASSETS.iterdir())
    assert files == sorted(f"{n}.{ext}" for n in NAMES for ext in ("json", "pt"))
    assert sum(p.stat().st_size for p in ASSETS.iterdir()) < 20 * 2**20


@pytest.mark.parametrize("name", NAMES)
def test_meta_describes_the_checkpoint(shipped, name):
    _, meta = shipped[name]
    assert meta["task"] == name and meta["description"]["en"] and meta["description"]["zh"]
    assert meta["command"] == "python -m transformer_core.make_assets" and meta["seed"] == 0
    assert meta["iterations"] > 0 and 0.0 <= meta["accuracy"] <= 1.0 and "example_src" in meta


@pytest.mark.parametrize("name", ("copy", "reverse", "sort", "repeat", "count"))
def test_task_checkpoint_keeps_its_accuracy_on_fresh_examples(shipped, name):
    model, meta = shipped[name]
    acc = TASKS[name].accuracy(model, n=256, seed=FRESH_SEED)
    floor = 0.95 if name in ("copy", "reverse") else meta["accuracy"] - MARGIN
    assert acc >= floor, f"{name}: {acc:.3f} < {floor:.3f}"


@pytest.mark.parametrize("name", ("copy", "reverse", "sort"))
def test_encoder_decoder_checkpoint_solves_its_example(shipped, name):
    model, meta = shipped[name]
    task = TASKS[name]
    answer = task.fn(meta["example_src"].split())
    assert meta["example_tgt"].split() == ["=", *answer[:-1]]  # the teacher-forced decoder input
    logits = run_with_trace(model, *[getattr(prepare(model, meta["example_src"], meta["example_tgt"]), k)
                                     for k in ("src_ids", "tgt_ids")])[0]
    predicted = token_labels(model, logits[0].argmax(-1).tolist())
    assert [p.strip() for p in predicted] == answer  # every position predicts its answer token
    assert task.solve(model, meta["example_src"]).split() == answer


def test_the_app_opens_on_the_reverse_checkpoint():
    assert registry.default_key().endswith("reverse")


def test_repeat_and_count_checkpoints_continue_their_examples(shipped):
    enc = load_encoding("cl100k_base")
    for name, prompt, expected in (("repeat", "d a c b g f d", " a c b g f"), ("count", "4 7 10 13", " 16 19")):
        model, _ = shipped[name]
        ids = prepare(model, prompt).src_ids[0].tolist()
        out = generate(model, ids, len(enc.encode(expected)), Sampling(greedy=True))
        assert enc.decode([model.cfg.vocab_map[i] for i in out[len(ids):]]) == expected


def test_reverse_cross_attention_forms_the_anti_diagonal(shipped):
    model, meta = shipped["reverse"]
    last = alignment_mass(model, TASKS["reverse"], n=40, seed=FRESH_SEED)[-1]
    assert last >= meta["cross_attention_alignment"][-1] - 0.05 and last > 0.4


def test_corpus_gpt_vocabulary_maps_back_to_the_corpus_tokens(shipped):
    model, meta = shipped["corpus-gpt"]
    enc = load_encoding("cl100k_base")
    assert model.cfg.vocab_map == tuple(sorted(set(enc.encode(TEXT))))
    ids = prepare(model, meta["example_src"]).src_ids[0].tolist()
    out = generate(model, ids, 8, Sampling(greedy=True))
    assert len(out) == len(ids) + 8 and meta["train_accuracy"] > 0.5


def test_checkpoint_with_pickled_code_is_refused_and_never_runs(tmp_path):
    target = tmp_path / "pwned.txt"

    class WritesAFile:
        def __reduce__(self):
            return (open, (str(target), "w"))

    shutil.copy(ASSETS / "copy.json", tmp_path / "upload.json")
    with (tmp_path / "upload.pt").open("wb") as f:
        pickle.dump({"decoder.embed.tok.weight": WritesAFile()}, f, protocol=2)
    with pytest.raises(CheckpointError, match="refused without running it"):
        load_checkpoint(tmp_path / "upload")
    assert not target.exists()


def test_config_that_does_not_match_the_weights_is_a_clear_error(tmp_path):
    doc = json.loads((ASSETS / "copy.json").read_text(encoding="utf-8"))
    doc["config"]["d_model"] = 32
    (tmp_path / "upload.json").write_text(json.dumps(doc), encoding="utf-8")
    shutil.copy(ASSETS / "copy.pt", tmp_path / "upload.pt")
    message = r"the weights do not match the config: .*file has \(21, 128\), config needs \(21, 32\)"
    with pytest.raises(CheckpointError, match=message):
        load_checkpoint(tmp_path / "upload")


def test_weights_of_another_task_are_refused(tmp_path):
    shutil.copy(ASSETS / "repeat.json", tmp_path / "upload.json")
    shutil.copy(ASSETS / "copy.pt", tmp_path / "upload.pt")
    with pytest.raises(CheckpointError, match="do not match the config"):
        load_checkpoint(tmp_path / "upload")


def test_loaded_checkpoints_are_in_eval_mode_on_the_cpu(shipped):
    for model, _ in shipped.values():
        assert not model.training and next(model.parameters()).device == torch.device("cpu")
