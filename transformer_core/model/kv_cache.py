"""Generation with a key/value cache: each step feeds only the new tokens; every attention block keeps the keys
and values it has already computed (cross-attention computes the encoder memory's once). Same numbers as a full
forward over the whole sequence, a fraction of the work."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .masks import attention_mask
from .transformer import Transformer


@dataclass
class KVCache:
    """What one sequence's generation has computed so far."""

    layers: list[dict] = field(default_factory=list)  # per decoder layer: {"self": {k, v}, "cross": {k, v}}
    memory: torch.Tensor | None = None  # (B, Ts, d) encoder output (encoder-decoder)
    src_lengths: torch.Tensor | None = None
    length: int = 0  # decoder tokens processed


@torch.inference_mode()
def start(model: Transformer, src: torch.Tensor | None = None, src_lengths: torch.Tensor | None = None) -> KVCache:
    """An empty cache; for an encoder-decoder model, the encoder runs once here."""
    cache = KVCache(layers=[{"self": {}, "cross": {}} for _ in model.decoder.layers], src_lengths=src_lengths)
    if model.is_encoder_decoder:
        model.check_ids(src, "src")
        B, Ts = src.shape
        cache.memory = model.encoder(src, attention_mask("padding", B, Ts, Ts, src_lengths, src.device))
    return cache


@torch.inference_mode()
def step(model: Transformer, cache: KVCache, new: torch.Tensor, last_only: bool = False) -> torch.Tensor:
    """Logits (B, t, vocab) of `new` (B, t) decoder tokens that follow what the cache holds; the cache grows.
    last_only: the last token's logits only, (B, 1, vocab): reading a prompt needs no output layer for the others
    (with a 12k-token vocabulary, the output layer over a 64-token prompt is most of the step)."""
    B, t = new.shape
    T = cache.length + t
    if model.cfg.max_len < T:
        raise ValueError("the cache would exceed max_len: recompute over a window instead")
    self_mask = attention_mask("causal", B, t, T, device=new.device)  # new queries see everything before them
    cross_mask = None
    if cache.memory is not None:
        Ts = cache.memory.size(1)
        cross_mask = attention_mask("padding", B, t, Ts, cache.src_lengths, new.device)
    hidden = model.decoder(new, cache.memory, self_mask, cross_mask, cache=cache.layers, offset=cache.length)
    cache.length = T
    return model.out(hidden[:, -1:] if last_only else hidden)  # (B, t, vocab) or (B, 1, vocab)
