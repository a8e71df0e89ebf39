"""The two norms: the course's LayerNorm and RMSNorm (Llama, Qwen2), chosen by `cfg.norm`."""
from __future__ import annotations

import torch
from torch import nn

from .config import TransformerConfig


class RMSNorm(nn.Module):
    """x / sqrt(mean(x²) + eps) · g: LayerNorm without subtracting the mean and without a bias."""

    def __init__(self, d_model: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d_model))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()  # in float32 even for half-precision weights, as Llama does
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)  # (..., d) unit root-mean-square
        return self.weight * h.to(x.dtype)  # (..., d)


def make_norm(cfg: TransformerConfig) -> nn.Module:
    """The norm a config asks for (Add & Norm and the final norm of a stack use this one helper)."""
    if cfg.norm == "rmsnorm":
        return RMSNorm(cfg.d_model, cfg.layer_norm_eps)
    return nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps)
