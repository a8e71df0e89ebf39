"""Two texts side by side: each side equals its own trace and surprise; the differences equal NumPy's
total variation and KL computed from the two next-token distributions."""
import numpy as np
import pytest
import torch

from transformer_core import InputError, build_model, prepare, preset, run, trace_text
from transformer_core.analysis.compare import compare
from transformer_core.analysis.surprise import surprise

A, B = "The cat sat on the mat", "The dog sat on a log"


def test_each_side_is_its_own_trace_and_surprise(gpt):
    pa, pb = prepare(gpt, A), prepare(gpt, B)
    result = compare(gpt, pa, pb, "dec_self", 1, 1)
    for side, text, prep in ((result.a, A, pa), (result.b, B, pb)):
        _, trace = trace_text(gpt, text)
        assert torch.equal(side.weights, trace.attention("dec_self", 1).weights[0, 1])
        assert torch.allclose(side.surprise.nats, surprise(gpt, prep).nats)
        last = trace.logits[0, -1]
        assert side.next_token.ids == torch.topk(last, 10).indices.tolist()
        assert len(side.query_labels) == len(side.key_labels) == prep.src_ids.size(1)


def test_differences_equal_numpy_on_the_two_distributions(gpt):
    pa, pb = prepare(gpt, A), prepare(gpt, B)
    d = compare(gpt, pa, pb, "dec_self", 0, 0).diff
    p = torch.softmax(run(gpt, pa.src_ids)[0, -1].double(), -1).numpy()
    q = torch.softmax(run(gpt, pb.src_ids)[0, -1].double(), -1).numpy()
    assert d.total_variation == pytest.approx(0.5 * np.abs(p - q).sum(), abs=1e-9)
    assert d.kl_ab == pytest.approx(float(np.sum(p * np.log(p / q))), abs=1e-9)
    assert d.kl_ba == pytest.approx(float(np.sum(q * np.log(q / p))), abs=1e-9)
    assert d.top_id == int(p.argmax())
    assert d.top_prob_change == pytest.approx(q[d.top_id] - p[d.top_id], abs=1e-9)
    assert d.only_a == [" cat", " the", " mat"] and d.only_b == [" dog", " a", " log"]


def test_a_text_compared_with_itself_has_no_difference(gpt):
    p = prepare(gpt, A)
    d = compare(gpt, p, p).diff
    assert d.total_variation == 0 and d.kl_ab == 0 and d.only_a == d.only_b == [] and d.top_prob_change == 0


def test_encoder_decoder_cross_attention_and_one_token_texts():
    model = build_model(preset("tiny"), "cpu")
    pa, pb = prepare(model, "d a c b", "= b c a"), prepare(model, "a b", "=")
    result = compare(model, pa, pb, "cross", 1, 0)
    assert result.a.weights.shape == (4, 4) and result.b.weights.shape == (1, 2)
    assert result.b.surprise is None and result.b.key_labels == ["a", " b"]
    assert set(result.arrays()) >= {"a_weights", "b_weights", "a_nats", "difference"}
    with pytest.raises(InputError) as err:
        compare(model, pa, pb, "cross", 2, 0)
    assert err.value.code == "head_unknown"
