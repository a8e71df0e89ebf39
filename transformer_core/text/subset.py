"""A vocabulary with no unknown token: the 256 byte tokens plus a merge-closed subset of a tiktoken encoding.

Every byte is a token, so any UTF-8 text encodes; every kept token's BPE merges pass only through kept tokens, so
BPE with the subset's ranks (the base encoding's own numbers) builds exactly the kept tokens and never another.
A word outside the subset is spelled with smaller kept pieces, as the base encoding would spell a rare word.
The file is an ordinary `.tiktoken` file (base64 token, rank); a `NAME.json` beside it names the base encoding.

A character-whole vocabulary (`character_whole`, `add_characters`) also keeps every chosen character in one token:
cl100k_base spells most Chinese characters in two or three byte pieces, so it first drops the tokens that hold a
piece of a character beside a character boundary (the merges that would cut a character across two tokens), then
gives each chosen character a token of its own where the base encoding has none (a new rank after the base's ranks
and special tokens, its first two bytes a token before it), so BPE always builds the character whole.
"""
from __future__ import annotations

import base64
import json
from collections import Counter
from pathlib import Path


def bpe(token: bytes, ranks: dict[bytes, int]) -> tuple[list[bytes], list[bytes]]:
    """BPE on a token's bytes with these ranks: the pieces it ends with, and every token it built on the way."""
    parts, built = [bytes([b]) for b in token], []
    while len(parts) > 1:
        best = min(((ranks.get(a + b), i) for i, (a, b) in enumerate(zip(parts, parts[1:]))
                    if a + b in ranks), default=None)
        if best is None:
            break  # not reachable by merges (tiktoken then keeps it whole only as a whole piece)
        i = best[1]
        parts[i : i + 2] = [parts[i] + parts[i + 1]]
        built.append(parts[i])
    return parts, built


def merge_parts(token: bytes, ranks: dict[bytes, int]) -> list[bytes]:
    """Every token BPE builds on the way from the single bytes of `token` to `token` (itself included)."""
    return bpe(token, ranks)[1]


def choose_subset(counts: Counter, ranks: dict[bytes, int], size: int,
                  keep: set[bytes] = frozenset()) -> dict[bytes, int]:
    """The 256 single bytes (and `keep`), then the most counted tokens (by token bytes) with their merge parts, up
    to `size`."""
    keep = {bytes([b]) for b in range(256)} | set(keep)
    for token, _ in sorted(counts.items(), key=lambda kv: (-kv[1], ranks[kv[0]])):
        if len(keep) >= size:
            break
        new = [p for p in merge_parts(token, ranks) if p not in keep]
        if token in keep or not new or new[-1] != token or len(keep) + len(new) > size:
            continue  # already kept, unreachable by merges, or too big to fit whole
        keep.update(new)
    return {t: ranks[t] for t in sorted(keep, key=ranks.__getitem__)}


def is_merge_closed(subset: dict[bytes, int], ranks: dict[bytes, int]) -> bool:
    """Whether every kept token's merge parts are kept, and every byte is a token."""
    return all(bytes([b]) in subset for b in range(256)) and all(
        p in subset for t in subset for p in merge_parts(t, ranks))


def utf8_units(token: bytes) -> list[tuple[bool, bytes]]:
    """A token's bytes as UTF-8 characters: (whole, bytes) for each; a piece of a character is not whole."""
    out, i = [], 0
    while i < len(token):
        lead = token[i]
        n = 1 if lead < 0x80 else 2 if 0xC0 <= lead < 0xE0 else 3 if 0xE0 <= lead < 0xF0 else 4 if lead >= 0xF0 else 0
        if n == 0:  # continuation bytes: the end of a character begun before this token
            j = i
            while j < len(token) and 0x80 <= token[j] < 0xC0:
                j += 1
            out.append((False, token[i:j]))
            i = j
            continue
        j = i + 1
        while j < min(i + n, len(token)) and 0x80 <= token[j] < 0xC0:
            j += 1
        out.append((j - i == n, token[i:j]))  # a whole character, or the start of one (cut by the token's end)
        i = j
    return out


def splits_a_character(token: bytes) -> bool:
    """Whether a token holds a piece of a character beside a character boundary ("的" + the first byte of the
    next character): BPE merging it would cut a character across two tokens. A piece alone is fine."""
    units = utf8_units(token)
    return len(units) > 1 and not all(whole for whole, _ in units)


def character_whole(ranks: dict[bytes, int]) -> dict[bytes, int]:
    """The base ranks without the tokens that split a character, and without any token that BPE can then no
    longer build (repeated until none is left): with these ranks no merge ever cuts a character."""
    kept = {t: r for t, r in ranks.items() if not splits_a_character(t)}
    while True:
        lost = [t for t in kept if len(t) > 1 and (merge_parts(t, kept) or [b""])[-1] != t]
        if not lost:
            return kept
        for t in lost:
            del kept[t]


def add_characters(subset: dict[bytes, int], chars: list[str], base: dict[bytes, int],
                   first_rank: int) -> dict[bytes, int]:
    """`subset` plus one token for each character: the base's own (with its merge parts) where it has one, else a
    new one ranked from `first_rank` on, after its first two bytes (a new token too where the base lacks them).
    `base` are character-whole ranks (`character_whole`)."""
    out, rank = dict(subset), first_rank
    for ch in chars:
        token = ch.encode("utf-8")
        if token in out:
            continue
        if token in base:
            out.update({p: base[p] for p in merge_parts(token, base)})
            continue
        if len(token) != 3:
            continue  # (a character of the supplementary planes: rare, left in byte pieces)
        head = token[:2]
        if head not in out:
            out[head], rank = base.get(head, rank), rank + (head not in base)
        out[token], rank = rank, rank + 1
    return out


def words_and_characters(counts: Counter, ranks: dict[bytes, int], size: int, chars: list[str],
                         words: list[bytes], first_rank: int) -> dict[bytes, int]:
    """A character-whole vocabulary of `size` tokens: the 256 bytes, each of `chars` whole (`add_characters`), each
    of `words` that the base encoding holds as one token, then the most counted tokens made of whole characters."""
    base = character_whole(ranks)
    keep = add_characters({bytes([b]): ranks[bytes([b])] for b in range(256)}, chars, base, first_rank)
    for word in words:
        if word in base:
            keep.update({p: base[p] for p in merge_parts(word, base)})
    whole = Counter({t: c for t, c in counts.items() if t in base and all(w for w, _ in utf8_units(t))})
    from_base = {t for t in keep if t in base}
    chosen = choose_subset(whole, base, size - (len(keep) - len(from_base)), from_base)
    return dict(sorted({**chosen, **keep}.items(), key=lambda kv: kv[1]))


def write_subset(folder: Path, name: str, subset: dict[bytes, int], base: str, about: dict) -> Path:
    """NAME.tiktoken (tiktoken's format) and NAME.json (the base encoding and how the subset was chosen)."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = (f"{base64.b64encode(t).decode('ascii')} {r}\n" for t, r in subset.items())
    (folder / f"{name}.tiktoken").write_text("".join(lines), encoding="ascii")
    meta = {"base": base, "size": len(subset), **about}
    (folder / f"{name}.json").write_text(json.dumps(meta, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    return folder / f"{name}.tiktoken"


def subset_meta(folder: Path, name: str) -> dict | None:
    """NAME.json of a shipped subset (None when there is none)."""
    if not name.replace("_", "").replace("-", "").isalnum():
        return None  # a name, never a path
    path = folder / f"{name}.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
