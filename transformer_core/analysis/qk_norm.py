"""What Qwen3's QK-norm does to one head on the learner's text: the length of each token's q and k before and after
the per-head RMSNorm, and the head's scores and weights with the norms (what the model computed) beside the ones the
same q and k give without them (RoPE and the mask applied as the model does; the rest of the model unchanged)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..model.attention import attention
from ..model.trace import AttentionStages


@dataclass(frozen=True)
class QKNormEffect:
    q_before: np.ndarray  # (Tq,) |q| of each query token, as W_q made it
    q_after: np.ndarray  # (Tq,) after the RMSNorm: √d_k · rms = about |gain| for every token
    k_before: np.ndarray  # (Tk,) |k| of each key token (this head's K/V head)
    k_after: np.ndarray  # (Tk,)
    scaled_with: np.ndarray  # (Tq, Tk) q·k/√d_k the model computed (−∞ where masked)
    scaled_without: np.ndarray  # (Tq, Tk) the same without the norms
    weights_with: np.ndarray  # (Tq, Tk) softmax rows the model computed
    weights_without: np.ndarray  # (Tq, Tk)
    d_k: int  # the head's width

    @property
    def spread(self) -> tuple[float, float]:
        """(max − min) of the unmasked scaled scores without and with the norms: how far the softmax's inputs range."""
        def rng(x):
            x = x[np.isfinite(x)]
            return float(x.max() - x.min()) if x.size else 0.0
        return rng(self.scaled_without), rng(self.scaled_with)


def qk_norm_effect(model, stages: AttentionStages, head: int) -> QKNormEffect | None:
    """The QK-norm's effect on `head` of a traced decoder self-attention block (batch item 0); None for a block
    without QK-norm. The block's own rotary turns the raw q and k as the forward turned the normed ones."""
    if stages.kind != "dec_self" or not stages.has("q_normed"):
        return None
    attn = model.decoder.layers[stages.layer].self_attn
    q, k = stages.head("q", head), stages.head("k", head)  # (Tq, hs), (Tk, hs) before the norms
    qn, kn = stages.head("q_normed", head), stages.head("k_normed", head)
    mask = stages.head("mask", head).bool()  # (Tq, Tk)

    def scores(qx, kx):
        if attn.rotary is not None:
            qx, kx = attn.rotary(qx[None, None])[0, 0], attn.rotary(kx[None, None])[0, 0]  # (T, hs) turned
        seen = {}
        _, w = attention(qx, kx, kx, mask, hook=lambda s, x: seen.setdefault(s, x))
        return seen.get("masked", seen["scaled"]), w

    with torch.no_grad():
        plain, w_plain = scores(q.float(), k.float())
        normed, w_normed = scores(qn.float(), kn.float())
    norm = lambda x: x.float().norm(dim=-1).numpy()  # (T,) lengths
    return QKNormEffect(norm(q), norm(qn), norm(k), norm(kn), normed.numpy(), plain.numpy(), w_normed.numpy(),
                        w_plain.numpy(), int(q.size(-1)))
