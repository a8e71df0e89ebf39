"""The next word, not only the next token: a word the vocabulary spells in pieces (" mat" = " m" + "at", a Chinese
character in byte pieces) gets its probability as the model would write it. Each of the top first tokens is
continued greedily, one token at a time, while the continuation is still inside the word (letters after letters, or
the rest of an unfinished character); the word's probability is the product of its pieces' probabilities along that
path: the chance the model writes exactly these tokens next, a lower bound of the word's (another spelling of it adds
to it; paths that end in the same word are summed). The model's own probabilities (temperature 1), with the KV cache:
one forward of the text, then one batched step per extra piece.
"""
from __future__ import annotations

import unicodedata
from dataclasses import dataclass

import torch

from ..model import kv_cache
from ..model.transformer import Transformer
from ..text.inputs import real_ids, token_labels
from ..text.tokenizer import load_encoding, token_bytes

FIRST_TOKENS = 20  # the top first tokens each continued into a word
MAX_PIECES = 5  # a word of at most this many tokens (longer ones are cut: the row says so)


@dataclass(frozen=True)
class WordGuess:
    text: str  # the word's text (a broken character's bytes shown as U+FFFD)
    pieces: tuple[tuple[int, ...], ...]  # model ids of each path that spells it, highest probability first
    prob: float  # summed over its paths: each the product of its pieces' probabilities
    complete: bool  # False when the word was still going after MAX_PIECES (or its character stayed unfinished)


def _letter(ch: str) -> bool:
    """A letter of a word the vocabulary may split (Latin, Cyrillic, ...); a CJK character is a word of its own."""
    return ch.isalpha() and not unicodedata.name(ch, "").startswith(("CJK", "HIRAGANA", "KATAKANA", "HANGUL"))


def continues(word: bytes, piece: bytes | None) -> bool:
    """Whether `piece` goes on with `word`: the rest of an unfinished character, or letters right after letters."""
    if piece is None:
        return False
    try:
        text = word.decode("utf-8")
    except UnicodeDecodeError:
        return True  # an unfinished character: whatever comes next is read as its rest (or the word is broken)
    head = piece.decode("utf-8", "ignore")[:1]
    return bool(text) and _letter(text[-1]) and bool(head) and _letter(head)


@torch.inference_mode()
def next_words(model: Transformer, dec: list[int], src: list[int] | None = None, top: int = 10,
               first_tokens: int = FIRST_TOKENS) -> list[WordGuess]:
    """The `top` most likely next words after the model ids `dec` (and the source `src` of an encoder-decoder)."""
    enc = load_encoding(model.cfg.encoding)
    device = next(model.parameters()).device
    src_t = None if src is None else torch.tensor([src], device=device)
    cache = kv_cache.start(model, src_t)
    first = kv_cache.step(model, cache, torch.tensor([dec], device=device), last_only=True)  # (1, 1, vocab)
    probs = torch.softmax(first[0, -1].double(), -1)
    firsts = torch.topk(probs, min(first_tokens, probs.numel()))
    paths = [[int(i)] for i in firsts.indices]  # model ids of each path
    p = firsts.values.tolist()
    raw = [token_bytes(enc, r) for r in real_ids(model, [q[0] for q in paths])]
    named = {i: label for i, (b, label) in enumerate(zip(raw, token_labels(model, [q[0] for q in paths]), strict=True))
             if b is None}  # the unknown id of a compacted vocabulary: no bytes, its label is its word
    raw = [b or b"" for b in raw]
    live = list(range(len(paths)))  # the paths still inside their word; the cache holds one row for each
    _rows(cache, torch.zeros(len(paths), dtype=torch.long, device=device))  # the text's one row, for every path
    for _ in range(min(MAX_PIECES, model.cfg.max_len - len(dec)) - 1):
        new = torch.tensor([[paths[i][-1]] for i in live], device=device)  # (n, 1) each path's last piece
        step_p = torch.softmax(kv_cache.step(model, cache, new, last_only=True)[:, -1].double(), -1)  # (n, vocab)
        best_p, best = step_p.max(-1)  # (n,) the greedy continuation of each path
        going = []
        for row, (i, piece) in enumerate(zip(live, real_ids(model, best.tolist()), strict=True)):
            piece = token_bytes(enc, piece)
            if continues(raw[i], piece):
                paths[i].append(int(best[row]))
                p[i] *= float(best_p[row])
                raw[i] += piece
                going.append(row)
        live = [live[row] for row in going]
        if not live:
            break
        _rows(cache, torch.tensor(going, device=device))
    done = set(range(len(paths))) - set(live)
    words: dict[str, WordGuess] = {}
    for i in range(len(paths)):
        text = named.get(i) or raw[i].decode("utf-8", "replace")
        try:
            raw[i].decode("utf-8")
            whole = i in done
        except UnicodeDecodeError:
            whole = False
        old = words.get(text)
        words[text] = WordGuess(text, (old.pieces if old else ()) + (tuple(paths[i]),), (old.prob if old else 0) + p[i],
                                whole and (old.complete if old else True))
    return sorted(words.values(), key=lambda w: -w.prob)[:top]


def _rows(cache: kv_cache.KVCache, rows: torch.Tensor) -> None:
    """Keep (or repeat) the cache's rows `rows`: every block's keys and values, the encoder's memory."""
    for layer in cache.layers:
        for part in layer.values():
            for name in ("k", "v"):
                if name in part:
                    part[name] = part[name].index_select(0, rows)
    if cache.memory is not None:
        cache.memory = cache.memory.index_select(0, rows)
        if cache.src_lengths is not None:
            cache.src_lengths = cache.src_lengths.index_select(0, rows)
