"""A corpus from a package registry as training data: one line at a time through the tokenizer, a compacted
vocabulary with an unknown id, random windows, and (optionally) synthetic rows that teach copying.

A synthetic row is a span of L random tokens (L uniform in 8 .. context/2; optionally, half the time, drawn from only
`synthetic_alphabet` tokens so that tokens recur), the same span again, then real text.
The second copy can only be predicted by finding the first one: that is what induction heads do. The loss skips
the first, unpredictable copy (it would only push the output towards uniform). The first `synthetic_first` batches
hold nothing else (each row one span of half the context, twice): the copying circuit forms before the language.

Heads that copy random tokens need not copy text (measured: five heads at 0.96-0.99 on the random-token probe, yet
a repeated everyday sentence's next word was the top guess 7 times in 10). So a row may also begin with the
corpus's own text written twice, as a learner types it ("span span", or "span gap span": a sentence repeated later),
or with a list of unrelated words written twice ("apple, river, chair. apple, river, chair"). The loss skips the
second copy's first token (what starts a repeat cannot be known: learning it would teach the model to repeat
itself) and, for a list, the first copy (random words). A model taught so copied a repeated sentence yet not a word
that its frame does not expect ("The dog sat on the apple. The dog sat on the" → " floor"): `slot_share` of the text
written twice has one of its words swapped for a random word of the vocabulary (a Chinese character for another),
so the copy, not the frame, predicts it the second time.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import torch

from ..text.subset import subset_meta
from ..text.tokenizer import BUNDLED, load_encoding
from .corpora import load_corpus
from .data import IGNORE, Batch
from .vocab import build_vocab, count_tokens, encode_lines, full_vocab, to_model_ids

DEFAULT_CACHE = Path.home() / ".cache" / "transformer-explorer" / "corpora"
SLOT_WORD = re.compile(r"(?<= )[a-z]{3,}\b")  # a lower-case English word after a space, that slot_twice may swap
CHINESE_CHAR = re.compile(r"[\u4e00-\u9fff]")
SPLITS = ("train", "val")


class CorpusData:
    """Training windows over one or more corpora (sampled equally often, or by `weights`), held-out text never
    trained on. An encoding with byte fallback (a shipped subset) gives a vocabulary of all its tokens and no
    unknown token; otherwise the k most frequent tokens plus ⟨unk⟩."""

    def __init__(self, names: tuple[str, ...], context: int, k: int | None, synthetic_fraction: float = 0.0,
                 seed: int = 0, cache_dir: str | Path = "", encoding: str = "cl100k_base",
                 synthetic_first: int = 0, synthetic_alphabet: int = 0, weights: tuple[float, ...] = (),
                 repeat_fraction: float = 0.0, list_fraction: float = 0.0, slot_share: float = 0.0) -> None:
        enc = self.enc = load_encoding(encoding)
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
        self.repeat_fraction, self.list_fraction, self.slot_share = repeat_fraction, list_fraction, slot_share
        if list_fraction or slot_share:
            self.list_words = list_words(enc, self.vocab)
            self.chinese = [len(CHINESE_CHAR.findall(c.train[:2000])) > 500 for c in corpora]

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
            k = int(rng.choice(len(self.weights), p=self.weights))
            stream = self.streams[split][k]
            start = int(rng.integers(0, len(stream) - T - 1))
            row = stream[start : start + T + 1].copy()
            skip, hide = 0, ()
            draw = rng.random() if split == "train" and not pure else 1.0
            if draw < self.repeat_fraction + self.list_fraction:
                first, second = (self.text_twice(rng, stream) if draw < self.repeat_fraction
                                 else self.list_twice(rng, stream, self.chinese[k]))
                row = np.concatenate([first, second, row])[: T + 1]
                hide = (len(first) - 1,)  # the label of the second copy's first token
                if draw >= self.repeat_fraction:
                    skip = len(first) - 1  # a list's first copy: random words
            elif split == "train" and rng.random() < fraction:
                L = (T + 1) // 2 if pure else int(rng.integers(8, T // 2 + 1))
                span = rng.integers(1, self.vocab.size, size=L)  # any token but model id 0 (⟨unk⟩ where there is one)
                if self.synthetic_alphabet and rng.random() < 0.5:  # a few tokens, recurring: the copy must
                    span = rng.choice(span[: self.synthetic_alphabet], size=L)  # match the previous token too
                row = np.concatenate([span, span, row])[: T + 1]
                skip = L  # targets 0 .. L-1: the random first copy, and the second copy's first token
            rows[b], labels[b] = row, row[1:]
            labels[b, :skip] = IGNORE
            labels[b, [h for h in hide if h < T]] = IGNORE
        x = torch.from_numpy(rows[:, :-1])  # (B, T)
        return Batch(src=x, labels=torch.from_numpy(labels))  # (B, T), (B, T)

    # ------------------------------------------------------------------ text written twice
    def text_of(self, model_ids: np.ndarray) -> str:
        """The text of some model ids (a character cut at either end is dropped)."""
        real = self.vocab.real_ids
        raw = b"".join(self.enc.decode_single_token_bytes(real[int(i)]) for i in model_ids if real[int(i)] >= 0)
        return raw.decode("utf-8", "ignore")

    def model_ids(self, text: str) -> np.ndarray:
        return to_model_ids(self.vocab, self.enc.encode_ordinary(text))

    def text_twice(self, rng, stream: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """A span of the corpus's text as the first copy, then (half the time after a gap of other text) the
        same span again: model ids of each part, the second part starting with the second copy (`slot_share` of
        the time a span with a word swapped: slot_twice)."""
        if self.slot_share and rng.random() < self.slot_share:
            return self.slot_twice(rng, stream)
        return self.span_twice(rng, stream)

    def span_of(self, rng, stream: np.ndarray) -> str:
        """A span of 6 to context/3 tokens of the corpus's text, as text."""
        s = int(rng.integers(0, len(stream) - self.context))
        return self.text_of(stream[s : s + int(rng.integers(6, self.context // 3))]).strip()

    def span_twice(self, rng, stream: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        T = self.context
        span = self.span_of(rng, stream) or "."
        sep = " " if span[:1].isascii() else ""
        gap = ""
        if rng.random() < 0.5:
            g = int(rng.integers(0, len(stream) - T))
            gap = self.text_of(stream[g : g + int(rng.integers(2, T // 4))]).strip()
            gap = gap + sep if gap else ""
        return self.model_ids(span + sep + gap), self.model_ids(span + sep)

    def corpus_chars(self, rng, stream: np.ndarray, n: int) -> list[str]:
        """The Chinese characters of n tokens of the corpus's text from a random place (slot_twice, list_twice)."""
        g = int(rng.integers(0, len(stream) - 4))
        return CHINESE_CHAR.findall(self.text_of(stream[g : g + n]))

    def slot_twice(self, rng, stream: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """A span of the corpus's text with one of its lower-case English words swapped for a random word of the
        vocabulary (or, in Chinese, one character for another of the corpus), written twice."""
        span = self.span_of(rng, stream)
        if words := list(SLOT_WORD.finditer(span)):
            m = words[int(rng.integers(0, len(words)))]
            span = span[: m.start()] + self.list_words[int(rng.integers(0, len(self.list_words)))] + span[m.end() :]
        elif chars := list(CHINESE_CHAR.finditer(span)):
            m = chars[int(rng.integers(0, len(chars)))]
            if other := self.corpus_chars(rng, stream, 3):
                span = span[: m.start()] + other[0] + span[m.end() :]
        else:  # neither: a plain span
            return self.span_twice(rng, stream)
        sep = " " if span[:1].isascii() else ""
        return self.model_ids(span + sep), self.model_ids(span + sep)

    def list_twice(self, rng, stream: np.ndarray, chinese: bool) -> tuple[np.ndarray, np.ndarray]:
        """A list of 4-12 unrelated words (English words of the vocabulary, or one or two Chinese characters of
        the corpus), then the same list again after a full stop or a line break."""
        n = int(rng.integers(4, 13))
        if chinese:
            items = []
            while len(items) < n:
                word = "".join(self.corpus_chars(rng, stream, 2))
                if word:
                    items.append(word[: int(rng.integers(1, 3))])
            listed, end = "、".join(items), ["。", "\n", "；"][int(rng.integers(0, 3))]
        else:
            items = [self.list_words[int(i)] for i in rng.integers(0, len(self.list_words), size=n)]
            listed, end = ", ".join(items), [". ", "\n", ", "][int(rng.integers(0, 3))]
        return self.model_ids(listed + end), self.model_ids(listed + end)


def list_words(enc, vocab) -> list[str]:
    """The vocabulary's lower-case English words of three letters or more (" river" -> "river")."""
    out = []
    for real in vocab.real_ids:
        if real >= 0 and real not in enc._special_tokens.values():
            raw = enc.decode_single_token_bytes(real)
            if raw[:1] == b" " and raw[1:].isalpha() and raw[1:].islower() and len(raw) > 3 and raw.isascii():
                out.append(raw[1:].decode())
    return out
