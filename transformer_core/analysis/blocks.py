"""Which attention blocks, heads and FFNs a model has, checked against what a learner asks for, and which
sequence of a prepared input each side reads."""
from __future__ import annotations

import operator

import torch

from ..errors import InputError
from ..model.hooks import act_name
from ..model.trace import run, run_with_trace
from ..model.transformer import Transformer
from ..text.inputs import Prepared

KIND_ORDER = ("enc_self", "dec_self", "cross")  # forward order of the three kinds of attention


def kinds(model: Transformer) -> tuple[str, ...]:
    """The attention kinds a model has: all three (encoder-decoder) or dec_self alone (decoder-only)."""
    return KIND_ORDER if model.is_encoder_decoder else ("dec_self",)


def sides(model: Transformer) -> tuple[str, ...]:
    """The stacks a model has: encoder and decoder, or decoder alone."""
    return ("encoder", "decoder") if model.is_encoder_decoder else ("decoder",)


def _index(value, n: int) -> int | None:
    """value as an index in 0..n-1, or None (ints and integer scalars only: bools, floats and strings refused)."""
    if isinstance(value, bool):
        return None
    try:
        i = operator.index(value)
    except TypeError:
        return None
    return i if 0 <= i < n else None


def check_head(model: Transformer, kind: str, layer: int, head: int) -> tuple[str, int, int]:
    """(kind, layer, head) as plain values, or InputError 'head_unknown' when the model has no such head."""
    cfg = model.cfg
    if kind not in kinds(model) or _index(layer, cfg.n_layers) is None or _index(head, cfg.n_heads) is None:
        raise InputError("head_unknown", kind=str(kind)[:20], layer=str(layer)[:10], head=str(head)[:10],
                         kinds=", ".join(kinds(model)), last_layer=cfg.n_layers - 1, last_head=cfg.n_heads - 1)
    return kind, operator.index(layer), operator.index(head)


def check_ffn(model: Transformer, side: str, layer: int) -> tuple[str, int]:
    """(side, layer) as plain values, or InputError 'ffn_unknown' when the model has no such FFN."""
    if side not in sides(model) or _index(layer, model.cfg.n_layers) is None:
        raise InputError("ffn_unknown", side=str(side)[:20], layer=str(layer)[:10], sides=", ".join(sides(model)),
                         last_layer=model.cfg.n_layers - 1)
    return side, operator.index(layer)


def check_fraction(value: float) -> float:
    """A number in [0, 1] (thresholds on attention weights), or InputError 'analysis_fraction'."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        x = float("nan")
    if not 0.0 <= x <= 1.0:
        raise InputError("analysis_fraction", value=str(value)[:20])
    return x


def check_top(value: int, hi: int = 1000) -> int:
    """How many top tokens to list: 1..hi, or InputError 'analysis_top'."""
    k = _index(value, hi + 1)
    if not k:
        raise InputError("analysis_top", value=str(value)[:20], hi=hi)
    return k


def query_side(kind: str) -> str:
    """The stack whose positions are a block's queries."""
    return "encoder" if kind == "enc_self" else "decoder"


def key_side(kind: str) -> str:
    """The stack whose positions are a block's keys."""
    return "decoder" if kind == "dec_self" else "encoder"


def sequence(prep: Prepared, side: str) -> torch.Tensor:
    """(T,) model ids a stack reads: the encoder's source, or the decoder's target (the prompt if decoder-only)."""
    if side == "encoder" or prep.tgt_ids is None:
        return prep.src_ids[0]
    return prep.tgt_ids[0]


def logits_of(model: Transformer, prep: Prepared) -> torch.Tensor:
    """(T, vocab) float32 CPU logits of one untraced forward (T = decoder positions)."""
    return run(model, prep.src_ids, prep.tgt_ids)[0].float().cpu()  # (T, vocab)


def block_weights(model: Transformer, src: torch.Tensor,
                  tgt: torch.Tensor | None) -> dict[tuple[str, int], torch.Tensor]:
    """(kind, layer) -> (B, nh, Tq, Tk) float32 attention weights of every block, in forward order. The forward
    stops after the last block's weights: the output layer (most of a big vocabulary's forward) is never run."""
    cross = model.is_encoder_decoder
    names = {(k, i): act_name("weights", layer=i, block=k, cross=cross)
             for k in kinds(model) for i in range(model.cfg.n_layers)}
    _, trace = run_with_trace(model, src, tgt, names=list(names.values()), stop_early=True)
    return {where: trace[name].float() for where, name in names.items()}
