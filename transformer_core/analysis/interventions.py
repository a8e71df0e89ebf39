"""Change what the model computes and see the effect: ablate heads and FFNs, patch one head's output from
another text. Every edit goes through `intervene` (per thread, the shared model is never changed).

A head's contribution is its slice of the `z` hook (B, nh, T, hs): z = weights @ V, before the heads are
concatenated and mixed by W_o, so zeroing it removes exactly that head from the block's output.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
import torch

from ..errors import InputError
from ..model.hooks import act_name, fused_attention, intervene
from ..model.trace import run, run_with_trace
from ..model.transformer import Transformer
from ..text.inputs import Prepared
from .blocks import check_ffn, check_head, check_top, logits_of, query_side, sequence
from .next_token import Distribution, distribution
from .surprise import mean_loss

__all__ = ["ABLATION_MODES", "ALIGNMENTS", "Ablation", "Effect", "Patch", "ablate", "ablation_edits",
           "PatchSource", "aligned_positions", "effect", "intervene", "kl_divergence", "patch", "patch_source"]

Edit = Callable[[torch.Tensor], torch.Tensor]
ABLATION_MODES = ("zero", "mean")
ALIGNMENTS = ("end", "start", "exact")


def kl_divergence(logits_p: torch.Tensor, logits_q: torch.Tensor) -> float:
    """KL(p ‖ q) in nats between the softmaxes of two (vocab,) logit vectors, in float64 (never inf)."""
    logp = torch.log_softmax(logits_p.double(), dim=-1)  # (vocab,)
    logq = torch.log_softmax(logits_q.double(), dim=-1)  # (vocab,)
    return float((logp.exp() * (logp - logq)).sum().clamp_min(0.0))


@dataclass(frozen=True)
class Effect:
    """An edited forward against the intact one: the next token (last position) and the loss over the text."""

    intact: Distribution  # next-token top tokens of the intact model
    edited: Distribution  # the same after the edit
    kl: float  # KL(intact ‖ edited) of the next-token distributions, nats
    top_id: int  # the intact model's most likely next token (model id)
    top_prob_intact: float
    top_prob_edited: float  # the same token's probability after the edit
    loss_intact: float | None  # mean next-token loss over the text, nats/token (None for a one-token text)
    loss_edited: float | None
    moved: list[tuple[int, float, float]]  # (model id, p intact, p edited): the tokens whose probability moved most

    @property
    def loss_change(self) -> float | None:
        """Edited minus intact loss (positive: the edit hurt the model's predictions)."""
        return None if self.loss_intact is None else self.loss_edited - self.loss_intact

    def arrays(self) -> dict[str, np.ndarray]:
        f32 = np.float32
        return {"intact_ids": np.array(self.intact.ids, dtype=np.int64),
                "intact_probs": np.array(self.intact.raw, dtype=f32),
                "edited_ids": np.array(self.edited.ids, dtype=np.int64),
                "edited_probs": np.array(self.edited.raw, dtype=f32),
                "kl": np.array(self.kl, dtype=f32),
                "top_prob": np.array([self.top_prob_intact, self.top_prob_edited], dtype=f32),
                "loss": np.array([np.nan if x is None else x for x in (self.loss_intact, self.loss_edited)], dtype=f32),
                "moved_ids": np.array([m[0] for m in self.moved], dtype=np.int64),
                "moved_probs": np.array([m[1:] for m in self.moved], dtype=f32).reshape(-1, 2)}


def effect(intact: torch.Tensor, edited: torch.Tensor, ids: torch.Tensor, top: int = 10) -> Effect:
    """Compare (T, vocab) logits of an intact and an edited forward over the (T,) decoder ids."""
    p0 = torch.softmax(intact[-1].double(), dim=-1)  # (vocab,)
    p1 = torch.softmax(edited[-1].double(), dim=-1)  # (vocab,)
    top_id = int(intact[-1].argmax())
    moved = torch.topk((p1 - p0).abs(), min(top, p0.numel())).indices  # (top,)
    return Effect(
        intact=distribution(intact[-1], top=top), edited=distribution(edited[-1], top=top),
        kl=kl_divergence(intact[-1], edited[-1]), top_id=top_id,
        top_prob_intact=float(p0[top_id]), top_prob_edited=float(p1[top_id]),
        loss_intact=mean_loss(intact, ids), loss_edited=mean_loss(edited, ids),
        moved=[(int(i), float(p0[i]), float(p1[i])) for i in moved],
    )


def _head_edit(heads: list[int], mode: str) -> Edit:
    def edit(z: torch.Tensor) -> torch.Tensor:  # (B, nh, T, hs)
        out = z.clone()
        out[:, heads] = 0.0 if mode == "zero" else z[:, heads].mean(dim=2, keepdim=True)  # (B, k, T, hs)
        return out

    return edit


def _ffn_edit(mode: str) -> Edit:
    if mode == "zero":
        return torch.zeros_like  # (B, T, d)
    return lambda x: torch.zeros_like(x) + x.mean(dim=1, keepdim=True)  # (B, T, d) every position the mean


def ablation_edits(model: Transformer, heads: Iterable[tuple[str, int, int]] = (),
                   ffn_layers: Iterable[tuple[str, int]] = (), mode: str = "zero") -> dict[str, Edit]:
    """Hook name -> edit for intervene(): each head's z slice and each FFN output set to 0 ("zero") or to its
    mean over the text's positions ("mean": what the component always adds, without what depends on position)."""
    if mode not in ABLATION_MODES:
        raise InputError("ablation_mode", mode=str(mode)[:20], choices=", ".join(ABLATION_MODES))
    per_hook: dict[str, list[int]] = {}
    for kind, layer, head in heads:
        kind, layer, head = check_head(model, kind, layer, head)
        per_hook.setdefault(act_name("z", layer=layer, block=kind), []).append(head)
    edits = {name: _head_edit(sorted(set(hs)), mode) for name, hs in per_hook.items()}
    for side, layer in ffn_layers:
        side, layer = check_ffn(model, side, layer)
        edits[act_name("ffn_out", layer=layer, side=side)] = _ffn_edit(mode)
    return edits


@dataclass(frozen=True)
class Ablation:
    heads: list[tuple[str, int, int]]
    ffn_layers: list[tuple[str, int]]
    mode: str
    effect: Effect

    def arrays(self) -> dict[str, np.ndarray]:
        return self.effect.arrays()


def ablate(model: Transformer, prep: Prepared, heads: Iterable[tuple[str, int, int]] = (),
           ffn_layers: Iterable[tuple[str, int]] = (), *, mode: str = "zero", top: int = 10) -> Ablation:
    """Knock out heads (kind, layer, head) and FFNs (side, layer); the next token and loss against the intact model."""
    heads, ffn_layers, top = [tuple(h) for h in heads], [tuple(f) for f in ffn_layers], check_top(top)
    edits = ablation_edits(model, heads, ffn_layers, mode)
    intact = logits_of(model, prep)  # (T, vocab)
    with intervene(edits):
        edited = logits_of(model, prep)  # (T, vocab)
    return Ablation(heads, ffn_layers, mode, effect(intact, edited, sequence(prep, "decoder"), top))


def aligned_positions(n_a: int, n_b: int, align: str = "end") -> list[tuple[int, int]]:
    """(position in A, position in B) pairs whose values are swapped, in A's order.

    "end": the last positions line up (where the next token is read; the default), as far back as the shorter
    text goes. "start": the first positions line up. "exact": position by position, equal lengths only.
    """
    if align not in ALIGNMENTS:
        raise InputError("patch_align", align=str(align)[:20], choices=", ".join(ALIGNMENTS))
    if align == "exact" and n_a != n_b:
        raise InputError("patch_lengths", a=n_a, b=n_b)
    n = min(n_a, n_b)
    if align == "end":
        return [(n_a - n + k, n_b - n + k) for k in range(n)]
    return [(k, k) for k in range(n)]


@dataclass(frozen=True)
class Patch:
    """Text A run with one head's z taken from text B: what moved in A's next-token prediction."""

    kind: str
    layer: int
    head: int
    positions: list[tuple[int, int]]  # (A position, B position) pairs that were swapped
    effect: Effect  # A intact vs A patched
    source: Distribution  # B's own next-token distribution
    source_top_id: int  # B's most likely next token
    source_top_in_a: tuple[float, float]  # its probability in A, intact and patched

    def arrays(self) -> dict[str, np.ndarray]:
        return {**self.effect.arrays(), "positions": np.array(self.positions, dtype=np.int64).reshape(-1, 2),
                "source_ids": np.array(self.source.ids, dtype=np.int64),
                "source_probs": np.array(self.source.raw, dtype=np.float32),
                "source_top_in_a": np.array(self.source_top_in_a, dtype=np.float32)}


@dataclass(frozen=True)
class PatchSource:
    """What text B gives a patch at one block: every head's z there and B's own next-token logits. It does not
    depend on text A or the head, so a page keeps it while the learner changes those."""

    kind: str
    layer: int
    z: torch.Tensor  # (1, nh, Tb, hs) CPU
    last_logits: torch.Tensor  # (vocab,) float32 CPU, B's prediction after its last token


def patch_source(model: Transformer, prep_b: Prepared, kind: str, layer: int) -> PatchSource:
    """Run B once, keeping the z of block (kind, layer) (no map kept: the fused attention kernel)."""
    kind, layer, _ = check_head(model, kind, layer, 0)
    name = act_name("z", layer=layer, block=kind)
    with fused_attention():
        logits_b, trace_b = run_with_trace(model, prep_b.src_ids, prep_b.tgt_ids, names=[name])
    return PatchSource(kind, layer, trace_b[name], logits_b[0, -1].float().cpu())


def patch(model: Transformer, prep_a: Prepared, prep_b: Prepared, kind: str, layer: int, head: int, *,
          align: str = "end", top: int = 10, source: PatchSource | None = None) -> Patch:
    """Run A with head `head`'s z at (kind, layer) replaced by B's at aligned positions (activation patching).
    `source`: patch_source(model, prep_b, kind, layer) computed before (B is not run again)."""
    kind, layer, head = check_head(model, kind, layer, head)
    top = check_top(top)
    if (prep_a.tgt_ids is None) != (prep_b.tgt_ids is None):
        raise InputError("patch_mismatch")
    side = query_side(kind)
    n_b = sequence(prep_b, side).numel()
    if source is None or (source.kind, source.layer, source.z.size(2)) != (kind, layer, n_b):
        source = patch_source(model, prep_b, kind, layer)  # none given, or one of another block or text
    pairs = aligned_positions(sequence(prep_a, side).numel(), n_b, align)
    z_b = source.z[:, head]  # (1, Tb, hs)
    at_a, at_b = [a for a, _ in pairs], [b for _, b in pairs]

    def edit(z: torch.Tensor) -> torch.Tensor:  # (2, nh, Ta, hs): item 0 stays intact, item 1 is patched
        out = z.clone()
        out[1, head, at_a] = z_b[0, at_b].to(z)  # (n, hs)
        return out

    both = (prep_a.src_ids.expand(2, -1), None if prep_a.tgt_ids is None else prep_a.tgt_ids.expand(2, -1))
    with intervene({act_name("z", layer=layer, block=kind): edit}), fused_attention():
        intact, patched = run(model, *both).float().cpu()  # (Ta, vocab) each: one forward of A, intact and patched
    b_top = int(source.last_logits.argmax())
    p0, p1 = (torch.softmax(x[-1].double(), dim=-1)[b_top] for x in (intact, patched))
    return Patch(kind, layer, head, pairs, effect(intact, patched, sequence(prep_a, "decoder"), top),
                 distribution(source.last_logits, top=top), b_top, (float(p0), float(p1)))
