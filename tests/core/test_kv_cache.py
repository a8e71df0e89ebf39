"""Generation with a key/value cache computes exactly what full forwards over the whole sequence compute."""
import pytest
import torch

from transformer_core import GREEDY, Sampling, build_model, generate_batch, preset, run
from transformer_core.model import kv_cache

VARIANTS = {
    "course post-norm": {},
    "pre-norm, learned positions, tied, final norm": dict(positional="learned", norm_first=True, final_norm=True,
                                                         tie_embeddings=True, output_bias=False),
    "scaled embeddings": dict(scale_embedding=True, final_norm=True),
}


@pytest.mark.parametrize("name", ["tiny", "tiny-gpt"])
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_cached_steps_give_the_logits_of_a_full_forward(name, variant):
    torch.manual_seed(0)
    model = build_model(preset(name, vocab_size=300, **VARIANTS[variant]), "cpu")
    dec, src, lengths = torch.randint(0, 300, (3, 6)), torch.randint(0, 300, (3, 7)), torch.tensor([7, 5, 2])
    encdec = model.is_encoder_decoder
    cache = kv_cache.start(model, src if encdec else None, lengths if encdec else None)
    pieces = [kv_cache.step(model, cache, dec[:, a:b]) for a, b in ((0, 3), (3, 4), (4, 6))]
    full = run(model, src, dec, src_lengths=lengths) if encdec else run(model, dec)
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, atol=1e-5, rtol=1e-5)
    assert cache.length == 6


def test_a_wrong_cache_gives_wrong_logits():
    """Guards the test above: the cached keys are really used."""
    model = build_model(preset("tiny-gpt", vocab_size=300), "cpu")
    dec = torch.randint(0, 300, (1, 6))
    cache = kv_cache.start(model)
    kv_cache.step(model, cache, dec[:, :5])
    cache.layers[0]["self"]["k"] = cache.layers[0]["self"]["k"] * 2
    assert not torch.allclose(kv_cache.step(model, cache, dec[:, 5:]), run(model, dec)[:, 5:], atol=1e-3)


@pytest.mark.parametrize("s", [GREEDY, Sampling(temperature=1.3, top_k=20)], ids=["greedy", "sampled"])
def test_cached_generation_of_eight_tokens_equals_eight_single_cached_steps(s):
    model = build_model(preset("tiny-gpt", vocab_size=300), "cpu")
    prompt = torch.randint(0, 300, (2, 5))
    cached = generate_batch(model, prompt, 8, s, seed=4)  # fits in max_len: the cached path
    # the same steps one call at a time (each call starts a fresh cache from the whole sequence)
    dec = prompt
    for _ in range(8):
        dec = torch.cat([dec, generate_batch(model, dec, 1, s, seed=4)], dim=1)
    assert torch.equal(cached, dec[:, 5:])
