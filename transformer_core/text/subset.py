"""A vocabulary with no unknown token: the 256 byte tokens plus a merge-closed subset of a tiktoken encoding.

Every byte is a token, so any UTF-8 text encodes; every kept token's BPE merges pass only through kept tokens, so
BPE with the subset's ranks (the base encoding's own numbers) builds exactly the kept tokens and never another.
A word outside the subset is spelled with smaller kept pieces, as the base encoding would spell a rare word.
The file is an ordinary `.tiktoken` file (base64 token, rank); a `NAME.json` beside it names the base encoding.
"""
from __future__ import annotations

import base64
import json
from collections import Counter
from pathlib import Path


def merge_parts(token: bytes, ranks: dict[bytes, int]) -> list[bytes]:
    """Every token BPE builds on the way from the single bytes of `token` to `token` (itself included)."""
    parts, built = [bytes([b]) for b in token], []
    while len(parts) > 1:
        best = min(((ranks.get(a + b), i) for i, (a, b) in enumerate(zip(parts, parts[1:]))
                    if a + b in ranks), default=None)
        if best is None:
            break  # not reachable by merges (tiktoken then keeps it whole only as a whole piece)
        i = best[1]
        parts[i : i + 2] = [parts[i] + parts[i + 1]]
        built.append(parts[i])
    return built


def choose_subset(counts: Counter, ranks: dict[bytes, int], size: int) -> dict[bytes, int]:
    """The 256 single bytes, then the most counted tokens (by token bytes) with their merge parts, up to `size`."""
    keep = {bytes([b]) for b in range(256)}
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
