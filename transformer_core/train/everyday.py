"""Everyday text, written for this project and found in no training text, and how a model reads it.

The default model's targets are measured here (bench/everyday.py prints them; the build writes them into the card;
a test recomputes the model's figures from the shipped weights). Bits per byte = the sum of −log₂ p over the
predicted tokens ÷ the UTF-8 bytes of those tokens: it does not depend on the tokenizer, so models with different
vocabularies (and an n-gram over cl100k_base) compare fairly. Each text is read on its own; its first token is
not predicted.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..analysis.blocks import logits_of
from ..analysis.surprise import token_nats
from ..text.inputs import prepare, real_ids
from ..text.tokenizer import encode_by_line, load_encoding

ENGLISH = (
    "I'm going to the store to buy some milk and bread.",
    "Can you send me the report before the meeting tomorrow morning?",
    "The weather is nice today, so we are having lunch outside.",
    "My brother just started a new job at a hospital in the city.",
    "We watched a movie last night and then went to bed early.",
    "Please call me when you get home so I know you are safe.",
    "The train was late again, and I missed the first half of the class.",
    "She said that the children would be back from school at four o'clock.",
    "I think we should ask the teacher for more time to finish the project.",
    "There is a small coffee shop on the corner of the street near my house.",
    "He has been working on this problem for three weeks without a break.",
    "Don't forget to bring your passport and your ticket to the airport.",
)
CHINESE = (
    "今天天气很好，我们一起去公园散步吧。",
    "我明天早上八点要去公司开会。",
    "这家餐厅的菜很好吃，价格也不贵。",
    "请问附近有没有地铁站？",
    "周末我想在家看书，不想出门。",
    "他昨天买了一部新手机，用起来很方便。",
    "孩子们放学以后在学校门口等妈妈。",
    "这个问题我们需要再讨论一下。",
    "我觉得这本书写得非常好，推荐大家去看看。",
    "下个月我们公司要搬到新的办公楼。",
)
CODE = (
    "def add(a, b):\n    return a + b",
    "for i in range(10):\n    print(i * i)",
    "const total = items.reduce((sum, x) => sum + x.price, 0);",
)
EMOJI = (
    "Happy birthday! 🎂🎉 See you at the party tonight 😊",
    "生日快乐🎂！晚上见😊",
)
GROUPS = {"english": ENGLISH, "chinese": CHINESE, "code": CODE, "emoji": EMOJI}
PROMPT = "After dinner we sat in the garden and"  # the greedy-continuation check
# The targets (bits per byte at most, top-1 at least), per group.
TARGETS = {"english": {"bits_per_byte": 1.8, "top1": 0.30}, "chinese": {"bits_per_byte": 2.1, "top1": 0.25}}


@dataclass
class Reading:
    """One group of texts as a model read them: summed surprise and bytes of the predicted tokens."""

    bits: float = 0.0
    bytes: int = 0
    correct: int = 0
    predicted: int = 0
    tokens: int = 0
    unknown: int = 0

    def add(self, other: Reading) -> None:
        for k in vars(self):
            setattr(self, k, getattr(self, k) + getattr(other, k))

    def summary(self) -> dict:
        return {"bits_per_byte": round(self.bits / max(self.bytes, 1), 4),
                "top1": round(self.correct / max(self.predicted, 1), 4), "tokens": self.tokens,
                "predicted": self.predicted, "bytes": self.bytes, "unknown": self.unknown}


@torch.no_grad()
def read_text(model, text: str) -> Reading:
    """How the model reads one text: bits and bytes of tokens 2..n, top-1 hits, ⟨unk⟩ count."""
    prep = prepare(model, text)
    ids = prep.src_ids[0]  # (T,) model ids
    logits = logits_of(model, prep)  # (T, vocab)
    nats = token_nats(logits, ids)  # (T-1,)
    hits = (logits[:-1].argmax(-1) == ids[1:]).sum()
    n_bytes = sum(len(t.raw) for t in prep.src.tokens[1:])
    return Reading(bits=float(nats.sum()) / math.log(2), bytes=n_bytes, correct=int(hits), predicted=len(ids) - 1,
                   tokens=len(ids), unknown=len(prep.src_unknown))


def read_groups(model, groups: dict[str, tuple[str, ...]] = GROUPS) -> dict[str, dict]:
    """Every group's bits per byte, top-1 accuracy and unknown tokens."""
    out = {}
    for name, texts in groups.items():
        total = Reading()
        for t in texts:
            total.add(read_text(model, t))
        out[name] = total.summary()
    return out


def ngram_bits_per_byte(kn, texts: tuple[str, ...], encoding: str = "cl100k_base") -> float:
    """The same texts' bits per byte under an n-gram over `encoding`'s tokens (read one line at a time)."""
    enc, bits, n_bytes = load_encoding(encoding), 0.0, 0
    for t in texts:
        ids = encode_by_line(enc, t)
        bits += sum(kn.bits(ids))
        n_bytes += sum(len(enc.decode_single_token_bytes(i)) for i in ids[1:])
    return round(bits / max(n_bytes, 1), 4)


def continuation(model, prompt: str = PROMPT, steps: int = 10) -> dict:
    """Greedy continuation: the text, and the most times one token repeats in it."""
    from ..analysis.next_token import generate
    from ..text.inputs import model_text

    prep = prepare(model, prompt)
    new = generate(model, prep.src_ids[0].tolist(), steps)
    return {"prompt": prompt, "text": model_text(model, new), "tokens": len(new),
            "most_repeats": max((real_ids(model, new).count(i) for i in set(real_ids(model, new))), default=0)}


# What each language's n-gram baseline learns from: the same training text the model read.
BASELINE_CORPORA = {"english": ("brown",), "chinese": ("reviews", "peoples-daily")}


def trigram_baselines(train_texts: dict[str, str], encoding: str = "cl100k_base") -> dict[str, float]:
    """Bits per byte of an interpolated Kneser-Ney trigram over `encoding`'s tokens, built from each language's
    training text (corpus name -> text), on that language's everyday texts."""
    from .kneser_ney import KneserNeyTrigram
    from .vocab import encode_lines

    enc, out = load_encoding(encoding), {}
    for lang, corpora in BASELINE_CORPORA.items():
        if all(c in train_texts for c in corpora):
            kn = KneserNeyTrigram([encode_lines(enc, train_texts[c]) for c in corpora], enc.n_vocab)
            out[lang] = ngram_bits_per_byte(kn, GROUPS[lang], encoding)
    return out


def in_training(train_texts: dict[str, str]) -> list[str]:
    """Everyday texts (or their lines) found verbatim in a training text: must be none."""
    lines = {line.strip() for texts in GROUPS.values() for t in texts for line in t.splitlines() if line.strip()}
    return sorted(line for line in lines if any(line in text for text in train_texts.values()))


def report(model, train_texts: dict[str, str] | None = None) -> dict:
    """The card's `everyday` section: every group's figures, the trigram baselines (when the training text is at
    hand), the greedy continuation, and the targets."""
    out = {"groups": read_groups(model), "continuation": continuation(model), "targets": TARGETS,
           "texts": {k: len(v) for k, v in GROUPS.items()}}
    if train_texts:
        out["trigram_bits_per_byte"] = trigram_baselines(train_texts)
        out["found_in_training"] = in_training(train_texts)
    return out
