"""Training batches, and the course's GPT data: user text, compacted vocabulary, an interleaved 80/20 split, windows."""
from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, replace

import torch

from ..errors import TrainingError
from ..text.tokenizer import clean_text, encode_by_line, load_encoding

IGNORE = -100  # label value that the loss and the accuracy skip
MAX_TEXT_CHARS = 5_000_000


@dataclass
class Batch:
    """Model-id tensors for one step; masks come from the lengths, never from the pad id."""

    src: torch.Tensor  # (B, Ts) encoder input, or the decoder-only input
    labels: torch.Tensor  # (B, T) next-token targets, IGNORE where nothing is scored
    tgt: torch.Tensor | None = None  # (B, Tt) decoder input for teacher forcing (encoder-decoder)
    src_lengths: torch.Tensor | None = None  # (B,)
    tgt_lengths: torch.Tensor | None = None  # (B,)

    def to(self, device) -> Batch:
        move = {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in vars(self).items()}
        return replace(self, **move)

    @property
    def n_tokens(self) -> int:
        return int((self.labels != IGNORE).sum())


def compact_vocab(ids: list[int]) -> tuple[tuple[int, ...], dict[int, int]]:
    """The sorted real ids that occur (model id -> real id) and the reverse index (real id -> model id)."""
    vocab_map = tuple(sorted(set(ids)))
    return vocab_map, {real: i for i, real in enumerate(vocab_map)}


VAL_BLOCKS = 4  # a text is cut into blocks so that validation gets at least this many (when the text is long enough)


def is_val_block(i: int, val_fraction: float) -> bool:
    """Whether block i goes to validation: evenly spread, a share val_fraction of the blocks (0.2: every fifth)."""
    return math.floor((i + 1) * val_fraction + 1e-9) > math.floor(i * val_fraction + 1e-9)


def first_val_block(val_fraction: float) -> int:
    return next(i for i in range(10_000) if is_val_block(i, val_fraction))


def min_text_tokens(context: int, val_fraction: float) -> int:
    """Fewest tokens so that both splits hold one window of context + 1 tokens (the first validation block whole)."""
    return (first_val_block(val_fraction) + 1) * (context + 1)


def interleaved_split(n: int, context: int, val_fraction: float) -> tuple[int, dict[str, list[tuple[int, int]]]]:
    """Cut n tokens into blocks (each at least a window long; enough of them for VAL_BLOCKS validation blocks) and give
    every block that is_val_block to validation, so both splits sample the whole text (a language or a topic at its
    end is in both). Returns the block length and each split's runs of adjacent blocks as (start, end) ranges."""
    block = max(context + 1, n // max(1, round(VAL_BLOCKS / val_fraction)))
    runs: dict[str, list[tuple[int, int]]] = {"train": [], "val": []}
    for i, start in enumerate(range(0, n, block)):
        split, end = ("val" if is_val_block(i, val_fraction) else "train"), min(start + block, n)
        if runs[split] and runs[split][-1][1] == start:
            runs[split][-1] = (runs[split][-1][0], end)  # the block right after the previous one of its split
        else:
            runs[split].append((start, end))
    return block, runs


def window_starts(runs: list[tuple[int, int]], context: int) -> torch.Tensor:
    """Where a window of context + 1 tokens may start in the runs laid end to end, never across two runs (they
    are not adjacent in the text)."""
    starts, offset = [], 0
    for a, b in runs:
        starts += range(offset, offset + (b - a) - context)
        offset += b - a
    return torch.tensor(starts, dtype=torch.long)


def unknown_words(enc, ids: list[int], known: set[int]) -> Counter:
    """The words (letters, digits, CJK characters) written by runs of tokens outside `known`, counted."""
    words, run = Counter(), []
    for i in [*ids, None]:
        if i is not None and i not in known:
            run.append(i)
        elif run:
            words.update(re.findall(r"\w+", enc.decode_bytes(run).decode("utf-8", "replace")))
            run = []
    return words


class TextData:
    """The course's data pipeline on any text: encode, split 80/20 by interleaved blocks (every fifth block is
    validation, so both splits hold every part of the text), compact the vocabulary to the training split's tokens
    (a validation token never seen in training is ⟨unk⟩, as for every model with a compacted vocabulary), sample
    windows within a split's runs of adjacent blocks."""

    def __init__(self, text: str, context: int, *, encoding: str = "cl100k_base", val_fraction: float = 0.2,
                 seed: int = 0) -> None:
        if not isinstance(text, str) or not text.strip():
            raise TrainingError("train_text_empty")
        if len(text) > MAX_TEXT_CHARS:
            raise TrainingError("train_text_too_long", n=f"{len(text):,}", limit=f"{MAX_TEXT_CHARS:,}")
        text, _ = clean_text(text)
        ids = encode_by_line(load_encoding(encoding), text)  # as the app reads text for a model with its own vocabulary
        need = min_text_tokens(context, val_fraction)
        if len(ids) < need:
            raise TrainingError("train_text_too_short", n=len(ids), context=context, val=f"{val_fraction:.0%}",
                                need=need)
        from .vocab import build_vocab, count_tokens, to_model_ids

        self.encoding, self.context, self.n_tokens = encoding, context, len(ids)
        self.block, self.runs = interleaved_split(len(ids), context, val_fraction)
        real = {s: [i for a, b in runs for i in ids[a:b]] for s, runs in self.runs.items()}
        self.vocab = build_vocab(count_tokens(real["train"]), None)  # the training split's tokens, plus ⟨unk⟩
        self.vocab_map = self.vocab.real_ids
        self.splits = {s: torch.from_numpy(to_model_ids(self.vocab, r)) for s, r in real.items()}  # unseen -> ⟨unk⟩
        known = set(real["train"])
        self.val_unknown = Counter(i for i in real["val"] if i not in known)  # tokenizer ids validation alone has
        self.val_unknown_words = unknown_words(load_encoding(encoding), real["val"], known)
        self.starts = {s: window_starts(runs, context) for s, runs in self.runs.items()}
        self.gens = {s: torch.Generator().manual_seed(seed + k) for k, s in enumerate(self.splits)}

    @property
    def val_unk(self) -> tuple[int, int]:
        """(⟨unk⟩ tokens, tokens) of the validation split: ⟨unk⟩ stands for the tokens training never holds."""
        return sum(self.val_unknown.values()), len(self.splits["val"])

    @property
    def vocab_size(self) -> int:
        return len(self.vocab_map)

    def batch(self, split: str, size: int) -> Batch:
        """Random windows: x = data[i : i+T], y = data[i+1 : i+T+1] (the course's get_batch), within one run."""
        data, T, allowed = self.splits[split], self.context, self.starts[split]
        starts = allowed[torch.randint(0, len(allowed), (size,), generator=self.gens[split])]  # (B,)
        offsets = starts[:, None] + torch.arange(T)[None, :]  # (B, T)
        return Batch(src=data[offsets], labels=data[offsets + 1])  # (B, T), (B, T)
