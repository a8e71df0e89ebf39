"""The model cache is bounded by bytes, shared by every session: one session opening every preset on every shipped
encoding cannot take the server past the cache's size."""
import gc
import resource

import torch

from transformer_core.model.config import PRESETS
from transformer_core.model.memory import module_bytes, param_bytes
from transformer_core.text.tokenizer import BUNDLED

MB = 2**20


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def vocab_of(encoding: str) -> int:
    """The vocabulary a preset gets on this encoding (its token ids' range)."""
    from transformer_core.text.tokenizer import load_encoding

    return load_encoding(encoding).n_vocab


def test_module_bytes_reads_the_model_itself_and_counts_tied_weights_once():
    from transformer_core.model.transformer import build_model

    for name in ("tiny", "tiny-gpt", "course-gpt"):
        model = build_model(PRESETS[name], "cpu")
        assert module_bytes(model) == param_bytes(PRESETS[name])
    tied = build_model(PRESETS["tiny-gpt"].replace(tie_embeddings=True), "cpu")
    assert module_bytes(tied) == param_bytes(PRESETS["tiny-gpt"].replace(tie_embeddings=True))


def test_every_preset_on_every_shipped_encoding_stays_within_the_model_cache(monkeypatch):
    from ui import cache

    limit = 700 * MB
    monkeypatch.setattr(cache, "MODELS", cache.BoundedCache(limit, lambda v: module_bytes(v[0])))
    encodings = sorted(p.stem for p in BUNDLED.glob("*.tiktoken"))
    gc.collect()
    gc.freeze()  # what exists now is never freed here: each collection below looks only at what the loop made
    try:
        before, peak, largest = rss(), 0, 0
        built = set()
        for name in PRESETS:
            for enc in encodings:
                shape = (name, vocab_of(enc))  # the same preset on another encoding of as many tokens: the same model
                if shape in built:  # (cl100k's subsets keep cl100k's ids), the same bytes to the cache: built once
                    continue
                built.add(shape)
                model, _ = cache.get_model(f"preset:{name}@{enc}", "cpu")
                largest = max(largest, module_bytes(model))
                del model
                gc.collect()
                assert cache.MODELS.total_bytes() <= max(limit, max(s for _, s in cache.MODELS._items.values()))
                peak = max(peak, rss() - before)
    finally:
        gc.unfreeze()
    assert len(encodings) >= 3 and len(cache.MODELS._items) < len(built)  # some were evicted
    # resident growth: the cache (one model may pass the limit alone) plus one model being built (at most the largest
    # of them all, not only of those the cache still holds at the end), plus slack
    assert peak < max(limit, largest) + largest + 300 * MB, f"RSS grew by {peak / MB:.0f} MB"
    hit = cache.get_model(f"preset:tiny@{encodings[0]}", "cpu")
    assert cache.get_model(f"preset:tiny@{encodings[0]}", "cpu") is hit  # a cached model is shared, not rebuilt


def test_a_model_a_run_loaded_is_probed_once_in_the_background_when_the_run_is_over(monkeypatch):
    """app.py calls warm_loaded() once a run's page is sent: the induction probe of each model that run loaded is
    measured in a background thread, once, and the Attention and Heads pages then read that measurement."""
    import threading

    from transformer_core.analysis import heads
    from ui import cache

    calls, real = [], heads.induction_scores
    monkeypatch.setattr(heads, "induction_scores", lambda model, length: calls.append(length) or real(model, length))
    monkeypatch.setattr(cache, "MODELS", cache.BoundedCache(64 * MB, lambda v: module_bytes(v[0])))
    monkeypatch.setattr(cache, "PER_MODEL", cache.BoundedCache(MB, lambda v: 1))
    monkeypatch.setattr(cache, "_FRESH", threading.local())
    key = f"preset:tiny-gpt@{sorted(p.stem for p in BUNDLED.glob('*.tiktoken'))[0]}"
    model, _ = cache.get_model(key, "cpu")
    cache.get_model(key, "cpu")  # cached: loaded once, due once
    assert cache._FRESH.keys == [(key, "cpu")] and calls == []  # nothing measured while the run goes on
    cache.warm_loaded()
    assert not hasattr(cache._FRESH, "keys")
    for thread in [th for th in threading.enumerate() if th.name == f"warm {key}"]:
        assert not thread.daemon
        thread.join(timeout=60)
    assert calls == [heads.default_length(model)]
    shared = cache.induction_by_block(key, "cpu")
    assert calls == [heads.default_length(model)]  # the page reads the background's measurement
    direct = real(model, heads.default_length(model))
    assert shared.keys() == direct.keys() and all(torch.equal(shared[k], direct[k]) for k in direct)
    other = key.replace("tiny-gpt", "course-gpt")
    cache.get_model(other, "cpu")
    cache.MODELS.clear()  # evicted before its run was over: not loaded again only to be measured
    cache.warm_loaded()
    assert not [th for th in threading.enumerate() if th.name == f"warm {other}"]
    assert calls == [heads.default_length(model)]
