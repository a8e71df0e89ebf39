"""The residual stream of one stack, read off a trace: its norm per token after every sub-layer, what attention
and the FFN each add, what each LayerNorm does, and the FFN's most active neurons for a token."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..model.hooks import act_name
from ..model.trace import Trace

SUBLAYERS = {"encoder": ("enc_self", "enc_ffn"), "decoder": ("dec_self", "cross", "dec_ffn")}


@dataclass(frozen=True)
class Step:
    """One point of the residual stream: after the embeddings, or after the Add & Norm of a sub-layer."""

    layer: int | None  # None for the embeddings
    sublayer: str  # "embed", "enc_self", "dec_self", "cross", "enc_ffn", "dec_ffn"
    norm: torch.Tensor  # (T,) L2 norm of the stream at each position
    added: torch.Tensor | None  # (T,) norm of what the sub-layer wrote (attention's W_o output, the FFN's output)
    ln_in: torch.Tensor | None = None  # (T, d) the LayerNorm's input (post-norm: x + sublayer(x))
    ln_out: torch.Tensor | None = None  # (T, d) after the Add & Norm


def sublayers(trace: Trace, side: str) -> list[str]:
    """The sub-layers of one layer of a stack, in forward order (decoder-only models have no cross-attention)."""
    names = SUBLAYERS[side]
    return [s for s in names if s != "cross" or trace.is_encoder_decoder]


def stream(trace: Trace, side: str, n_layers: int) -> list[Step]:
    """Every point of the residual stream of a stack, batch item 0, in forward order."""
    steps = [Step(None, "embed", trace.embeddings(side).sum[0].float().norm(dim=-1), None)]
    for layer in range(n_layers):
        for sub in sublayers(trace, side):
            ln_in, ln_out = trace.addnorm(layer, sub)
            if ln_out is None:
                continue
            steps.append(Step(layer, sub, ln_out[0].float().norm(dim=-1), added_norm(trace, side, layer, sub),
                              ln_in[0].float() if ln_in is not None else None, ln_out[0].float()))
    return steps


def added_norm(trace: Trace, side: str, layer: int, sub: str) -> torch.Tensor | None:
    """(T,) the norm of what a sub-layer adds to the stream: attention's output after W_o, or the FFN's output."""
    if sub.endswith("ffn"):
        out = trace.ffn(layer, side)[1]
    else:  # W_o's output is kept for every layer (only the per-head stages are kept for one)
        out = trace.tensors.get(act_name("out", layer=layer, block=sub))
    return None if out is None else out[0].float().norm(dim=-1)


@dataclass(frozen=True)
class NormEffect:
    """What one LayerNorm did at one position: mean and spread of the features before and after."""

    mean_in: float
    std_in: float
    mean_out: float
    std_out: float
    norm_in: float
    norm_out: float


def layer_norm_effect(step: Step, position: int) -> NormEffect | None:
    """Mean, standard deviation and norm of the features at one position, before and after the LayerNorm."""
    if step.ln_in is None or step.ln_out is None:
        return None
    a, b = step.ln_in[position], step.ln_out[position]
    return NormEffect(float(a.mean()), float(a.std(unbiased=False)), float(b.mean()), float(b.std(unbiased=False)),
                      float(a.norm()), float(b.norm()))


def top_neurons(trace: Trace, side: str, layer: int, position: int, k: int = 12) -> list[tuple[int, float]]:
    """The FFN's k most active hidden units (after the activation) at one position: (neuron, activation)."""
    hidden = trace.ffn(layer, side)[0]
    if hidden is None:
        return []
    h = hidden[0, position].float()  # (d_ffn,)
    values, index = torch.topk(h, min(k, h.numel()))
    return [(int(i), float(v)) for i, v in zip(index, values)]


def active_fraction(trace: Trace, side: str, layer: int) -> float | None:
    """Share of FFN hidden units above zero, over all positions (ReLU: the ones that fire)."""
    hidden = trace.ffn(layer, side)[0]
    return None if hidden is None else float((hidden[0] > 0).float().mean())
