"""Why two tokenizations of one text differ: each encoding's token count and, for a shipped subset (subset.py),
how many of its base encoding's tokens it spells in smaller pieces and how many of its own tokens (whole characters
the base spells in byte pieces) it uses. The Tokenizer page's one-line answer."""
from __future__ import annotations

from .subset import subset_meta
from .tokenizer import BUNDLED, load_encoding, tokenize


def compare_counts(text: str, encoding: str, others: tuple[str, ...] = ("cl100k_base", "r50k_base"), *,
                   max_tokens: int | None = None, by_line: bool | None = None, allow_special: bool = False) -> dict:
    """Why a model's tokenization differs from the reference encodings on one text: each encoding's token count and,
    for a subset, how many of its base encoding's tokens it does not keep (each spelled in smaller pieces), how many
    tokens it adds to them ("added": whole characters; "kept" + "added" = "size") and how many of those this text
    uses ("whole").

    Counted as `tokenize` counts with these arguments (a page passes what its token lists used, so the sentence
    cites the counts it shows); by_line None: the model's own encoding one line at a time, as a model reads text."""
    def ids(name: str) -> list[int]:
        return tokenize(text, name, allow_special=allow_special, max_tokens=max_tokens,
                        by_line=name == encoding if by_line is None else by_line).ids

    counts = {name: len(ids(name)) for name in (encoding, *others)}
    meta = subset_meta(BUNDLED, encoding)
    out = {"counts": counts, "subset": meta is not None}
    if meta is not None:
        kept, base_size = set(load_encoding(encoding)._mergeable_ranks.values()), load_encoding(meta["base"]).n_vocab
        added = int(meta.get("new_tokens", 0))  # ranked after the base's tokens
        out |= {"base": meta["base"], "size": meta["size"], "base_size": base_size, "kept": meta["size"] - added,
                "added": added, "not_kept": sum(1 for i in ids(meta["base"]) if i not in kept),
                "whole": sum(1 for i in ids(encoding) if i >= base_size)}
    return out
