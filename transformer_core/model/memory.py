"""Memory before work: what a model, a traced forward and a training step will take, derived from the model
itself (`footprint.py`: its forward measured at a few lengths, from the loaded model or on the meta device, and
fitted), so a server can refuse or shorten work that would not fit before it starts. No figure here knows a
layer type: a new family is measured like the course's.

Every figure is in bytes. They are upper bounds for the forwards of `Transformer`: tests/service/test_service_memory.py
compares them with real runs (the bytes a trace holds, the tensors autograd saves, and the peak RSS of a fresh
process) for every family and pins the factor.

    keep = KEEP_ALL            every hook point (run_with_trace's default)
    keep = 3                   layer_filter(3): per-head attention tensors of layer 3 only, everything else kept
    keep = KEEP_NONE           an untraced forward (run)
    keep = KEEP_WEIGHTS        every layer's softmax weights and masks only (the Attention view's every layer)
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .config import TransformerConfig
from .footprint import footprint, parameters, saved_for_backward
from .hooks import layer_filter, stages_filter

FLOAT = 4  # bytes of a float32 (every model the core builds or loads is float32)
KEEP_ALL, KEEP_NONE, KEEP_WEIGHTS = "all", "none", "weights"
# What no tensor shows: the allocator's rounding and the kernels' own buffers, on top of the most bytes alive at
# once (a fresh process's RSS grew 1% more than the live tensors of an untraced forward:
# tests/service/test_service_memory.py)
PEAK_SLACK = 1.1
# Training: what the formula-free measurement cannot see, because it happens after the forward.
LOSS_GRADIENTS = 2  # (B, T, vocab) floats at the start of backward: the logits' gradient and log-softmax's
ADAMW_STATE = 2  # exp_avg and exp_avg_sq: two more copies of every parameter
# Backward frees activations as it goes but makes gradients of the same sizes; allocator slack on top.
TRAIN_ACTIVATION_FACTOR = 1.5


def param_count(cfg: TransformerConfig) -> int:
    """Parameters a config builds (tied weights once): sum(p.numel()) of Transformer(cfg), counted on the meta
    device from a one- and a two-layer model (nothing allocated, whatever the size)."""
    return parameters(cfg)[0]


def param_bytes(cfg: TransformerConfig, dtype_bytes: int = FLOAT) -> int:
    """Bytes of a built model: parameters plus buffers (the sine/cosine table of each stack, RoPE's frequencies)."""
    return sum(parameters(cfg)) * dtype_bytes


def module_bytes(module) -> int:
    """Bytes a built model holds, read from the model itself (any family, any dtype or device): its parameters
    and buffers, each storage once (tied weights share one)."""
    seen, total = set(), 0
    for t in list(module.parameters()) + list(module.buffers()):
        key = (t.device, t.untyped_storage().data_ptr())
        if key not in seen:
            seen.add(key)
            total += t.untyped_storage().nbytes()
    return total


def _lengths(cfg: TransformerConfig, n_src: int, n_tgt: int | None) -> tuple[int, int | None]:
    """(source tokens, target tokens or None for decoder-only), each at least 1 and at most max_len."""
    n_src = max(1, min(int(n_src), cfg.max_len))
    if cfg.arch != "encoder_decoder":
        return n_src, None
    n_tgt = n_src if n_tgt is None else max(1, min(int(n_tgt), cfg.max_len))
    return n_src, n_tgt


def wanted(keep) -> Callable[[str], bool]:
    """Which hook points a keep choice captures."""
    if keep == KEEP_ALL:
        return lambda name: True
    if keep == KEEP_NONE:
        return lambda name: False
    if keep == KEEP_WEIGHTS:
        return stages_filter()
    return layer_filter(int(keep))


@dataclass(frozen=True)
class TraceEstimate:
    """The parts of a traced forward's peak, in bytes (`total` is what to reserve)."""

    kept: int  # hook tensors the trace holds afterwards
    transient: int  # the most the forward works with at once, beyond its logits (what it keeps counted above)
    logits: int  # (B, T, vocab), returned and kept
    probs: int  # softmax over the vocabulary (the pages compute it from the trace)

    @property
    def total(self) -> int:
        return self.kept + self.transient + self.logits + self.probs


def trace_estimate(cfg: TransformerConfig, n_src: int, n_tgt: int | None = None, *, keep=KEEP_ALL, batch: int = 1,
                   probs: bool = True) -> TraceEstimate:
    """The peak of one forward of `batch` sequences of n_src source tokens (and n_tgt target tokens, default n_src,
    for an encoder-decoder), keeping the hook points `keep` chooses (KEEP_ALL, a layer index, KEEP_WEIGHTS or
    KEEP_NONE).

    From the config's footprint: every hook tensor the trace keeps (a view is copied, a tensor two hook points
    return is held once), the most bytes alive at once while the forward runs, the logits and, with `probs`, their
    softmax. The model's own weights are not included (param_bytes).
    """
    Ts, Tt = _lengths(cfg, n_src, n_tgt)
    fp = footprint(cfg, max(1, int(batch)))
    logits = fp.logits(Ts, Tt)
    kept = fp.kept(wanted(keep), Ts, Tt) if keep != KEEP_NONE else 0
    return TraceEstimate(kept=kept, transient=max(0, int(PEAK_SLACK * fp.peak(Ts, Tt)) - logits), logits=logits,
                         probs=logits if probs else 0)


def trace_bytes(cfg: TransformerConfig, n_src: int, n_tgt: int | None = None, *, keep=KEEP_ALL, batch: int = 1,
                probs: bool = True) -> int:
    """Bytes to reserve for one traced forward (trace_estimate(...).total)."""
    return trace_estimate(cfg, n_src, n_tgt, keep=keep, batch=batch, probs=probs).total


def forward_bytes(cfg: TransformerConfig, n_src: int, n_tgt: int | None = None, *, batch: int = 1) -> int:
    """Bytes of one untraced forward (logits included, no probabilities)."""
    return trace_bytes(cfg, n_src, n_tgt, keep=KEEP_NONE, batch=batch, probs=False)


def train_activation_bytes(cfg: TransformerConfig, batch: int, n_src: int, n_tgt: int | None = None) -> int:
    """Bytes autograd saves for backward in one training forward and its loss (measured on the meta device), and
    the loss's gradients backward starts with, before TRAIN_ACTIVATION_FACTOR."""
    B = max(1, int(batch))
    Ts, Tt = _lengths(cfg, n_src, n_tgt)
    T_out = Tt if Tt is not None else Ts
    return saved_for_backward(cfg, B, Ts, T_out) + LOSS_GRADIENTS * B * T_out * cfg.vocab_size * FLOAT


def train_bytes(cfg: TransformerConfig, batch: int, n_src: int, n_tgt: int | None = None) -> int:
    """Peak bytes of training with AdamW: weights, gradients and the optimizer's two moments (4 copies of the
    parameters) plus TRAIN_ACTIVATION_FACTOR × the activations saved for backward for `batch` sequences."""
    weights = param_bytes(cfg)
    states = (1 + ADAMW_STATE) * param_count(cfg) * FLOAT  # gradients, exp_avg, exp_avg_sq
    return weights + states + int(TRAIN_ACTIVATION_FACTOR * train_activation_bytes(cfg, batch, n_src, n_tgt))


def max_tokens_that_fit(cfg: TransformerConfig, budget_bytes: int, keep=KEEP_ALL, *, batch: int = 1,
                        probs: bool = True) -> int:
    """The most tokens T (source and target both T, at most max_len) whose traced forward fits in budget_bytes;
    0 when not even one token fits. The estimate grows with T, so this is a binary search."""
    lo, hi = 0, cfg.max_len
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if trace_bytes(cfg, mid, mid, keep=keep, batch=batch, probs=probs) <= budget_bytes:
            lo = mid
        else:
            hi = mid - 1
    return lo
