"""One forward that returns the logits plus a Trace of every named intermediate (detached, on the CPU)."""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch

from .hooks import capture_all
from .model import DEFAULT_MASKS, Transformer

ATTN_STAGES = ("q", "k", "v", "scores", "scaled", "mask", "masked", "weights", "z", "concat", "out")
BLOCK_KINDS = {"self_attn": "self", "cross_attn": "cross"}


@dataclass
class Trace:
    """Hook name -> tensor, in forward order. Shapes: see `shapes()`; attention tensors are (B, nh, Tq, Tk)."""

    tensors: dict[str, torch.Tensor]
    src_ids: torch.Tensor
    tgt_ids: torch.Tensor | None = None
    src_lengths: torch.Tensor | None = None
    tgt_lengths: torch.Tensor | None = None
    masks: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_MASKS))
    all_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)  # every hook, stored or not
    _probs: torch.Tensor | None = None

    def __getitem__(self, name: str) -> torch.Tensor:
        return self.tensors[name]

    def __contains__(self, name: str) -> bool:
        return name in self.tensors

    def names(self) -> list[str]:
        return list(self.tensors)

    def shapes(self) -> list[tuple[str, tuple[int, ...]]]:
        """(name, shape) in forward order, token ids first, probabilities last (as the course prints)."""
        rows = [("src_ids", tuple(self.src_ids.shape))]
        if self.tgt_ids is not None:
            rows.append(("tgt_ids", tuple(self.tgt_ids.shape)))
        shapes = self.all_shapes or {n: tuple(t.shape) for n, t in self.tensors.items()}
        rows += list(shapes.items())
        if "hook_logits" in shapes:
            rows.append(("probs", shapes["hook_logits"]))
        return rows

    @property
    def logits(self) -> torch.Tensor:
        return self.tensors["hook_logits"]  # (B, T, vocab)

    @property
    def probs(self) -> torch.Tensor:
        """Softmax over the vocabulary (B, T, vocab), computed on first use."""
        if self._probs is None:
            self._probs = torch.softmax(self.logits.float(), dim=-1)
        return self._probs

    def attention_blocks(self) -> list[str]:
        """Paths of the attention blocks traced, e.g. 'encoder.layers.0.self_attn'."""
        return [n[: -len(".hook_weights")] for n in self.tensors if n.endswith(".hook_weights")]

    def attention(self, block: str) -> dict[str, torch.Tensor]:
        """Every stage of one block; with no mask, 'masked' is the scaled scores and 'mask' all True."""
        stages = {s: self.tensors[f"{block}.hook_{s}"] for s in ATTN_STAGES if f"{block}.hook_{s}" in self.tensors}
        if "mask" not in stages and "scaled" in stages:
            stages["mask"] = torch.ones_like(stages["scaled"], dtype=torch.bool)
            stages["masked"] = stages["scaled"]
        return stages


def run_with_trace(
    model: Transformer,
    src: torch.Tensor,
    tgt: torch.Tensor | None = None,
    *,
    src_lengths: torch.Tensor | None = None,
    tgt_lengths: torch.Tensor | None = None,
    masks: dict[str, str] | None = None,
    names: Iterable[str] | Callable[[str], bool] | None = None,
) -> tuple[torch.Tensor, Trace]:
    """Run one inference forward, capturing the hook points chosen by `names` (default: all)."""
    device = next(model.parameters()).device
    src = src.to(device)
    tgt = tgt.to(device) if tgt is not None else None
    with torch.inference_mode(), capture_all(names) as store:
        logits = model(src, tgt, src_lengths=src_lengths, tgt_lengths=tgt_lengths, masks=masks)
    trace = Trace(
        tensors=dict(store.tensors), all_shapes=dict(store.shapes),
        src_ids=src.cpu(), tgt_ids=None if tgt is None else tgt.cpu(),
        src_lengths=src_lengths, tgt_lengths=tgt_lengths, masks={**DEFAULT_MASKS, **(masks or {})},
    )
    return logits, trace


def run(model: Transformer, src, tgt=None, **kwargs) -> torch.Tensor:
    """Untraced inference forward (same math, nothing captured)."""
    device = next(model.parameters()).device
    with torch.inference_mode():
        return model(src.to(device), None if tgt is None else tgt.to(device), **kwargs)


PER_HEAD_STAGES = ("q", "k", "v", "scores", "scaled", "mask", "masked", "weights", "z")


def layer_filter(layer: int) -> Callable[[str], bool]:
    """Keep everything except per-head attention tensors of other layers (bounded memory for long texts)."""
    mine = f".layers.{layer}."

    def wanted(name: str) -> bool:
        stage = name.rsplit(".hook_", 1)[-1]
        return stage not in PER_HEAD_STAGES or "_attn." not in name or mine in name

    return wanted
