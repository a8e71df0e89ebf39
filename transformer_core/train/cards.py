"""Model-card fields measured on a trained model (a task's accuracy and alignment, a text model's accuracy)."""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from ..analysis.alignment import alignment_mass
from .data import IGNORE
from .loop import TrainResult, describe
from .tasks import TASKS, SeqToSeqTask

ACCURACY_N, ACCURACY_SEED = 512, 99


def task_card(name: str, result: TrainResult, n: int = ACCURACY_N) -> dict:
    """A task model's card: descriptions, examples, accuracy on fresh examples, cross-attention alignment."""
    task = TASKS[name]
    card = {
        "task": name, "arch": task.arch, "description": {"en": task.description, "zh": task.description_zh},
        "example_src": task.example.src, "example_tgt": task.example.tgt,
        "accuracy": round(task.accuracy(result.model, n=n, seed=ACCURACY_SEED), 4),
        "accuracy_metric": task.metric, "accuracy_examples": n, "accuracy_seed": ACCURACY_SEED,
    }
    if isinstance(task, SeqToSeqTask):
        card["cross_attention_alignment"] = alignment_mass(result.model, task)  # per decoder layer
    return card | run_fields(result)


def run_fields(result: TrainResult) -> dict:
    """What every card says about its run."""
    return {"steps": result.iterations, "tokens_seen": result.tokens, "train_seconds": round(result.seconds, 1),
            "device": str(result.device), "stopped": result.stopped, "train_config": describe(result.config)}


@torch.no_grad()
def next_token_accuracy(model, data: torch.Tensor, context: int) -> float:
    """Argmax next-token accuracy over consecutive windows of a split."""
    starts = range(0, len(data) - context, context)
    x = torch.stack([data[i : i + context] for i in starts])  # (N, T)
    y = torch.stack([data[i + 1 : i + context + 1] for i in starts])  # (N, T)
    return float((model(x.to(next(model.parameters()).device)).argmax(-1).cpu() == y).float().mean())


# --- language models: held-out loss against n-gram baselines, the unknown-token rate, the heads --------------


def unigram_loss(train: np.ndarray, heldout: np.ndarray, vocab_size: int) -> float:
    """Add-one smoothed unigram model from the training stream, scored on heldout[1:] (nats/token)."""
    counts = np.bincount(train, minlength=vocab_size).astype(np.float64) + 1.0  # (V,)
    logp = np.log(counts) - math.log(counts.sum())
    return float(-logp[heldout[1:]].mean())


def bigram_loss(train: np.ndarray, heldout: np.ndarray, vocab_size: int) -> float:
    """Add-one smoothed bigram P(b|a) = (c(a,b) + 1) / (c(a,·) + V) from the training stream, on heldout[1:]."""
    pairs = np.bincount(train[:-1] * vocab_size + train[1:], minlength=vocab_size * vocab_size).astype(np.float64)
    context = np.bincount(train[:-1], minlength=vocab_size).astype(np.float64)  # (V,) c(a,·)
    prev, nxt = heldout[:-1], heldout[1:]
    return float(-(np.log(pairs[prev * vocab_size + nxt] + 1.0) - np.log(context[prev] + vocab_size)).mean())


def windows(stream: np.ndarray, context: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Consecutive windows covering every prediction of stream[1:] once: (inputs (W, T), targets (W, T)),
    the last one padded with IGNORE."""
    n = len(stream) - 1
    count = -(-n // context)
    x = np.zeros((count, context), dtype=np.int64)
    y = np.full((count, context), IGNORE, dtype=np.int64)
    for w in range(count):
        a, b = w * context, min((w + 1) * context, n)
        x[w, : b - a], y[w, : b - a] = stream[a:b], stream[a + 1 : b + 1]
    return torch.from_numpy(x), torch.from_numpy(y)


@torch.no_grad()
def heldout_loss(model, stream: np.ndarray, context: int, batch_size: int = 32) -> float:
    """Mean next-token cross-entropy (nats) of a decoder-only model over every held-out position."""
    x, y = windows(stream, context)
    device = next(model.parameters()).device
    total, count = 0.0, 0
    for i in range(0, len(x), batch_size):
        logits = model(x[i : i + batch_size].to(device)).float()  # (B, T, V)
        yb = y[i : i + batch_size].to(device)
        total += float(F.cross_entropy(logits.flatten(0, 1), yb.flatten(), ignore_index=IGNORE, reduction="sum"))
        count += int((yb != IGNORE).sum())
    return total / max(count, 1)


def text_card(model, train: np.ndarray, heldout: np.ndarray, context: int, unk_id: int | None = 0) -> dict:
    """heldout_loss with the unigram and bigram baselines on the same tokens, and the unknown-token rate."""
    V = model.cfg.vocab_size
    h = heldout_loss(model, heldout, context)
    u, b = unigram_loss(train, heldout, V), bigram_loss(train, heldout, V)
    return {"heldout_loss": round(h, 4), "unigram_loss": round(u, 4), "bigram_loss": round(b, 4),
            "below_bigram": round(1 - h / b, 4), "heldout_tokens": int(len(heldout) - 1),
            "unk_rate": round(float((heldout == unk_id).mean()), 5) if unk_id is not None else 0.0}


@torch.no_grad()
def card_heads(model, heldout: np.ndarray, context: int, n_windows: int = 64, length: int | None = None) -> list:
    """Every self-attention head's previous-token and first-token scores over held-out windows, and its induction
    score on random sequences repeated twice (analysis.heads' definitions), labelled with its strongest kind."""
    from ..analysis.heads import default_length, first_token, induction_scores, label, previous_token
    from ..model.hooks import act_name
    from ..model.trace import run_with_trace

    x, _ = windows(heldout, context)
    x = x[:n_windows]
    layers = range(model.cfg.n_layers)
    names = [act_name("weights", layer=i, block="dec_self") for i in layers]
    _, trace = run_with_trace(model, x, names=names)
    ind = induction_scores(model, length or default_length(model), count=16)
    rows = []
    for i in layers:
        w = trace.attention("dec_self", i).weights  # (W, nh, T, T)
        prev, first = previous_token(w), first_token(w)
        for h in range(model.cfg.n_heads):
            scores = {"previous_token": round(float(prev[h]), 4), "first_token": round(float(first[h]), 4),
                      "induction": round(float(ind["dec_self", i][h]), 4)}
            rows.append({"layer": i, "head": h, **scores, "kind": label(scores), "score": max(scores.values())})
    return rows
