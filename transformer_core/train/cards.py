"""Model-card fields measured on a trained model (a task's accuracy and alignment, a text model's accuracy)."""
from __future__ import annotations

import math
import re

import numpy as np
import torch
import torch.nn.functional as F

from ..analysis.alignment import alignment_mass
from ..model.device import device_name
from ..text.tokenizer import encode_by_line, load_encoding
from .advice import curve_advice
from .data import IGNORE
from .loop import TrainResult, describe
from .tasks import TASKS, SeqToSeqTask

ACCURACY_N, ACCURACY_SEED = 512, 99
UNKNOWN_EXAMPLES = 6  # words of validation's ⟨unk⟩ tokens a text model's card names


def task_card(name: str, result: TrainResult, n: int = ACCURACY_N) -> dict:
    """A task model's card: descriptions, examples, accuracy on fresh examples, cross-attention alignment."""
    task = TASKS[name]
    card = {
        "task": name, "arch": task.arch, "description": {"en": task.description, "zh": task.description_zh},
        # a prompt task (name movers) opens on its prompt: the pages read the answer it must give, not what follows it
        "example_src": getattr(task.example, "prompt", "") or task.example.src, "example_tgt": task.example.tgt,
        "accuracy": round(task.accuracy(result.model, n=n, seed=ACCURACY_SEED), 4),
        "accuracy_metric": task.metric, "accuracy_examples": n, "accuracy_seed": ACCURACY_SEED,
    }
    if isinstance(task, SeqToSeqTask):
        card["cross_attention_alignment"] = alignment_mass(result.model, task)  # per decoder layer
    return card | run_fields(result)


def run_fields(result: TrainResult) -> dict:
    """What every card says about its run."""
    kept = {} if result.best_step is None else {"best_step": result.best_step}  # keep_best: the weights' step
    device = f"cuda ({device_name(result.device)})" if result.device.type == "cuda" else str(result.device)
    return {"steps": result.iterations, "tokens_seen": result.tokens, "train_seconds": round(result.seconds, 1),
            "device": device, "stopped": result.stopped, **kept, "train_config": describe(result.config)}


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


CARD_KINDS = ("previous_token", "first_token", "self", "induction")  # the patterns a model card reports


@torch.no_grad()
def card_heads(model, heldout: np.ndarray, context: int, n_windows: int = 64, length: int | None = None) -> list:
    """Every self-attention head's previous-token, first-token and self scores over the first n_windows held-out
    windows, and its induction score on random sequences repeated twice (analysis.heads' detector); "kind" is
    analysis.heads.label of those four (the rule every page uses), "score" the highest of them."""
    from ..analysis.heads import induction_scores, label, label_block
    from ..model.hooks import act_name
    from ..model.trace import run_with_trace

    x, _ = windows(heldout, context)
    layers = range(model.cfg.n_layers)
    _, trace = run_with_trace(model, x[:n_windows], names=[act_name("weights", layer=i, block="dec_self")
                                                           for i in layers])
    ind = induction_scores(model, length)  # the probe every page shows (analysis.heads: length, count, seed)
    rows = []
    for i in layers:
        for r in label_block("dec_self", i, trace.attention("dec_self", i).weights, ind["dec_self", i]):
            scores = {k: r.scores[k] for k in CARD_KINDS}
            rows.append({"layer": i, "head": r.head, **scores, "kind": label(scores), "score": max(scores.values())})
    return rows


def chunked_accuracy(model, data: torch.Tensor, context: int, windows: int) -> float:
    """next_token_accuracy over the same windows, `windows` at a time (the memory of one training batch)."""
    step = max(1, windows) * context
    scores = []  # (accuracy, windows) per chunk
    for i in range(0, max(len(data) - context, 0), step):
        chunk = data[i : i + step + 1]
        n = len(range(0, len(chunk) - context, context))
        if n:
            scores.append((next_token_accuracy(model, chunk, context), n))
    total = sum(n for _, n in scores)
    return sum(a * n for a, n in scores) / total if total else 0.0


def text_example(text: str, vocab_map, encoding: str = "cl100k_base", max_tokens: int = 8) -> str:
    """A short start of the training text whose tokens are all in the model's vocabulary (the sidebar example),
    tokenized as the app reads text for this model (one line at a time)."""
    known, best, enc = set(vocab_map), "", load_encoding(encoding)
    for m in re.finditer(r"\S+", text[:2000]):
        prefix = text[: m.end()].strip()
        ids = encode_by_line(enc, prefix)
        if len(ids) > max_tokens or not set(ids) <= known:
            break
        best = prefix
    return best or text.strip()[:1]


def user_text_card(result: TrainResult, windows: int) -> dict:
    """The card of a model trained on a learner's text (TextData): held-out loss against the n-gram baselines
    and next-token accuracy on the first `windows` validation windows (bounded: logits are (N, T, vocab))."""
    tc, data = result.config, result.data
    val = data.splits["val"][: windows * tc.context + 1]
    return {"task": "text", "arch": "decoder_only", "example_tgt": "",
            "example_src": text_example(tc.text, data.vocab_map, tc.encoding),
            **text_card(result.model, data.splits["train"].numpy(), val.numpy(), tc.context, unk_id=data.vocab.unk),
            "accuracy": round(chunked_accuracy(result.model, val, tc.context, tc.batch_size), 4),
            "accuracy_metric": "next-token accuracy on the validation split (never trained on)",
            "advice": curve_advice(result.history, data.val_unk,
                                   tuple(w for w, _ in data.val_unknown_words.most_common(UNKNOWN_EXAMPLES)),
                                   result.best_step),
            "description": {"en": f"Trained here on {len(tc.text):,} characters of your text.",
                            "zh": f"在这里用你的 {len(tc.text):,} 个字符的文本训练。"}} | run_fields(result)
