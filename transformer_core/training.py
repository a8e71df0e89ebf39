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

from .config import TransformerConfig, preset
from .data import IGNORE, Batch, DataError, TextData
from .device import pick_device
from .model import Transformer, build_model
from .tasks import TASKS, Task

MAX_ITERS = 100_000
LR_SCHEDULES = ("constant", "cosine")


class TrainingError(ValueError):
    """Training settings or data that cannot work; the message is meant for the learner."""


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
    lr_schedule: str = "constant"  # the course's; "cosine" decays to lr / 10 by max_iters
    grad_clip: float = 0.0  # 0 = off (the course does not clip)
    seed: int = 1337
    device: str | None = None  # None: CUDA when available, else CPU
    encoding: str = "cl100k_base"

    def validate(self) -> None:
        """Raise TrainingError for a setting out of range."""
        checks = [
            (self.task is None or self.task in TASKS, f"unknown task {self.task!r}; choose one of {sorted(TASKS)}"),
            (self.task is not None or bool(self.text.strip()), "paste some text to train on, or choose a task"),
            (1 <= self.batch_size <= 512, f"batch size must be between 1 and 512, got {self.batch_size}"),
            (2 <= self.context <= 1024, f"context length must be between 2 and 1024, got {self.context}"),
            (2 <= self.d_model <= 1024 and self.d_model % 2 == 0,
             f"d_model must be an even number between 2 and 1024, got {self.d_model}"),
            (1 <= self.n_heads <= 64, f"the number of heads must be between 1 and 64, got {self.n_heads}"),
            (self.d_model % max(self.n_heads, 1) == 0,
             f"d_model ({self.d_model}) must be divisible by the number of heads ({self.n_heads})"),
            (1 <= self.n_layers <= 24, f"the number of layers must be between 1 and 24, got {self.n_layers}"),
            (0 <= self.d_ffn <= 8192, f"d_ffn must be between 0 (= 4 × d_model) and 8192, got {self.d_ffn}"),
            (0.0 <= self.dropout < 1.0, f"dropout must be in [0, 1), got {self.dropout}"),
            (math.isfinite(self.lr) and 0.0 < self.lr <= 1.0, f"learning rate must be in (0, 1], got {self.lr}"),
            (1 <= self.max_iters <= MAX_ITERS, f"iterations must be between 1 and {MAX_ITERS:,}, got {self.max_iters}"),
            (0 <= self.eval_interval <= MAX_ITERS,
             f"eval interval must be 0 (off) or a positive number of steps, got {self.eval_interval}"),
            (1 <= self.eval_iters <= 1000, f"eval batches must be between 1 and 1000, got {self.eval_iters}"),
            (0.05 <= self.val_fraction <= 0.5, f"validation fraction must be in [0.05, 0.5], got {self.val_fraction}"),
            (self.lr_schedule in LR_SCHEDULES, f"lr_schedule must be one of {LR_SCHEDULES}, got {self.lr_schedule!r}"),
            (self.grad_clip >= 0.0, f"gradient clipping must be 0 (off) or positive, got {self.grad_clip}"),
        ]
        for ok, message in checks:
            if not ok:
                raise TrainingError(message)


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


class TaskData:
    """A task as a data source: fresh examples per batch, train and val from separate seeds."""

    def __init__(self, task: Task, seed: int) -> None:
        self.task = task
        self.rngs = {"train": random.Random(seed), "val": random.Random(seed + 1_000_003)}

    def batch(self, split: str, size: int) -> Batch:
        return self.task.make_batch(self.rngs[split], size)


def make_data(tc: TrainConfig) -> TaskData | TextData:
    """The data source of a config: a task, or the user's text (TrainingError if it is unusable)."""
    if tc.task is not None:
        return TaskData(TASKS[tc.task], tc.seed)
    try:
        return TextData(tc.text, tc.context, encoding=tc.encoding, val_fraction=tc.val_fraction, seed=tc.seed)
    except DataError as exc:
        raise TrainingError(str(exc)) from exc


def model_config(tc: TrainConfig, data: TaskData | TextData) -> TransformerConfig:
    """The model config for a run: the task's, or the course GPT's with the text's compacted vocabulary."""
    sizes = dict(d_model=tc.d_model, n_heads=tc.n_heads, n_layers=tc.n_layers, d_ffn=tc.d_ffn or 4 * tc.d_model,
                 dropout=tc.dropout, positional=tc.positional, norm_first=tc.norm_first, seed=tc.seed)
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
    """The learning rate of step `it`: constant, or cosine from lr down to lr / 10."""
    if tc.lr_schedule == "constant":
        return tc.lr
    return tc.lr * (0.1 + 0.45 * (1 + math.cos(math.pi * it / tc.max_iters)))


def train_step(model, opt, b: Batch, grad_clip: float) -> torch.Tensor:
    """One AdamW step (the model is in train mode); returns the (detached) loss."""
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
    opt = torch.optim.AdamW(model.parameters(), lr=tc.lr)
    hist, it, tokens, start = History(), 0, 0, time.perf_counter()
    with _fork_rng(device):
        torch.manual_seed(tc.seed)
        while it < tc.max_iters and not (stop is not None and stop.is_set()):
            if tc.eval_interval and (it % tc.eval_interval == 0 or it == tc.max_iters - 1):
                losses = estimate_loss(model, data, tc, device, stop)
                if stop is not None and stop.is_set():
                    break  # a cut-short estimate is not recorded
                _record_eval(hist, it, losses)
            if not model.training:
                model.train()  # once, and again after each evaluation
            b = data.batch("train", tc.batch_size)
            tokens += b.n_tokens  # counted on the CPU: no device sync
            for group in opt.param_groups:
                group["lr"] = lr_at(tc, it)
            loss = float(train_step(model, opt, b.to(device), tc.grad_clip))
            it += 1
            hist.step_loss.append(loss)
            if callback is not None:
                callback(Progress(it, tc.max_iters, loss, hist))
    stopped = it < tc.max_iters
    return TrainResult(model.eval(), hist, it, stopped, time.perf_counter() - start, tokens, tc)


def _record_eval(hist: History, it: int, losses: dict[str, float]) -> None:
    hist.eval_steps.append(it)
    hist.train_loss.append(losses["train"])
    hist.val_loss.append(losses["val"])


def train_text(text: str, **changes) -> TrainResult:
    """The course's GPT on user text: compacted vocabulary, 80/20 split, context windows, next-token loss."""
    return train(TrainConfig(text=text, **changes))


# small and quick on a CPU (about 10 s for both runs): reverse without positions cannot tell the
# first input letter from the last (about 35 % accuracy against 99 %); sort barely needs positions
EXPERIMENT_DEFAULTS = dict(batch_size=32, d_model=64, n_layers=2, n_heads=4, dropout=0.0, max_iters=600,
                           eval_interval=50, eval_iters=4, seed=0)


@dataclass
class PositionalExperiment:
    """The course's "does positional information help?": the same run with and without positions."""

    task: str
    histories: dict[str, History]  # "sinusoidal" / "none" -> loss curves
    accuracy: dict[str, float]  # on fresh examples
    stopped: bool = False


def positional_experiment(task: str = "reverse", callback=None, stop=None, **changes) -> PositionalExperiment:
    """Train the same model on a task with positional='sinusoidal', then 'none' (the callback sees both runs)."""
    base = TrainConfig(task=task, **{**EXPERIMENT_DEFAULTS, **changes})
    exp = PositionalExperiment(task, {}, {})
    for positional in ("sinusoidal", "none"):
        result = train(replace(base, positional=positional), callback, stop)
        exp.histories[positional] = result.history
        exp.accuracy[positional] = TASKS[task].accuracy(result.model, n=128)
        exp.stopped |= result.stopped
    return exp



def describe(tc: TrainConfig) -> dict:
    """The config as a JSON-ready dict, without the (possibly long) text."""
    out = asdict(tc)
    out["text"] = f"<{len(tc.text)} characters>" if tc.text else ""
    return out
