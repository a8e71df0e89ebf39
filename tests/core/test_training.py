"""The training loop: validation messages, loss goes down, stop flag, compacted vocabulary, the position experiment."""
import threading

import pytest
import torch

from transformer_core.errors import TrainingError
from transformer_core.text.inputs import prepare
from transformer_core.text.tokenizer import encode_by_line, load_encoding
from transformer_core.train import loop as training
from transformer_core.train.corpus import CHINESE, TEXT
from transformer_core.train.data import TextData, min_text_tokens
from transformer_core.train.experiment import positional_experiment
from transformer_core.train.loop import MAX_ITERS, TrainConfig, lr_at, train, train_text

TINY = dict(d_model=16, n_heads=2, n_layers=1, dropout=0.0, eval_interval=0, seed=0, device="cpu")


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # conftest.py


@pytest.mark.parametrize(("changes", "code", "words"), [
    (dict(lr=0.0), "train_range", "lr” must be between"),
    (dict(lr=-1e-3), "train_range", "lr” must be between"),
    (dict(lr=float("nan")), "train_range", "lr” must be between"),
    (dict(batch_size=0), "train_range", "batch_size” must be between 1 and 512"),
    (dict(d_model=66, n_heads=4), "config_heads", r"d_model \(66\) must be divisible by the number of heads \(4\)"),
    (dict(max_iters=MAX_ITERS + 1), "train_range", "max_iters” must be between 1 and"),
    (dict(n_layers=0), "train_range", "n_layers” must be between 1 and 24"),
    (dict(dropout=1.0), "train_range", "dropout” must be between 0.0 and 0.95"),
    (dict(context=1), "train_range", "context” must be between 2"),
    (dict(lr_schedule="linear"), "config_choice", "lr_schedule must be one of"),
    (dict(task="translate"), "unknown_task", "Unknown task"),
    (dict(text="   "), "train_text_empty", "paste some text to train on"),
])
def test_invalid_settings_raise_a_clear_training_error(changes, code, words):
    tc = TrainConfig(**({"text": TEXT} | changes))
    with pytest.raises(TrainingError, match=words) as info:
        train(tc)
    assert info.value.code == code


def test_text_too_short_for_the_context_says_how_many_tokens_it_needs():
    # the first validation block (every fifth block of at least context + 1 = 17 tokens) must be whole: 5 × 17
    with pytest.raises(TrainingError, match=r"too short: it has 5 tokens.*context length 16.*at least 85"):
        train_text("one two three four five")


def test_a_short_run_reduces_the_loss():
    result = train_text(TEXT, batch_size=16, context=8, max_iters=80, lr=3e-3, **TINY)
    first, last = result.history.step_loss[:5], result.history.step_loss[-5:]
    assert sum(last) / 5 < sum(first) / 5 - 0.5
    assert result.iterations == 80 and not result.stopped and result.tokens == 80 * 16 * 8


def test_the_stop_flag_stops_training_at_the_next_step():
    stop = threading.Event()

    def callback(p):
        if p.iteration == 5:
            stop.set()

    result = train(TrainConfig(text=TEXT, max_iters=1000, **TINY), callback, stop)
    assert result.stopped and result.iterations == 5 and len(result.history.step_loss) == 5


def test_a_stop_flag_set_before_the_start_trains_nothing():
    stop = threading.Event()
    stop.set()
    result = train(TrainConfig(text=TEXT, max_iters=50, **TINY), None, stop)
    assert result.stopped and result.iterations == 0


def test_callback_gets_progress_and_the_course_eval_schedule():
    seen = []
    tc = TrainConfig(text=TEXT, max_iters=25, eval_iters=2, **(TINY | {"eval_interval": 10}))
    result = train(tc, seen.append)
    assert [p.iteration for p in seen] == list(range(1, 26)) and seen[-1].fraction == 1.0
    assert result.history.eval_steps == [0, 10, 20, 24]  # every eval_interval and the last step, as the course
    assert len(result.history.val_loss) == 4 and all(v > 0 for v in result.history.val_loss)


def test_user_text_compacts_the_vocabulary_and_maps_back_to_the_real_tokens():
    text = TEXT[:600]
    result = train_text(text, max_iters=2, **TINY)
    enc = load_encoding("cl100k_base")
    ids = encode_by_line(enc, text)  # one line at a time, as the app then reads text for this model
    data = TextData(text, 16)  # the vocabulary is the training split's (every fifth block is validation)
    train_ids = [i for a, b in data.runs["train"] for i in ids[a:b]]
    cfg = result.model.cfg
    assert cfg.vocab_size == len(set(train_ids)) + 1 < 1000  # and the unknown token, model id 0
    assert cfg.vocab_map[0] == -1 and set(cfg.vocab_map[1:]) == set(train_ids)
    prep = prepare(result.model, "A Transformer reads")  # the app's pipeline maps real ids to model ids
    assert [cfg.vocab_map[i] for i in prep.src_ids[0].tolist()] == enc.encode("A Transformer reads")
    prep = prepare(result.model, "zebra quantum")  # tokens never seen in training: read as ⟨unk⟩, not refused
    assert prep.src_unknown and all(prep.src_ids[0, p] == 0 for p in prep.src_unknown)


def test_course_defaults_build_the_course_gpt():
    result = train_text(TEXT, max_iters=1, eval_interval=0, device="cpu")
    cfg = result.model.cfg
    assert (cfg.arch, cfg.d_model, cfg.n_layers, cfg.n_heads, cfg.max_len, cfg.d_ffn) == (
        "decoder_only", 64, 8, 4, 16, 256)
    assert result.config.batch_size == 4 and result.config.lr == 1e-3 and not result.model.training


def test_special_token_text_trains_as_plain_text():
    result = train_text("<|endoftext|> is just text here. " * 20, max_iters=2, **TINY)
    assert result.iterations == 2


def test_training_is_seeded_and_leaves_the_global_rng_alone():
    before = torch.random.get_rng_state()
    a = train_text(TEXT, max_iters=10, **(TINY | {"dropout": 0.1}))
    b = train_text(TEXT, max_iters=10, **(TINY | {"dropout": 0.1}))
    assert a.history.step_loss == b.history.step_loss and a.model is not b.model
    assert torch.equal(torch.random.get_rng_state(), before)


def test_cosine_schedule_ends_at_a_tenth_of_the_rate():
    tc = TrainConfig(text=TEXT, lr=1e-3, max_iters=100, lr_schedule="cosine")
    assert lr_at(tc, 0) == pytest.approx(1e-3) and lr_at(tc, 100) == pytest.approx(1e-4)
    assert lr_at(TrainConfig(text=TEXT), 4999) == 1e-3


def test_task_training_reduces_the_loss():
    result = train(TrainConfig(task="count", batch_size=16, max_iters=40, lr=3e-3, **TINY))
    assert sum(result.history.step_loss[-5:]) < sum(result.history.step_loss[:5])
    assert result.model.cfg.vocab_size == 101


def test_positional_experiment_returns_a_curve_with_and_without_positions():
    exp = positional_experiment("reverse", max_iters=12, eval_interval=6, eval_iters=1, batch_size=8,
                                d_model=16, n_heads=2, n_layers=1)
    assert set(exp.histories) == set(exp.accuracy) == {"sinusoidal", "none"}
    for hist in exp.histories.values():
        assert hist.eval_steps == [0, 6, 11] and len(hist.val_loss) == 3 and len(hist.step_loss) == 12


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_training_runs_on_cuda():
    result = train_text(TEXT, max_iters=5, **(TINY | {"device": "cuda"}))
    assert next(result.model.parameters()).device.type == "cuda"


def test_stop_during_an_evaluation_records_no_partial_estimate(monkeypatch):
    stop = threading.Event()
    real = training.estimate_loss

    calls = []

    def estimate_then_stop(model, data, tc, device, flag=None):
        calls.append(tc)
        if len(calls) == 2:
            stop.set()  # as if the learner pressed Stop during the second evaluation
        return real(model, data, tc, device, flag)

    monkeypatch.setattr(training, "estimate_loss", estimate_then_stop)
    result = train(TrainConfig(text=TEXT, max_iters=100, eval_iters=3, **(TINY | {"eval_interval": 2})), None, stop)
    assert result.stopped and result.iterations == 2 and result.history.eval_steps == [0]
    assert all(v > 0 for v in result.history.val_loss)


def test_positional_experiment_on_reverse_shows_that_positions_help():
    exp = positional_experiment("reverse", max_iters=150, eval_interval=50)
    assert exp.histories["sinusoidal"].val_loss[-1] < exp.histories["none"].val_loss[-1]
    assert exp.accuracy["sinusoidal"] > exp.accuracy["none"]


@pytest.mark.parametrize("name", ["tiny-gpt", "course-gpt-modern", "tiny"])
def test_training_attention_is_the_staged_formula(name):
    """In training with nothing watching, attention runs PyTorch's fused kernel; its output and gradients equal the
    staged function's (the one every page traces), causal, grouped-query and encoder-decoder blocks alike."""
    from transformer_core import PRESETS, build_model, capture

    cfg = PRESETS[name].replace(d_model=64, n_heads=4, n_layers=2, d_ffn=128, vocab_size=50, max_len=16, dropout=0.0)
    model = build_model(cfg).train()
    src = torch.randint(0, 50, (3, 12))
    tgt = torch.randint(0, 50, (3, 9)) if model.is_encoder_decoder else None

    def loss_and_grads(watch: bool):
        model.zero_grad()
        if watch:  # a capture makes every block take the staged path
            with capture(names=["none"]):
                out = model(src, tgt)
        else:
            out = model(src, tgt)
        out.square().mean().backward()
        return out.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]

    fast, fast_grads = loss_and_grads(False)
    staged, staged_grads = loss_and_grads(True)
    assert torch.allclose(fast, staged, atol=1e-5)
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(fast_grads, staged_grads, strict=True))


def test_the_split_interleaves_so_the_chinese_paragraph_at_the_end_is_in_both_splits():
    """The default text is English with one Chinese paragraph at its end: a tail split put nearly all of it in
    validation (71 of 101 validation tokens ⟨unk⟩). Every fifth block is validation instead."""
    enc = load_encoding("cl100k_base")
    ids = encode_by_line(enc, TEXT)
    data = TextData(TEXT, 16)
    chinese = set(encode_by_line(enc, CHINESE.strip())) - set(encode_by_line(enc, TEXT.replace(CHINESE, "")))
    real = {s: [i for a, b in runs for i in ids[a:b]] for s, runs in data.runs.items()}
    assert sorted(i for r in data.runs.values() for a, b in r for i in range(a, b)) == list(range(len(ids)))
    assert abs(len(real["val"]) / len(ids) - 0.2) < 0.02 and len(data.runs["val"]) >= 4
    for split in ("train", "val"):
        assert len(set(real[split]) & chinese) >= 10, split  # Chinese tokens on both sides
    tail = ids[int(len(ids) * 0.8):]
    tail_unk = sum(i not in set(ids[: int(len(ids) * 0.8)]) for i in tail) / len(tail)
    n_unk, n_val = data.val_unk
    assert n_val == len(real["val"]) and n_unk == sum(i not in set(real["train"]) for i in real["val"])
    assert n_unk / n_val < tail_unk - 0.2  # far fewer ⟨unk⟩ than the tail split (0.70 there)
    assert (data.splits["val"] == 0).sum() == n_unk  # model id 0 is ⟨unk⟩


@pytest.mark.parametrize(("context", "fraction"), [(16, 0.2), (16, 0.3), (8, 0.5), (4, 0.05)])
def test_windows_never_cross_two_blocks_and_the_shortest_text_fits_a_window_in_each_split(context, fraction):
    n = min_text_tokens(context, fraction)
    text = " ".join(f"w{i}" for i in range(n))  # about one token a word, more than n tokens
    data = TextData(text, context, val_fraction=fraction)
    for split, runs in data.runs.items():
        assert len(data.starts[split]), split
        ends = torch.tensor([b - a for a, b in runs]).cumsum(0)
        for s in data.starts[split].tolist():  # a window s .. s + context lies in one run
            assert torch.searchsorted(ends, s, right=True) == torch.searchsorted(ends, s + context, right=True)
    with pytest.raises(TrainingError, match="too short"):
        TextData(" ".join(["x"] * 3), context, val_fraction=fraction)


def test_a_text_of_one_token_is_said_in_the_singular():
    """"The text is too short: it has 1 tokens": a count of one gets its own sentence (err.<code>_one)."""
    from transformer_core.errors import message

    one = message("train_text_too_short", "en", n=1, context=16, val=0.2, need=40)
    assert one.startswith("The text is too short: it has 1 token, and") and "{" not in one
    assert "it has 5 tokens," in message("train_text_too_short", "en", n=5, context=16, val=0.2, need=40)
    assert "只有 1 个词元" in message("train_text_too_short", "zh", n=1, context=16, val=0.2, need=40)
