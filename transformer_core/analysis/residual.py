"""The residual stream of one stack, read off a trace: its norm per token after every sub-layer, what attention
and the FFN each add, what each LayerNorm does, and the FFN's most active neurons for a token."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..model.hooks import addnorm_index
from ..model.trace import Trace

SUBLAYERS = {"encoder": ("enc_self", "enc_ffn"), "decoder": ("dec_self", "cross", "dec_ffn")}


@dataclass(frozen=True)
class Step:
    """One point of the residual stream: after the embeddings, or after the Add & Norm of a sub-layer."""

    layer: int | None  # None for the embeddings
    sublayer: str  # "embed", "enc_self", "dec_self", "cross", "enc_ffn", "dec_ffn"
    norm: torch.Tensor  # (T,) L2 norm of the stream at each position
    added: torch.Tensor | None  # (T,) norm of what the sub-layer wrote (attention's W_o output, the FFN's output)
    ln_in: torch.Tensor | None = None  # (T, d) the norm's input (post-norm: x + sublayer(x); pre-norm: x)
    ln_out: torch.Tensor | None = None  # (T, d) the norm's output (post-norm: the stream; pre-norm: what the
    #                                     sub-layer reads)


def sublayers(trace: Trace, side: str) -> list[str]:
    """The sub-layers of one layer of a stack, in forward order (decoder-only models have no cross-attention)."""
    names = SUBLAYERS[side]
    return [s for s in names if s != "cross" or trace.is_encoder_decoder]


def stream(trace: Trace, side: str, n_layers: int) -> list[Step]:
    """Every point of the residual stream of a stack, batch item 0, in forward order."""
    steps = [Step(None, "embed", trace.embeddings(side).sum[0].float().norm(dim=-1), None)]
    for layer in range(n_layers):
        for sub in sublayers(trace, side):
            out = trace.addnorm(layer, sub)[1]  # the stream after this sub-layer
            if out is None:
                continue
            ln_in, ln_out = trace.norm_io(layer, sub)
            steps.append(Step(layer, sub, out[0].float().norm(dim=-1), added_norm(trace, side, layer, sub),
                              ln_in[0].float() if ln_in is not None else None, ln_out[0].float()))
    return steps


def added_norm(trace: Trace, side: str, layer: int, sub: str) -> torch.Tensor | None:
    """(T,) the norm of what a sub-layer adds to the stream: attention's output after W_o, or the FFN's output."""
    if sub.endswith("ffn"):
        out = trace.ffn(layer, side)[1]
    else:  # W_o's output is kept for every layer (only the per-head stages are kept for one)
        out = trace.get("out", layer=layer, block=sub)
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


@dataclass(frozen=True)
class NormPair:
    """One vector through LayerNorm and through RMSNorm (no gain: the model's own gain is shown beside them)."""

    x: torch.Tensor  # (d,) the norm's input
    layer_norm: torch.Tensor  # (d,) (x − mean) / sqrt(var + eps)
    rms_norm: torch.Tensor  # (d,) x / sqrt(mean(x²) + eps)
    mean: float  # of x: LayerNorm subtracts it, RMSNorm keeps it
    std: float
    rms: float  # sqrt(mean(x²)) = sqrt(std² + mean²)

    @property
    def difference(self) -> float:
        """The largest |LayerNorm − RMSNorm| over the vector (before any gain)."""
        return float((self.layer_norm - self.rms_norm).abs().max())


def norm_pair(x: torch.Tensor, eps: float) -> NormPair:
    """Both norms of one vector, computed here in float64 from their formulas."""
    x64 = x.double()
    mean, var = x64.mean(), x64.var(unbiased=False)
    ms = (x64 * x64).mean()
    return NormPair(x.float(), ((x64 - mean) / torch.sqrt(var + eps)).float(), (x64 / torch.sqrt(ms + eps)).float(),
                    float(mean), float(var.sqrt()), float(ms.sqrt()))


GATE_OPEN = 0.1  # |SiLU(gate)| above this counts as a gate letting its unit through (the FFN page's share)


@dataclass(frozen=True)
class GateUp:
    """A gated FFN (SwiGLU) at one position: each (d_ffn,) vector, and what the FFN page reads off them."""

    gate: torch.Tensor  # SiLU(W_gate x)
    up: torch.Tensor  # W_up x
    product: torch.Tensor  # gate ⊙ up: what W_down reads
    open_share: float  # share of units with |gate| > GATE_OPEN
    top: list[int]  # the units with the largest |gate ⊙ up|, largest first


def gate_up(trace: Trace, side: str, layer: int, position: int, k: int = 12) -> GateUp | None:
    """The gate, up and product of a gated FFN at one position, the open share and the top-k units; None for the
    course's FFN."""
    gate, up = trace.gated(layer, side)
    if gate is None or up is None:
        return None
    g, u = gate[0, position].float(), up[0, position].float()  # (d_ffn,)
    h = g * u
    top = h.abs().topk(min(k, h.numel())).indices.tolist()
    return GateUp(g, u, h, float((g.abs() > GATE_OPEN).float().mean()), top)


def norm_affine(model, side: str, layer: int, sublayer: str) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(g, b): the gain (d,) and the bias (d,) of the norm in the Add & Norm around a sub-layer (enc_self, dec_self,
    cross, *_ffn); b is None for a norm without one (RMSNorm, a LayerNorm built with bias=False)."""
    stack = model.encoder if side == "encoder" else model.decoder
    ln = getattr(stack.layers[layer], f"addnorm{addnorm_index(sublayer, model.is_encoder_decoder)}").ln
    bias = getattr(ln, "bias", None)
    return ln.weight.detach().float().cpu(), None if bias is None else bias.detach().float().cpu()


def norm_check(model, step, side: str, position: int, pair: NormPair) -> tuple[float, bool] | None:
    """The largest |model's own norm output − (g ⊙ formula + b)| at one position of a pre-norm sub-layer's input
    (`pair`: norm_pair of that input), and whether the norm has a bias b; None for post-norm (there the norm's output
    is the stream itself)."""
    if not model.cfg.norm_first:
        return None
    gain, bias = norm_affine(model, side, step.layer, step.sublayer)
    mine = pair.rms_norm if model.cfg.norm == "rmsnorm" else pair.layer_norm
    return float((step.ln_out[position] - (gain * mine + (0 if bias is None else bias))).abs().max()), bias is not None
