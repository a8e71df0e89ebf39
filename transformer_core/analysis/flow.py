"""Where the information flowed: the routes that carried one prediction (information flow routes, Ferrando & Voita,
2024).

Each sub-layer adds to the residual stream, and what it adds is a sum of parts. After layer ℓ's attention the stream
at position i is y = x_i + Σ_j Σ_h A_h[i, j] · W_O^h v_h[j] (+ W_O's bias): the stream before it and one term per
key (its heads together; per head and key, too, for the breakdown). After the FFN it is y = x_i + FFN(x_i): two
parts. A part's importance is how close it lies to the sum, proximity = max(0, ‖y‖₁ − ‖y − part‖₁), as a share of
all the parts' proximities (a part pointing away from the sum, or tiny, gets nothing). The graph keeps the edges
whose share is at least a threshold, walked back from the prediction: an edge counts only when the node it feeds is
kept. As in the paper an attention edge is one key's term with all heads together: on an induction sentence several
heads copy the same token, each under the threshold alone, their sum well above it.

Post-norm models (the course's Add & Norm) are read the same way: the sum is taken before the norm, which scales
all of it alike. The encoder-decoder's decoder also reads the encoder through cross-attention: not drawn here.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..errors import InputError
from ..model.hooks import act_name
from ..model.trace import Trace
from ..model.transformer import Transformer

THRESHOLD = 0.04  # the paper's τ: an edge with less than 4% of its node's importance is dropped
CHUNK_ELEMENTS = 4_000_000  # query positions handled at once: at most this many floats of head × key terms (16 MB)


def flow_names(model: Transformer) -> list[str]:
    """The hook points the flow reads: every layer's attention weights, values and output, FFN output and sums."""
    names = []
    for layer in range(model.cfg.n_layers):
        names += [act_name(s, layer=layer, block="dec_self") for s in ("weights", "v", "out")]
        names += [act_name("ffn_out", layer=layer), *(_sum_name(model, layer, b) for b in ("dec_self", "dec_ffn"))]
    return names


def _sum_name(model: Transformer, layer: int, block: str) -> str:
    """The hook point holding x + sublayer(x): the Add & Norm's output in pre-norm order, its input in post-norm."""
    stage = "addnorm_out" if model.cfg.norm_first else "addnorm_in"
    return act_name(stage, layer=layer, block=block, cross=False)


@dataclass(frozen=True)
class Edge:
    """One kept edge: from (stage, layer, position) to (stage, layer, position); stage "R" is the stream entering a
    layer (layer n_layers: after the last), "M" the stream after the layer's attention."""

    kind: str  # "attention", "residual" or "ffn"
    layer: int
    head: int  # an attention edge's head with the largest share of its own (-1 for the others)
    source: tuple[str, int, int]
    target: tuple[str, int, int]
    share: float


@dataclass(frozen=True)
class Flow:
    """Every part's share of the stream it adds to, at every layer and position (batch item 0)."""

    position: int  # the prediction's position (it predicts the token after it)
    tokens: np.ndarray  # (L, T, T) key j's term (all heads) in the stream at query i after layer ℓ's attention
    heads: np.ndarray  # (L, nh, T, T) float16, the same split per head: head h's term from key j, among every head's
    attn_residual: np.ndarray  # (L, T) the stream before the attention
    attn_bias: np.ndarray  # (L, T) W_O's bias (zeros without one)
    ffn: np.ndarray  # (L, T) the FFN's output in the stream after layer ℓ
    ffn_residual: np.ndarray  # (L, T) the stream before the FFN

    def arrays(self) -> dict[str, np.ndarray]:
        return {"tokens": self.tokens, "heads": self.heads, "attn_residual": self.attn_residual,
                "attn_bias": self.attn_bias, "ffn": self.ffn, "ffn_residual": self.ffn_residual,
                "position": np.array([self.position])}

    def routes(self, threshold: float = THRESHOLD, position: int | None = None) -> list[Edge]:
        """The edges with at least `threshold` of their node's importance that lead to the prediction at `position`
        (default: the flow's own), from the last layer down."""
        L = self.ffn.shape[0]
        kept, edges = {("R", L, self.position if position is None else int(position))}, []

        def add(kind, layer, head, source, target, share):
            edges.append(Edge(kind, layer, head, source, target, float(share)))
            kept.add(source)

        for layer in reversed(range(L)):
            for i in sorted(p for s, ly, p in list(kept) if (s, ly) == ("R", layer + 1)):
                mid, out = ("M", layer, i), ("R", layer + 1, i)
                if self.ffn_residual[layer, i] >= threshold:
                    add("residual", layer, -1, mid, out, self.ffn_residual[layer, i])
                if self.ffn[layer, i] >= threshold:  # the FFN reads the stream after the attention
                    add("ffn", layer, -1, mid, out, self.ffn[layer, i])
            for i in sorted(p for s, ly, p in list(kept) if (s, ly) == ("M", layer)):
                if self.attn_residual[layer, i] >= threshold:
                    add("residual", layer, -1, ("R", layer, i), ("M", layer, i), self.attn_residual[layer, i])
                for j in np.nonzero(self.tokens[layer, i] >= threshold)[0].tolist():
                    add("attention", layer, int(self.heads[layer, :, i, j].argmax()), ("R", layer, j), ("M", layer, i),
                        self.tokens[layer, i, j])
        return edges


def _shares(y: torch.Tensor, parts: torch.Tensor) -> torch.Tensor:
    """(..., P) each part's proximity to the sum y, as a share: y (..., d), parts (..., P, d)."""
    prox = (y.abs().sum(-1, keepdim=True) - (y.unsqueeze(-2) - parts).abs().sum(-1)).clamp_min(0)  # (..., P)
    return prox / prox.sum(-1, keepdim=True).clamp_min(torch.finfo(prox.dtype).tiny)


def information_flow(model: Transformer, trace: Trace, position: int | None = None) -> Flow:
    """Every part's share in the stream at every layer and position, for the prediction at `position` (default: the
    last). InputError for an encoder-decoder or a position out of range."""
    if model.is_encoder_decoder:
        raise InputError("flow_decoder_only")
    T = trace.decoder_ids.numel()
    position = T - 1 if position is None else int(position)
    if not 0 <= position < T:
        raise InputError("dla_range", last=T - 1)
    cfg = model.cfg
    L, H, hs = cfg.n_layers, cfg.n_heads, cfg.head_dim
    heads, tokens = np.zeros((L, H, T, T), dtype=np.float16), np.zeros((L, T, T), dtype=np.float32)
    attn_res, attn_bias, ffn, ffn_res = (np.zeros((L, T), dtype=np.float32) for _ in range(4))
    for layer in range(L):
        attn = model.decoder.layers[layer].self_attn
        stages = trace.attention("dec_self", layer)
        A = stages.weights[0].float()  # (nh, T, T)
        v = stages.v[0].float()[torch.arange(H) // (H // stages.v.size(1))]  # (nh, T, hs) each query head's K/V head
        W_o = attn.W_o.weight.detach().float().cpu().reshape(-1, H, hs)  # (d, nh, hs)
        ov = torch.einsum("htk,dhk->htd", v, W_o)  # (nh, T, d) what each key would write through each head
        y = trace[_sum_name(model, layer, "dec_self")][0].float()  # (T, d) the stream after the attention
        x = y - trace[act_name("out", layer=layer, block="dec_self")][0].float()  # (T, d) the stream before it
        b = attn.W_o.bias.detach().float().cpu() if attn.W_o.bias is not None else torch.zeros_like(y[0])
        step = max(1, CHUNK_ELEMENTS // max(1, H * T * ov.size(-1)))
        for q0 in range(0, T, step):
            q = slice(q0, min(T, q0 + step))
            terms = A[:, q, :, None] * ov[:, None]  # (nh, Tq, T, d)
            n, rest = q.stop - q.start, [x[q, None], b.expand(q.stop - q.start, 1, -1)]  # (Tq, 1, d) each
            s = _shares(y[q], torch.cat([terms.sum(0), *rest], 1))  # (Tq, T + 2): each key's heads together
            tokens[layer, q], attn_res[layer, q], attn_bias[layer, q] = s[:, :T], s[:, -2], s[:, -1]
            s = _shares(y[q], torch.cat([terms.permute(1, 0, 2, 3).reshape(n, H * T, -1), *rest], 1))  # (Tq, nh·T+2)
            heads[layer, :, q] = s[:, :H * T].reshape(n, H, T).permute(1, 0, 2).numpy()  # (a breakdown: 16 bits)
        y2 = trace[_sum_name(model, layer, "dec_ffn")][0].float()  # (T, d) the stream after the FFN
        f = trace[act_name("ffn_out", layer=layer)][0].float()  # (T, d)
        s = _shares(y2, torch.stack([f, y2 - f], 1))  # (T, 2)
        ffn[layer], ffn_res[layer] = s[:, 0].numpy(), s[:, 1].numpy()
    return Flow(position, tokens, heads, attn_res, attn_bias, ffn, ffn_res)
