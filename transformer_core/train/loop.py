"""A training loop for notebooks and Streamlit threads: own model, AdamW, callback, stop flag, eval history."""
from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace

import torch
import torch.nn.functional as F

from ..errors import TrainingError
from ..model.config import TransformerConfig, preset
from ..model.device import native_bf16, pick_device
from ..model.transformer import Transformer, build_model
from .data import IGNORE, Batch, TextData
from .tasks import TASKS, Task

MAX_ITERS = 100_000
LR_SCHEDULES = ("constant", "cosine")


@dataclass(frozen=True)
class TrainConfig:
    """Defaults are the course's small GPT (doc 003): batch 4, context 16, d_model 64, 8 layers, 4 heads."""

    task: str | None = None  # a tasks.TASKS name, or None to train a language model on `text`
    text: str = ""
    batch_size: int = 4
    context: int = 16  # window length for text (tasks set their own lengths)
    d_model: int = 64
    n_layers: int = 8
    n_heads: int = 4
    d_ffn: int = 0  # 0 = 4 × d_model
    dropout: float = 0.1
    lr: float = 1e-3
    max_iters: int = 5000
    eval_interval: int = 50  # 0 = never evaluate
    eval_iters: int = 20
    val_fraction: float = 0.2
    positional: str = "sinusoidal"
    norm_first: bool = False
    final_norm: bool = False  # a LayerNorm after the stack (GPT-2's; pre-norm needs it before the output layer)
    lr_schedule: str = "constant"  # the course's; "cosine" decays to lr / 10 by max_iters
    grad_clip: float = 0.0  # 0 = off (the course does not clip)
    seed: int = 1337
    device: str | None = None  # None: CUDA when available, else CPU
    encoding: str = "cl100k_base"
    # the shipped language models (python -m transformer_core.train.build) also set these
    corpus: tuple[str, ...] = ()  # train.corpora names, fetched from their package registry (instead of `text`)
    corpus_weights: tuple[float, ...] = ()  # the chance a row comes from each corpus (empty: equal)
    vocab_k: int | None = None  # a corpus model keeps its k most frequent tokens (None: all) plus ⟨unk⟩
    synthetic_fraction: float = 0.0  # share of rows holding a random span written twice (teaches copying)
    synthetic_first: int = 0  # the first steps use synthetic rows only (the copying circuit forms first)
    synthetic_alphabet: int = 0  # >0: half the spans use only this many tokens (sharpens previous-token heads)
    repeat_fraction: float = 0.0  # share of rows holding a span of the corpus's own text written twice
    list_fraction: float = 0.0  # share of rows holding a list of unrelated words written twice
    slot_share: float = 0.0  # share of the text written twice with a word swapped for a random one (corpus_data)
    init_from: str = ""  # start from a trained model's weights (train/transfer.py: a folder, or git:COMMIT:FOLDER)
    freeze_embeddings: bool = False  # token embeddings stay at their random start (a name is then any vector)
    warmup: int = 0  # steps of linear learning-rate warm-up
    min_lr_ratio: float = 0.1  # the cosine schedule ends at lr × this
    weight_decay: float | None = None  # None: AdamW's default on every parameter; else on matrices only
    betas: tuple[float, float] = (0.9, 0.999)
    tie_embeddings: bool = False
    scale_embedding: bool = False
    embed_std: float = 0.0
    # today's decoders (see TransformerConfig): RMSNorm, a gated FFN (SwiGLU with silu), grouped-query attention, RoPE
    norm: str = "layernorm"
    ffn: str = "mlp"
    activation: str = "relu"
    n_kv_heads: int = 0
    rope_theta: float = 10000.0
    bias: bool = True  # False: no biases in attention and FFN linears (Llama)
    cache_dir: str = ""  # where corpus archives are kept (a rebuild is then offline)
    # a long run: bfloat16 autocast for training steps (CUDA, or a CPU with AMX; evaluation stays float32), a wall-time
    # budget that sets max_iters from the measured speed (0: none; the card records the steps, a rerun with them and
    # budget 0 repeats the run), and the weights of the evaluation with the lowest held-out loss kept at the end
    amp: bool = False
    budget_s: float = 0.0
    keep_best: bool = False

    def validate(self) -> None:
        """Raise TrainingError for a setting out of range."""
        def rng(field: str, lo, hi) -> tuple[bool, str, dict]:
            value = getattr(self, field)
            ok = isinstance(value, (int, float)) and math.isfinite(value) and lo <= value <= hi
            return ok, "train_range", {"field": field, "lo": lo, "hi": hi, "value": value}

        checks = [
            (self.task is None or self.task in TASKS, "unknown_task", {"name": str(self.task)[:40],
                                                                      "choices": ", ".join(sorted(TASKS))}),
            (self.task is not None or bool(self.corpus) or bool(self.text.strip()), "train_text_empty", {}),
            rng("batch_size", 1, 512), rng("context", 2, 1024), rng("d_model", 2, 1024),
            (self.d_model % 2 == 0, "config_even", {"field": "d_model"}),
            rng("n_heads", 1, 64),
            (self.d_model % max(self.n_heads, 1) == 0, "config_heads",
             {"d_model": self.d_model, "heads": self.n_heads}),
            rng("n_layers", 1, 24), rng("d_ffn", 0, 8192), rng("dropout", 0.0, 0.95), rng("lr", 1e-6, 1.0),
            rng("max_iters", 1, MAX_ITERS), rng("eval_interval", 0, MAX_ITERS), rng("eval_iters", 1, 1000),
            rng("val_fraction", 0.05, 0.5), rng("grad_clip", 0.0, 1e6), rng("synthetic_fraction", 0.0, 1.0),
            rng("warmup", 0, MAX_ITERS), rng("synthetic_first", 0, MAX_ITERS), rng("min_lr_ratio", 0.0, 1.0),
            rng("synthetic_alphabet", 0, 1024), rng("repeat_fraction", 0.0, 1.0), rng("list_fraction", 0.0, 1.0),
            rng("slot_share", 0.0, 1.0),
            (self.synthetic_fraction + self.repeat_fraction + self.list_fraction <= 1.0, "train_range",
             {"field": "synthetic_fraction + repeat_fraction + list_fraction", "lo": 0, "hi": 1,
              "value": round(self.synthetic_fraction + self.repeat_fraction + self.list_fraction, 4)}),
            rng("embed_std", 0.0, 10.0), rng("budget_s", 0.0, 86_400.0),
            (not self.keep_best or self.eval_interval > 0, "train_keep_best", {}),
            (self.lr_schedule in LR_SCHEDULES, "config_choice", {"field": "lr_schedule",
                                                                 "choices": ", ".join(LR_SCHEDULES)}),
        ]
        for ok, code, params in checks:
            if not ok:
                raise TrainingError(code, **params)


@dataclass
class History:
    """Per-step training loss, and the course's estimate_loss() every eval_interval steps."""

    step_loss: list[float] = field(default_factory=list)  # one per iteration
    eval_steps: list[int] = field(default_factory=list)
    train_loss: list[float] = field(default_factory=list)  # mean over eval_iters batches
    val_loss: list[float] = field(default_factory=list)


@dataclass
class Progress:
    """What the callback gets after every step (cheap: the history is shared, not copied)."""

    iteration: int  # steps done
    max_iters: int
    loss: float  # this step's training loss
    history: History
    model: Transformer | None = None  # the model being trained (a snapshot may copy its weights; never change them)

    @property
    def fraction(self) -> float:
        return self.iteration / self.max_iters


@dataclass
class TrainResult:
    model: Transformer  # the run's own model, in eval mode
    history: History
    iterations: int
    stopped: bool  # the stop flag ended the run early
    seconds: float
    tokens: int  # target tokens trained on
    config: TrainConfig
    device: torch.device = torch.device("cpu")
    data: object = None  # the run's data source (its vocabulary and held-out split measure the model afterwards)
    best_step: int | None = None  # keep_best: the step whose weights the model holds


class TaskData:
    """A task as a data source: fresh examples per batch, train and val from separate seeds."""

    def __init__(self, task: Task, seed: int) -> None:
        self.task = task
        self.rngs = {"train": random.Random(seed), "val": random.Random(seed + 1_000_003)}

    def batch(self, split: str, size: int) -> Batch:
        return self.task.make_batch(self.rngs[split], size)


def make_data(tc: TrainConfig):
    """The data source of a config: a task, a corpus, or the user's text (TrainingError if it is unusable)."""
    if tc.task is not None:
        return TaskData(TASKS[tc.task], tc.seed)
    if tc.corpus:
        from .corpus_data import CorpusData

        return CorpusData(tc.corpus, tc.context, tc.vocab_k, tc.synthetic_fraction, tc.seed, tc.cache_dir,
                          tc.encoding, tc.synthetic_first, tc.synthetic_alphabet, tc.corpus_weights,
                          repeat_fraction=tc.repeat_fraction, list_fraction=tc.list_fraction, slot_share=tc.slot_share)
    return TextData(tc.text, tc.context, encoding=tc.encoding, val_fraction=tc.val_fraction, seed=tc.seed)


def model_config(tc: TrainConfig, data: TaskData | TextData) -> TransformerConfig:
    """The model config for a run: the task's, or the course GPT's with the text's compacted vocabulary."""
    sizes = dict(d_model=tc.d_model, n_heads=tc.n_heads, n_layers=tc.n_layers, d_ffn=tc.d_ffn or 4 * tc.d_model,
                 dropout=tc.dropout, positional=tc.positional, norm_first=tc.norm_first, final_norm=tc.final_norm,
                 seed=tc.seed,
                 tie_embeddings=tc.tie_embeddings, scale_embedding=tc.scale_embedding, embed_std=tc.embed_std,
                 norm=tc.norm, ffn=tc.ffn, activation=tc.activation, n_kv_heads=tc.n_kv_heads,
                 rope_theta=tc.rope_theta, qkv_bias=tc.bias, linear_bias=tc.bias)
    if isinstance(data, TaskData):
        return data.task.model_config(**sizes)
    return preset("course-gpt", vocab_size=data.vocab_size, vocab_map=data.vocab_map, max_len=tc.context,
                  encoding=tc.encoding, **sizes)


def batch_loss(model: Transformer, b: Batch) -> torch.Tensor:
    """Mean cross-entropy of the next-token predictions over the labelled positions."""
    logits = model(b.src, b.tgt, src_lengths=b.src_lengths, tgt_lengths=b.tgt_lengths)  # (B, T, V)
    return F.cross_entropy(logits.flatten(0, 1), b.labels.flatten(), ignore_index=IGNORE)


@torch.no_grad()
def estimate_loss(model: Transformer, data, tc: TrainConfig, device, stop=None) -> dict[str, float]:
    """Mean loss over eval_iters batches of each split, in eval mode (the course's estimate_loss)."""
    model.eval()
    out = {}
    for split in ("train", "val"):
        losses = []
        for _ in range(tc.eval_iters):
            if stop is not None and stop.is_set():
                break
            losses.append(batch_loss(model, data.batch(split, tc.batch_size).to(device)).item())
        out[split] = sum(losses) / max(len(losses), 1)
    return out


def lr_at(tc: TrainConfig, it: int) -> float:
    """The learning rate of step `it`: a linear warm-up, then constant, or cosine from lr to lr × min_lr_ratio."""
    if it < tc.warmup:
        return tc.lr * (it + 1) / tc.warmup
    if tc.lr_schedule == "constant":
        return tc.lr
    t = (it - tc.warmup) / max(1, tc.max_iters - tc.warmup)
    return tc.lr * (tc.min_lr_ratio + (1 - tc.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * t)))


def optimizer(model: Transformer, tc: TrainConfig) -> torch.optim.Optimizer:
    """AdamW: the course's (default weight decay on everything), or a weight decay on matrices only."""
    params = [p for p in model.parameters() if p.requires_grad]  # each tensor once (a tied matrix too)
    if tc.weight_decay is None:
        return torch.optim.AdamW(params, lr=tc.lr, betas=tc.betas)
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": tc.weight_decay},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=tc.lr, betas=tc.betas)


def train_step(model, opt, b: Batch, grad_clip: float, amp: bool = False) -> torch.Tensor:
    """One AdamW step (the model is in train mode); returns the (detached) loss. `amp`: the forward in bfloat16
    where the device computes it natively (the weights, gradients and optimizer stay float32)."""
    with torch.autocast(b.src.device.type, dtype=torch.bfloat16, enabled=amp and native_bf16(b.src.device)):
        loss = batch_loss(model, b)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    if grad_clip:
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    opt.step()
    return loss.detach()


def _fork_rng(device: torch.device):
    """Seed inside a forked RNG so the caller's global random state is left as it was."""
    cuda = [device.index or 0] if device.type == "cuda" else []
    return torch.random.fork_rng(devices=cuda)


def train(tc: TrainConfig, callback: Callable[[Progress], None] | None = None,
          stop: threading.Event | None = None) -> TrainResult:
    """Train a fresh model of its own; stops early when `stop` is set. Returns the model and its history."""
    tc.validate()
    device = pick_device(tc.device)
    data = make_data(tc)
    model = build_model(model_config(tc, data), device)  # never a shared model
    if tc.init_from:
        from .transfer import warm_start

        warm_start(model, tc.init_from, tc.cache_dir)
    for emb in (m for m in model.modules() if isinstance(m, torch.nn.Embedding)) if tc.freeze_embeddings else ():
        emb.weight.requires_grad_(False)  # (tied: the output matrix too)
    opt = optimizer(model, tc)
    hist, it, tokens, start, planned = History(), 0, 0, time.perf_counter(), tc.max_iters
    best: tuple[float, int, dict] | None = None  # keep_best: (held-out loss, step, weights)
    with _fork_rng(device):
        torch.manual_seed(tc.seed)
        while it < tc.max_iters and not (stop is not None and stop.is_set()):
            if tc.eval_interval and (it % tc.eval_interval == 0 or it == tc.max_iters - 1):
                losses = estimate_loss(model, data, tc, device, stop)
                if stop is not None and stop.is_set():
                    break  # a cut-short estimate is not recorded
                _record_eval(hist, it, losses)
                if tc.keep_best and (best is None or losses["val"] < best[0]):
                    best = (losses["val"], it, {k: v.detach().clone() for k, v in model.state_dict().items()})
            if not model.training:
                model.train()  # once, and again after each evaluation
            b = data.batch("train", tc.batch_size)
            tokens += b.n_tokens  # counted on the CPU: no device sync
            for group in opt.param_groups:
                group["lr"] = lr_at(tc, it)
            loss = float(train_step(model, opt, b.to(device), tc.grad_clip, tc.amp))
            it += 1
            hist.step_loss.append(loss)
            if tc.budget_s and it == WARM_STEPS:
                warm = time.perf_counter()
            if tc.budget_s and it == CALIBRATION_STEPS:
                now = time.perf_counter()
                tc = fit_budget(tc, it, now - start, (now - warm) / (CALIBRATION_STEPS - WARM_STEPS))
                paced = (it, now)
            elif tc.budget_s and it > CALIBRATION_STEPS and it - paced[0] >= REFIT_STEPS and it < tc.max_iters:
                now = time.perf_counter()  # a shared CPU's speed drifts: fit the rest again at the recent pace
                tc = fit_budget(replace(tc, max_iters=planned), it, now - start, (now - paced[1]) / (it - paced[0]))
                paced = (it, now)
            if callback is not None:
                callback(Progress(it, tc.max_iters, loss, hist, model))
            if tc.budget_s and time.perf_counter() - start > 1.1 * tc.budget_s:
                break  # the calibration was off: stop rather than overrun the machine's lease
    stopped, kept = it < tc.max_iters, None
    if best is not None:  # a run stopped by hand keeps its best weights too
        kept = best[1]
        if best[1] < it:
            losses = estimate_loss(model, data, tc, device)  # the last weights, against the best evaluated before
            _record_eval(hist, it, losses)
            if losses["val"] < best[0]:
                kept = it
            else:
                model.load_state_dict(best[2])
    return TrainResult(model.eval(), hist, it, stopped, time.perf_counter() - start, tokens, tc, device, data, kept)


# A budgeted run times its steps WARM_STEPS..CALIBRATION_STEPS, then sets max_iters. The first steps are left out:
# on a GPU they pay its warm-up (on an H200, 50 steps from the start timed 0.104 s a step, 4.4x the 0.024 s that
# followed: 2,844 steps of the 12,000 that fitted).
WARM_STEPS, CALIBRATION_STEPS = 20, 100
REFIT_STEPS = 200  # then every this many steps the remaining ones are fitted again at the pace since the last fit


def fit_budget(tc: TrainConfig, done: int, seconds: float, per_step: float | None = None) -> TrainConfig:
    """The config with max_iters cut to what fits in budget_s, `seconds` spent, at `per_step` (default: the mean so
    far; an evaluation costs about eval_iters × 2 forwards, a third of a step each, every eval_interval steps)."""
    per_step = seconds / done if per_step is None else per_step
    evals = (2 * tc.eval_iters / 3) / tc.eval_interval if tc.eval_interval else 0.0
    fits = done + int((tc.budget_s - seconds) / (per_step * (1 + evals)))
    return replace(tc, max_iters=max(done, min(tc.max_iters, fits)))


def _record_eval(hist: History, it: int, losses: dict[str, float]) -> None:
    hist.eval_steps.append(it)
    hist.train_loss.append(losses["train"])
    hist.val_loss.append(losses["val"])


def train_text(text: str, **changes) -> TrainResult:
    """The course's GPT on user text: compacted vocabulary, interleaved 80/20 split, windows, next-token loss."""
    return train(TrainConfig(text=text, **changes))


def describe(tc: TrainConfig) -> dict:
    """The config as a JSON-ready dict, without the (possibly long) text."""
    out = asdict(tc)
    out["text"] = f"<{len(tc.text)} characters>" if tc.text else ""
    out.pop("cache_dir")  # a folder of the machine it ran on: no card names one
    return out
