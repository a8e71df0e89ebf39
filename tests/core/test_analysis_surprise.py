"""Surprise: per-token probability, bits and nats, mean loss and perplexity equal F.cross_entropy computed
directly on the model's logits (decoder-only over the text, encoder-decoder over the target)."""
import math

import pytest
import torch
import torch.nn.functional as F

from transformer_core import InputError, build_model, prepare, preset, run
from transformer_core.analysis.surprise import surprise


def check_against_cross_entropy(result, logits, ids):
    per_token = F.cross_entropy(logits[:-1], ids[1:], reduction="none")  # (T-1,)
    assert torch.allclose(result.nats.float(), per_token, atol=1e-5)
    assert torch.allclose(result.bits.float(), per_token / math.log(2), atol=1e-5)
    assert torch.allclose(result.prob.float(), torch.softmax(logits[:-1], -1)[torch.arange(len(ids) - 1), ids[1:]],
                          atol=1e-6)
    loss = float(F.cross_entropy(logits[:-1], ids[1:]))
    assert result.mean_loss == pytest.approx(loss, abs=1e-5)
    assert result.perplexity == pytest.approx(math.exp(loss), rel=1e-5)


def test_decoder_only_surprise_equals_cross_entropy(gpt):
    prep = prepare(gpt, "Surprise is the negative log probability of what came next. 意外")
    result = surprise(gpt, prep)
    ids = prep.src_ids[0]
    check_against_cross_entropy(result, run(gpt, prep.src_ids)[0].float(), ids)
    assert result.ids == ids.tolist() and len(result.table()) == len(ids) - 1
    assert result.table()[0]["token"] == result.labels[1]


def test_encoder_decoder_surprise_is_over_the_target():
    model = build_model(preset("tiny"), "cpu")
    prep = prepare(model, "d a c b", "= b c a")
    result = surprise(model, prep)
    check_against_cross_entropy(result, run(model, prep.src_ids, prep.tgt_ids)[0].float(), prep.tgt_ids[0])
    assert result.labels == ["=", " b", " c", " a"]


def test_unknown_tokens_are_flagged_for_a_compacted_vocabulary():
    real = prepare(build_model(preset("tiny-gpt"), "cpu"), "ab cd ab").src_ids[0].tolist()
    vocab_map = (-1, *sorted(set(real[:2])))  # the unknown slot, then two of the text's tokens
    model = build_model(preset("tiny-gpt", vocab_size=len(vocab_map), vocab_map=vocab_map), "cpu")
    prep = prepare(model, "ab cd ab")
    result = surprise(model, prep)
    assert result.unknown == prep.src_unknown and result.unknown
    assert "⟨unk⟩" in result.labels


def test_a_single_token_has_no_surprise(gpt):
    with pytest.raises(InputError) as err:
        surprise(gpt, prepare(gpt, "Hi"))
    assert err.value.code == "surprise_one_token" and err.value.text("zh").strip()
