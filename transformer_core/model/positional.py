"""Positions: the course's fixed sine/cosine PositionalEncoding, learned positions (GPT-2), or none."""
from __future__ import annotations

import math

import torch
from torch import nn

from .config import TransformerConfig
from .hooks import HookPoint


def sinusoid_table(max_len: int, d_model: int) -> torch.Tensor:
    """(max_len, d_model): sin on even dimensions, cos on odd ones, wavelengths 2π .. 10000·2π."""
    position = torch.arange(max_len, dtype=torch.float).unsqueeze(1)  # (max_len, 1)
    div_term = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float) * (-math.log(10000.0) / d_model))
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe


class PositionalEncoding(nn.Module):
    """Adds the fixed sine/cosine table; buffer `pe` has shape (1, max_len, d_model)."""

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.register_buffer("pe", sinusoid_table(cfg.max_len, cfg.d_model).unsqueeze(0), persistent=False)
        self.hook_pe = HookPoint()

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        return x + self.hook_pe(self.pe[:, offset : offset + x.size(1)])  # (B, T, d) + (1, T, d)


class LearnedPositions(nn.Module):
    """Learned position embeddings (GPT-2)."""

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(cfg.max_len, cfg.d_model) * 0.02)
        self.hook_pe = HookPoint()

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        return x + self.hook_pe(self.weight[offset : offset + x.size(1)].unsqueeze(0))  # (B, T, d) + (1, T, d)


class NoPositions(nn.Module):
    """No positional information (the course's "does position help?" experiment)."""

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.hook_pe = HookPoint()

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        return x + self.hook_pe(torch.zeros_like(x[:1]))  # (B, T, d)


POSITIONS = {"sinusoidal": PositionalEncoding, "learned": LearnedPositions, "none": NoPositions}
