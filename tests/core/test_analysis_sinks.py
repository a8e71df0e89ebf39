"""Attention sinks: finding heads by their first-token weight, and removing it through the `weights` hook: rows
renormalised, the edit reaches z = weights @ V (checked against the traced V), and the effect is measured."""
import pytest
import torch

from transformer_core import act_name, build_model, capture, prepare, preset, run, trace_text
from transformer_core.analysis.interventions import intervene
from transformer_core.analysis.sinks import find_sinks, remove_sink, without_first_key

TEXT = "Attention sinks park weight on the first token"


def test_the_edit_zeroes_key_0_and_renormalises_only_that_head():
    w = torch.softmax(torch.randn(1, 2, 4, 4), -1).tril()  # causal-like rows, not all summing to 1
    w = w / w.sum(-1, keepdim=True)
    out = without_first_key(1)(w)
    assert torch.equal(out[:, 0], w[:, 0])
    assert torch.all(out[0, 1, :, 0] == 0)
    assert torch.allclose(out[0, 1, 1:].sum(-1), torch.ones(3))
    assert torch.all(out[0, 1, 0] == 0)  # query 0 had only key 0: nothing left to attend to
    assert torch.allclose(out[0, 1, 2, 1:], w[0, 1, 2, 1:] / w[0, 1, 2, 1:].sum())


def test_find_sinks_reports_mean_first_token_weights(gpt):
    prep, trace = trace_text(gpt, TEXT)
    every = find_sinks(gpt, prep, threshold=0.0)
    assert len(every) == gpt.cfg.n_layers * gpt.cfg.n_heads
    assert [s.first_weight for s in every] == sorted((s.first_weight for s in every), reverse=True)
    for s in every:
        w = trace.attention(s.kind, s.layer).weights[0, s.head]  # (T, T)
        assert s.first_weight == pytest.approx(float(w[1:, 0].mean()), abs=1e-6)
    assert find_sinks(gpt, prep, threshold=1.0) == []


def test_removing_the_sink_flows_through_z_and_changes_the_output(gpt):
    prep = prepare(gpt, TEXT)
    layer, head = 0, 1
    names = {s: act_name(s, layer=layer, block="dec_self") for s in ("weights", "v", "z")}
    with intervene({names["weights"]: without_first_key(head)}), capture(names.values()) as got:
        edited = run(gpt, prep.src_ids)[0].float()
    assert torch.all(got[names["weights"]][0, head, :, 0] == 0)  # the trace shows the ablation
    assert torch.allclose(got[names["z"]], got[names["weights"]] @ got[names["v"]], atol=1e-6)
    result = remove_sink(gpt, prep, "dec_self", layer, head)
    assert torch.equal(result.weights_after, got[names["weights"]][0, head])
    assert torch.allclose(result.weights_after[1:].sum(-1), torch.ones(prep.src_ids.size(1) - 1))
    intact = run(gpt, prep.src_ids)[0].float()
    p, q = torch.softmax(intact[-1].double(), -1), torch.softmax(edited[-1].double(), -1)
    assert result.effect.kl == pytest.approx(float((p * (p / q).log()).sum()), abs=1e-9)
    # the mean KL the verdict cites is over every position (those the loss change is taken over), the last one too
    P, Q = torch.softmax(intact.double(), -1), torch.softmax(edited.double(), -1)  # (T, vocab)
    per_row = (P * (P / Q).log()).sum(-1)  # (T,)
    assert torch.allclose(result.kl_positions, per_row, atol=1e-9) and result.kl_positions[-1] == pytest.approx(
        result.effect.kl, abs=1e-9)
    assert result.mean_kl == pytest.approx(float(per_row.mean()), abs=1e-9)
    assert float(result.block_change[1:].min()) > 0 and float(result.layer_change.max()) > 0
    assert result.arrays()["weights_after"].shape == (prep.src_ids.size(1),) * 2


def test_encoder_decoder_sinks_in_cross_attention_read_every_query():
    model = build_model(preset("tiny"), "cpu")
    prep, trace = trace_text(model, "d a c b", "= b c a")
    cross = [s for s in find_sinks(model, prep, threshold=0.0) if s.kind == "cross"]
    for s in cross:
        assert s.first_weight == pytest.approx(float(trace.attention("cross", s.layer).weights[0, s.head, :, 0].mean()),
                                               abs=1e-6)
    result = remove_sink(model, prep, "cross", 1, 0)
    assert torch.allclose(result.weights_after.sum(-1), torch.ones(4))
    assert result.layer_change.shape == (4,)


def test_the_largest_change_leaves_out_the_rows_that_removal_empties(gpt):
    """A causal head's query 0 can only read the first token: removal empties that row, whose change (100%)
    says nothing about parked weight, so the page's "changes up to N%" leaves it out."""
    prep = prepare(gpt, TEXT)
    result = remove_sink(gpt, prep, "dec_self", 0, 1)
    assert result.emptied.tolist() == [True] + [False] * (prep.src_ids.size(1) - 1)
    assert result.largest_change("block") == pytest.approx(float(result.block_change[1:].max()))
    assert result.largest_change("layer") == pytest.approx(float(result.layer_change[1:].max()))
    assert result.largest_change("block") <= float(result.block_change.max())
