"""From user text to a traced forward: tokenize safely, map to model ids, pad, trace."""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import torch

from ..errors import InputError
from ..model.masks import pad_batch
from ..model.trace import Trace, run_with_trace
from ..model.transformer import Transformer
from .tokenizer import Tokenized, decode, token_strings, tokenize

UNK = -1  # in a compacted vocabulary's map: the model id that stands for every token outside it
UNK_LABEL = "⟨unk⟩"


@dataclass
class Prepared:
    src: Tokenized
    tgt: Tokenized | None
    src_ids: torch.Tensor  # (1, Ts) model ids
    tgt_ids: torch.Tensor | None  # (1, Tt)
    src_unknown: list[int] = field(default_factory=list)  # positions mapped to the unknown id
    tgt_unknown: list[int] = field(default_factory=list)
    cut_from: int | None = None  # tokens before cut() shortened the sequences (None: not cut)

    def cut(self, n: int) -> Prepared:
        """The same input with each sequence cut to its first n tokens (what fits a memory budget)."""
        if n >= self.longest:
            return self
        return Prepared(self.src, self.tgt, self.src_ids[:, :n], None if self.tgt_ids is None else self.tgt_ids[:, :n],
                        [p for p in self.src_unknown if p < n], [p for p in self.tgt_unknown if p < n], self.longest)

    @property
    def longest(self) -> int:
        """The longer of the two sequences (what a traced forward's memory grows with)."""
        return max(self.src_ids.size(1), 0 if self.tgt_ids is None else self.tgt_ids.size(1))


@lru_cache(maxsize=32)
def vocab_index(vocab_map: tuple[int, ...]) -> dict[int, int]:
    """Tokenizer id -> model id of a compacted vocabulary (the unknown slot is not in it)."""
    return {real: i for i, real in enumerate(vocab_map) if real != UNK}


def unknown_id(model: Transformer) -> int | None:
    """The model id of the unknown token, or None when the vocabulary has none (every token must be known)."""
    vmap = model.cfg.vocab_map
    return vmap.index(UNK) if UNK in vmap else None


def end_of_text_id(model: Transformer) -> int | None:
    """The model id of its encoding's end-of-text token (None when the model has no id for it)."""
    try:
        from .tokenizer import load_encoding

        real = load_encoding(model.cfg.encoding).eot_token
    except Exception:  # noqa: BLE001 - an encoding that cannot load: nothing to stop at
        return None
    vmap = model.cfg.vocab_map
    if vmap:
        return vocab_index(vmap).get(real)
    return real if real < model.cfg.vocab_size else None


def missing_positions(tok: Tokenized, model: Transformer) -> list[int]:
    """Positions of the tokens a model's vocabulary does not hold (none for a full vocabulary)."""
    if not model.cfg.vocab_map:
        return [pos for pos, i in enumerate(tok.ids) if i >= model.cfg.vocab_size]
    index = vocab_index(model.cfg.vocab_map)
    return [pos for pos, i in enumerate(tok.ids) if i not in index]


def to_model_ids(tok: Tokenized, model: Transformer) -> tuple[list[int], list[int]]:
    """Tokenizer ids -> (model ids, positions that became the unknown id).

    A full vocabulary is the identity; a compacted one maps through its table, and a token outside it becomes
    the unknown id when the model has one. A model without one (a task with its own alphabet) refuses.
    """
    cfg = model.cfg
    if not cfg.vocab_map:
        if any(i >= cfg.vocab_size for i in tok.ids):
            raise InputError("ids_out_of_vocab", what=tok.text[:20], top=cfg.vocab_size - 1)
        return tok.ids, []
    index, unk = vocab_index(cfg.vocab_map), unknown_id(model)
    missing = missing_positions(tok, model)
    if missing and unk is None:
        # each missing character once, whole ('小'), not its byte pieces ('<0x20><0xE5><0xB0>', '<0x8F>')
        whole = {m: chars for chars, members in tok.groups for m in members}
        words = (whole.get(p, tok.tokens[p].text) for p in missing)
        shown = ", ".join(repr(x) for x in list(dict.fromkeys(w.strip() or w for w in words))[:8])
        raise InputError("tokens_not_in_vocab", n=cfg.vocab_size, tokens=shown)
    return [index.get(i, unk) for i in tok.ids], missing


def prepare(model: Transformer, text: str, tgt_text: str | None = None, *, allow_special: bool = False,
            extra: tuple[int, ...] = ()) -> Prepared:
    """Tokenize the text(s) for this model, truncated to max_len; raise InputError on unusable input.

    `extra` are generated model ids appended to the decoder's sequence (the prompt, or the target).
    """
    cfg = model.cfg

    def one(t: str, label: str) -> tuple[Tokenized, torch.Tensor, list[int]]:
        if not t or not t.strip():
            raise InputError(f"empty_{label}")
        tok = tokenize(t, cfg.encoding, allow_special=allow_special, max_tokens=cfg.max_len,
                       by_line=bool(cfg.vocab_map))  # as its training text was read
        ids, unknown = to_model_ids(tok, model)
        return tok, torch.tensor([ids], dtype=torch.long), unknown

    src, src_ids, src_unk = one(text, "input")
    tgt, tgt_ids, tgt_unk = one(tgt_text, "target") if model.is_encoder_decoder else (None, None, [])
    if extra:
        grown = torch.cat([tgt_ids if tgt_ids is not None else src_ids, torch.tensor([list(extra)])], dim=1)
        if grown.size(1) > cfg.max_len:
            raise InputError("sequence_full", max_len=cfg.max_len)
        if tgt_ids is not None:
            tgt_ids = grown
        else:
            src_ids = grown
    return Prepared(src, tgt, src_ids, tgt_ids, src_unk, tgt_unk)


def real_ids(model: Transformer, ids) -> list[int]:
    """Model ids -> tokenizer ids (through the compacted vocabulary's map; the unknown id stays UNK = -1)."""
    vmap = model.cfg.vocab_map
    ids = ids.tolist() if hasattr(ids, "tolist") else [int(i) for i in ids]  # a tensor's items one by one are slow
    return [vmap[i] for i in ids] if vmap else ids


def model_text(model: Transformer, ids) -> str:
    """The text of model ids, the unknown id written as ⟨unk⟩ (it has no bytes to decode)."""
    parts, run = [], []
    for i in [*real_ids(model, ids), None]:
        if i is None or i == UNK:
            parts.append(decode(run, model.cfg.encoding))
            run = []
            if i == UNK:
                parts.append(UNK_LABEL)
        else:
            run.append(i)
    return "".join(parts)


def token_labels(model: Transformer, ids, context=None) -> list[str]:
    """Display strings of model ids taken one by one (predictions, top tokens): the unknown id as ⟨unk⟩, a token
    that is only part of a character as its bytes in hex ("‹E6 98›", display_bytes), or, when `context` (the model ids
    of the learner's sequence) holds that same token as a piece of one character only, as that piece ("明 1/2")."""
    from .tokenizer import display_bytes, load_encoding

    real = real_ids(model, ids)
    enc = load_encoding(model.cfg.encoding)
    known = _pieces_in(model, context) if context is not None else {}
    out = []
    for i in real:
        if i == UNK:
            out.append(UNK_LABEL)
            continue
        try:
            out.append(known.get(i) or display_bytes(enc.decode_single_token_bytes(i), short=True))
        except (KeyError, ValueError):
            out.append(token_strings([i], model.cfg.encoding)[0])
    return out


def _pieces_in(model: Transformer, ids) -> dict[int, str]:
    """tokenizer id -> its label in this sequence, for tokens that are pieces of a character ("明 1/2") and stand
    for one piece of one character everywhere in it (an id seen as pieces of two characters is left out)."""
    seen: dict[int, set[str]] = {}
    for i, lab in zip(real_ids(model, ids), sequence_labels(model, ids)):
        if "\u00a0" in lab and "/" in lab:  # label_pieces' "明 1/2" (no-break space)
            seen.setdefault(i, set()).add(lab)
    return {i: next(iter(labs)) for i, labs in seen.items() if len(labs) == 1}


def sequence_labels(model: Transformer, ids) -> list[str]:
    """token_labels for a sequence (adjacent tokens): a token that is only part of a character is shown with its
    character and which piece it is ("明 1/2", "明 2/2"), not as bytes; bytes stay on the Tokenizer page."""
    from .tokenizer import label_pieces, load_encoding, token_bytes

    labels, real = token_labels(model, ids), real_ids(model, ids)
    enc = load_encoding(model.cfg.encoding)
    return label_pieces([token_bytes(enc, i) or b"" for i in real], labels)


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
