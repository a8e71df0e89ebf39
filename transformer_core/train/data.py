"""Training batches, and the course's GPT data: user text, compacted vocabulary, 80/20 split, windows."""
from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from ..errors import TrainingError
from ..text.tokenizer import clean_text, encode_by_line, load_encoding

IGNORE = -100  # label value that the loss and the accuracy skip
MAX_TEXT_CHARS = 5_000_000


@dataclass
class Batch:
    """Model-id tensors for one step; masks come from the lengths, never from the pad id."""

    src: torch.Tensor  # (B, Ts) encoder input, or the decoder-only input
    labels: torch.Tensor  # (B, T) next-token targets, IGNORE where nothing is scored
    tgt: torch.Tensor | None = None  # (B, Tt) decoder input for teacher forcing (encoder-decoder)
    src_lengths: torch.Tensor | None = None  # (B,)
    tgt_lengths: torch.Tensor | None = None  # (B,)

    def to(self, device) -> Batch:
        move = {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in vars(self).items()}
        return replace(self, **move)

    @property
    def n_tokens(self) -> int:
        return int((self.labels != IGNORE).sum())


def compact_vocab(ids: list[int]) -> tuple[tuple[int, ...], dict[int, int]]:
    """The sorted real ids that occur (model id -> real id) and the reverse index (real id -> model id)."""
    vocab_map = tuple(sorted(set(ids)))
    return vocab_map, {real: i for i, real in enumerate(vocab_map)}


def min_text_tokens(context: int, val_fraction: float) -> int:
    """Fewest tokens so that both splits hold one window of context + 1 tokens."""
    need = context + 1
    return max(int(need / val_fraction) + 1, int(need / (1 - val_fraction)) + 1)


class TextData:
    """The course's data pipeline on any text: encode, split 80/20, compact the vocabulary to the training split's
    tokens (a validation token never seen in training is ⟨unk⟩, as for every model with a compacted vocabulary),
    sample windows."""

    def __init__(self, text: str, context: int, *, encoding: str = "cl100k_base", val_fraction: float = 0.2,
                 seed: int = 0) -> None:
        if not isinstance(text, str) or not text.strip():
            raise TrainingError("train_text_empty")
        if len(text) > MAX_TEXT_CHARS:
            raise TrainingError("train_text_too_long", n=f"{len(text):,}", limit=f"{MAX_TEXT_CHARS:,}")
        text, _ = clean_text(text)
        ids = encode_by_line(load_encoding(encoding), text)  # as the app reads text for a model with its own vocabulary
        need = min_text_tokens(context, val_fraction)
        if len(ids) < need:
            raise TrainingError("train_text_too_short", n=len(ids), context=context, val=f"{val_fraction:.0%}",
                                need=need)
        from .vocab import build_vocab, count_tokens, to_model_ids

        self.encoding, self.context, self.n_tokens = encoding, context, len(ids)
        split = int(len(ids) * (1 - val_fraction))
        self.vocab = build_vocab(count_tokens(ids[:split]), None)  # the training split's tokens, plus ⟨unk⟩
        self.vocab_map = self.vocab.real_ids
        data = torch.from_numpy(to_model_ids(self.vocab, ids))  # model ids; unseen validation tokens -> ⟨unk⟩
        self.splits = {"train": data[:split], "val": data[split:]}
        self.gens = {s: torch.Generator().manual_seed(seed + k) for k, s in enumerate(self.splits)}

    @property
    def vocab_size(self) -> int:
        return len(self.vocab_map)

    def batch(self, split: str, size: int) -> Batch:
        """Random windows: x = data[i : i+T], y = data[i+1 : i+T+1] (the course's get_batch)."""
        data, T = self.splits[split], self.context
        starts = torch.randint(0, len(data) - T, (size,), generator=self.gens[split])  # (B,)
        offsets = starts[:, None] + torch.arange(T)[None, :]  # (B, T)
        return Batch(src=data[offsets], labels=data[offsets + 1])  # (B, T), (B, T)
