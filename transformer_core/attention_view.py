"""Read one head of a traced attention block: its stages, one query's arithmetic, row sums (no new math)."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

GRID_STAGES = ("scores", "scaled", "masked", "weights")
BLOCK_KIND = {"encoder.self_attn": "enc_self", "decoder.self_attn": "dec_self", "decoder.cross_attn": "cross"}


def block_kind(block: str) -> str | None:
    """'decoder.layers.3.cross_attn' -> 'cross' (the model's mask slot); None for an unknown path."""
    stack, _, rest = str(block).partition(".layers.")
    return BLOCK_KIND.get(f"{stack}.{rest.partition('.')[2]}")


def layer_blocks(hook_names, layer: int) -> list[str]:
    """Attention block paths of one layer, in forward order, from a model's hook names."""
    mine = f".layers.{layer}."
    return [n[: -len(".hook_weights")] for n in hook_names if n.endswith(".hook_weights") and mine in n]


def head_stage(stages: dict[str, torch.Tensor], stage: str, head: int | None = None, limit: int | None = None):
    """One stage of batch item 0, float32: (nh, Tq, Tk) or (Tq, Tk) for one head; cropped to `limit` tokens."""
    x = stages[stage][0].float()  # (nh, Tq, Tk) or (nh, T, hs)
    x = x if head is None else x[head]
    if limit is not None:
        x = x[..., :limit, :limit] if stage not in ("q", "k", "v", "z") else x[..., :limit, :]
    return x


@dataclass
class QuerySteps:
    """The numbers of one query row of one head, read from the trace (keys along dim 0)."""

    d_k: int
    raw: torch.Tensor  # (Tk,) q·k
    scaled: torch.Tensor  # (Tk,) q·k / √d_k
    mask: torch.Tensor  # (Tk,) bool, True = may attend
    masked: torch.Tensor  # (Tk,) scaled with −∞ where masked
    weights: torch.Tensor  # (Tk,) softmax row (exact 0 where masked)
    v: torch.Tensor  # (Tk, hs)
    output: torch.Tensor  # (hs,) the traced z row = Σ_j weights_j · v_j


def query_steps(stages: dict[str, torch.Tensor], head: int, query: int) -> QuerySteps:
    """Every stage for one query token of one head (batch item 0)."""
    def row(s):
        return stages[s][0, head, query].float()

    return QuerySteps(d_k=int(stages["q"].size(-1)), raw=row("scores"), scaled=row("scaled"),
                      mask=stages["mask"][0, head, query].bool(), masked=row("masked"), weights=row("weights"),
                      v=stages["v"][0, head].float(), output=row("z"))


def weighted_sum(steps: QuerySteps) -> torch.Tensor:
    """Σ_j w_j v_j (hs,): recomputed from the row to show it equals the traced output."""
    return steps.weights @ steps.v


def row_sums(weights: torch.Tensor, mask: torch.Tensor) -> tuple[float, float, int]:
    """(min, max) of the softmax row sums over rows with a key to attend to, and how many rows have none."""
    sums = weights.float().sum(-1)  # (..., Tq)
    live = mask.bool().any(-1)  # (..., Tq)
    n_empty = int((~live).sum())
    if not bool(live.any()):
        return 0.0, 0.0, n_empty
    return float(sums[live].min()), float(sums[live].max()), n_empty


def scale_factor(d_k: int) -> float:
    return math.sqrt(d_k)
