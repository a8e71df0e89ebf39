"""Scaled dot-product attention (one function, every stage observable) and MultiHeadAttention."""
from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from .config import TransformerConfig
from .hooks import ATTENTION_STAGES, MAP_STAGES, QK_NORM_STAGES, ROTARY_STAGES, HookPoint, fused_allowed, observed
from .norms import RMSNorm
from .positional import RotaryEmbedding


def _unchanged(stage: str, x: torch.Tensor) -> torch.Tensor:
    return x


def attention(q, k, v, mask=None, *, hook: Callable[[str, torch.Tensor], torch.Tensor] = _unchanged,
              dropout: Callable[[torch.Tensor], torch.Tensor] | None = None):
    """softmax(QKᵀ/√d_k + M)V; returns (output, weights). Fully masked rows give weights 0, never NaN.

    q: (..., Tq, hs), k and v: (..., Tk, hs), mask: bool broadcastable to (..., Tq, Tk), True = may attend.
    `hook(stage, x)` sees (and returns) every stage: scores, scaled, mask, masked, weights, z.
    """
    scores = hook("scores", q @ k.transpose(-2, -1))  # (..., Tq, Tk) raw QKᵀ
    scores = hook("scaled", scores / math.sqrt(q.size(-1)))  # (..., Tq, Tk)
    if mask is not None:
        mask = hook("mask", mask)
        scores = hook("masked", scores.masked_fill(~mask, float("-inf")))
    weights = torch.softmax(scores, dim=-1)  # (..., Tq, Tk)
    if mask is not None:  # a query with every key masked attends to nothing (0, not NaN)
        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    weights = hook("weights", weights)
    z = hook("z", (dropout(weights) if dropout is not None else weights) @ v)  # (..., Tq, hs)
    return z, weights


def no_empty_row(mask) -> bool:
    """Whether every query may attend to some key (a shapes-only meta tensor is taken to: the common case)."""
    return mask is None or mask.device.type == "meta" or bool(mask.any(-1).all())


class MultiHeadAttention(nn.Module):
    """Multi-head attention: self-attention (kv = x) or cross-attention (kv = encoder memory).

    Today's decoders change a few things, each a config choice: grouped-query attention (cfg.kv_heads < n_heads K/V
    heads, query head h reads K/V head h // group), RoPE (q and k turned by their positions before QKᵀ), Qwen3's
    QK-norm (each head's q and k scaled to a fixed root-mean-square before RoPE) and a head width of its own.
    """

    def __init__(self, cfg: TransformerConfig, rotary: bool = False) -> None:
        super().__init__()
        self.n_heads, self.n_kv, self.head_dim = cfg.n_heads, cfg.kv_heads, cfg.head_dim
        q_width, kv_width = self.n_heads * self.head_dim, self.n_kv * self.head_dim  # d_model unless cfg.d_head
        self.W_q = nn.Linear(cfg.d_model, q_width, bias=cfg.qkv_bias)
        self.W_k = nn.Linear(cfg.d_model, kv_width, bias=cfg.qkv_bias)
        self.W_v = nn.Linear(cfg.d_model, kv_width, bias=cfg.qkv_bias)
        self.W_o = nn.Linear(q_width, cfg.d_model, bias=cfg.linear_bias)
        self.rotary = RotaryEmbedding(cfg.head_dim, cfg.rope_theta) if rotary and cfg.positional == "rope" else None
        self.q_norm = RMSNorm(self.head_dim, cfg.layer_norm_eps) if cfg.qk_norm else None  # one gain per dimension,
        self.k_norm = RMSNorm(self.head_dim, cfg.layer_norm_eps) if cfg.qk_norm else None  # shared by every head
        self.dropout = nn.Dropout(cfg.dropout)
        for stage in ATTENTION_STAGES:  # hook points only where the model has them
            if (self.rotary is not None or stage not in ROTARY_STAGES) and (cfg.qk_norm or stage not in QK_NORM_STAGES):
                setattr(self, f"hook_{stage}", HookPoint())

    @property
    def group(self) -> int:
        """Query heads per K/V head (1: the course's attention)."""
        return self.n_heads // self.n_kv

    def split_heads(self, x: torch.Tensor, heads: int | None = None) -> torch.Tensor:
        B, T, _ = x.shape
        return x.view(B, T, heads or self.n_heads, self.head_dim).transpose(1, 2)  # (B, heads, T, hs)

    def map_hooks(self) -> tuple[str, ...]:
        """The hook paths of this block's (B, nh, Tq, Tk) stages, which only the step-by-step attention() has."""
        return tuple(getattr(self, f"hook_{s}").name for s in MAP_STAGES)

    def stage(self, name: str, x: torch.Tensor) -> torch.Tensor:
        return getattr(self, f"hook_{name}")(x)

    def keys_values(self, kv: torch.Tensor, offset: int = 0, q: torch.Tensor | None = None) -> tuple:
        """(q, K, V): K and V of kv (B, Tk, d), (B, n_kv, Tk, hs) each; with RoPE, K (and the queries q, if given)
        turned as positions offset, offset + 1, ... (hook points in the forward's order: k, [k_normed], v, q_rot,
        k_rot)."""
        k = self.hook_k(self.split_heads(self.W_k(kv), self.n_kv))  # (B, n_kv, Tk, hs)
        if self.k_norm is not None:
            k = self.hook_k_normed(self.k_norm(k))  # (B, n_kv, Tk, hs) each key's rms = the gain's
        v = self.hook_v(self.split_heads(self.W_v(kv), self.n_kv))  # (B, n_kv, Tk, hs)
        if self.rotary is not None:
            q = None if q is None else self.hook_q_rot(self.rotary(q, offset))  # (B, nh, Tq, hs)
            k = self.hook_k_rot(self.rotary(k, offset))  # (B, n_kv, Tk, hs)
        return q, k, v

    def forward(self, x, kv=None, mask=None, cache: dict | None = None, static: bool = False):
        """x: (B, Tq, d); kv: (B, Tk, d) or None for self-attention; mask: bool (B, 1, Tq, Tk).

        cache (generation only): this block's keys and values so far. Self-attention appends the new ones;
        a `static` block (cross-attention over a fixed memory) computes them once and reuses them.
        """
        kv = x if kv is None else kv
        q = self.hook_q(self.split_heads(self.W_q(x)))  # (B, nh, Tq, hs)
        if self.q_norm is not None:
            q = self.hook_q_normed(self.q_norm(q))  # (B, nh, Tq, hs) before RoPE, as Qwen3 does
        if cache is not None and static and "k" in cache:
            k, v = cache["k"], cache["v"]  # (B, n_kv, Tk, hs) the memory's, computed at the first step
        else:
            offset = cache["k"].size(2) if cache is not None and "k" in cache else 0  # positions the cache holds
            q, k, v = self.keys_values(kv, offset, q)  # (B, nh, Tq, hs), (B, n_kv, Tk, hs) x 2
            if cache is not None and not static and "k" in cache:
                k, v = torch.cat([cache["k"], k], dim=2), torch.cat([cache["v"], v], dim=2)  # (B, n_kv, T, hs)
            if cache is not None:
                cache["k"], cache["v"] = k, v
        if self.group > 1:  # grouped-query attention: each K/V head serves `group` query heads in a row
            k, v = k.repeat_interleave(self.group, dim=1), v.repeat_interleave(self.group, dim=1)  # (B, nh, Tk, hs)
        if (self.training or fused_allowed()) and not observed(self.map_hooks()) and no_empty_row(mask):
            # training, or the head sweep's knock-outs of z (hooks.fused_attention), with nothing captured and no map
            # edited: PyTorch's fused kernel of the same formula, without the (B, nh, Tq, Tk) copies the map stages
            # need, 2-4x faster on a CPU (bench/train_speed.py, bench/sweeps.py); z's hook still sees (and may edit)
            # its output. The mask (B, 1, Tq, Tk) is checked before any expand.
            z = self.hook_z(F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=self.dropout.p
                                                           if self.training else 0.0))  # (B, nh, Tq, hs)
        else:
            if mask is not None:
                mask = mask.expand(-1, self.n_heads, -1, -1)  # (B, nh, Tq, Tk) True = attend
            z, _ = attention(q, k, v, mask, hook=self.stage, dropout=self.dropout)  # (B, nh, Tq, hs)
        B, _, Tq, _ = z.shape
        concat = self.hook_concat(z.transpose(1, 2).reshape(B, Tq, -1))  # (B, Tq, nh·hs): d unless cfg.d_head
        return self.hook_out(self.W_o(concat))  # (B, Tq, d)
