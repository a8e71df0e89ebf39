"""Why two tokenizations of one text differ: each encoding's token count and, for a shipped subset (subset.py),
how many of its base encoding's tokens it spells in smaller pieces. The Tokenizer page's one-line answer."""
from __future__ import annotations

from .subset import subset_meta
from .tokenizer import BUNDLED, load_encoding, tokenize


def compare_counts(text: str, encoding: str, others: tuple[str, ...] = ("cl100k_base", "r50k_base")) -> dict:
    """Why a model's tokenization differs from the reference encodings on one text: each encoding's token count and,
    for a subset, how many of its base encoding's tokens it does not keep (each spelled in smaller pieces)."""
    counts = {name: len(tokenize(text, name, by_line=name == encoding).ids) for name in (encoding, *others)}
    meta = subset_meta(BUNDLED, encoding)
    out = {"counts": counts, "subset": meta is not None}
    if meta is not None:
        kept = set(load_encoding(encoding)._mergeable_ranks.values())
        base_ids = tokenize(text, meta["base"]).ids
        out |= {"base": meta["base"], "size": meta["size"], "base_size": load_encoding(meta["base"]).n_vocab,
                "not_kept": sum(1 for i in base_ids if i not in kept)}
    return out
