"""The logit lens: its last row is the model's own output, exactly; its other rows equal a model cut after that
layer (independently: a copy with the later layers removed)."""
import copy
import dataclasses

import pytest
import torch

from transformer_core import InputError, build_model, prepare, preset, run, trace_text
from transformer_core.analysis.logit_lens import EMBEDDINGS, lens_from_trace, lens_logits, logit_lens, residual_names

TEXT = "The quick brown fox jumps over"

MODELS = {
    "post-norm gpt": preset("tiny-gpt"),
    "pre-norm gpt with final norm": preset("tiny-gpt", norm_first=True, final_norm=True),
    "post-norm encoder-decoder with final norm": preset("tiny", final_norm=True, scale_embedding=True),
    "pre-norm encoder-decoder": preset("tiny", norm_first=True),
}


@pytest.fixture(scope="module", params=list(MODELS), ids=list(MODELS))
def model(request):
    return build_model(MODELS[request.param], "cpu")


def prep_for(model):
    return prepare(model, TEXT, "= a b c" if model.is_encoder_decoder else None)


def test_last_layer_lens_is_exactly_the_models_logits(model):
    prep, trace = trace_text(model, TEXT, "= a b c" if model.is_encoder_decoder else None)
    last = trace[residual_names(model)[-1]]
    assert torch.equal(lens_logits(model, last), trace.logits)
    lens = logit_lens(model, prep, k=4)
    probs = torch.softmax(run(model, prep.src_ids, prep.tgt_ids)[0].float(), -1)  # (T, vocab)
    top = torch.topk(probs, 4)
    assert torch.equal(lens.ids[-1], top.indices)
    assert lens_from_trace(model, trace, 4) is lens_from_trace(model, trace, 4)  # computed once per trace
    # probabilities as exp(logit - logsumexp) of the few entries read: softmax's values up to rounding
    torch.testing.assert_close(lens.probs[-1], top.values, rtol=1e-5, atol=0)
    torch.testing.assert_close(lens.final_prob[-1], top.values[:, 0], rtol=1e-5, atol=0)


def test_each_row_equals_the_model_cut_after_that_layer(model):
    prep = prep_for(model)
    lens = logit_lens(model, prep, k=3)
    assert lens.layers == [EMBEDDINGS, *range(model.cfg.n_layers)]
    for keep in range(model.cfg.n_layers + 1):  # 0 layers: the embeddings read out directly
        cut = copy.deepcopy(model)
        cut.decoder.layers = cut.decoder.layers[:keep]
        probs = torch.softmax(run(cut, prep.src_ids, prep.tgt_ids)[0].float(), -1)  # (T, vocab)
        top = torch.topk(probs, 3)
        assert torch.equal(lens.ids[keep], top.indices), keep
        assert torch.allclose(lens.probs[keep], top.values, atol=1e-6)


def test_table_has_one_row_per_layer_position_and_rank():
    model = build_model(preset("tiny-gpt"), "cpu")
    lens = logit_lens(model, prepare(model, TEXT), k=2)
    T = len(lens.labels)
    rows = lens.table()
    assert len(rows) == (model.cfg.n_layers + 1) * T * 2
    assert rows[0]["layer"] == EMBEDDINGS and rows[0]["rank"] == 1 and rows[1]["rank"] == 2
    assert all(0 <= r["prob"] <= 1 for r in rows)
    assert lens.arrays()["ids"].shape == (model.cfg.n_layers + 1, T, 2)


def test_a_trace_without_the_residual_is_refused_and_k_is_checked():
    model = build_model(preset("tiny-gpt"), "cpu")
    _, trace = trace_text(model, TEXT, names=lambda n: n.endswith("hook_weights"))
    with pytest.raises(InputError) as err:
        lens_from_trace(model, trace)
    assert err.value.code == "trace_missing"
    with pytest.raises(InputError) as err:
        logit_lens(model, prepare(model, TEXT), k=0)
    assert err.value.code == "analysis_top"


def test_settled_rows_is_the_first_row_from_which_the_final_top_token_stays_on_top(model):
    lens = logit_lens(model, prep_for(model), k=3)
    top = lens.ids[:, :, 0]  # (R, T)
    expected = []
    for p in range(top.size(1)):  # by hand: walk up from the last row while the top token is the final one
        row = top.size(0) - 1
        while row > 0 and top[row - 1, p] == top[-1, p]:
            row -= 1
        expected.append(row)
    assert lens.settled_rows().tolist() == expected
    made = dataclasses.replace(lens, ids=torch.tensor([[[1], [2], [3]], [[5], [2], [3]], [[1], [2], [4]],
                                                      [[1], [9], [4]]]), layers=[EMBEDDINGS, 0, 1, 2])
    assert made.settled_rows().tolist() == [2, 3, 2]  # a top token that leaves and comes back counts from its return


def test_a_window_of_positions_reads_each_position_as_the_whole_lens_does(model):
    """The Lens page reads only the positions it draws: every field of the window equals the whole lens's columns
    (the logit lens and the tuned lens alike), the KL and ranks included."""
    from transformer_core.analysis import tuned_lens

    prep, trace = trace_text(model, "one two three four five six seven eight nine ten",
                             "= a b c d e f" if model.is_encoder_decoder else None)
    whole, part = lens_from_trace(model, trace, 3), lens_from_trace(model, trace, 3, window=(2, 5))
    assert part.first == 2 and part.labels == whole.labels[2:5] and part.ids.shape[1] == 3
    for name in ("ids", "final_rank"):
        assert torch.equal(getattr(part, name), getattr(whole, name)[:, 2:5]), name
    for name in ("probs", "final_prob", "kl"):
        torch.testing.assert_close(getattr(part, name), getattr(whole, name)[:, 2:5], rtol=1e-5, atol=1e-6)
    assert part.tokens == [[row[p] for p in range(2, 5)] for row in whole.tokens]
    T = len(whole.labels)
    assert lens_from_trace(model, trace, 3, window=(0, T)) is whole  # the whole text is the whole lens
    for bad in ((3, 3), (-1, 2), (0, T + 1)):
        with pytest.raises(InputError) as err:
            lens_from_trace(model, trace, 3, window=bad)
        assert err.value.code == "dla_range"
    tr = tuned_lens.for_model(model)
    torch.testing.assert_close(tuned_lens.tuned_lens_from_trace(model, trace, tr, 3, window=(2, 5)).kl,
                               tuned_lens.tuned_lens_from_trace(model, trace, tr, 3).kl[:, 2:5], rtol=1e-5, atol=1e-6)
