"""intervene() (per-thread hook edits), head / FFN ablation and activation patching, each checked against an
independent computation: a copy of the model with the same component's weights zeroed, or the W_o arithmetic."""
import copy
import threading

import pytest
import torch
import torch.nn.functional as F

from transformer_core import ExplorerError, InputError, act_name, build_model, capture, prepare, preset, run
from transformer_core.analysis.interventions import (
    ablate,
    ablation_edits,
    aligned_positions,
    intervene,
    kl_divergence,
    patch,
    patch_source,
)
from transformer_core.model.hooks import editing
from transformer_core.model.trace import run_with_trace

TEXT = "The cat sat on the mat because it was warm"
OTHER = "A dog ran in the park"


@pytest.fixture(scope="module")
def seq2seq():
    return build_model(preset("tiny"), "cpu")


def logits(model, prep):
    return run(model, prep.src_ids, prep.tgt_ids)[0].float()


def without_head(model, layer, head, module="self_attn", stack="decoder"):
    """A copy whose W_o ignores one head's slice of concat: the same as that head's z being 0."""
    m = copy.deepcopy(model)
    attn = getattr(getattr(m, stack).layers[layer], module)
    hs = m.cfg.head_dim
    with torch.no_grad():
        attn.W_o.weight[:, head * hs:(head + 1) * hs] = 0.0
    return m


def test_intervene_replaces_a_hook_value_and_capture_sees_the_edit(gpt):
    prep = prepare(gpt, TEXT)
    name = act_name("ffn_out", layer=1, side="decoder")
    with intervene({name: torch.zeros_like}), capture([name]) as got:
        edited = logits(gpt, prep)
    assert torch.count_nonzero(got[name]) == 0
    with capture([name]) as plain:
        intact = logits(gpt, prep)
    assert torch.count_nonzero(plain[name]) > 0
    assert not torch.allclose(edited, intact)


def test_intervene_is_removed_after_the_block_even_on_error(gpt):
    prep = prepare(gpt, TEXT)
    before = logits(gpt, prep)
    with pytest.raises(RuntimeError), intervene({act_name("embed", side="decoder"): torch.zeros_like}):
        assert editing()
        raise RuntimeError("boom")
    assert not editing()
    assert torch.equal(logits(gpt, prep), before)


def test_intervene_never_touches_the_model(gpt):
    state = {k: v.clone() for k, v in gpt.state_dict().items()}
    with intervene(ablation_edits(gpt, [("dec_self", 0, 0)], [("decoder", 1)])):
        logits(gpt, prepare(gpt, TEXT))
    assert all(torch.equal(v, gpt.state_dict()[k]) for k, v in state.items())
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in gpt.modules())


def test_nested_interventions_compose_inner_after_outer(gpt):
    name = act_name("embed", side="decoder")
    prep = prepare(gpt, TEXT)
    with intervene({name: lambda x: x + 1.0}), intervene({name: lambda x: x * 2.0}), capture([name]) as got:
        logits(gpt, prep)
    with capture([name]) as plain:
        logits(gpt, prep)
    assert torch.allclose(got[name], (plain[name] + 1.0) * 2.0)


def test_an_intervention_in_one_thread_does_not_reach_another_thread(gpt):
    prep = prepare(gpt, TEXT)
    intact = logits(gpt, prep)
    inside, other_done = threading.Event(), threading.Event()
    results = {}

    def slow_zero(x):  # holds thread A inside its edited forward while thread B runs
        inside.set()
        assert other_done.wait(30)
        return torch.zeros_like(x)

    def edited_thread():
        with intervene({act_name("ffn_out", layer=0, side="decoder"): slow_zero}):
            results["a"] = logits(gpt, prep)

    def plain_thread():
        assert inside.wait(30)
        results["b"] = logits(gpt, prep)
        results["b_editing"] = editing()
        other_done.set()

    threads = [threading.Thread(target=edited_thread), threading.Thread(target=plain_thread)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert torch.equal(results["b"], intact) and not results["b_editing"]
    assert not torch.allclose(results["a"], intact)


def test_zero_ablating_a_head_equals_zeroing_its_columns_of_W_o(gpt):
    prep = prepare(gpt, TEXT)
    result = ablate(gpt, prep, heads=[("dec_self", 1, 0)])
    expected = logits(without_head(gpt, 1, 0), prep)
    with intervene(ablation_edits(gpt, [("dec_self", 1, 0)])):
        got = logits(gpt, prep)
    assert torch.allclose(got, expected, atol=1e-5)
    ids = prep.src_ids[0]
    assert result.effect.loss_edited == pytest.approx(float(F.cross_entropy(expected[:-1], ids[1:])), abs=1e-5)
    assert result.effect.loss_intact == pytest.approx(float(F.cross_entropy(logits(gpt, prep)[:-1], ids[1:])),
                                                      abs=1e-5)
    p = torch.softmax(logits(gpt, prep)[-1].double(), -1)
    q = torch.softmax(expected[-1].double(), -1)
    assert result.effect.kl == pytest.approx(float((p * (p / q).log()).sum()), abs=1e-6)
    assert result.effect.top_prob_edited == pytest.approx(float(q[result.effect.top_id]), abs=1e-6)


def test_ablating_cross_attention_and_ffn_of_an_encoder_decoder(seq2seq):
    prep = prepare(seq2seq, "d a c b", "= b c a")
    m = without_head(seq2seq, 0, 1, module="cross_attn")
    with torch.no_grad():
        m.encoder.layers[1].ffn.linear2.weight.zero_()
        m.encoder.layers[1].ffn.linear2.bias.zero_()
    with intervene(ablation_edits(seq2seq, [("cross", 0, 1)], [("encoder", 1)])):
        got = logits(seq2seq, prep)
    assert torch.allclose(got, logits(m, prep), atol=1e-5)
    assert ablate(seq2seq, prep, [("cross", 0, 1)], [("encoder", 1)]).effect.kl > 0


def test_mean_ablation_sets_the_head_to_its_mean_over_positions(gpt):
    prep = prepare(gpt, TEXT)
    name = act_name("z", layer=0, block="dec_self")
    with capture([name]) as plain:
        logits(gpt, prep)
    with intervene(ablation_edits(gpt, [("dec_self", 0, 1)], mode="mean")), capture([name]) as got:
        logits(gpt, prep)
    z0, z1 = plain[name], got[name]  # (1, nh, T, hs)
    assert torch.allclose(z1[:, 1], z0[:, 1].mean(dim=1, keepdim=True).expand_as(z0[:, 1]), atol=1e-6)
    assert torch.equal(z1[:, 0], z0[:, 0])


def test_no_ablation_changes_nothing(gpt):
    effect = ablate(gpt, prepare(gpt, TEXT)).effect
    assert effect.kl == 0.0 and effect.loss_change == 0.0 and effect.intact.ids == effect.edited.ids


@pytest.mark.parametrize("heads, ffn, code", [
    ([("cross", 0, 0)], [], "head_unknown"),  # a decoder-only model has no cross-attention
    ([("dec_self", 2, 0)], [], "head_unknown"),
    ([("dec_self", 0, 2)], [], "head_unknown"),
    ([("dec_self", 0, True)], [], "head_unknown"),
    ([], [("encoder", 0)], "ffn_unknown"),
    ([], [("decoder", -1)], "ffn_unknown"),
])
def test_ablating_what_the_model_lacks_is_refused_with_a_code(gpt, heads, ffn, code):
    with pytest.raises(InputError) as err:
        ablate(gpt, prepare(gpt, TEXT), heads, ffn)
    assert err.value.code == code and "{" not in err.value.text("zh")


def test_unknown_ablation_mode_is_refused(gpt):
    with pytest.raises(ExplorerError, match="mode"):
        ablate(gpt, prepare(gpt, TEXT), [("dec_self", 0, 0)], mode="noise")


def test_aligned_positions_from_the_end_start_and_exact():
    assert aligned_positions(5, 3, "end") == [(2, 0), (3, 1), (4, 2)]
    assert aligned_positions(3, 5, "end") == [(0, 2), (1, 3), (2, 4)]
    assert aligned_positions(5, 3, "start") == [(0, 0), (1, 1), (2, 2)]
    assert aligned_positions(4, 4, "exact") == [(i, i) for i in range(4)]
    with pytest.raises(InputError) as err:
        aligned_positions(4, 5, "exact")
    assert err.value.code == "patch_lengths" and "4" in str(err.value) and "5" in err.value.text("zh")
    with pytest.raises(InputError):
        aligned_positions(4, 5, "middle")


def test_patching_a_text_with_itself_changes_nothing(gpt):
    prep = prepare(gpt, TEXT)
    result = patch(gpt, prep, prep, "dec_self", 1, 1)
    assert result.effect.kl == pytest.approx(0.0, abs=1e-9)
    assert result.positions == [(i, i) for i in range(prep.src_ids.size(1))]


def test_patch_equals_adding_the_head_difference_through_W_o_to_the_block_output(gpt):
    """Replacing head h's z by B's moves the block output by (z_B − z_A)[h] @ W_o[:, h slice]ᵀ at the aligned
    positions: run A with that added at the `out` hook instead, and the next token must come out the same."""
    a, b = prepare(gpt, TEXT), prepare(gpt, OTHER)
    layer, head, hs = 1, 1, gpt.cfg.head_dim
    z, out = act_name("z", layer=layer, block="dec_self"), act_name("out", layer=layer, block="dec_self")
    _, ta = run_with_trace(gpt, a.src_ids, names=[z])
    _, tb = run_with_trace(gpt, b.src_ids, names=[z])
    result = patch(gpt, a, b, "dec_self", layer, head)
    pairs = result.positions
    assert pairs[-1] == (a.src_ids.size(1) - 1, b.src_ids.size(1) - 1) and len(pairs) == b.src_ids.size(1)
    at_a, at_b = [p for p, _ in pairs], [q for _, q in pairs]
    w_o = gpt.decoder.layers[layer].self_attn.W_o.weight[:, head * hs:(head + 1) * hs].detach()  # (d, hs)
    delta = torch.zeros(a.src_ids.size(1), gpt.cfg.d_model)
    delta[at_a] = (tb[z][0, head, at_b] - ta[z][0, head, at_a]) @ w_o.T  # (n, d)
    with intervene({out: lambda x: x + delta}):
        expected = logits(gpt, a)
    intact = logits(gpt, a)
    q = torch.softmax(expected[-1].double(), -1)
    top = torch.topk(expected[-1], 10)
    assert result.effect.edited.ids == top.indices.tolist()
    assert result.effect.edited.raw == pytest.approx(q[top.indices].tolist(), abs=1e-6)
    p = torch.softmax(intact[-1].double(), -1)
    assert result.effect.kl == pytest.approx(float((p * (p / q).log()).sum()), abs=1e-6)
    assert result.source_top_id == int(logits(gpt, b)[-1].argmax())
    assert result.source_top_in_a == pytest.approx((float(p[result.source_top_id]), float(q[result.source_top_id])),
                                                   abs=1e-6)


def test_patching_encoder_heads_aligns_source_positions(seq2seq):
    a, b = prepare(seq2seq, "d a c b e", "= e b c a d"), prepare(seq2seq, "b a", "= a b c")
    result = patch(seq2seq, a, b, "enc_self", 0, 1)
    assert result.positions == [(3, 0), (4, 1)]
    assert patch(seq2seq, a, b, "cross", 1, 0, align="start").positions == [(i, i) for i in range(4)]  # "= a b c"
    with pytest.raises(InputError) as err:
        patch(seq2seq, a, b, "enc_self", 0, 1, align="exact")
    assert err.value.code == "patch_lengths"


def test_kl_divergence_matches_torch_kl_div():
    p, q = torch.randn(50), torch.randn(50)
    expected = F.kl_div(torch.log_softmax(q.double(), -1), torch.log_softmax(p.double(), -1), log_target=True,
                        reduction="sum")
    assert kl_divergence(p, q) == pytest.approx(float(expected), abs=1e-12)
    assert kl_divergence(p, p) == 0.0


def test_a_patch_from_a_kept_source_equals_one_that_runs_text_b_itself(gpt):
    a, b = prepare(gpt, TEXT), prepare(gpt, OTHER)
    source = patch_source(gpt, b, "dec_self", 1)
    assert source.z.shape == (1, gpt.cfg.n_heads, b.src_ids.size(1), gpt.cfg.head_dim)
    torch.testing.assert_close(source.last_logits, logits(gpt, b)[-1], atol=2e-4, rtol=1e-5)
    for head in (0, 1):
        kept, fresh = patch(gpt, a, b, "dec_self", 1, head, source=source), patch(gpt, a, b, "dec_self", 1, head)
        assert kept.effect == fresh.effect and kept.source_top_in_a == fresh.source_top_in_a
    other_layer = patch(gpt, a, b, "dec_self", 0, 1, source=source)  # a source of another block is not used
    assert other_layer == patch(gpt, a, b, "dec_self", 0, 1)
    c = prepare(gpt, TEXT + " and more")  # nor one of a text of another length
    assert patch(gpt, a, c, "dec_self", 1, 1, source=source) == patch(gpt, a, c, "dec_self", 1, 1)
