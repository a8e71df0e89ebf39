"""Memory before work: what a model, a traced forward and a training step will take, computed from the config
alone (pure arithmetic: nothing is built, nothing is allocated), so a server can refuse or shorten work that
would not fit before it starts.

Every figure is in bytes, for float32 tensors (4 bytes; bool masks 1 byte). They are upper bounds for the
forwards of `Transformer`: tests/test_service_memory.py compares them with real runs (the bytes a trace holds,
the tensors autograd saves, and the peak RSS of a fresh process) and pins the factor.

    keep = KEEP_ALL            every hook point (run_with_trace's default)
    keep = 3                   layer_filter(3): per-head attention tensors of layer 3 only, everything else kept
    keep = KEEP_NONE           an untraced forward (run)
"""
from __future__ import annotations

from dataclasses import dataclass

from .config import TransformerConfig

FLOAT = 4  # bytes of a float32
BOOL = 1
KEEP_ALL, KEEP_NONE = "all", "none"
PER_HEAD_MAPS = 4  # (B, h, Tq, Tk) float stages a trace keeps: scores, scaled, masked, weights (+ the bool mask)
TRANSIENT_MAPS = 3  # float maps alive at once inside attention() when its stages are not kept
# Training: bytes per element that autograd saves for backward, counted op by op in attention(), the layers and
# cross_entropy, with some slack. With dropout on the CPU, dropout keeps a float noise tensor and its output.
TRAIN_MAP_BYTES = {True: 4 * FLOAT, False: 2 * FLOAT}  # [dropout?] per (B, h, Tq, Tk): softmax out, noise, out, ~mask
TRAIN_VECTORS_PER_BLOCK = {True: 8, False: 6}  # (B, T, d) floats: x, q, k, v, concat, Add & Norm input, noise
TRAIN_FFN_HIDDEN = {True: 3 * FLOAT + BOOL, False: 2 * FLOAT}  # (B, T, d_ffn): activation (GELU: its input), noise
TRAIN_LOGITS = 3  # (B, T, vocab) floats at the start of backward: log_softmax output, its grad, the logits' grad
ADAMW_STATE = 2  # exp_avg and exp_avg_sq: two more copies of every parameter
# Backward frees activations as it goes but makes gradients of the same sizes; allocator slack on top.
TRAIN_ACTIVATION_FACTOR = 1.5


def param_count(cfg: TransformerConfig) -> int:
    """Parameters a config builds (tied weights once), by formula: equals sum(p.numel()) of Transformer(cfg)."""
    d, f, v = cfg.d_model, cfg.d_ffn, cfg.vocab_size
    kv = cfg.kv_heads * cfg.head_dim  # width of W_k and W_v (narrower with grouped-query attention)
    attn = d * d + 2 * d * kv + d * d + (d + 2 * kv if cfg.qkv_bias else 0) + (d if cfg.linear_bias else 0)
    linears = 3 if cfg.ffn == "gated" else 2  # gate, up, down
    ffn = linears * d * f + ((linears - 1) * f + d if cfg.linear_bias else 0)
    norm = d if cfg.norm == "rmsnorm" else 2 * d
    embed = v * d + (cfg.max_len * d if cfg.positional == "learned" else 0)
    final = norm if cfg.final_norm else 0
    total = embed + cfg.n_layers * (attn + ffn + 3 * norm + attn) + final  # decoder: self, cross, 3 norms
    if cfg.arch == "encoder_decoder":
        total += embed + cfg.n_layers * (attn + ffn + 2 * norm) + final
    else:
        total -= cfg.n_layers * (attn + norm)  # no cross-attention, two Add & Norms
    total += (0 if cfg.tie_embeddings else d * v) + (v if cfg.output_bias else 0)
    return total


def param_bytes(cfg: TransformerConfig, dtype_bytes: int = FLOAT) -> int:
    """Bytes of a built model: parameters plus buffers (the sine/cosine table of each stack)."""
    stacks = 2 if cfg.arch == "encoder_decoder" else 1
    table = stacks * cfg.max_len * cfg.d_model if cfg.positional == "sinusoidal" else 0
    return (param_count(cfg) + table) * dtype_bytes


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


def _keeps_heads(keep, layer: int) -> bool:
    return keep == KEEP_ALL or (not isinstance(keep, str) and int(keep) == layer)


@dataclass(frozen=True)
class TraceEstimate:
    """The parts of a traced forward's peak, in bytes (`total` is what to reserve)."""

    kept: int  # hook tensors the trace holds afterwards
    transient: int  # the largest working set of one block while it runs (maps not kept, masks, FFN hidden)
    logits: int  # (B, T, vocab), returned and kept
    probs: int  # softmax over the vocabulary (the pages compute it from the trace)

    @property
    def total(self) -> int:
        return self.kept + self.transient + self.logits + self.probs


def _attention_block(cfg: TransformerConfig, B: int, Tq: int, Tk: int, heads_kept: bool, traced: bool) -> tuple[int,
                                                                                                           int]:
    """(kept, transient) bytes of one attention block with Tq queries over Tk keys."""
    d, h = cfg.d_model, cfg.n_heads
    maps = B * h * Tq * Tk
    if not traced:
        return 0, TRANSIENT_MAPS * maps * FLOAT + 2 * maps * BOOL + 4 * B * max(Tq, Tk) * d * FLOAT
    kept = 2 * B * Tq * d * FLOAT  # concat, out
    rotary = 2 if cfg.positional == "rope" else 1  # RoPE keeps q and k once more, rotated
    if heads_kept:  # q, z (B, Tq, d); k, v (B, Tk, d); the maps; the expanded mask, copied as bool
        kept += ((rotary + 1) * B * Tq * d + (rotary + 1) * B * Tk * d) * FLOAT
        kept += PER_HEAD_MAPS * maps * FLOAT + maps * BOOL
        transient = maps * FLOAT + maps * BOOL  # softmax before its fully-masked-row fill; ~mask
    else:
        transient = TRANSIENT_MAPS * maps * FLOAT + 2 * maps * BOOL + 4 * B * max(Tq, Tk) * d * FLOAT
    return kept, transient


def _stack(cfg: TransformerConfig, B: int, T: int, T_mem: int | None, keep, traced: bool) -> tuple[int, int]:
    """(kept, largest transient) of one stack: embeddings, layers (self-attention, cross-attention when T_mem),
    FFN and Add & Norms, the stack output."""
    d, f = cfg.d_model, cfg.d_ffn
    vec = B * T * d * FLOAT
    kept = (3 * vec + T * d * FLOAT + vec) if traced else 0  # tok, scaled, sum, pe; the stack output
    transient = 0
    norms = 3 if T_mem is not None else 2
    for layer in range(cfg.n_layers):
        heads = traced and _keeps_heads(keep, layer)
        k, t = _attention_block(cfg, B, T, T, heads, traced)
        kept, transient = kept + k, max(transient, t)
        if T_mem is not None:
            k, t = _attention_block(cfg, B, T, T_mem, heads, traced)
            kept, transient = kept + k, max(transient, t)
        if traced:  # FFN hidden (and a gated FFN's gate and up) and out; each Add & Norm's in, out (and normed)
            kept += (3 if cfg.ffn == "gated" else 1) * B * T * f * FLOAT + vec
            kept += norms * (3 if cfg.norm_first else 2) * vec
        transient = max(transient, (1 if traced else 2) * B * T * f * FLOAT + 2 * vec)
    return kept, transient


def trace_estimate(cfg: TransformerConfig, n_src: int, n_tgt: int | None = None, *, keep=KEEP_ALL, batch: int = 1,
                   probs: bool = True) -> TraceEstimate:
    """The peak of one forward of `batch` sequences of n_src source tokens (and n_tgt target tokens, default n_src,
    for an encoder-decoder), keeping the hook points `keep` chooses (KEEP_ALL, a layer index, or KEEP_NONE).

    Counted: every kept hook tensor (B·T·d per (B, T, d) hook; B·h·Tq·Tk per kept attention stage: scores, scaled,
    mask (bool), masked, weights; q/k/v/z B·T·d each), the largest transient working set (an attention block whose
    maps are not kept holds three maps at once; the bool masks; the FFN hidden layer), the masks the forward builds,
    the logits B·T·vocab and, with `probs`, their softmax. The model's own weights are not included (param_bytes).
    """
    B = max(1, int(batch))
    Ts, Tt = _lengths(cfg, n_src, n_tgt)
    traced = keep != KEEP_NONE
    T_out = Tt if Tt is not None else Ts
    if Tt is None:
        kept, transient = _stack(cfg, B, Ts, None, keep, traced)
        masks = B * Ts * Ts * BOOL
    else:
        k_enc, t_enc = _stack(cfg, B, Ts, None, keep, traced)
        k_dec, t_dec = _stack(cfg, B, Tt, Ts, keep, traced)
        kept, transient = k_enc + k_dec, max(t_enc, t_dec) + B * Ts * cfg.d_model * FLOAT  # + the memory
        masks = B * (Ts * Ts + Tt * Tt + Tt * Ts) * BOOL
    logits = B * T_out * cfg.vocab_size * FLOAT
    return TraceEstimate(kept=kept, transient=transient + 2 * masks, logits=logits, probs=logits if probs else 0)


def trace_bytes(cfg: TransformerConfig, n_src: int, n_tgt: int | None = None, *, keep=KEEP_ALL, batch: int = 1,
                probs: bool = True) -> int:
    """Bytes to reserve for one traced forward (trace_estimate(...).total)."""
    return trace_estimate(cfg, n_src, n_tgt, keep=keep, batch=batch, probs=probs).total


def forward_bytes(cfg: TransformerConfig, n_src: int, n_tgt: int | None = None, *, batch: int = 1) -> int:
    """Bytes of one untraced forward (logits included, no probabilities)."""
    return trace_bytes(cfg, n_src, n_tgt, keep=KEEP_NONE, batch=batch, probs=False)


def train_activation_bytes(cfg: TransformerConfig, batch: int, n_src: int, n_tgt: int | None = None) -> int:
    """Bytes autograd saves for backward in one training forward, before TRAIN_ACTIVATION_FACTOR."""
    B, d, f, h = max(1, int(batch)), cfg.d_model, cfg.d_ffn, cfg.n_heads
    Ts, Tt = _lengths(cfg, n_src, n_tgt)
    drop = cfg.dropout > 0
    vectors, map_bytes, hidden = TRAIN_VECTORS_PER_BLOCK[drop], TRAIN_MAP_BYTES[drop], TRAIN_FFN_HIDDEN[drop]

    def stack(T: int, T_mem: int | None) -> int:
        blocks = [(T, T)] + ([(T, T_mem)] if T_mem is not None else [])
        per_layer = sum(vectors * B * max(tq, tk) * d * FLOAT + B * h * tq * tk * map_bytes for tq, tk in blocks)
        per_layer += B * T * f * hidden + 3 * B * T * d * FLOAT  # FFN and its Add & Norm
        return B * T * (d * (FLOAT + BOOL) + 8) + cfg.n_layers * per_layer  # embeddings: dropout, ids

    T_out = Tt if Tt is not None else Ts
    total = stack(Ts, None) if Tt is None else stack(Ts, None) + stack(Tt, Ts)
    return total + B * T_out * (cfg.d_model + TRAIN_LOGITS * cfg.vocab_size) * FLOAT


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
