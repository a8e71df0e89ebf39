"""BPE merge playback: how tiktoken builds tokens from bytes. The text is first split into pre-token chunks by
the encoding's regex; each chunk starts as single bytes, and the adjacent pair whose concatenation has the lowest
rank (the leftmost one on a tie) is merged, again and again, until no adjacent pair is a token. A token's rank is
also its id.
"""
from __future__ import annotations

import heapq
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import regex

from ..errors import InputError
from ..text.tokenizer import DEFAULT_ENCODING, clean_text, display_bytes, load_encoding


@dataclass(frozen=True)
class MergeStep:
    """One merge: the parts after it, the pair that was merged (at index `at` of the new parts), its rank."""

    parts: tuple[bytes, ...]
    pair: tuple[bytes, bytes]
    rank: int
    at: int


def _merge(piece: bytes, ranks: Mapping[bytes, int], record: bool) -> tuple[list[bytes], list[MergeStep]]:
    """tiktoken's byte-pair merge of one chunk: (final parts, the steps when `record`); O(n log n) with a heap."""
    n = len(piece)
    end = list(range(1, n + 1))  # end[s]: where the part starting at s ends (for live starts)
    prev = list(range(-1, n - 1))  # prev[s]: the start of the part before
    live = [True] * n
    heap: list[tuple[int, int, int, int]] = []  # (rank, left start, right start, right end): lowest, leftmost first

    def push(a: int) -> None:
        b = end[a]
        if b < n and (r := ranks.get(piece[a:end[b]])) is not None:
            heapq.heappush(heap, (r, a, b, end[b]))

    for a in range(n - 1):
        push(a)
    steps = []
    while heap:
        r, a, b, c = heapq.heappop(heap)
        if not (live[a] and end[a] == b and live[b] and end[b] == c):
            continue  # an entry for a pair that an earlier merge changed
        live[b], end[a] = False, c
        if c < n:
            prev[c] = a
        push(a)
        if prev[a] >= 0:
            push(prev[a])
        if record:
            starts = [s for s in range(n) if live[s]]
            steps.append(MergeStep(tuple(piece[s:end[s]] for s in starts), (piece[a:b], piece[b:c]), r,
                                   starts.index(a)))
    parts, s = [], 0
    while s < n:
        parts.append(piece[s:end[s]])
        s = end[s]
    return parts, steps


def merge_steps(piece: bytes, ranks: Mapping[bytes, int]) -> list[MergeStep]:
    """Every merge tiktoken's byte-pair algorithm makes on one chunk of bytes, in order."""
    return _merge(piece, ranks, record=True)[1]


def byte_pair_parts(piece: bytes, ranks: Mapping[bytes, int]) -> list[bytes]:
    """The parts (tokens' bytes) one chunk ends as."""
    return _merge(piece, ranks, record=False)[0]


@dataclass(frozen=True)
class TokenPlayback:
    """How one token is built: its bytes, then the merges (the last one leaves the token as one part)."""

    id: int
    raw: bytes
    label: str
    steps: list[MergeStep]

    @property
    def n_merges(self) -> int:
        return len(self.steps)

    def table(self) -> list[dict]:
        """One row per merge: step, the two parts merged, the rank, the parts after it (shown as text)."""
        return [{"step": i + 1, "left": display_bytes(s.pair[0]), "right": display_bytes(s.pair[1]), "rank": s.rank,
                 "parts": [display_bytes(p) for p in s.parts]} for i, s in enumerate(self.steps)]

    def arrays(self) -> dict[str, np.ndarray]:
        return {"ranks": np.array([s.rank for s in self.steps], dtype=np.int64),
                "n_parts": np.array([len(s.parts) for s in self.steps], dtype=np.int64)}


def token_playback(token_id: int, encoding: str = DEFAULT_ENCODING) -> TokenPlayback:
    """The merges that build one token (a tokenizer id, not a model id); InputError for special tokens."""
    enc = load_encoding(encoding)
    ranks = enc._mergeable_ranks  # bytes -> rank (= token id)
    try:
        raw = enc.decode_single_token_bytes(int(token_id))
    except (KeyError, ValueError, TypeError, OverflowError):
        raw = None
    if raw is None or ranks.get(raw) != int(token_id):
        raise InputError("bpe_not_merged", id=str(token_id)[:20], encoding=encoding)
    return TokenPlayback(int(token_id), raw, display_bytes(raw), merge_steps(raw, ranks))


def chunks(text: str, encoding: str = DEFAULT_ENCODING) -> list[str]:
    """The pre-token chunks the encoding's regex splits a text into (BPE never merges across them)."""
    return regex.findall(load_encoding(encoding)._pat_str, clean_text(text)[0])


@dataclass(frozen=True)
class TokenMerges:
    id: int
    label: str
    n_bytes: int
    n_merges: int  # merges inside this token's bytes (n_bytes - 1)
    chunk: int  # index of the pre-token chunk it comes from


@dataclass(frozen=True)
class TextMerges:
    chunks: list[str]
    tokens: list[TokenMerges]
    TOKENIZER_IDS = True  # its ids are the tokenizer's (export adds no mapping)

    @property
    def ids(self) -> list[int]:
        return [t.id for t in self.tokens]

    @property
    def n_merges(self) -> int:
        return sum(t.n_merges for t in self.tokens)

    def arrays(self) -> dict[str, np.ndarray]:
        return {"ids": np.array(self.ids, dtype=np.int64),
                "n_merges": np.array([t.n_merges for t in self.tokens], dtype=np.int64),
                "chunk": np.array([t.chunk for t in self.tokens], dtype=np.int64)}


def text_merges(text: str, encoding: str = DEFAULT_ENCODING) -> TextMerges:
    """Every token of a text (special-token text as plain text, as the app tokenizes) and the merges it took."""
    ranks = load_encoding(encoding)._mergeable_ranks
    pieces = chunks(text, encoding)
    tokens = []
    for c, chunk in enumerate(pieces):
        for part in byte_pair_parts(chunk.encode("utf-8"), ranks):
            tokens.append(TokenMerges(ranks[part], display_bytes(part), len(part), len(part) - 1, c))
    return TextMerges(pieces, tokens)


HINT_WORDS = (" hello", " Transformer")  # the BPE page's examples, built by the model's own encoding
COMMON_HAN, RARE_HAN = "的是人我中", "踩龘罄"  # candidates for a common character (one token) and a rarer one (bytes)


@dataclass(frozen=True)
class WordBuild:
    """How an encoding builds a short text: the tokens it ends as and every merge on the way, in order."""

    text: str
    parts: tuple[bytes, ...]
    steps: tuple[MergeStep, ...]

    @property
    def n_merges(self) -> int:
        return len(self.steps)


def word_build(text: str, encoding: str = DEFAULT_ENCODING) -> WordBuild:
    """The tokens and the merges of a short text (chunk by chunk, as text_merges)."""
    ranks = load_encoding(encoding)._mergeable_ranks
    parts, steps = [], []
    for chunk in chunks(text, encoding):
        p, s = _merge(chunk.encode("utf-8"), ranks, record=True)
        parts += p
        steps += s
    return WordBuild(text, tuple(parts), tuple(steps))


def han_examples(encoding: str = DEFAULT_ENCODING) -> tuple[WordBuild | None, WordBuild | None]:
    """A common Chinese character the encoding makes one token, and a rarer one it leaves as single bytes (None
    where no candidate is so)."""
    builds = [word_build(c, encoding) for c in COMMON_HAN + RARE_HAN]
    common = next((b for b in builds[: len(COMMON_HAN)] if len(b.parts) == 1), None)
    rare = next((b for b in builds[len(COMMON_HAN):] if b.n_merges == 0), None)
    return common, rare
