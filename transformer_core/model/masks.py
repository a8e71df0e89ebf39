"""Attention masks. Convention: bool, True = may attend; shape broadcastable to (B, nh, Tq, Tk)."""
from __future__ import annotations

import torch

from ..errors import ConfigError

MASK_MODES = ("none", "causal", "padding", "both")


def pad_batch(seqs: list[list[int]], pad_id: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Pad id lists to one length; return (ids (B, T), lengths (B,)). The pad id is never masked by value."""
    lengths = torch.tensor([len(s) for s in seqs], dtype=torch.long)
    T = int(lengths.max()) if len(seqs) else 0
    ids = torch.full((len(seqs), T), pad_id, dtype=torch.long)
    for b, s in enumerate(seqs):
        ids[b, : len(s)] = torch.tensor(s, dtype=torch.long)
    return ids, lengths


def padding_mask(lengths: torch.Tensor, T: int) -> torch.Tensor:
    """(B, T) True for real tokens, built from lengths (never from id == 0: id 0 is '!')."""
    return torch.arange(T, device=lengths.device)[None, :] < lengths[:, None]


def subsequent_mask(T: int, device=None) -> torch.Tensor:
    """(T, T) lower-triangular: query i may attend to keys 0..i."""
    return torch.ones(T, T, dtype=torch.bool, device=device).tril()


def block_mode(kind: str, mode: str) -> str:
    """The mask mode a block applies when `mode` is asked of it: cross-attention is never causal over the encoder's
    tokens (the memory), so "causal" and "both" keep its padding part only."""
    return "padding" if kind == "cross" and mode in ("causal", "both") else mode


def attention_mask(
    mode: str, B: int, Tq: int, Tk: int, key_lengths: torch.Tensor | None = None, device=None
) -> torch.Tensor | None:
    """(B, 1, Tq, Tk) bool mask for a mode in MASK_MODES, or None for 'none'."""
    if mode not in MASK_MODES:
        raise ConfigError("mask_mode", mode=str(mode)[:20], choices=", ".join(MASK_MODES))
    if mode == "none":
        return None
    mask = torch.ones(B, 1, Tq, Tk, dtype=torch.bool, device=device)
    if mode in ("causal", "both"):
        mask = mask & torch.ones(Tq, Tk, dtype=torch.bool, device=device).tril(diagonal=Tk - Tq)
    if mode in ("padding", "both") and key_lengths is not None:
        mask = mask & padding_mask(key_lengths.to(mask.device), Tk)[:, None, None, :]
    return mask
