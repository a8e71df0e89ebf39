"""What a long training run on a GPU machine needs: corpora packed for a machine with no network, a wall-time budget
that sets the steps, the best evaluated weights kept, bfloat16 autocast only where the device computes it natively."""
import threading
from dataclasses import replace

import pytest
import torch

from transformer_core.train import corpora
from transformer_core.train import loop as training
from transformer_core.train.build import main as build_main
from transformer_core.train.cards import run_fields
from transformer_core.train.corpus import TEXT
from transformer_core.train.defaults import (
    EVERYDAY,
    EVERYDAY_GPU,
    EVERYDAY_SENTENCES,
    EVERYDAY_SLOTS,
    EVERYDAY_WORDS,
    EVERYDAY_WORDS_GPU,
    SHIPPED_LMS,
)
from transformer_core.train.loop import TrainConfig, fit_budget, train

TINY = dict(text=TEXT, d_model=16, n_heads=2, n_layers=1, dropout=0.0, eval_interval=0, seed=0, device="cpu",
            batch_size=4, context=8)

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # conftest.py


def corpus(name: str = "brown") -> corpora.Corpus:
    train_text, heldout = "The cat sat on the mat.\n今天天气很好。\n", "A dog ran.\n"
    hashes = corpora.text_hashes(train_text + heldout, train_text, heldout)
    return corpora.Corpus(name, train_text, heldout, {"package": "test", **hashes})


def test_a_packed_corpus_reads_back_equal_and_load_corpus_prefers_it_without_fetching(tmp_path):
    path = corpora.write_packed(corpus(), tmp_path)
    assert path == corpora.packed_path(tmp_path, "brown") and path.stat().st_size < 1000
    assert corpora.read_packed("brown", tmp_path) == corpus()
    assert corpora.load_corpus("brown", tmp_path) == corpus()  # an empty cache otherwise: a fetch would fail here
    assert corpora.read_packed("kjv", tmp_path) is None


def test_a_packed_corpus_whose_text_changed_is_refused(tmp_path):
    c = corpus()
    corpora.write_packed(corpora.Corpus(c.name, c.train + "one more line\n", c.heldout, c.provenance), tmp_path)
    with pytest.raises(corpora.CorpusError, match="train text differs"):
        corpora.read_packed("brown", tmp_path)
    corpora.packed_path(tmp_path, "kjv").write_bytes(b"not xz")
    with pytest.raises(corpora.CorpusError, match="unreadable"):
        corpora.read_packed("kjv", tmp_path)


def test_the_budget_sets_the_steps_from_the_measured_speed():
    tc = TrainConfig(**TINY, max_iters=1000, budget_s=100.0)
    assert fit_budget(tc, 50, 10.0).max_iters == 500  # 0.2 s a step: 450 more fit in the 90 s left
    assert fit_budget(replace(tc, eval_interval=10, eval_iters=3), 50, 10.0).max_iters == 50 + int(90 / 0.24)
    assert fit_budget(tc, 50, 1.0).max_iters == 1000  # never more than max_iters
    assert fit_budget(tc, 50, 120.0).max_iters == 50  # over budget already: stop
    assert fit_budget(tc, 50, 10.0, per_step=0.1).max_iters == 950  # the warm steps' speed, not the mean


class Clock:
    """perf_counter advancing one second per call: the training loop reads it once per step in a budgeted run."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        self.now += 1.0
        return self.now


def test_a_budgeted_run_trains_the_fitted_steps_and_a_rerun_with_them_repeats_it(monkeypatch):
    monkeypatch.setattr(training, "time", Clock())
    tc = TrainConfig(**TINY, max_iters=5000, budget_s=200.0, lr_schedule="cosine", warmup=100, lr=3e-3)
    result = train(tc)  # timed at 100 steps, ~1 s each: about 95 more fit in the ~98 s left
    assert 190 <= result.config.max_iters == result.iterations <= 200 < 5000 and not result.stopped
    assert result.config.budget_s == 200.0 and tc.warmup >= training.CALIBRATION_STEPS
    again = train(replace(tc, budget_s=0.0, max_iters=result.iterations))
    for a, b in zip(result.model.parameters(), again.model.parameters(), strict=True):
        assert torch.equal(a, b)


def test_a_budgeted_run_stops_at_a_tenth_over_its_budget_if_the_speed_changes(monkeypatch):
    monkeypatch.setattr(training, "time", Clock())
    monkeypatch.setattr(training, "fit_budget", lambda tc, *timing: tc)  # as if calibrated far too high
    result = train(TrainConfig(**TINY, max_iters=5000, budget_s=100.0))
    # one second per step, and one more for each of the two timings (steps 20 and 100): step 109 is past 110 s
    assert result.stopped and result.iterations == 109


def fake_evals(monkeypatch, vals: list[float]):
    """Evaluations that report these held-out losses in turn (the training itself is real)."""
    seq = iter(vals)
    monkeypatch.setattr(training, "estimate_loss", lambda *a, **k: {"train": 1.0, "val": next(seq)})


def weights_at(steps: set[int]):
    seen: dict[int, dict] = {}

    def callback(p) -> None:
        if p.iteration in steps:
            seen[p.iteration] = {k: v.clone() for k, v in p.model.state_dict().items()}
    return seen, callback


@pytest.mark.parametrize(("vals", "best"), [
    ([5.0, 3.0, 4.0, 4.5, 4.6], 10),  # evaluations at 0, 10, 20, 29 and after the last step (30): 10 is best
    ([5.0, 4.0, 3.0, 2.5, 2.0], 30),  # still falling: the last weights are kept
])
def test_keep_best_ends_with_the_weights_of_the_lowest_held_out_loss(monkeypatch, vals, best):
    fake_evals(monkeypatch, vals)
    seen, callback = weights_at({best})
    result = train(TrainConfig(**(TINY | {"eval_interval": 10}), max_iters=30, keep_best=True), callback)
    assert result.best_step == best and result.history.eval_steps == [0, 10, 20, 29, 30]
    for k, v in result.model.state_dict().items():
        assert torch.equal(v, seen[best][k]), k


def test_a_run_stopped_by_hand_keeps_its_best_weights_not_its_last(monkeypatch):
    """Stop pressed at step 25: the evaluations at 0, 10 and 20 read 5.0, 3.0 and 4.0, and the last weights (a final
    evaluation, 4.5) are worse than step 10's: the model holds step 10's weights (it kept its last before)."""
    fake_evals(monkeypatch, [5.0, 3.0, 4.0, 4.5])
    stop = threading.Event()
    seen, record = weights_at({10})

    def callback(p):
        record(p)
        if p.iteration == 25:
            stop.set()

    result = train(TrainConfig(**(TINY | {"eval_interval": 10}), max_iters=1000, keep_best=True), callback, stop)
    assert result.stopped and result.iterations == 25 and result.best_step == 10
    assert result.history.eval_steps == [0, 10, 20, 25] and result.history.val_loss[-1] == 4.5
    for k, v in result.model.state_dict().items():
        assert torch.equal(v, seen[10][k]), k


def test_keep_best_needs_evaluations():
    with pytest.raises(training.TrainingError, match="needs evaluations") as info:
        train(TrainConfig(**TINY, max_iters=5, keep_best=True))
    assert info.value.code == "train_keep_best"


def test_amp_changes_nothing_on_a_cpu_without_amx_and_the_card_says_cpu_and_the_kept_step(monkeypatch):
    monkeypatch.setattr(training, "native_bf16", lambda device: False)
    a = train(TrainConfig(**TINY, max_iters=10))
    b = train(TrainConfig(**TINY, max_iters=10, amp=True))
    assert a.history.step_loss == b.history.step_loss
    assert run_fields(a)["device"] == "cpu" and "best_step" not in run_fields(a)
    fake_evals(monkeypatch, [3.0, 2.0, 2.5, 2.6, 2.7])  # steps 0, 4, 8, 9 and after the last (10)
    kept = train(TrainConfig(**(TINY | {"eval_interval": 4}), max_iters=10, keep_best=True))
    assert run_fields(kept)["best_step"] == 4 and run_fields(kept)["steps"] == 10


def test_amp_on_a_cpu_with_amx_runs_the_forward_in_bfloat16_and_keeps_the_weights_float32(monkeypatch):
    monkeypatch.setattr(training, "native_bf16", lambda device: True)
    seen = []
    real_loss = training.batch_loss

    def loss_seeing_logits(model, b):
        hook = model.out.register_forward_hook(lambda mod, args, out: seen.append(out.dtype))
        try:
            return real_loss(model, b)
        finally:
            hook.remove()

    monkeypatch.setattr(training, "batch_loss", loss_seeing_logits)
    result = train(TrainConfig(**TINY, max_iters=20, amp=True))
    assert set(seen) == {torch.bfloat16}
    assert all(p.dtype == torch.float32 for p in result.model.parameters())
    assert result.history.step_loss[-1] < result.history.step_loss[0]


def test_bfloat16_pays_only_on_cuda_or_a_cpu_with_amx(monkeypatch):
    from transformer_core.model.device import native_bf16

    assert native_bf16(torch.device("cuda"))
    for has_amx in (True, False):
        monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda has=has_amx: has, raising=False)
        assert native_bf16(torch.device("cpu")) is has_amx
    monkeypatch.delattr(torch.cpu, "_is_amx_tile_supported")  # a build without the check: float32
    assert not native_bf16(torch.device("cpu"))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_amp_trains_on_cuda_and_the_card_names_the_gpu():
    result = train(TrainConfig(**(TINY | {"device": "cuda"}), max_iters=20, amp=True))
    assert result.history.step_loss[-1] < result.history.step_loss[0]
    assert run_fields(result)["device"] == f"cuda ({torch.cuda.get_device_name()})"


def test_the_gpu_recipe_is_the_bilingual_recipe_wider_and_longer():
    """Same vocabulary, corpora, depth, heads and context as the CPU recipe; only width and long-run settings."""
    EVERYDAY_GPU.validate()
    changed = {k for k in vars(EVERYDAY) if getattr(EVERYDAY, k) != getattr(EVERYDAY_GPU, k)}
    assert changed == {"d_model", "d_ffn", "embed_std", "corpus_weights", "batch_size", "max_iters", "budget_s", "amp",
                       "dropout", "warmup", "eval_interval", "eval_iters", "keep_best", "device"}
    assert EVERYDAY_GPU.d_model % EVERYDAY_GPU.n_heads == 0
    assert EVERYDAY_GPU.warmup >= training.CALIBRATION_STEPS  # a rerun with the card's steps repeats the run


def test_the_default_s_gpu_recipe_is_its_cpu_recipe_on_a_gpu():
    """The default (whole words, warm-started from the 2,048-token model): the GPU recipe changes only the device,
    batch and budget, and takes the copying rows (EVERYDAY_SLOTS) and the corpora (EVERYDAY_SENTENCES) that the
    shipped CPU continuations added."""
    assert SHIPPED_LMS["everyday-gpt"]["config"] is EVERYDAY_SENTENCES
    assert SHIPPED_LMS["everyday-gpt"]["gpu_config"] is EVERYDAY_WORDS_GPU
    EVERYDAY_WORDS_GPU.validate()
    changed = {k for k in vars(EVERYDAY_WORDS) if getattr(EVERYDAY_WORDS, k) != getattr(EVERYDAY_WORDS_GPU, k)}
    assert changed == {"device", "amp", "batch_size", "budget_s", "max_iters", "eval_interval", "eval_iters",
                       "repeat_fraction", "slot_share", "corpus", "corpus_weights"}
    assert (EVERYDAY_WORDS_GPU.corpus, EVERYDAY_WORDS_GPU.corpus_weights) == (
        EVERYDAY_SENTENCES.corpus, EVERYDAY_SENTENCES.corpus_weights)
    assert "wordnet" in EVERYDAY_SENTENCES.corpus and sum(EVERYDAY_SENTENCES.corpus_weights) == pytest.approx(1)
    # the vocabulary is still the one the five corpora chose: the shipped tokens did not change with the mix
    assert SHIPPED_LMS["everyday-gpt"]["subset"]["chosen_by"] is EVERYDAY_SLOTS
    assert EVERYDAY_WORDS.init_from and EVERYDAY_WORDS.encoding == "cl100k_words"
    EVERYDAY_SLOTS.validate()  # the shipped weights: the model EVERYDAY_WORDS built, trained on from git
    changed = {k for k in vars(EVERYDAY_WORDS) if getattr(EVERYDAY_WORDS, k) != getattr(EVERYDAY_SLOTS, k)}
    assert changed == {"init_from", "budget_s", "lr", "warmup", "keep_best", "repeat_fraction", "slot_share"}
    assert (EVERYDAY_SLOTS.slot_share, EVERYDAY_WORDS_GPU.slot_share) == (0.5, 0.5)
    assert EVERYDAY_SLOTS.init_from.startswith("git:") and EVERYDAY_SLOTS.init_from.endswith(
        ":assets/models/everyday-gpt")
    EVERYDAY_SENTENCES.validate()  # the shipped weights now: the model EVERYDAY_SLOTS built, trained on from git
    changed = {k for k in vars(EVERYDAY_SLOTS) if getattr(EVERYDAY_SLOTS, k) != getattr(EVERYDAY_SENTENCES, k)}
    assert changed == {"init_from", "corpus", "corpus_weights", "budget_s", "lr", "warmup", "amp", "repeat_fraction"}
    assert EVERYDAY_SENTENCES.init_from == "git:1909f1f:assets/models/everyday-gpt"


def test_the_build_asks_which_model_for_the_gpu_recipe(capsys):
    with pytest.raises(SystemExit):
        build_main(["--recipe", "gpu"])
    with pytest.raises(SystemExit):
        build_main(["--recipe", "gpu", "--only", "copy"])
    assert "name one of ['everyday-gpt'] with --only" in capsys.readouterr().err


def test_a_trial_of_the_gpu_recipe_takes_more_steps_and_its_card_command_repeats_it(monkeypatch, tmp_path):
    from transformer_core.train import build

    seen = {}

    def fake_build(name, out, cache, gpu=False, **changes):
        seen.update(name=name, gpu=gpu, changes=changes)
        return {"command": build.gpu_command(name, changes)}

    monkeypatch.setattr(build, "build_lm", fake_build)
    build_main(["--recipe", "gpu", "--only", "everyday-gpt", "--out", str(tmp_path), "--steps", "20000",
                "--budget", "420"])
    assert seen == {"name": "everyday-gpt", "gpu": True, "changes": {"budget_s": 420.0, "max_iters": 20000}}
    assert build.gpu_command("everyday-gpt", seen["changes"]) == (
        "python -m transformer_core.train.build --only everyday-gpt --recipe gpu --cache .corpora --budget 420 "
        "--steps 20000")
    assert build.gpu_command("everyday-gpt", {}).endswith("--recipe gpu --cache .corpora")  # the shipped run
    more = replace(EVERYDAY_GPU, max_iters=20_000, budget_s=420.0)  # what the options set; the budget still fits
    assert fit_budget(more, 100, 2.0).max_iters == 20_000  # 0.02 s a step: all 20,000 fit in 420 s
    assert fit_budget(replace(more, budget_s=100.0), 100, 2.0).max_iters < 20_000


def test_the_pack_command_writes_every_corpus_the_recipe_reads_its_word_list_and_the_model_it_starts_from(
        tmp_path, monkeypatch, capsys):
    import subprocess

    from transformer_core.train import corpus_pack, transfer

    monkeypatch.setattr(corpus_pack, "load_corpus", lambda name, cache: corpus(name))  # no registry here
    monkeypatch.setattr(corpus_pack, "word_list_file", lambda cache: (b"the word list", "sha"))
    shown = []  # git show COMMIT:PATH/NAME, as the repository's history answers it
    monkeypatch.setattr(transfer.subprocess, "run", lambda cmd, **kw: shown.append(cmd[-1]) or
                        subprocess.CompletedProcess(cmd, 0, cmd[-1].encode(), b""))
    corpus_pack.main(["--out", str(tmp_path), "--only", "everyday-gpt"])
    base = EVERYDAY_WORDS.init_from.split(":")  # git:cfcda73:assets/models/everyday-gpt
    start = tmp_path / "bases" / f"everyday-gpt@{base[1]}"
    read = EVERYDAY_SENTENCES.corpus  # the shipped recipe's six corpora (the GPU recipe reads the same)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [f"{c}.corpus.xz" for c in read] + [corpora.WORDS_PACKED, "bases"])
    assert all(corpora.load_corpus(c, tmp_path) == corpus(c) for c in read)
    assert (tmp_path / corpora.WORDS_PACKED).read_bytes() == b"the word list"
    assert sorted(p.name for p in start.iterdir()) == ["card.json", "config.json", "model.safetensors"]
    assert (start / "model.safetensors").read_text() == f"{base[1]}:{base[2]}/model.safetensors"
    assert EVERYDAY_WORDS_GPU.init_from == EVERYDAY_WORDS.init_from  # the GPU recipe's start, and the CPU one's
    assert len(shown) == 6 and sorted(p.name for p in (tmp_path / "bases").iterdir()) == sorted(
        f"everyday-gpt@{r.init_from.split(':')[1]}" for r in (EVERYDAY_WORDS_GPU, EVERYDAY_SENTENCES))
    assert capsys.readouterr().out.count(" MB") == len(read) + 7  # the word list, two models' 3 files

    # the GPU machine: the working tree and the packed folder, no git history and no network
    def no_network_nor_history(*args, **kwargs):
        raise AssertionError("fetched")

    monkeypatch.setattr(transfer.subprocess, "run", no_network_nor_history)
    monkeypatch.setattr(corpora, "_run", no_network_nor_history)
    assert transfer.base_folder(EVERYDAY_WORDS.init_from, tmp_path) == start
    pin = corpora.PINS["wordfreq"]["archive_sha256"]
    assert corpora.word_list_file(tmp_path, strict=False) == (b"the word list", pin)
    with pytest.raises(corpora.CorpusError, match="differs from the pinned"):  # a packed list is checked like the wheel
        corpora.word_list_file(tmp_path)


def test_the_device_script_runs_the_documented_build_and_sends_back_its_archive_in_parts_the_call_returns():
    from pathlib import Path

    script = (Path(__file__).resolve().parents[2] / "scripts" / "train_on_device.sh").read_text(encoding="utf-8")
    assert "-m transformer_core.train.build --only everyday-gpt --recipe gpu --cache .corpora" in script
    # at most 8 files of at most 16 MiB come back: the log and the archive in 15 MiB parts (the weights are 24 MB)
    assert 'split -b 15M -d - "$out/everyday-gpt.tgz.part-"' in script and 'tee "$out/build.log"' in script


def test_every_trial_option_reaches_the_recipe_and_the_card_s_command(monkeypatch, tmp_path):
    from transformer_core.train import build

    seen = {}
    monkeypatch.setattr(build, "build_lm", lambda name, out, cache, gpu=False, **changes: seen.update(changes) or
                        {"command": build.gpu_command(name, changes)})
    build_main(["--recipe", "gpu", "--only", "everyday-gpt", "--out", str(tmp_path), "--batch", "128", "--dropout",
                "0.15", "--d-model", "384", "--d-ffn", "1536", "--embed-std", "0.051"])
    assert seen == {"batch_size": 128, "dropout": 0.15, "d_model": 384, "d_ffn": 1536, "embed_std": 0.051}
    assert build.gpu_command("everyday-gpt", seen).endswith(
        "--batch 128 --dropout 0.15 --d-model 384 --d-ffn 1536 --embed-std 0.051")
    replace(EVERYDAY_GPU, **seen).validate()  # each option names a real TrainConfig field


def test_a_device_call_can_leave_the_shipped_models_out_and_get_them_back(tmp_path):
    """scripts/device_tree.sh: what travels to a GPU machine (64 MiB at most) without the models a call does not need,
    and git's index as it was after the call."""
    import shutil
    import subprocess
    from pathlib import Path

    def sh(*args: str, ok: bool = True) -> str:
        done = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, check=False)
        assert (done.returncode == 0) == ok, done.stdout + done.stderr
        return done.stdout + done.stderr

    (tmp_path / "scripts").mkdir()
    shutil.copy(Path(__file__).resolve().parents[2] / "scripts" / "device_tree.sh", tmp_path / "scripts")
    for name, size in (("everyday-gpt", 40), ("modern-gpt", 20), ("reverse", 8)):
        (tmp_path / "assets" / "models" / name).mkdir(parents=True)
        (tmp_path / "assets" / "models" / name / "model.safetensors").write_bytes(b"\0" * (size << 20))
    (tmp_path / ".gitignore").write_text("/.corpora/\n")
    (tmp_path / ".corpora").mkdir()
    (tmp_path / ".corpora" / "brown.corpus.xz").write_bytes(b"\0" * (9 << 20))
    sh("git", "init", "-q")
    sh("git", "add", "-A")
    sh("git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "models")
    exclude = (tmp_path / ".git" / "info" / "exclude").read_text()

    assert "68.0 MiB would travel (the limit is 64 MiB): too large" in sh("bash", "scripts/device_tree.sh", "size",
                                                                           ok=False)
    sh("bash", "scripts/device_tree.sh", "slim", "everyday-gpt")
    assert "49.0 MiB would travel (the limit is 64 MiB): fits" in sh("bash", "scripts/device_tree.sh", "size",
                                                                      ".corpora")
    assert sh("bash", "scripts/device_tree.sh", "list").split() == [
        ".gitignore", "assets/models/everyday-gpt/model.safetensors", "scripts/device_tree.sh"]
    assert "restore" in sh("bash", "scripts/device_tree.sh", "slim", ok=False)  # twice: refused
    assert (tmp_path / "assets" / "models" / "reverse" / "model.safetensors").stat().st_size == 8 << 20  # still here

    sh("bash", "scripts/device_tree.sh", "restore")
    assert sh("git", "status", "--porcelain") == ""
    assert (tmp_path / ".git" / "info" / "exclude").read_text() == exclude
    assert len(sh("git", "ls-files").split()) == 5
    (tmp_path / "assets" / "models" / "mine").mkdir()  # a model staged by hand stays staged: nothing to restore
    (tmp_path / "assets" / "models" / "mine" / "card.json").write_text("{}")
    sh("git", "add", "assets/models/mine")
    assert "nothing to restore" in sh("bash", "scripts/device_tree.sh", "restore")
    assert sh("git", "status", "--porcelain") == "A  assets/models/mine/card.json\n"
