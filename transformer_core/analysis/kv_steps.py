"""What the key/value cache holds during generation, and the work it saves, measured on the learner's sequence.

The cache is built over every token but the last (what generation has computed before this step); then the last
token is run twice: as a cached step (1 new query against the cached keys and values) and as a full forward over
the whole sequence (what generation without a cache would redo at every step). Both give the same logits; the
report says what each costs (median wall time of a few runs, and the positions each one computes).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch

from ..model import kv_cache
from ..model.trace import run
from ..model.transformer import Transformer


@dataclass(frozen=True)
class CacheLayer:
    layer: int
    self_shape: tuple[int, ...]  # (B, nh, T, d_k) of K and of V in the decoder's self-attention
    cross_shape: tuple[int, ...] | None  # (B, nh, Ts, d_k) of the encoder memory's K and V (encoder-decoder)
    nbytes: int  # bytes of this layer's K and V (self and cross)
    self_nbytes: int  # of which the self-attention's (grows by one position per token)


@dataclass(frozen=True)
class CacheReport:
    layers: list[CacheLayer]
    length: int  # decoder tokens in the cache after this step
    cached_ms: float  # one cached step (the last token)
    full_ms: float  # a full forward over the whole sequence
    max_abs_diff: float  # between the two last-position logits (the cache changes no number)

    @property
    def nbytes(self) -> int:
        return sum(layer.nbytes for layer in self.layers)

    def arrays(self) -> dict[str, np.ndarray]:
        return {"layer": np.array([x.layer for x in self.layers], dtype=np.int64),
                "self_shape": np.array([x.self_shape for x in self.layers], dtype=np.int64),
                "nbytes": np.array([x.nbytes for x in self.layers], dtype=np.int64),
                "cached_ms": np.array(self.cached_ms, dtype=np.float32),
                "full_ms": np.array(self.full_ms, dtype=np.float32)}


def cache_layout(model: Transformer, length: int, src_length: int | None = None) -> list[CacheLayer]:
    """What the cache holds after `length` decoder tokens, from the config alone (no forward): per decoder layer the
    self-attention K and V (1, kv_heads, length, d_k) and, for an encoder-decoder, the cross-attention K and V of the
    source (1, kv_heads, src_length, d_k), float32; kv_heads = n_heads, or fewer with grouped-query attention (that
    is its saving). cache_report reads the same from a real cache (a test compares)."""
    cfg = model.cfg
    d_k, item = cfg.head_dim, next(model.parameters()).element_size()
    self_shape = (1, cfg.kv_heads, int(length), d_k)
    cross_shape = (1, cfg.kv_heads, int(src_length), d_k) if model.is_encoder_decoder and src_length else None
    self_bytes = 2 * int(np.prod(self_shape)) * item
    cross_bytes = 2 * int(np.prod(cross_shape)) * item if cross_shape else 0
    return [CacheLayer(i, self_shape, cross_shape, self_bytes + cross_bytes, self_bytes) for i in range(cfg.n_layers)]


def _median_ms(fn, repeats: int, setup=lambda: None) -> float:
    """Median wall time of fn(setup()) over `repeats` runs after a warm-up; setup's own time is not counted."""
    times = []
    for _ in range(repeats + 1):
        arg = setup()
        start = time.perf_counter()
        fn(arg)
        times.append(1000 * (time.perf_counter() - start))
    return float(np.median(times[1:]))


@torch.inference_mode()
def cache_report(model: Transformer, dec: list[int], src: list[int] | None = None, repeats: int = 3) -> CacheReport:
    """The cache after `dec` (model ids; the decoder side) and what one step with it costs against a full forward."""
    device = next(model.parameters()).device
    dec_t = torch.tensor([dec], device=device)  # (1, T)
    src_t = None if src is None else torch.tensor([src], device=device)  # (1, Ts)

    def prefix_cache():  # what generation has computed before this step
        cache = kv_cache.start(model, src_t)
        if dec_t.size(1) > 1:
            kv_cache.step(model, cache, dec_t[:, :-1], last_only=True)  # (its logits are not read)
        return cache

    def full(_=None):
        return run(model, src_t, dec_t) if model.is_encoder_decoder else run(model, dec_t)  # (1, T, vocab)

    cache = prefix_cache()
    cached_logits = kv_cache.step(model, cache, dec_t[:, -1:])[0, -1].float()  # (vocab,)
    diff = float((cached_logits - full()[0, -1].float()).abs().max())
    cached_ms = _median_ms(lambda c: kv_cache.step(model, c, dec_t[:, -1:]), repeats, prefix_cache)
    full_ms = _median_ms(full, repeats)
    layers = []
    for i, entry in enumerate(cache.layers):
        k_self, k_cross = entry["self"].get("k"), entry["cross"].get("k")
        size = {part: sum(t.numel() * t.element_size() for t in kv.values()) for part, kv in entry.items()}
        layers.append(CacheLayer(i, tuple(k_self.shape), None if k_cross is None else tuple(k_cross.shape),
                                 sum(size.values()), size["self"]))
    return CacheReport(layers, cache.length, cached_ms, full_ms, diff)
