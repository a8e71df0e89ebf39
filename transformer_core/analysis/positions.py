"""Positional encodings as data: the model's position table, PE similarity, the √d_model balance."""
from __future__ import annotations

import math

import torch

from ..model.positional import LearnedPositions, PositionalEncoding, RotaryEmbedding, rope_angles, sinusoid_table


def similarity(table: torch.Tensor) -> torch.Tensor:
    """(n, n) dot products between the rows (positions) of a (n, d) table."""
    table = table.float()
    return table @ table.T  # (n, n)


def pe_similarity(n_positions: int, d_model: int) -> torch.Tensor:
    """(n, n) PE(p)·PE(q) of the sine/cosine table; equals Σ_i cos(ω_i (p − q)), so it depends on p − q only."""
    return similarity(sinusoid_table(n_positions, d_model))


def position_table(model, n_positions: int, side: str = "decoder") -> torch.Tensor:
    """(n, d) what the model adds at positions 0..n-1 of `side` (sinusoidal, learned, or zeros), on the CPU."""
    stack = model.encoder if side == "encoder" and model.encoder is not None else model.decoder
    pos = stack.embed.pos
    n = max(0, min(int(n_positions), model.cfg.max_len))
    if isinstance(pos, PositionalEncoding):
        return sinusoid_table(n, model.cfg.d_model)
    if isinstance(pos, LearnedPositions):
        return pos.weight[:n].detach().float().cpu().clone()
    return torch.zeros(n, model.cfg.d_model)


def scale_balance(tok: torch.Tensor, scaled: torch.Tensor, pe: torch.Tensor) -> dict[str, float]:
    """Mean |value| of the token embedding, the scaled embedding (as the model does), tok·√d, and the PE."""
    factor = math.sqrt(tok.size(-1))
    tok, scaled, pe = tok.float(), scaled.float(), pe.float()
    return {
        "tok": float(tok.abs().mean()),
        "scaled": float(scaled.abs().mean()),
        "sqrt_scaled": float((tok * factor).abs().mean()),
        "pe": float(pe.abs().mean()),
        "factor": factor,
    }


def rope_table(n_positions: int, head_dim: int, theta: float) -> torch.Tensor:
    """(n, head_dim/2) RoPE's angle, in radians, for each position and dimension pair: the sine/cosine table's
    counterpart (the table's columns are sin and cos of these angles with θ = 10000)."""
    return rope_angles(torch.arange(max(0, int(n_positions))), head_dim, theta)


def rope_offset_scores(q: torch.Tensor, k: torch.Tensor, theta: float, offsets: range,
                       starts: tuple[int, ...] = (0, 10, 50)) -> dict[int, list[float]]:
    """q·k after RoPE for one fixed query vector q and key vector k (hs,), the query at position start + offset
    and the key at `start`: one curve per start. The curves coincide: the score depends on the offset only."""
    hs = q.numel()
    rot, out = RotaryEmbedding(hs, theta), {}  # the model's own rotation
    for start in starts:
        keys = rot(k.reshape(1, 1, 1, hs).double(), start)[0, 0, 0]  # (hs,) the key at `start`
        scores = [float(rot(q.reshape(1, 1, 1, hs).double(), start + o)[0, 0, 0] @ keys) for o in offsets]
        out[start] = scores
    return out
