"""Whatever a learner types: clear InputErrors or a working trace, never a crash. Plus sampling settings."""
import math

import pytest
import torch

from transformer_core import (
    ConfigError,
    InputError,
    build_model,
    prepare,
    preset,
    run,
    trace_text,
)
from transformer_core.analysis.next_token import (
    Sampling,
    entropy_bits,
    generate,
    generate_batch,
    next_token_probs,
)
from transformer_core.errors import SamplingError


def assert_clean_trace(trace):
    for block in trace.blocks():
        stages = trace.attention(*block)
        weights, mask = stages["weights"], stages["mask"]
        assert not torch.isnan(weights).any(), block
        assert torch.all(weights[~mask] == 0), block
        torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]), atol=1e-6, rtol=0)
    assert torch.isfinite(trace.logits).all()


# --- prepare / trace_text ------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["", " ", "   \n\t  ", "\u3000"],
                         ids=["empty", "space", "whitespace", "ideographic_space"])
def test_empty_or_whitespace_text_raises_input_error(tiny_gpt, tiny, text):
    with pytest.raises(InputError, match="empty"):
        prepare(tiny_gpt, text)
    with pytest.raises(InputError, match="empty"):
        trace_text(tiny_gpt, text)
    with pytest.raises(InputError, match="input text"):
        prepare(tiny, text, "我现在开始排雷。")
    with pytest.raises(InputError, match="target text"):
        prepare(tiny, "我现在开始排雷。", text)


def test_encoder_decoder_without_target_text_raises_input_error(tiny):
    with pytest.raises(InputError, match="target"):
        prepare(tiny, "hello", None)


def test_endoftext_text_works_as_plain_text(tiny_gpt):
    prep, trace = trace_text(tiny_gpt, "<|endoftext|>")
    assert 100257 not in prep.src.ids
    assert_clean_trace(trace)


def test_endoftext_text_works_as_special_token_when_allowed(tiny, tiny_gpt):
    prep, trace = trace_text(tiny_gpt, "hi <|endoftext|>", allow_special=True)
    assert prep.src.ids[-1] == 100257
    assert_clean_trace(trace)
    prep, trace = trace_text(tiny, "<|endoftext|>", "<|endoftext|>", allow_special=True)
    assert prep.src_ids.tolist() == [[100257]] and prep.tgt_ids.tolist() == [[100257]]
    assert_clean_trace(trace)


def test_lone_surrogates_work(tiny_gpt, tiny):
    prep, trace = trace_text(tiny_gpt, "a\ud800b\udfff")
    assert prep.src.cleaned
    assert_clean_trace(trace)
    prep, trace = trace_text(tiny, "\ud83d", "x\udc00")
    assert prep.src.cleaned and prep.tgt.cleaned
    assert_clean_trace(trace)


@pytest.mark.parametrize(
    "text",
    [
        "👩‍👩‍👧‍👦 family 🏳️‍🌈",  # ZWJ sequences
        "👍🏽🇨🇳🇫🇷",  # skin tone modifier, flags
        "e\u0301 a\u0308\u0323 Z\u0351\u0352\u0353\u0354",  # combining marks
        "שלום עולם مرحبا بالعالم",  # RTL scripts
        "\u202eevil\u202c \u200f\u200e",  # bidi controls
        "\x00\x01\x7f nul",  # control characters and NUL
        "\ufeff\ufffd\U0010ffff",  # BOM, replacement char, last code point
    ],
    ids=["zwj", "modifiers_flags", "combining", "rtl", "bidi_controls", "controls", "edge_code_points"],
)
def test_unusual_unicode_works(tiny_gpt, text):
    prep, trace = trace_text(tiny_gpt, text)
    assert len(prep.src.ids) >= 1
    assert_clean_trace(trace)


def test_hundred_thousand_characters_truncated_to_max_len(tiny, tiny_gpt):
    long_text = "同志们!我踩着地雷了" * 10_000  # 100 000 characters
    assert len(long_text) == 100_000
    prep = prepare(tiny, long_text, long_text)
    assert prep.src.truncated and prep.tgt.truncated
    assert prep.src_ids.shape == (1, tiny.cfg.max_len) == (1, 64)
    assert prep.tgt_ids.shape == (1, 64)
    prep, trace = trace_text(tiny_gpt, "x" * 100_000)
    assert prep.src.truncated
    assert prep.src_ids.shape == (1, 64)
    assert_clean_trace(trace)


def test_config_with_d_model_not_divisible_by_heads_raises_config_error():
    with pytest.raises(ConfigError, match="divisible"):
        build_model(preset("tiny-gpt", d_model=18, n_heads=4), "cpu")


def test_compacted_vocabulary_rejects_unknown_tokens_with_input_error():
    cfg = preset("tiny-gpt", vocab_size=3, vocab_map=(0, 15339, 1917))  # '!', 'hello', ' world'
    model = build_model(cfg, "cpu")
    prep = prepare(model, "hello world!")
    assert prep.src_ids.tolist() == [[1, 2, 0]]
    with pytest.raises(InputError, match="not among them") as refused:
        prepare(model, "同志们 鬱")
    # each character once and whole, never its byte pieces ('<0xE5><0x90>') or its space
    assert str(refused.value).endswith(": '同', '志', '们', '鬱'."), str(refused.value)


# --- generation ----------------------------------------------------------------------------------------------

LOGITS = torch.tensor([2.0, 1.0, 0.5, -1.0, 3.0, 0.0])


def test_next_token_probs_sum_to_one():
    for s in (Sampling(), Sampling(temperature=0.3), Sampling(temperature=5.0), Sampling(top_k=3, top_p=0.9)):
        probs = next_token_probs(LOGITS, s)
        assert probs.shape == LOGITS.shape
        torch.testing.assert_close(probs.sum(), torch.tensor(1.0))
        assert torch.all(probs >= 0)


@pytest.mark.parametrize("k", [1, 2, 3, 5, 6])
def test_top_k_keeps_exactly_k_tokens_for_distinct_logits(k):
    probs = next_token_probs(LOGITS, Sampling(top_k=k))
    assert int((probs > 0).sum()) == k
    kept = set(torch.nonzero(probs).flatten().tolist())
    assert kept == set(torch.topk(LOGITS, k).indices.tolist())


def test_top_p_keeps_the_smallest_set_reaching_p():
    base = torch.tensor([0.5, 0.3, 0.15, 0.05])
    logits = base.log()
    for p, kept in [(0.4, [0]), (0.7, [0, 1]), (0.85, [0, 1, 2]), (0.99, [0, 1, 2, 3]), (1.0, [0, 1, 2, 3])]:
        probs = next_token_probs(logits, Sampling(top_p=p))
        assert torch.nonzero(probs).flatten().tolist() == kept, p
        torch.testing.assert_close(probs[kept], base[kept] / base[kept].sum())


@pytest.mark.parametrize("temperature", [0.0, -1.0, 0.001, 1000.0, float("nan")])
def test_invalid_temperature_raises_sampling_error(temperature):
    with pytest.raises(SamplingError, match="temperature"):
        next_token_probs(LOGITS, Sampling(temperature=temperature))


def test_invalid_top_k_and_top_p_raise_sampling_error():
    with pytest.raises(SamplingError, match="(?i)top-k"):
        next_token_probs(LOGITS, Sampling(top_k=-1))
    for p in (0.0, 1.5):
        with pytest.raises(SamplingError, match="(?i)top-p"):
            next_token_probs(LOGITS, Sampling(top_p=p))


def test_entropy_of_uniform_over_four_is_two_bits():
    assert math.isclose(entropy_bits(torch.full((4,), 0.25)), 2.0, abs_tol=1e-9)
    assert entropy_bits(torch.tensor([1.0, 0.0, 0.0])) == 0.0


def test_greedy_generation_is_deterministic(tiny_gpt):
    s = Sampling(greedy=True)
    a = generate(tiny_gpt, [15339, 1917], 5, s, seed=0)
    b = generate(tiny_gpt, [15339, 1917], 5, s, seed=123)
    assert a == b and len(a) == 5
    logits = run(tiny_gpt, torch.tensor([[15339, 1917]]))
    assert a[0] == int(logits[0, -1].argmax())


def test_greedy_generation_for_encoder_decoder_is_deterministic(tiny):
    s = Sampling(greedy=True)
    a = generate(tiny, [0], 4, s, src=[42016, 78228])
    assert a == generate(tiny, [0], 4, s, src=[42016, 78228]) and len(a) == 4


def test_sampled_generation_is_reproducible_by_seed(tiny_gpt):
    s = Sampling(temperature=1.5)
    assert generate(tiny_gpt, [1], 6, s, seed=7) == generate(tiny_gpt, [1], 6, s, seed=7)


def test_generation_stops_at_max_len_and_the_batch_loop_slides_its_window(tiny_gpt):
    assert len(generate(tiny_gpt, list(range(1, 63)), 4, Sampling(greedy=True))) == 2  # 62 + 2 = max_len 64
    out = generate_batch(tiny_gpt, torch.tensor([list(range(1, 63))]), 4)  # the window keeps the last 64
    assert out.shape == (1, 4)


def test_appending_five_tokens_equals_appending_one_five_times(tiny_gpt):
    s = Sampling(temperature=1.3)
    five = generate(tiny_gpt, [1, 2], 5, s, seed=3)
    grown = [1, 2]
    for _ in range(5):
        grown += generate(tiny_gpt, grown, 1, s, seed=3)
    assert grown[2:] == five
