"""Where the information flowed: every part's share of the stream it adds to (proximity, Ferrando & Voita 2024), and
the routes kept at a threshold. One layer's shares are recomputed here in float64 from PyTorch hooks written in this
test (the attention's input and the Add & Norm's output), with the attention redone by hand from W_q, W_k, W_v,
W_o; the routes are checked against their own rule; the shipped default shows its induction route."""
import math

import numpy as np
import pytest
import torch

from transformer_core import build_model, load_model, preset, run_with_trace, trace_text
from transformer_core.analysis import flow as fl
from transformer_core.errors import InputError

CAT = "The cat sat on the mat. The cat sat on the"


def shares(y: torch.Tensor, parts: torch.Tensor) -> torch.Tensor:
    prox = torch.clamp(y.abs().sum() - (y - parts).abs().sum(-1), min=0)  # (P,)
    return prox / prox.sum()


@torch.no_grad()
def test_one_layer_s_shares_match_an_attention_redone_by_hand_from_hooks_of_this_test():
    model, _ = load_model("everyday-gpt")
    prep, trace = trace_text(model, CAT)
    f = fl.information_flow(model, trace)
    layer, T, H, hs = 2, prep.src_ids.size(1), model.cfg.n_heads, model.cfg.head_dim
    block, seen = model.decoder.layers[layer], {}
    hooks = [block.self_attn.register_forward_pre_hook(lambda m, a, k: seen.__setitem__("h", a[0][0].double()),
                                                       with_kwargs=True),
             block.addnorm1.register_forward_hook(lambda m, a, out: seen.__setitem__("y", out[0].double()))]
    model(prep.src_ids)
    for h in hooks:
        h.remove()
    attn = block.self_attn
    q, k, v = (lin(seen["h"].float()).double().view(T, H, hs).transpose(0, 1) for lin in (attn.W_q, attn.W_k,
                                                                                         attn.W_v))
    scores = q @ k.transpose(1, 2) / math.sqrt(hs) + torch.full((T, T), -torch.inf).triu(1).double()
    A = scores.softmax(-1)  # (H, T, T)
    W_o = attn.W_o.weight.double().view(-1, H, hs)  # (d, H, hs)
    ov = torch.einsum("htk,dhk->htd", v, W_o)  # (H, T, d)
    for i in (T - 1, 5):
        terms = A[:, i, :, None] * ov  # (H, T, d)
        out = terms.sum((0, 1)) + attn.W_o.bias.double()
        x = seen["y"][i] - out
        s = shares(seen["y"][i], torch.cat([terms.sum(0), x[None], attn.W_o.bias.double()[None]]))
        assert np.abs(f.tokens[layer, i] - s[:T].numpy()).max() < 1e-4
        assert abs(f.attn_residual[layer, i] - float(s[T])) < 1e-4
        assert abs(f.attn_bias[layer, i] - float(s[T + 1])) < 1e-4
        per_head = shares(seen["y"][i], torch.cat([terms.reshape(H * T, -1), x[None], attn.W_o.bias.double()[None]]))
        assert np.abs(f.heads[layer, :, i].astype(np.float64).ravel() - per_head[:H * T].numpy()).max() < 2e-3
    for a in (f.tokens.sum(2) + f.attn_residual + f.attn_bias, f.ffn + f.ffn_residual):
        assert np.abs(a - 1).max() < 1e-5  # a node's shares add up to 1


def test_the_default_s_induction_route_on_a_repeated_sentence():
    """The last " the" gets " m" from the first copy at layer 2 and " m" got the " the" before it at layer 0 (the
    previous-token step): both edges on the kept route at the paper's threshold."""
    model, card = load_model("everyday-gpt")
    prep, trace = trace_text(model, CAT)
    edges = fl.information_flow(model, trace).routes()
    attention = {(e.layer, e.source[2], e.target[2]): e for e in edges if e.kind == "attention"}
    T = prep.src_ids.size(1)
    assert (2, 5, T - 1) in attention and attention[(2, 5, T - 1)].share > 0.08  # " m" -> the last " the"
    assert (0, 4, 5) in attention  # " the" -> " m": why " m" carries "what followed the"
    kinds = {(h["layer"], h["head"]): h["kind"] for h in card["heads"]}
    assert kinds[2, attention[(2, 5, T - 1)].head] == "induction"  # its largest head: one the card calls so


def test_routes_follow_their_rule():
    """Every kept edge has at least the threshold and feeds a node that is kept (the prediction, or the source of a
    kept edge); a higher threshold keeps a subset; every attention edge runs from a key at or before its query."""
    model, _ = load_model("everyday-gpt")
    _, trace = trace_text(model, "我们明天早上去公园，然后我们去吃饭。")
    f = fl.information_flow(model, trace)
    low, high = f.routes(0.02), f.routes(0.1)
    L, last = model.cfg.n_layers, trace.decoder_ids.numel() - 1
    for edges, tau in ((low, 0.02), (high, 0.1)):
        sources = {e.source for e in edges} | {("R", L, last)}
        assert all(e.share >= tau and e.target in sources for e in edges)
        assert all(e.source[2] <= e.target[2] for e in edges)
        assert {e.target for e in edges if e.layer == L - 1} <= {("R", L, last), *(("M", L - 1, p) for p in range(99))}
    assert {(e.kind, e.source, e.target) for e in high} <= {(e.kind, e.source, e.target) for e in low}
    other = f.routes(0.04, position=3)
    assert all(e.target[2] <= 3 for e in other) and other


def test_post_norm_rope_grouped_heads_and_a_partial_trace():
    """The course's post-norm order (the sum before its norm), Qwen3's parts (RoPE, QK-norm, 2 K/V heads for 4), and
    a forward keeping only what the flow reads: shares that add up to 1, the same as from a full trace."""
    for name in ("course-gpt", "course-gpt-qwen3"):
        model = build_model(preset(name), "cpu").eval()
        prep, trace = trace_text(model, "我今天去超市 and the park")
        f = fl.information_flow(model, trace)
        assert np.abs(f.tokens.sum(2) + f.attn_residual + f.attn_bias - 1).max() < 1e-5
        _, partial = run_with_trace(model, prep.src_ids, names=fl.flow_names(model))
        g = fl.information_flow(model, partial)
        assert np.array_equal(f.tokens, g.tokens) and np.array_equal(f.ffn, g.ffn)
        assert len(partial.tensors) == len(fl.flow_names(model))


def test_an_encoder_decoder_and_a_position_out_of_range_get_a_message():
    model = build_model(preset("course-gpt"), "cpu").eval()
    _, trace = trace_text(model, "the cat sat")
    with pytest.raises(InputError) as err:
        fl.information_flow(model, trace, position=3)
    assert err.value.code == "dla_range"
    model, _ = load_model("reverse")
    _, trace = trace_text(model, "d a c b", "= b c a")
    with pytest.raises(InputError) as err:
        fl.information_flow(model, trace)
    assert err.value.code == "flow_decoder_only"
