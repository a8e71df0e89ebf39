"""Why a head looks where it looks: one attention score q·k/√d_k split into where q and k came from.

In a pre-norm decoder the stream entering a layer is a sum of parts: the embeddings (token + position), every
earlier head's output (W_o[:, head] z_head), every earlier W_o bias and every earlier FFN's output. The attention's
norm is linear once its scale is frozen at the value it had in this forward (LayerNorm: 1/σ after subtracting each
part's own mean; RMSNorm: 1/rms), W_q and W_k are linear, RoPE turns every part by the same angle, and a QK-norm is
linear once its per-head scale is frozen too. So q = Σ q_part + q_bias and k = Σ k_part + k_bias, and the score is
Σ_ij q_i·k_j/√d_k: a query-part × key-part matrix that sums to the score (the residue is float rounding). On an
induction head the previous-token head's output on the key side carries the score.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from ..errors import InputError
from ..model.trace import Trace
from ..model.transformer import Transformer
from .attribution import stream_parts

GROUP_HEADS_ABOVE = 64  # more parts than this (a big model): a layer's heads count as one part, "attention of L"


@dataclass(frozen=True)
class QKAttribution:
    layer: int
    head: int
    query: int
    key: int
    parts: tuple[tuple, ...]  # ("embed",), ("head", layer, head), ("attn", layer) (its heads together),
    #                           ("attn_bias", layer), ("ffn", layer), ("bias",) (the norm's β, W_q/W_k's biases)
    matrix: np.ndarray  # (P, P) query part × key part: their share of q·k/√d_k
    score: float  # the model's own scaled score (before the mask)

    @property
    def total(self) -> float:
        return float(self.matrix.sum())

    @property
    def residue(self) -> float:
        return self.score - self.total

    def arrays(self) -> dict[str, np.ndarray]:
        return {"matrix": self.matrix, "score": np.array([self.score])}


def _side(model, trace, layer: int, position: int, head_rows: slice, W, b, qk_norm, group: bool) -> torch.Tensor:
    """(P + 1, hs): each part's q (or k) of one head at one position, the biases last; norms frozen, RoPE applied."""
    block = model.decoder.layers[layer]
    parts = stream_parts(model, trace, layer, position, group)[1]  # (P, d)
    x = parts.sum(0)  # (d,) the stream itself
    ln = block.addnorm1.ln
    g = ln.weight.detach().double().cpu()
    if isinstance(ln, torch.nn.LayerNorm):
        normed = g * (parts - parts.mean(-1, keepdim=True)) / torch.sqrt(x.var(unbiased=False) + ln.eps)  # (P, d)
        const = ln.bias.detach().double().cpu() if ln.bias is not None else torch.zeros_like(g)
    else:
        normed, const = g * parts / torch.sqrt((x * x).mean() + ln.eps), torch.zeros_like(g)
    W = W.detach().double().cpu()[head_rows]  # (hs, d)
    out = torch.cat([normed @ W.T, (W @ const + (b.detach().double().cpu()[head_rows] if b is not None else 0))[None]])
    if qk_norm is not None:  # Qwen3: the head's q (or k) scaled to rms 1, then its gain; the scale frozen
        whole = out.sum(0)
        out = out * qk_norm.weight.detach().double().cpu() / torch.sqrt((whole * whole).mean() + qk_norm.eps)
    if block.self_attn.rotary is not None:  # the parts as heads of one token at `position`: each turned alike
        out = block.self_attn.rotary(out[None, :, None, :], position)[0, :, 0]
    return out  # (P + 1, hs)


def qk_attribution(model: Transformer, trace: Trace, layer: int, head: int, query: int, key: int) -> QKAttribution:
    """The score of `head` of decoder self-attention `layer` from `query` to `key` (batch item 0), split by the parts
    of the stream on each side. InputError for a post-norm or encoder-decoder model, or positions out of range."""
    cfg = model.cfg
    if model.is_encoder_decoder or not cfg.norm_first:
        raise InputError("dla_post_norm")
    T = trace.decoder_ids.numel()
    if not (0 <= key <= query < T and 0 <= layer < cfg.n_layers and 0 <= head < cfg.n_heads):
        raise InputError("dla_range", last=T - 1)
    attn = model.decoder.layers[layer].self_attn
    hs, kv = cfg.head_dim, head // (cfg.n_heads // cfg.kv_heads)
    group = 1 + layer * (cfg.n_heads + 2) > GROUP_HEADS_ABOVE
    parts = stream_parts(model, trace, layer, query, group)[0] + (("bias",),)
    q = _side(model, trace, layer, query, slice(head * hs, (head + 1) * hs), attn.W_q.weight, attn.W_q.bias,
              attn.q_norm, group)
    k = _side(model, trace, layer, key, slice(kv * hs, (kv + 1) * hs), attn.W_k.weight, attn.W_k.bias,
              attn.k_norm, group)
    matrix = (q @ k.T / math.sqrt(hs)).numpy()  # (P + 1, P + 1)
    score = float(trace.attention("dec_self", layer).scaled[0, head, query, key])
    return QKAttribution(layer, head, query, key, parts, matrix, score)
