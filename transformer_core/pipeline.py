"""From user text to a traced forward: tokenize safely, map to model ids, pad, trace."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .masks import pad_batch
from .model import Transformer
from .tokenizer import Tokenized, token_strings, tokenize
from .trace import Trace, run_with_trace


class InputError(ValueError):
    """User input the model cannot take; the message is meant for the learner."""


@dataclass
class Prepared:
    src: Tokenized
    tgt: Tokenized | None
    src_ids: torch.Tensor  # (1, Ts) model ids
    tgt_ids: torch.Tensor | None  # (1, Tt)


def to_model_ids(tok: Tokenized, model: Transformer) -> list[int]:
    """Tokenizer ids -> model ids (identity, or via the compacted vocabulary's map)."""
    cfg = model.cfg
    if not cfg.vocab_map:
        bad = sorted({i for i in tok.ids if i >= cfg.vocab_size})
        if bad:
            raise InputError(f"token ids {bad[:5]} are outside this model's vocabulary of {cfg.vocab_size}")
        return tok.ids
    index = {real: i for i, real in enumerate(cfg.vocab_map)}
    unknown = [t.text for t in tok.tokens if t.id not in index]
    if unknown:
        raise InputError(
            f"this model's vocabulary was compacted to the {cfg.vocab_size} tokens of its training text; "
            f"these tokens are not in it: {', '.join(repr(u) for u in unknown[:8])}"
        )
    return [index[i] for i in tok.ids]


def prepare(model: Transformer, text: str, tgt_text: str | None = None, *, allow_special: bool = False,
            extra: tuple[int, ...] = ()) -> Prepared:
    """Tokenize the text(s) for this model, truncated to max_len; raise InputError on unusable input.

    `extra` are generated model ids appended to the decoder's sequence (the prompt, or the target).
    """
    cfg = model.cfg

    def one(t: str, label: str) -> tuple[Tokenized, torch.Tensor]:
        if not t or not t.strip():
            raise InputError(f"The {label} is empty: type a sentence.")
        tok = tokenize(t, cfg.encoding, allow_special=allow_special, max_tokens=cfg.max_len)
        return tok, torch.tensor([to_model_ids(tok, model)], dtype=torch.long)

    src, src_ids = one(text, "input text")
    tgt, tgt_ids = one(tgt_text, "target text") if model.is_encoder_decoder else (None, None)
    if extra:
        grown = torch.cat([tgt_ids if tgt_ids is not None else src_ids, torch.tensor([list(extra)])], dim=1)
        if grown.size(1) > cfg.max_len:
            raise InputError(f"the sequence would exceed the model's max_len of {cfg.max_len} tokens")
        if tgt_ids is not None:
            tgt_ids = grown
        else:
            src_ids = grown
    return Prepared(src, tgt, src_ids, tgt_ids)


def real_ids(model: Transformer, ids) -> list[int]:
    """Model ids -> tokenizer ids (through the compacted vocabulary's map when there is one)."""
    vmap = model.cfg.vocab_map
    return [vmap[int(i)] if vmap else int(i) for i in ids]


def token_labels(model: Transformer, ids) -> list[str]:
    """Display strings of model ids, as the tokenizer shows them."""
    return token_strings(real_ids(model, ids), model.cfg.encoding)


def trace_text(model: Transformer, text: str, tgt_text: str | None = None, *, masks=None, names=None,
               allow_special: bool = False) -> tuple[Prepared, Trace]:
    """Tokenize and run one traced forward on a single text (and target)."""
    prep = prepare(model, text, tgt_text, allow_special=allow_special)
    _, trace = run_with_trace(model, prep.src_ids, prep.tgt_ids, masks=masks, names=names)
    return prep, trace


def padded_batch(texts: list[str], encoding: str = "cl100k_base", pad_id: int = 0, max_tokens: int | None = None):
    """The course's padded batch: (ids (B, T), lengths (B,), padding mask (B, T) from lengths)."""
    seqs = [tokenize(t, encoding, max_tokens=max_tokens).ids for t in texts]
    ids, lengths = pad_batch(seqs, pad_id)
    mask = torch.arange(ids.size(1))[None, :] < lengths[:, None]
    return ids, lengths, mask
