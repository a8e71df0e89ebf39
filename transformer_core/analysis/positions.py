"""Positional encodings as data: the model's position table, PE similarity, the √d_model balance."""
from __future__ import annotations

import math

import torch

from ..model.positional import LearnedPositions, PositionalEncoding, sinusoid_table


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
