"""Why a head looks where it looks: the score q·k/√d_k split into query part × key part. The matrix sums to the
model's own score; a head's row is recomputed here through hooks written in this test (the LayerNorm's
input, W_o's input, W_k's output), not through the trace."""
import math

import pytest
import torch

from transformer_core import build_model, load_model, preset, trace_text
from transformer_core.analysis import qk_attribution as qka
from transformer_core.errors import InputError

CAT = "The cat sat on the mat. The cat sat on the"


def test_the_induction_head_s_score_splits_into_parts_that_sum_to_it_and_match_hooks_of_this_test():
    model, _ = load_model("everyday-gpt")
    prep, trace = trace_text(model, CAT)
    T, layer, head, hs = prep.src_ids.size(1), 2, 7, model.cfg.head_dim
    key = 5  # " m", after the first " the": where the induction head looks from the last " the"
    a = qka.qk_attribution(model, trace, layer, head, T - 1, key)
    scaled = trace.attention("dec_self", layer).scaled[0, head, T - 1, key]
    assert abs(a.residue) < 1e-4 and abs(a.score - float(scaled)) < 1e-6
    seen = {}
    block = model.decoder.layers[layer]
    hooks = [block.addnorm1.ln.register_forward_pre_hook(lambda m, x: seen.__setitem__("x", x[0][0].double())),
             model.decoder.layers[1].self_attn.W_o.register_forward_pre_hook(
                 lambda m, x: seen.__setitem__("z1", x[0][0].double())),
             block.self_attn.W_k.register_forward_hook(lambda m, x, out: seen.__setitem__("k", out[0].double()))]
    with torch.no_grad():
        model(prep.src_ids)
    for h in hooks:
        h.remove()
    ln = block.addnorm1.ln
    sigma = torch.sqrt(seen["x"][T - 1].var(unbiased=False) + ln.eps)  # the query's frozen LayerNorm scale
    W_o = model.decoder.layers[1].self_attn.W_o.weight.double()
    part = W_o[:, 5 * hs:6 * hs] @ seen["z1"][T - 1, 5 * hs:6 * hs]  # layer 1 head 5's output at the query
    q_part = model.decoder.layers[layer].self_attn.W_q.weight.double()[head * hs:(head + 1) * hs] @ (
        ln.weight.double() * (part - part.mean()) / sigma)
    k = seen["k"][key, head * hs:(head + 1) * hs]  # this head's key at " m"
    i = a.parts.index(("head", 1, 5))
    assert abs(a.matrix[i].sum() - float((q_part @ k).detach()) / math.sqrt(hs)) < 1e-4
    assert a.parts[0] == ("embed",) and a.parts[-1] == ("bias",) and a.matrix.shape == (len(a.parts),) * 2


def test_rope_qk_norm_and_grouped_heads_split_exactly_too(monkeypatch):
    """Qwen3's parts (RMSNorm, RoPE, QK-norm, 2 K/V heads for 4), random weights: the matrix sums to the score; with
    the heads grouped per layer (a big model's view) it still does."""
    model = build_model(preset("course-gpt-qwen3"), "cpu").eval()
    _, trace = trace_text(model, "我今天去超市 and the park")
    a = qka.qk_attribution(model, trace, 5, 3, 8, 4)
    assert abs(a.residue) < 1e-4 * max(1.0, abs(a.score)) and len(a.parts) == 1 + 5 * (4 + 1) + 1
    monkeypatch.setattr(qka, "GROUP_HEADS_ABOVE", 4)
    b = qka.qk_attribution(model, trace, 5, 3, 8, 4)
    assert ("attn", 0) in b.parts and abs(b.total - a.total) < 1e-6 and len(b.parts) == 1 + 5 * 2 + 1


def test_a_post_norm_model_and_a_future_key_are_refused_with_a_message():
    model = build_model(preset("course-gpt"), "cpu").eval()
    _, trace = trace_text(model, "the cat sat")
    with pytest.raises(InputError) as err:
        qka.qk_attribution(model, trace, 0, 0, 1, 0)
    assert err.value.code == "dla_post_norm"
    model, _ = load_model("everyday-gpt")
    _, trace = trace_text(model, "the cat sat")
    with pytest.raises(InputError):
        qka.qk_attribution(model, trace, 0, 0, 0, 1)  # a key after the query: masked, nothing to explain
