"""Attention sinks: heads that park most of their weight on the first token. Removing the sink (its weight set
to 0 and each row renormalised, through intervene() on the `weights` hook, which attention() feeds into z = weights
@ V) shows what the parked weight was doing to the layer's output and the next token."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..model.hooks import act_name, intervene
from ..model.trace import run_with_trace
from ..model.transformer import Transformer
from ..text.inputs import Prepared
from .blocks import block_weights, check_fraction, check_head, check_top, sequence
from .heads import first_token
from .interventions import Effect, effect

THRESHOLD = 0.5  # mean weight on key 0 (queries i >= 1; cross-attention: every query), as heads.first_token
EMPTIED_BELOW = 1e-6  # a row with no more weight than this off the first key is emptied by the removal


@dataclass(frozen=True)
class Sink:
    kind: str
    layer: int
    head: int
    first_weight: float  # mean weight on the first key


def sink_weights(weights: dict[tuple[str, int], torch.Tensor]) -> list[Sink]:
    """Every head's mean weight on key 0 from (kind, layer) -> (B, nh, Tq, Tk) weights, in forward order."""
    out = []
    for (kind, layer), w in weights.items():
        score = first_token(w.float(), from_query=0 if kind == "cross" else 1)  # (nh,)
        out += [Sink(kind, layer, h, float(score[h])) for h in range(w.size(1)) if score[h] == score[h]]
    return out


def find_sinks(model: Transformer, prep: Prepared, threshold: float = THRESHOLD) -> list[Sink]:
    """Heads whose mean weight on the first token exceeds the threshold, strongest first."""
    threshold = check_fraction(threshold)
    found = sink_weights(block_weights(model, prep.src_ids, prep.tgt_ids))
    return sorted((s for s in found if s.first_weight > threshold), key=lambda s: -s.first_weight)


def without_first_key(head: int):
    """An edit of a `weights` hook (B, nh, Tq, Tk): head's weight on key 0 set to 0, each row renormalised to 1;
    a row that had all its weight on key 0 is left with nothing (all 0, like a query with every key masked)."""

    def edit(w: torch.Tensor) -> torch.Tensor:  # (B, nh, Tq, Tk)
        row = w[:, head].clone()  # (B, Tq, Tk)
        row[..., 0] = 0.0
        total = row.sum(-1, keepdim=True)  # (B, Tq, 1)
        out = w.clone()
        out[:, head] = torch.where(total > 0, row / total.clamp_min(torch.finfo(row.dtype).tiny), 0.0)
        return out

    return edit


@dataclass(frozen=True)
class SinkRemoval:
    """One head with its first-token weight removed: weights, the block's and the layer's output, the next token."""

    kind: str
    layer: int
    head: int
    weights_before: torch.Tensor  # (Tq, Tk) float32
    weights_after: torch.Tensor  # (Tq, Tk) float32
    block_change: torch.Tensor  # (Tq,) ‖Δ out‖ / ‖out‖ of the attention block's output per position
    layer_change: torch.Tensor  # (Tq,) the same for the layer's output (the residual stream after the layer)
    effect: Effect  # the next token at the last position, and the loss over the text
    kl_positions: torch.Tensor  # (T,) float64 KL(intact ‖ removed) of the next-token distribution at every position

    @property
    def mean_kl(self) -> float:
        """KL(intact ‖ removed) averaged over every position of the text (the positions the loss is taken over, and
        the last one), nats."""
        return float(self.kl_positions.mean())

    @property
    def emptied(self) -> torch.Tensor:
        """(Tq,) bool: rows whose whole weight was on the first key (a causal head's first query can only read
        it): removal leaves them with nothing, so their change says nothing about parked weight."""
        return self.weights_before[:, 1:].sum(-1) <= EMPTIED_BELOW

    def largest_change(self, which: str = "block") -> float:
        """The largest relative change of the block's ("block") or layer's ("layer") output over the rows that
        removal does not empty (0 when every row is emptied)."""
        change = (self.block_change if which == "block" else self.layer_change)[~self.emptied]
        return float(change.max()) if change.numel() else 0.0

    def arrays(self) -> dict[str, np.ndarray]:
        return {**self.effect.arrays(), "weights_before": self.weights_before.numpy(),
                "weights_after": self.weights_after.numpy(), "block_change": self.block_change.numpy(),
                "layer_change": self.layer_change.numpy(), "kl_positions": self.kl_positions.numpy()}


def _relative(before: torch.Tensor, after: torch.Tensor) -> torch.Tensor:
    """(T,) ‖after − before‖ / ‖before‖ per position of (T, d) tensors (0 where before is 0 and nothing moved)."""
    before, after = before.float(), after.float()
    num, den = (after - before).norm(dim=-1), before.norm(dim=-1)  # (T,), (T,)
    return torch.where(den > 0, num / den.clamp_min(1e-30), num)


def kl_rows(p_logits: torch.Tensor, q_logits: torch.Tensor) -> torch.Tensor:
    """(T,) KL(p ‖ q) in nats, row by row, of two (T, vocab) logit tensors, in float64."""
    logp, logq = torch.log_softmax(p_logits.double(), -1), torch.log_softmax(q_logits.double(), -1)  # (T, vocab)
    return (logp.exp() * (logp - logq)).sum(-1).clamp_min(0.0)  # (T,)


def remove_sink(model: Transformer, prep: Prepared, kind: str, layer: int, head: int, *,
                top: int = 10) -> SinkRemoval:
    """Run the text with one head's first-token weight removed, against the intact run."""
    kind, layer, head = check_head(model, kind, layer, head)
    top = check_top(top)
    cross = model.is_encoder_decoder
    weights = act_name("weights", layer=layer, block=kind, cross=cross)
    out = act_name("out", layer=layer, block=kind, cross=cross)
    last = act_name("addnorm_out", layer=layer, block="enc_ffn" if kind == "enc_self" else "dec_ffn", cross=cross)
    names = [weights, out, last]

    def traced():
        logits, trace = run_with_trace(model, prep.src_ids, prep.tgt_ids, names=names)
        return logits[0].float().cpu(), trace

    intact, before = traced()
    with intervene({weights: without_first_key(head)}):
        edited, after = traced()
    return SinkRemoval(
        kind, layer, head,
        weights_before=before[weights][0, head].float(), weights_after=after[weights][0, head].float(),
        block_change=_relative(before[out][0], after[out][0]), layer_change=_relative(before[last][0], after[last][0]),
        effect=effect(intact, edited, sequence(prep, "decoder"), top), kl_positions=kl_rows(intact, edited),
    )
