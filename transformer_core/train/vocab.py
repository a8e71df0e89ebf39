"""Compacted vocabularies over a tiktoken encoding: the K most frequent tokens of a text plus one unknown id.

A model id indexes `Vocab.real_ids`, which is exactly `TransformerConfig.vocab_map` (model id -> tokenizer id).
Model id 0 is the unknown token (its tokenizer id is UNK = -1: it stands for every token outside the
vocabulary and shows as ⟨unk⟩), then extra ids (e.g. BOS / EOS), then the kept tokens from the most to the
least frequent (ties: smaller tokenizer id first).
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from ..text.inputs import UNK, vocab_index


@dataclass(frozen=True)
class Vocab:
    """model id -> tokenizer id, the unknown token at model id 0; `specials` names extra model ids."""

    real_ids: tuple[int, ...]
    specials: tuple[tuple[str, int], ...] = (("unk", 0),)

    @property
    def size(self) -> int:
        return len(self.real_ids)

    @property
    def unk(self) -> int | None:
        """The unknown token's model id (None: a vocabulary with byte fallback, where every token is known)."""
        return dict(self.specials).get("unk")

    def special(self, name: str) -> int:
        return dict(self.specials)[name]

    def index(self) -> dict[int, int]:
        """tokenizer id -> model id (the unknown token is not in it)."""
        return vocab_index(self.real_ids)


def count_tokens(real_ids: Iterable[int]) -> Counter:
    return Counter(int(i) for i in real_ids)


def build_vocab(counts: Counter, k: int | None, extra: Sequence[tuple[str, int]] = ()) -> Vocab:
    """The unknown token, then `extra` (name, tokenizer id) pairs, then the k most frequent tokens (all if None)."""
    reserved = {real for _, real in extra}
    ranked = sorted((i for i in counts if i not in reserved), key=lambda i: (-counts[i], i))
    kept = ranked if k is None else ranked[:k]
    specials = (("unk", 0), *((name, 1 + j) for j, (name, _) in enumerate(extra)))
    return Vocab(real_ids=(UNK, *(real for _, real in extra), *kept), specials=specials)


def full_vocab(enc, extra: Sequence[tuple[str, int]] = ()) -> Vocab:
    """Every token of an encoding (by rank), then `extra` (name, tokenizer id) pairs; no unknown token."""
    ranks = sorted(enc._mergeable_ranks.values())
    return Vocab(real_ids=(*ranks, *(real for _, real in extra)),
                 specials=tuple((name, len(ranks) + j) for j, (name, _) in enumerate(extra)))


def to_model_ids(vocab: Vocab, real_ids: Sequence[int]) -> np.ndarray:
    """Tokenizer ids -> model ids (int64); ids outside the vocabulary become the unknown id."""
    table, unk = vocab.index(), vocab.unk
    if unk is None:
        missing = {int(i) for i in real_ids} - table.keys()
        if missing:
            raise ValueError(f"tokens outside a vocabulary with no unknown token: {sorted(missing)[:8]}")
    return np.fromiter((table.get(int(i), unk) for i in real_ids), dtype=np.int64, count=len(real_ids))


def encode_lines(enc, text: str) -> list[int]:
    """Tokenizer ids of a text encoded one line at a time, each line followed by the id of "\\n" (the corpus
    models' training text; text.tokenizer.encode_by_line says why)."""
    from ..text.tokenizer import encode_by_line

    return encode_by_line(enc, text if text.endswith("\n") else text + "\n")
