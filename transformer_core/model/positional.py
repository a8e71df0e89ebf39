"""Positions: the course's fixed sine/cosine PositionalEncoding, learned positions (GPT-2), none, or rotary
(RoPE: Llama, Qwen2), which adds nothing to the embeddings and turns q and k inside attention instead."""
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


def rope_angles(positions: torch.Tensor, head_dim: int, theta: float) -> torch.Tensor:
    """(T, head_dim/2): the angle p · θ^(-2i/head_dim) that RoPE turns dimension pair i by at position p.

    Pair i is dimensions (i, i + head_dim/2) of a head, the half-split layout Llama and Qwen2 use."""
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim)  # (hs/2,)
    return positions.float()[:, None] * inv_freq[None, :].to(positions.device)  # (T, hs/2)


class RotaryEmbedding(nn.Module):
    """Turns each pair of a head's dimensions by its position's angle; q·k then depends on the offset only."""

    def __init__(self, head_dim: int, theta: float) -> None:
        super().__init__()
        self.head_dim, self.theta = head_dim, theta

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """x: (B, h, T, hs) queries or keys of positions offset .. offset + T - 1."""
        angles = rope_angles(torch.arange(offset, offset + x.size(-2), device=x.device), self.head_dim, self.theta)
        cos, sin = torch.cat([angles, angles], -1).cos(), torch.cat([angles, angles], -1).sin()  # (T, hs)
        x1, x2 = x.chunk(2, dim=-1)  # (B, h, T, hs/2) each: the pairs' first and second members
        rotated = torch.cat([-x2, x1], dim=-1)  # (B, h, T, hs) each pair turned by 90°
        return (x * cos.to(x.dtype) + rotated * sin.to(x.dtype))  # (B, h, T, hs)


# "rope" adds nothing here: its positions enter as rotations of q and k (RotaryEmbedding, in attention)
POSITIONS = {"sinusoidal": PositionalEncoding, "learned": LearnedPositions, "none": NoPositions, "rope": NoPositions}
