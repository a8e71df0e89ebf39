"""Direct logit attribution: how much each head and each FFN wrote, directly, into one token's logit.

In a pre-norm decoder the last residual is a sum: x = embeddings + Σ_layers (attention out + FFN out), and each
attention output is a sum over heads, W_o[:, head] z_head, plus W_o's bias. The output layer is linear, and the
final norm is linear too once its scale is frozen at the value it had in this forward (LayerNorm: 1/σ after
subtracting each part's own mean; RMSNorm: 1/rms). So logit = Σ parts + constants, exactly (the residue is float
rounding). "Directly" matters: a head that changes what later layers do is credited only with what it wrote
itself. A post-norm model (the course's Add & Norm) renormalises after every sub-layer: its stream is no such
sum, and it gets a clear message instead.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..errors import InputError
from ..model.hooks import act_name
from ..model.trace import Trace
from ..model.transformer import Transformer


@dataclass(frozen=True)
class Attribution:
    """One token's logit at one position, split into what each part of the model wrote."""

    token: int  # model id
    position: int
    logit: float  # the model's own logit
    embed: float  # the embeddings' (token + position) share
    heads: np.ndarray  # (n_layers, n_heads) each head's share
    attn_bias: np.ndarray  # (n_layers,) W_o's bias
    ffn: np.ndarray  # (n_layers,) each FFN's share
    constant: float  # the output layer's bias and the final norm's own bias (LayerNorm's β)
    scale: float  # the final norm's frozen scale: 1/σ (LayerNorm) or 1/rms (RMSNorm); 1.0 without a final norm
    norm: str  # "layernorm", "rmsnorm" or "none"

    @property
    def total(self) -> float:
        return float(self.embed + self.heads.sum() + self.attn_bias.sum() + self.ffn.sum() + self.constant)

    @property
    def residue(self) -> float:
        """The logit minus the sum of the parts (float rounding only)."""
        return self.logit - self.total

    def per_layer(self) -> np.ndarray:
        """(n_layers,) attention (heads and bias) plus FFN of each layer."""
        return self.heads.sum(1) + self.attn_bias + self.ffn

    def arrays(self) -> dict[str, np.ndarray]:
        return {"heads": self.heads, "attn_bias": self.attn_bias, "ffn": self.ffn,
                "embed_const_logit_scale": np.array([self.embed, self.constant, self.logit, self.scale],
                                                    dtype=np.float64)}


def stream_parts(model: Transformer, trace: Trace, layer: int, position: int, group: bool = False):
    """(parts, (P, d) float64): the stream entering decoder `layer` (n_layers: the last residual) at `position`
    split into its parts: ("embed",), then per lower layer ("head", layer, head) for each head (or ("attn", layer),
    its heads together, when `group`), ("attn_bias", layer) where W_o has a bias, ("ffn", layer)."""
    cfg = model.cfg
    parts, rows = [("embed",)], [trace[act_name("embed", side="decoder")][0, position].double()]
    hs = cfg.head_dim
    for lower in range(layer):
        attn = model.decoder.layers[lower].self_attn
        concat = trace[act_name("concat", layer=lower, block="dec_self")][0, position].double()  # (nh·hs,)
        W_o = attn.W_o.weight.detach().double().cpu()  # (d, nh·hs)
        heads = [W_o[:, h * hs:(h + 1) * hs] @ concat[h * hs:(h + 1) * hs] for h in range(cfg.n_heads)]
        if group:
            parts.append(("attn", lower))
            rows.append(torch.stack(heads).sum(0))
        else:
            parts += [("head", lower, h) for h in range(cfg.n_heads)]
            rows += heads
        if attn.W_o.bias is not None:
            parts.append(("attn_bias", lower))
            rows.append(attn.W_o.bias.detach().double().cpu())
        parts.append(("ffn", lower))
        rows.append(trace[act_name("ffn_out", layer=lower)][0, position].double())
    return tuple(parts), torch.stack(rows)


def _readout(model: Transformer, final: torch.Tensor, token: int):
    """(direction, scale, centre, constant, norm): the token's logit = direction · centre(part) · scale, summed over
    parts, plus constant. `final` is the last residual at the position (d,)."""
    w = model.out.weight[token].detach().double().cpu()  # (d,)
    bias = float(model.out.bias.detach()[token]) if model.out.bias is not None else 0.0
    norm = model.decoder.norm
    x = final.double()
    if isinstance(norm, torch.nn.Identity):
        return w, 1.0, False, bias, "none"
    g = norm.weight.detach().double().cpu()
    if isinstance(norm, torch.nn.LayerNorm):
        scale = float(1.0 / torch.sqrt(x.var(unbiased=False) + norm.eps))
        beta = norm.bias.detach().double().cpu() if norm.bias is not None else torch.zeros_like(g)
        return w * g, scale, True, bias + float(w @ beta), "layernorm"
    scale = float(1.0 / torch.sqrt((x * x).mean() + norm.eps))
    return w * g, scale, False, bias, "rmsnorm"


def direct_logit_attribution(model: Transformer, trace: Trace, position: int, token: int) -> Attribution:
    """Each part's direct share of `token`'s logit at `position` (batch item 0); InputError for a post-norm model,
    an encoder-decoder (its decoder reads the memory through cross-attention: the same sum with more parts, not
    shown yet) or a position or token out of range."""
    cfg = model.cfg
    if model.is_encoder_decoder or not cfg.norm_first:
        raise InputError("dla_post_norm")
    T = trace.decoder_ids.numel()
    if not (0 <= int(position) < T and 0 <= int(token) < cfg.vocab_size):
        raise InputError("dla_range", last=T - 1)
    p, L, H = int(position), cfg.n_layers, cfg.n_heads
    final = trace[act_name("addnorm_out", layer=L - 1, block="dec_ffn", cross=False)][0, p]
    direction, scale, centre, constant, norm = _readout(model, final, int(token))

    def share(part: torch.Tensor) -> float:  # (d,) -> its direct contribution
        part = part.double()
        return float(direction @ (part - part.mean() if centre else part)) * scale

    heads, attn_bias, ffn = np.zeros((L, H)), np.zeros(L), np.zeros(L)
    embed = 0.0
    for part, row in zip(*stream_parts(model, trace, L, p), strict=True):
        kind, value = part[0], share(row)
        if kind == "embed":
            embed = value
        elif kind == "head":
            heads[part[1], part[2]] = value
        elif kind == "attn_bias":
            attn_bias[part[1]] = value
        else:
            ffn[part[1]] = value
    return Attribution(int(token), p, float(trace.logits_at(p)[int(token)]), embed, heads, attn_bias, ffn,
                       constant, scale, norm)
