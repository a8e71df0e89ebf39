"""The shipped checkpoints load, keep their accuracy on fresh examples, and bad checkpoints are refused."""
import json
import shutil
from pathlib import Path

import pytest
import torch

from transformer_core.analysis.alignment import alignment_mass
from transformer_core.analysis.next_token import Sampling, generate
from transformer_core.model.trace import run_with_trace
from transformer_core.text.inputs import prepare, token_labels
from transformer_core.text.tokenizer import load_encoding
from transformer_core.train.checkpoint import CheckpointError, load_checkpoint
from transformer_core.train.tasks import TASKS

ASSETS = Path(__file__).resolve().parents[2] / "assets" / "models"
NAMES = ("copy", "reverse", "sort", "repeat", "count")
FRESH_SEED = 31337  # not the seed the build measured with
MARGIN = 0.03


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # conftest.py


@pytest.fixture(scope="module")
def shipped():
    return {name: load_checkpoint(ASSETS / name) for name in NAMES}


def test_every_task_model_is_shipped_as_a_folder_with_weights_config_and_card():
    for name in NAMES:
        assert sorted(p.name for p in (ASSETS / name).iterdir()) == ["card.json", "config.json", "model.safetensors"]
    # every shipped file together (each model's weights ≤ 25 MB): the default (24 MB: its 12,288-token embedding),
    # modern-gpt (10 MB), the 40 training snapshots of induction-steps (8.5 MB), the rest small
    assert sum(p.stat().st_size for p in ASSETS.rglob("*") if p.is_file()) < 68 * 2**20
    assert all(p.stat().st_size <= 25 * 2**20 for p in ASSETS.rglob("*.safetensors"))


@pytest.mark.parametrize("name", NAMES)
def test_card_describes_the_model(shipped, name):
    _, card = shipped[name]
    assert card["task"] == name and card["description"]["en"] and card["description"]["zh"]
    assert card["command"] == f"python -m transformer_core.train.build --only {name}"
    assert card["steps"] > 0 and 0.0 <= card["accuracy"] <= 1.0 and "example_src" in card


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


def test_repeat_and_count_checkpoints_continue_their_examples(shipped):
    enc = load_encoding("cl100k_base")
    for name, prompt, expected in (("repeat", "d a c b g f d", " a c b g f"), ("count", "4 7 10 13", " 16 19")):
        model, _ = shipped[name]
        ids = prepare(model, prompt).src_ids[0].tolist()
        out = generate(model, ids, len(enc.encode(expected)), Sampling(greedy=True))
        assert enc.decode([model.cfg.vocab_map[i] for i in out]) == expected


def test_reverse_cross_attention_forms_the_anti_diagonal(shipped):
    model, meta = shipped["reverse"]
    last = alignment_mass(model, TASKS["reverse"], n=40, seed=FRESH_SEED)[-1]
    assert last >= meta["cross_attention_alignment"][-1] - 0.05 and last > 0.4


def test_config_that_does_not_match_the_weights_is_a_clear_error(tmp_path):
    shutil.copytree(ASSETS / "copy", tmp_path / "upload")
    doc = json.loads((tmp_path / "upload" / "config.json").read_text(encoding="utf-8"))
    doc["d_model"] = 32
    (tmp_path / "upload" / "config.json").write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(CheckpointError, match=r"do not fit the model settings: .*\(21, 128\) ≠ \(21, 32\)"):
        load_checkpoint(tmp_path / "upload")


def test_weights_of_another_task_are_refused(tmp_path):
    shutil.copytree(ASSETS / "repeat", tmp_path / "upload")
    shutil.copy(ASSETS / "copy" / "model.safetensors", tmp_path / "upload" / "model.safetensors")
    with pytest.raises(CheckpointError, match="do not fit"):
        load_checkpoint(tmp_path / "upload")


def test_loaded_checkpoints_are_in_eval_mode_on_the_cpu(shipped):
    for model, _ in shipped.values():
        assert not model.training and next(model.parameters()).device == torch.device("cpu")
