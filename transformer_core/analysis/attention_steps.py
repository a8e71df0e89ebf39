"""One query's attention arithmetic, step by step: the model's own attention() function run on one row of
the traced Q, K, V and mask, so the learner sees the numbers the model computed and a check that they match."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..model.attention import attention
from ..model.trace import AttentionStages


@dataclass
class QuerySteps:
    """The numbers of one query row of one head (keys along dim 0)."""

    d_k: int
    raw: torch.Tensor  # (Tk,) q·k
    scaled: torch.Tensor  # (Tk,) q·k / √d_k
    mask: torch.Tensor  # (Tk,) bool, True = may attend
    masked: torch.Tensor  # (Tk,) scaled with −∞ where masked
    weights: torch.Tensor  # (Tk,) softmax row (exact 0 where masked)
    v: torch.Tensor  # (Tk, hs)
    output: torch.Tensor  # (hs,) Σ_j weights_j · v_j
    traced_output: torch.Tensor  # (hs,) the same row as the model computed it in the traced forward

    @property
    def scale(self) -> float:
        return math.sqrt(self.d_k)

    @property
    def max_difference(self) -> float:
        """Largest |recomputed − traced| of the output row (float rounding only)."""
        return float((self.output - self.traced_output).abs().max())


def query_steps(stages: AttentionStages, head: int, query: int) -> QuerySteps:
    """Every stage for one query token of one head (batch item 0), computed by the model's attention()."""
    rotary = stages.has("q_rot")  # RoPE: the scores read the rotated q and k
    q = stages.head("q_rot" if rotary else "q", head)[query : query + 1]  # (1, hs)
    k, v = stages.head("k_rot" if rotary else "k", head), stages.head("v", head)  # (Tk, hs) its K/V head's
    mask = stages.head("mask", head)[query : query + 1].bool()  # (1, Tk)
    seen: dict[str, torch.Tensor] = {}

    def keep(stage: str, x: torch.Tensor) -> torch.Tensor:
        seen[stage] = x[0]
        return x

    out, _ = attention(q, k, v, mask, hook=keep)  # (1, hs)
    masked = seen.get("masked", seen["scaled"])
    return QuerySteps(d_k=int(q.size(-1)), raw=seen["scores"], scaled=seen["scaled"], mask=mask[0], masked=masked,
                      weights=seen["weights"], v=v, output=out[0], traced_output=stages.head("z", head)[query])


def row_sums(weights: torch.Tensor, mask: torch.Tensor) -> tuple[float, float, int]:
    """(min, max) of the softmax row sums over rows with a key to attend to, and how many rows have none."""
    sums = weights.float().sum(-1)  # (..., Tq)
    live = mask.bool().any(-1)  # (..., Tq)
    n_empty = int((~live).sum())
    if not bool(live.any()):
        return 0.0, 0.0, n_empty
    return float(sums[live].min()), float(sums[live].max()), n_empty
