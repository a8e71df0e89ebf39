"""A corpus from a package registry as training data: one line at a time through the tokenizer, a compacted
vocabulary with an unknown id, random windows, and (optionally) synthetic rows that teach copying.

A synthetic row is a span of L random tokens (L uniform in 8 .. context/2; optionally, half the time, drawn from only
`synthetic_alphabet` tokens so that tokens recur), the same span again, then real text.
The second copy can only be predicted by finding the first one: that is what induction heads do. The loss skips
the first, unpredictable copy (it would only push the output towards uniform). The first `synthetic_first` batches
hold nothing else (each row one span of half the context, twice): the copying circuit forms before the language.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from ..text.subset import subset_meta
from ..text.tokenizer import BUNDLED, load_encoding
from .corpora import load_corpus
from .data import IGNORE, Batch
from .vocab import build_vocab, count_tokens, encode_lines, full_vocab, to_model_ids

DEFAULT_CACHE = Path.home() / ".cache" / "transformer-explorer" / "corpora"
SPLITS = ("train", "val")


class CorpusData:
    """Training windows over one or more corpora (sampled equally often, or by `weights`), held-out text never
    trained on. An encoding with byte fallback (a shipped subset) gives a vocabulary of all its tokens and no
    unknown token; otherwise the k most frequent tokens plus ⟨unk⟩."""

    def __init__(self, names: tuple[str, ...], context: int, k: int | None, synthetic_fraction: float = 0.0,
                 seed: int = 0, cache_dir: str | Path = "", encoding: str = "cl100k_base",
                 synthetic_first: int = 0, synthetic_alphabet: int = 0, weights: tuple[float, ...] = ()) -> None:
        enc = load_encoding(encoding)
        corpora = [load_corpus(n, Path(cache_dir) if cache_dir else DEFAULT_CACHE) for n in names]
        train_real = [encode_lines(enc, c.train) for c in corpora]
        held_real = [encode_lines(enc, c.heldout) for c in corpora]
        if subset_meta(BUNDLED, encoding) is not None:  # byte fallback: every token known, the special ones too
            self.vocab = full_vocab(enc, [(s.strip("<|>"), i) for s, i in sorted(enc._special_tokens.items(),
                                                                                 key=lambda si: si[1])])
        else:
            self.vocab = build_vocab(count_tokens(i for ids in train_real for i in ids), k)
        p = np.asarray(weights or [1.0] * len(names), dtype=np.float64)
        self.weights = p / p.sum()  # (n_corpora,) the chance a row comes from each corpus
        self.streams = {"train": [to_model_ids(self.vocab, ids) for ids in train_real],
                        "val": [to_model_ids(self.vocab, ids) for ids in held_real]}
        self.heldout_texts = {n: c.heldout for n, c in zip(names, corpora, strict=True)}  # (a sample ships)
        self.context, self.synthetic_fraction = context, synthetic_fraction
        self.provenance = [c.provenance for c in corpora]
        self.rngs = {s: np.random.default_rng(seed + i) for i, s in enumerate(SPLITS)}
        self.synthetic_first, self.train_batches = synthetic_first, 0  # the first batches: synthetic rows only
        self.synthetic_alphabet = synthetic_alphabet

    @property
    def vocab_size(self) -> int:
        return self.vocab.size

    @property
    def vocab_map(self) -> tuple[int, ...]:
        return self.vocab.real_ids

    def batch(self, split: str, size: int) -> Batch:
        """Random windows x = s[i:i+T], y = s[i+1:i+T+1] of a corpus picked uniformly; training rows may be
        synthetic (a random span written twice, the loss on the second copy and the text after it)."""
        rng, T = self.rngs[split], self.context
        fraction, pure = self.synthetic_fraction, False
        if split == "train":
            pure = self.train_batches < self.synthetic_first  # first: whole rows of one span written twice
            fraction = 1.0 if pure else fraction
            self.train_batches += 1
        rows, labels = np.empty((size, T + 1), dtype=np.int64), np.empty((size, T), dtype=np.int64)
        for b in range(size):
            stream = self.streams[split][int(rng.choice(len(self.weights), p=self.weights))]
            start = int(rng.integers(0, len(stream) - T - 1))
            row = stream[start : start + T + 1].copy()
            skip = 0
            if split == "train" and rng.random() < fraction:
                L = (T + 1) // 2 if pure else int(rng.integers(8, T // 2 + 1))
                span = rng.integers(1, self.vocab.size, size=L)  # any token but model id 0 (⟨unk⟩ where there is one)
                if self.synthetic_alphabet and rng.random() < 0.5:  # a few tokens, recurring: the copy must
                    span = rng.choice(span[: self.synthetic_alphabet], size=L)  # match the previous token too
                row = np.concatenate([span, span, row])[: T + 1]
                skip = L  # targets 0 .. L-1: the random first copy, and the second copy's first token
            rows[b], labels[b] = row, row[1:]
            labels[b, :skip] = IGNORE
        x = torch.from_numpy(rows[:, :-1])  # (B, T)
        return Batch(src=x, labels=torch.from_numpy(labels))  # (B, T), (B, T)
