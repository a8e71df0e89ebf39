"""Every head at once: the model view (all layers × heads as one mosaic of small maps) and the head view (one
layer's heads as lines between tokens, BertViz's picture), light enough for the browser: weights quantised to one
byte, at most MAX_TOKENS tokens (longer texts pooled, each block its largest weight)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .blocks import block_weights

MAX_TOKENS = 64
GAP = 2  # empty cells between thumbnails


def pool_max(w: np.ndarray, step: int) -> np.ndarray:
    """(..., Tq, Tk) pooled into step × step blocks, each its largest value."""
    if step <= 1:
        return w
    *lead, n_q, n_k = w.shape
    pad = np.zeros((*lead, -(-n_q // step) * step, -(-n_k // step) * step), dtype=w.dtype)
    pad[..., :n_q, :n_k] = w
    return pad.reshape(*lead, pad.shape[-2] // step, step, pad.shape[-1] // step, step).max(axis=(-3, -1))


@dataclass(frozen=True)
class ModelView:
    """One attention kind's every layer and head: `mosaic` (L·(T+GAP), H·(T+GAP)) uint8, 0 = gap or masked,
    1..255 = weight 0..1; `step` > 1 when each cell is a block of step × step tokens."""

    kind: str
    n_layers: int
    n_heads: int
    size: int  # thumbnail side in cells
    step: int
    mosaic: np.ndarray

    def thumbnail(self, layer: int, head: int) -> np.ndarray:
        """(size, size) weights 0..1 of one head (NaN where masked), read back from the mosaic."""
        s, g = self.size, GAP
        cells = self.mosaic[layer * (s + g):layer * (s + g) + s, head * (s + g):head * (s + g) + s].astype(np.float32)
        return np.where(cells == 0, np.nan, (cells - 1) / 254)

    def arrays(self) -> dict[str, np.ndarray]:
        """weights (layers, heads, size, size) 0..1 read back from the bytes (NaN where masked), the mosaic itself,
        and (layers, heads, size, step)."""
        weights = np.stack([np.stack([self.thumbnail(layer, h) for h in range(self.n_heads)])
                            for layer in range(self.n_layers)])
        return {"weights": weights, "mosaic": self.mosaic,
                "shape": np.array([self.n_layers, self.n_heads, self.size, self.step])}


def quantise(w: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Weights 0..1 as bytes 1..255 (0 where masked): a 12 × 12-head mosaic of 64 tokens is 0.6 MB, not 2.4."""
    return np.where(mask, np.rint(np.clip(w, 0, 1) * 254) + 1, 0).astype(np.uint8)


def model_view(model, src: torch.Tensor, tgt: torch.Tensor | None, kind: str) -> ModelView:
    """The mosaic of every layer × head of one attention kind (enc_self, dec_self, cross) for one input."""
    weights = block_weights(model, src, tgt)
    L, H = model.cfg.n_layers, model.cfg.n_heads
    first = weights[(kind, 0)][0]
    step = max(1, -(-max(first.shape[-2:]) // MAX_TOKENS))
    size = -(-max(first.shape[-2:]) // step)
    out = np.zeros((L * (size + GAP) - GAP, H * (size + GAP) - GAP), dtype=np.uint8)
    for layer in range(L):
        w = weights[(kind, layer)][0].numpy()  # (H, Tq, Tk)
        causal = np.ones(w.shape[-2:], dtype=bool) if kind != "dec_self" else np.tril(np.ones(w.shape[-2:], bool))
        q = pool_max(quantise(w, np.broadcast_to(causal, w.shape)), step)  # (H, size', size')
        for head in range(H):
            r, c = layer * (size + GAP), head * (size + GAP)
            out[r:r + q.shape[-2], c:c + q.shape[-1]] = q[head]
    return ModelView(kind, L, H, size, step, out)


@dataclass(frozen=True)
class HeadView:
    """One layer's heads for the head view: weights (H, T, T) rounded to 3 decimals, at most MAX_TOKENS tokens."""

    layer: int
    kind: str
    weights: np.ndarray  # float32 (H, Tq, Tk)
    first: int  # the first token shown (a long text shows its last MAX_TOKENS tokens)

    def arrays(self) -> dict[str, np.ndarray]:
        return {"weights": self.weights, "first": np.array([self.first])}


def head_view(weights: torch.Tensor, layer: int, kind: str) -> HeadView:
    """(B, H, Tq, Tk) weights of one block -> the head view's data (the last MAX_TOKENS queries and keys)."""
    w = weights[0].float().numpy()
    n = w.shape[-1]
    first = max(0, n - MAX_TOKENS) if w.shape[-2] == n else 0
    w = w[:, first:, first:] if first else w[:, -MAX_TOKENS:, -MAX_TOKENS:]
    return HeadView(layer, kind, np.round(w, 3).astype(np.float32), first)
