"""What every generated task is: examples as text, tokenized by cl100k_base, a compacted vocabulary of their tokens,
batches and accuracy. tasks.py holds the synthetic tasks and the registry; translation.py the dates task."""
from __future__ import annotations

import random
from dataclasses import dataclass
from functools import cached_property

import torch

from ..errors import TaskError
from ..model.config import TransformerConfig
from ..model.masks import pad_batch
from ..model.trace import run
from ..model.transformer import Transformer
from ..text.tokenizer import load_encoding
from .data import IGNORE, Batch, compact_vocab

ENCODING = "cl100k_base"
BOS = "="  # a real, visible cl100k token that starts every encoder-decoder answer
LETTERS = tuple("abcdefghijklmnop")


@dataclass(frozen=True)
class Example:
    src: str  # encoder input (encoder-decoder) or the whole text (decoder-only)
    tgt: str = ""  # BOS + answer (encoder-decoder); "" for decoder-only


def encode(text: str) -> list[int]:
    """Real cl100k ids of a text (special-token text stays plain text)."""
    return load_encoding(ENCODING).encode(text, allowed_special=set(), disallowed_special=())


def single_token(text: str) -> int:
    """The id of a text that must be exactly one cl100k token."""
    ids = encode(text)
    if len(ids) != 1:
        raise TaskError("task_not_one_token", text=text, n=len(ids))
    return ids[0]


class Task:
    """A generated task: samples, vocabulary, batches to model ids, accuracy on fresh examples."""

    name: str
    arch: str
    description: str
    description_zh: str
    metric: str  # one line: what accuracy() measures
    example: Example
    max_len: int = 32
    encoding: str = ENCODING  # the tokenizer of its examples

    def sample(self, rng: random.Random) -> Example:
        raise NotImplementedError

    def vocab_texts(self) -> list[str]:
        """Strings that must each be one token; together they are the whole vocabulary."""
        raise NotImplementedError

    def batch(self, examples: list[Example], *, scored: bool = False) -> Batch:
        raise NotImplementedError

    def accuracy(self, model: Transformer, n: int = 256, seed: int = 2024) -> float:
        raise NotImplementedError

    @cached_property
    def vocab_map(self) -> tuple[int, ...]:
        return compact_vocab([single_token(t) for t in self.vocab_texts()])[0]

    @cached_property
    def index(self) -> dict[int, int]:
        return compact_vocab(list(self.vocab_map))[1]

    def to_ids(self, text: str) -> list[int]:
        """Model ids of a text; TaskError names a token outside the task's vocabulary."""
        ids = encode(text)
        bad = [i for i in ids if i not in self.index]
        if bad:
            enc = load_encoding(ENCODING)
            raise TaskError("task_token", token=repr(enc.decode([bad[0]])), task=self.name,
                            example=self.example.src)
        return [self.index[i] for i in ids]

    def make_batch(self, rng: random.Random, size: int, *, scored: bool = False) -> Batch:
        return self.batch([self.sample(rng) for _ in range(size)], scored=scored)

    def model_config(self, **changes) -> TransformerConfig:
        """A small config for this task with its compacted vocabulary (fields overridable)."""
        base = dict(arch=self.arch, vocab_size=len(self.vocab_map), vocab_map=self.vocab_map, d_model=64,
                    n_heads=4, n_layers=2, d_ffn=256, dropout=0.0, max_len=self.max_len, encoding=ENCODING)
        return TransformerConfig(**{**base, **changes})


def _pad_labels(seqs: list[list[int]]) -> torch.Tensor:
    return pad_batch(seqs, IGNORE)[0]  # (B, T) padded with IGNORE


class DecoderTask(Task):
    """Decoder-only: one text; the loss covers the predictable positions, accuracy a subset of them."""

    arch = "decoder_only"

    def targets(self, ex: Example) -> tuple[list[int], list[bool], list[bool]]:
        """(model ids, trained[t], scored[t]) where flags are for predicting ids[t + 1] from ids[: t + 1]."""
        raise NotImplementedError

    def batch(self, examples: list[Example], *, scored: bool = False) -> Batch:
        rows = [self.targets(e) for e in examples]
        src, lengths = pad_batch([ids[:-1] for ids, _, _ in rows])  # (B, T), (B,)
        labels = [[y if k else IGNORE for y, k in zip(ids[1:], sc if scored else tr)] for ids, tr, sc in rows]
        return Batch(src, _pad_labels(labels), src_lengths=lengths)

    def accuracy(self, model: Transformer, n: int = 256, seed: int = 2024) -> float:
        """Next-token accuracy (argmax, true prefix) on the scored positions of n fresh examples."""
        b = self.make_batch(random.Random(seed), n, scored=True)
        pred = run(model, b.src, src_lengths=b.src_lengths).argmax(-1).cpu()  # (B, T)
        scored = b.labels != IGNORE
        return float((pred == b.labels)[scored].float().mean())
