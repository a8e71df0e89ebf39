"""One forward that returns the logits plus a Trace of every named intermediate (detached, on the forward's device;
read on the CPU).

Read a trace through its views (`attention`, `embeddings`, `ffn`, `addnorm`), never by spelling hook paths.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch

from .hooks import ATTENTION_STAGES, BLOCKS, MAP_STAGES, PER_HEAD_STAGES, CaptureDone, act_name, capture_all
from .transformer import DEFAULT_MASKS, Transformer

KV_STAGES = ("k", "v", "k_normed", "k_rot")  # one per K/V head
VECTOR_STAGES = tuple(s for s in PER_HEAD_STAGES if s not in MAP_STAGES)  # (T, hs) per head, not maps


@dataclass(frozen=True, eq=False)
class AttentionStages:
    """Every stage of one attention block, batch first, each read as an attribute on the CPU (None when the trace did
    not keep it): weights (softmax rows) and mask (bool, True = may attend; all True when the block had no mask),
    (B, nh, Tq, Tk); scores (raw QKᵀ), scaled (/ √d_k), masked (−∞ where masked), the same; q, k, v, z per head
    (B, nh, T, hs): k and v have fewer heads than q with grouped-query attention; q_normed / k_normed after QK-norm
    (Qwen3), q_rot / k_rot after RoPE's rotation; concat (B, Tq, d) heads side by side; out (B, Tq, d) after W_o.
    The tensors stay where the trace keeps them (a GPU trace on the GPU): an attribute brings a whole stage to the
    CPU, `head()` only one head's slice of it, and the sizes come from the shapes (nothing is copied)."""

    kind: str  # enc_self, dec_self or cross
    layer: int
    stored: dict[str, torch.Tensor | None] = field(repr=False)  # stage -> the trace's tensor
    fetch: Callable[[torch.Tensor], torch.Tensor] = field(repr=False)  # the trace's way to the CPU (it counts)
    fetched: dict[str, torch.Tensor] = field(default_factory=dict, repr=False)  # whole stages already brought over

    def __getattr__(self, stage: str) -> torch.Tensor | None:  # stages.weights: a whole stage on the CPU, once
        stored = self.__dict__.get("stored")
        if stored is None or stage not in ATTENTION_STAGES:
            raise AttributeError(stage)
        if stored.get(stage) is None:
            return None
        if stage not in self.fetched:  # a page reads these views once per run: each stage crosses once
            self.fetched[stage] = self.fetch(stored[stage])
        return self.fetched[stage]

    def __getitem__(self, stage: str) -> torch.Tensor:
        return getattr(self, stage)

    def has(self, stage: str) -> bool:
        """Whether the trace kept this stage (asks nothing of the tensor)."""
        return self.stored.get(stage) is not None

    @property
    def n_heads(self) -> int:
        return self.stored["weights"].size(1)

    @property
    def n_q(self) -> int:
        return self.stored["weights"].size(-2)

    @property
    def n_k(self) -> int:
        return self.stored["weights"].size(-1)

    @property
    def group(self) -> int:
        """Query heads per K/V head: 1, or more with grouped-query attention."""
        k = self.stored.get("k")
        return self.n_heads // (k.size(1) if k is not None else self.n_heads)

    def kv_head(self, head: int) -> int:
        """The K/V head query head `head` reads (query heads share K/V heads in consecutive groups)."""
        return int(head) // self.group

    def head(self, stage: str, head: int | None = None, limit: int | None = None) -> torch.Tensor:
        """One stage of batch item 0, float32: (nh, Tq, Tk) or (Tq, Tk) for one head; cropped to `limit` tokens.
        Only that slice is brought to the CPU."""
        x = self.stored[stage][0]
        x = x if head is None else x[self.kv_head(head) if stage in KV_STAGES else head]
        if limit is not None:
            x = x[..., :limit, :limit] if stage not in VECTOR_STAGES else x[..., :limit, :]
        x = self.fetch(x)
        return x.float() if x.dtype != torch.bool else x


@dataclass(frozen=True)
class EmbeddingStages:
    """(B, T, d) each: token embedding, after × √d_model (when the model scales), positions added, their sum."""

    tok: torch.Tensor
    scaled: torch.Tensor
    pe: torch.Tensor  # (1, T, d)
    sum: torch.Tensor


@dataclass
class Trace:
    """Hook name -> tensor, in forward order. Shapes: see `shapes()`.

    The tensors stay on the device the forward ran on (a GPU trace on the GPU: copying every hook point to the CPU
    cost 20x the forward). Every way of reading a trace (its views, `trace[name]`, `logits_at`) hands out CPU
    tensors, bringing over only what was asked for; `fetched_bytes` counts what was handed out (on the CPU too,
    where nothing moves), so a test can check that a page reads no more than it draws."""

    tensors: dict[str, torch.Tensor]
    src_ids: torch.Tensor
    tgt_ids: torch.Tensor | None = None
    src_lengths: torch.Tensor | None = None
    tgt_lengths: torch.Tensor | None = None
    masks: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_MASKS))
    all_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)  # every hook, stored or not
    _probs: torch.Tensor | None = None
    _derived: dict = field(default_factory=dict, repr=False)  # memo(): results computed from this trace
    fetched_bytes: int = 0  # bytes handed out to readers (fetch)

    def fetch(self, x: torch.Tensor) -> torch.Tensor:
        """`x` (a stored tensor or a slice of one) on the CPU, counted in fetched_bytes."""
        self.fetched_bytes += x.numel() * x.element_size()
        return x if x.device.type == "cpu" else x.to("cpu")

    def memo(self, key: tuple, compute: Callable[[], object]):
        """What compute() returns, computed once per trace and key: a trace is shared by every session and page
        that traced the same input, so an analysis read from it (e.g. the logit lens) is computed once too."""
        if key not in self._derived:
            self._derived[key] = compute()  # two sessions at once may both compute it: same value, no harm
        return self._derived[key]

    def __getitem__(self, name: str) -> torch.Tensor:
        return self.fetch(self.tensors[name])

    def __contains__(self, name: str) -> bool:
        return name in self.tensors

    def names(self) -> list[str]:
        return list(self.tensors)

    @property
    def is_encoder_decoder(self) -> bool:
        return self.tgt_ids is not None

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

    def shape(self, stage: str, **where) -> tuple[int, ...] | None:
        """The shape of a traced quantity (stored or not), by act_name's arguments."""
        return self.all_shapes.get(act_name(stage, cross=self.is_encoder_decoder, **where))

    def _stored(self, stage: str, **where) -> torch.Tensor | None:
        return self.tensors.get(act_name(stage, cross=self.is_encoder_decoder, **where))

    def get(self, stage: str, **where) -> torch.Tensor | None:
        """A traced quantity by act_name's arguments, on the CPU; None when the trace did not keep it."""
        x = self._stored(stage, **where)
        return None if x is None else self.fetch(x)

    @property
    def logits(self) -> torch.Tensor:
        return self.fetch(self.tensors["hook_logits"])  # (B, T, vocab)

    def logits_at(self, position: int | slice) -> torch.Tensor:
        """(vocab,) the logits at one position of batch item 0 ((T, vocab) for a slice of positions): only those
        rows are brought to the CPU."""
        return self.fetch(self.tensors["hook_logits"][0, position])

    @property
    def logits_shape(self) -> tuple[int, ...]:
        return tuple(self.tensors["hook_logits"].shape)

    @property
    def probs(self) -> torch.Tensor:
        """Softmax over the vocabulary (B, T, vocab), computed on first use."""
        if self._probs is None:
            self._probs = torch.softmax(self.logits.float(), dim=-1)
        return self._probs

    @property
    def decoder_ids(self) -> torch.Tensor:
        """(T,) the sequence whose positions have logits: the target, or the prompt (decoder-only)."""
        return (self.tgt_ids if self.tgt_ids is not None else self.src_ids)[0]

    def blocks(self, layer: int | None = None) -> list[tuple[str, int]]:
        """(kind, layer) of every attention block traced with its weights, in forward order."""
        out = []
        for name in self.tensors:
            if name.endswith(".hook_weights"):
                stack, _, rest = name.partition(".layers.")
                n, _, module = rest.partition(".")
                kind = next(k for k, (s, m) in BLOCKS.items() if s == stack and module.startswith(m))
                if layer is None or int(n) == layer:
                    out.append((kind, int(n)))
        return out

    def n_blocks(self) -> int:
        """Attention blocks the forward ran (traced or not)."""
        return sum(1 for n in self.all_shapes if n.endswith(".hook_weights"))

    def attention(self, kind: str, layer: int) -> AttentionStages | None:
        """Every stage of one block (None when it was not kept); with no mask, 'mask' is all True."""
        got = {s: self._stored(s, layer=layer, block=kind) for s in ATTENTION_STAGES}
        if got["weights"] is None:
            return None
        if got["mask"] is None:
            got["mask"] = torch.ones_like(got["weights"], dtype=torch.bool)
            got["masked"] = got["scaled"]
        return AttentionStages(kind=kind, layer=layer, stored=got, fetch=self.fetch)

    def embeddings(self, side: str = "decoder") -> EmbeddingStages:
        """The embedding stages of one stack ("encoder" or "decoder")."""
        return EmbeddingStages(*(self.get(s, side=side) for s in ("embed_tok", "embed_scaled", "pe", "embed")))

    def ffn(self, layer: int, side: str = "decoder") -> tuple[torch.Tensor, torch.Tensor]:
        """(hidden (B, T, d_ffn) after the activation, output (B, T, d)) of one layer's FFN."""
        return self.get("ffn_hidden", layer=layer, side=side), self.get("ffn_out", layer=layer, side=side)

    def addnorm(self, layer: int, sublayer: str) -> tuple[torch.Tensor, torch.Tensor]:
        """(input, output) of the Add & Norm around a sub-layer (enc_self, dec_self, cross, enc_ffn, dec_ffn).

        Post-norm: input = x + sublayer(x), output = LayerNorm(input).
        Pre-norm: input = x, output = x + sublayer(LN(x)).
        """
        return (self.get("addnorm_in", layer=layer, block=sublayer),
                self.get("addnorm_out", layer=layer, block=sublayer))

    def norm_io(self, layer: int, sublayer: str) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """(input, output) of the norm itself in the Add & Norm around a sub-layer: post-norm x + sublayer(x) and
        LN of it; pre-norm the stream x and LN(x), what the sub-layer reads."""
        normed = self.get("addnorm_normed", layer=layer, block=sublayer)
        ln_in, ln_out = self.addnorm(layer, sublayer)
        return ln_in, (normed if normed is not None else ln_out)

    def gated(self, layer: int, side: str = "decoder") -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """(gate after its activation, up-projection), each (B, T, d_ffn), of a gated FFN (SwiGLU); None otherwise.
        Their product is the hidden layer (`ffn`)."""
        return self.get("ffn_gate", layer=layer, side=side), self.get("ffn_up", layer=layer, side=side)

    def stack_out(self, side: str) -> torch.Tensor | None:
        """(B, T, d) a stack's output (after its final LayerNorm when it has one): the encoder's is the memory."""
        return self.get("stack_out", side=side)


def run_with_trace(
    model: Transformer,
    src: torch.Tensor,
    tgt: torch.Tensor | None = None,
    *,
    src_lengths: torch.Tensor | None = None,
    tgt_lengths: torch.Tensor | None = None,
    masks: dict[str, str] | None = None,
    names: Iterable[str] | Callable[[str], bool] | None = None,
    stop_early: bool = False,
) -> tuple[torch.Tensor | None, Trace]:
    """Run one inference forward, capturing the hook points chosen by `names` (default: all).

    stop_early (with `names` a list of hook paths): the forward stops once all of them are captured and the
    logits are None; e.g. attention weights need no output layer, which is most of a big-vocabulary forward.
    """
    device = next(model.parameters()).device
    src = src.to(device)
    tgt = tgt.to(device) if tgt is not None else None
    logits = None
    with torch.inference_mode(), capture_all(names, stop_when_done=stop_early, on_device=True) as store:
        try:
            logits = model(src, tgt, src_lengths=src_lengths, tgt_lengths=tgt_lengths, masks=masks)
        except CaptureDone:
            pass
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
