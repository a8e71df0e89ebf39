"""Head detector: the score definitions on handmade patterns and against plain loops, the random repeated
sequence, labels and the threshold, and the shipped models' heads (repeat copies, reverse reads backwards)."""
import numpy as np
import pytest
import torch

from transformer_core import PRESETS, InputError, build_model, load_model, param_counts, prepare, preset, trace_text
from transformer_core.analysis.heads import (
    THRESHOLD,
    HeadRecord,
    anti_diagonal,
    detect_heads,
    diagonal,
    first_token,
    induction,
    induction_batch,
    induction_scores,
    label,
    previous_token,
    self_token,
    vocab_ids,
)


def one_hot_rows(keys: list[int], T: int) -> torch.Tensor:
    """(1, 1, len(keys), T): row i puts all its weight on keys[i]."""
    w = torch.zeros(1, 1, len(keys), T)
    w[0, 0, torch.arange(len(keys)), torch.tensor(keys)] = 1.0
    return w


def test_handmade_patterns_score_one_on_their_own_pattern():
    T = 6
    prev = one_hot_rows([0] + list(range(T - 1)), T)  # query i looks at i - 1
    assert previous_token(prev).item() == 1.0 and self_token(prev).item() == 0.0
    assert first_token(prev).item() == pytest.approx(1 / (T - 1))  # only query 1's previous token is key 0
    sink = one_hot_rows([0] * T, T)
    assert first_token(sink).item() == 1.0 and previous_token(sink).item() == pytest.approx(1 / (T - 1))
    assert self_token(one_hot_rows(list(range(T)), T)).item() == 1.0
    L = 4
    ind = one_hot_rows([0] * L + [j + 1 for j in range(L)], 2 * L)  # query L + j looks at key j + 1
    assert induction(ind, L).item() == 1.0
    cross = one_hot_rows([3, 2, 1], 4)  # 3 decoder queries over 4 source keys, read backwards
    assert anti_diagonal(cross).item() == 1.0 and diagonal(cross).item() == 0.0
    assert diagonal(one_hot_rows([0, 1, 2], 5)).item() == 1.0


def test_scores_equal_plain_loops_on_random_weights():
    torch.manual_seed(0)
    B, nh, T, L = 3, 2, 8, 4
    w = torch.softmax(torch.randn(B, nh, T, T), -1)
    for h in range(nh):
        loops = {
            "previous_token": np.mean([np.mean([float(w[b, h, i, i - 1]) for i in range(1, T)]) for b in range(B)]),
            "first_token": np.mean([np.mean([float(w[b, h, i, 0]) for i in range(1, T)]) for b in range(B)]),
            "self": np.mean([np.mean([float(w[b, h, i, i]) for i in range(1, T)]) for b in range(B)]),
            "induction": np.mean([np.mean([float(w[b, h, L + j, j + 1]) for j in range(L - 1)]) for b in range(B)]),
        }
        got = {"previous_token": previous_token(w), "first_token": first_token(w), "self": self_token(w),
               "induction": induction(w, L)}
        for k, v in loops.items():
            assert float(got[k][h]) == pytest.approx(v, abs=1e-6), k
    wc = torch.softmax(torch.randn(B, nh, 3, 5), -1)  # cross: Tq = 3 decoder queries, Tk = 5 source keys
    assert float(anti_diagonal(wc)[1]) == pytest.approx(np.mean([[float(wc[b, 1, i, 4 - i]) for i in range(3)]
                                                                for b in range(B)]), abs=1e-6)
    assert float(first_token(wc, from_query=0)[0]) == pytest.approx(float(wc[:, 0, :, 0].mean()), abs=1e-6)


def test_undefined_scores_are_nan_not_errors():
    assert torch.isnan(previous_token(torch.ones(1, 2, 1, 1))).all()


def test_induction_batch_is_the_cards_random_sequence():
    ids = np.arange(10, 40)
    got = induction_batch(ids, 5, 3, seed=7)
    r = np.random.default_rng(7).choice(ids, size=(3, 5))
    assert got.tolist() == np.concatenate([r, r], 1).tolist()


def test_vocab_ids_leave_out_unknown_and_special_tokens():
    compact = build_model(preset("tiny-gpt", vocab_size=4, vocab_map=(5, -1, 7, 9)), "cpu")
    assert vocab_ids(compact).tolist() == [0, 2, 3]
    ids = vocab_ids(build_model(preset("tiny-gpt"), "cpu"))
    assert ids[-1] == 100255  # cl100k's last ordinary token; 100257.. are special


def test_label_is_the_strongest_pattern_above_the_threshold():
    assert label({"previous_token": 0.7, "self": 0.8, "first_token": None}) == "self"
    assert label({"previous_token": 0.45, "self": 0.3}) is None
    assert label({"previous_token": 0.45}, threshold=0.4) == "previous_token"
    assert THRESHOLD == 0.5


def test_detect_heads_on_a_tiny_model_matches_its_trace():
    model = build_model(preset("tiny"), "cpu")
    prep, trace = trace_text(model, "d a c b", "= b c a")
    records = detect_heads(model, prep, length=5, count=2)
    assert len(records) == 3 * model.cfg.n_layers * model.cfg.n_heads
    assert [r.kind for r in records[:4]] == ["enc_self"] * 4 and records[-1].kind == "cross"
    for r in records:
        w = trace.attention(r.kind, r.layer).weights
        if r.kind == "cross":
            assert r.scores["anti_diagonal"] == pytest.approx(float(anti_diagonal(w)[r.head]), abs=1e-4)
            assert set(r.scores) == {"first_token", "diagonal", "anti_diagonal"}
        else:
            assert r.scores["previous_token"] == pytest.approx(float(previous_token(w)[r.head]), abs=1e-4)
            assert 0 <= r.scores["induction"] <= 1
        assert r.label == label(r.scores) and r.labels == ((r.label,) if r.label else ())
    assert isinstance(sorted(records, key=lambda r: -r.strength)[0], HeadRecord)
    assert set(records[0].row()) >= {"kind", "layer", "head", "previous_token", "label"}


def test_one_rule_labels_a_head_by_its_highest_score_above_the_threshold_probe_included():
    """Every page and the model card label a head by analysis.heads.label: its highest score above the threshold
    among all measured for it, induction (on the probe) included (the card once left induction out, so
    everyday-gpt's induction heads read "—" on the card and "induction" on the Attention page)."""
    scores = {"previous_token": 0.02, "first_token": 0.01, "self": 0.906, "induction": 0.86}
    r = HeadRecord("dec_self", 1, 3, scores, label(scores))
    assert r.label == "self" and r.labels == ("self",) and r.strongest == "self" and r.strength == 0.906
    assert r.best == ("self", 0.906)  # the closest pattern on the text, never the probe's score
    card_row = {"previous_token": 0.012, "first_token": 0.416, "self": 0.011, "induction": 0.987}  # everyday L2H0
    assert label(card_row) == "induction"
    only_probe = {"previous_token": 0.2, "first_token": 0.1, "self": 0.3, "induction": 0.7}
    r = HeadRecord("dec_self", 1, 0, only_probe, label(only_probe))
    assert r.labels == ("induction",) and r.strength == 0.7 and r.best == ("self", 0.3)
    assert label({"self": 0.3, "induction": 0.4}) is None
    r = HeadRecord("dec_self", 0, 0, {"self": 0.3, "induction": 0.4}, None)
    assert r.labels == () and r.strength == 0.0 and r.strongest is None


def test_cross_attention_has_a_diagonal_only_where_its_map_is_square():
    """"Same position" means something only between texts of the same length (copy, reverse): an 8 x 2 map of a
    date's answer over a number's two tokens has no diagonal (the page once said "diagonal (same position) (1.00)")."""
    from transformer_core.analysis.heads import label_block

    tall = torch.zeros(1, 2, 8, 2)
    tall[0, :, :, 0] = 1.0  # every query on key 0: the "diagonal" of its first row would read 1.0 on 2 rows
    tall[0, 1, 1:, 1], tall[0, 1, 1:, 0] = 1.0, 0.0
    records = label_block("cross", 0, tall)
    assert all(set(r.scores) == {"first_token"} for r in records)
    assert records[0].label == "first_token" and records[1].label is None
    square = one_hot_rows([0, 1, 2], 3)
    (r,) = label_block("cross", 0, square)
    assert set(r.scores) == {"first_token", "diagonal", "anti_diagonal"} and r.label == "diagonal"


def test_detect_heads_with_induction_measured_before_gives_the_same_records():
    model = build_model(preset("tiny"), "cpu")
    prep = prepare(model, "d a c b", "= b c a")
    measured = induction_scores(model, 5, 2, 0)  # what a server keeps per model (ui.cache.induction_by_block)
    assert detect_heads(model, prep, length=5, count=2, induction=measured) == detect_heads(model, prep, length=5,
                                                                                            count=2)


def test_the_repeat_model_has_induction_heads_in_layer_1_only():
    model, _ = load_model("repeat")
    scores = induction_scores(model, length=4, count=16)
    assert float(scores["dec_self", 1].max()) > 0.5
    assert float(scores["dec_self", 0].max()) < 0.2


def test_the_reverse_model_reads_the_source_backwards():
    model, _ = load_model("reverse")
    records = detect_heads(model, prepare(model, "d a c b e", "= e b c a"), count=2)
    cross = [r for r in records if r.kind == "cross" and r.layer == 1]
    assert all(r.label == "anti_diagonal" for r in cross)


@pytest.mark.parametrize("kwargs, code", [({"length": 1}, "heads_length"), ({"length": 33}, "heads_length"),
                                          ({"count": 0}, "heads_count"), ({"threshold": 1.5}, "analysis_fraction")])
def test_bad_settings_are_refused_with_a_code(kwargs, code):
    model = build_model(preset("tiny-gpt"), "cpu")
    with pytest.raises(InputError) as err:
        detect_heads(model, prepare(model, "a b"), **kwargs)
    assert err.value.code == code and "{" not in err.value.text("zh")


def test_a_big_model_reads_fewer_probe_sequences(monkeypatch):
    """The probe reads PROBE_COUNT sequences (every shipped model: its card's number), fewer where that would cost
    more than PROBE_FLOPS, never fewer than MIN_PROBE_COUNT; induction_scores and detect_heads use that count."""
    from transformer_core.analysis import heads

    model = build_model(PRESETS["tiny"])
    assert heads.probe_count(model) == heads.PROBE_COUNT
    blocks = sum(n for c, n in param_counts(model).items() if c in ("attention", "ffn", "norms"))
    per_sequence = 4 * blocks * heads.default_length(model)
    monkeypatch.setattr(heads, "PROBE_FLOPS", 6 * per_sequence)  # as if the model were big: six fit
    assert heads.probe_count(model) == 6
    seen = []
    real = heads.induction_batch
    monkeypatch.setattr(heads, "induction_batch", lambda ids, length, count, seed=0: seen.append(count) or real(
        ids, length, count, seed))
    heads.induction_scores(model)
    assert seen == [6]
    monkeypatch.setattr(heads, "PROBE_FLOPS", 1.0)
    assert heads.probe_count(model) == heads.MIN_PROBE_COUNT


def test_the_translator_s_date_fields_score_is_its_alignment_table_s_share_of_hits():
    """dates-zh's cross-attention: a head's `fields` score and verdict come from the same rows as the Attention
    page's alignment table (it once said "no single clear pattern" beside a table aligning 4 of 4 fields)."""
    from transformer_core.analysis.alignment import prep_rows
    from transformer_core.analysis.heads import label_block

    model, _ = load_model("dates-zh")
    prep, trace = trace_text(model, "23 November 2026", "=2026年11月23日")
    for layer in range(model.cfg.n_layers):
        w = trace.attention("cross", layer).weights  # (1, nh, Tt, Ts): not square, so no diagonal
        assert w.size(-2) != w.size(-1)
        for r in label_block("cross", layer, w, prep=prep):
            rows = prep_rows(prep, w[0, r.head])
            assert rows and r.scores["fields"] == pytest.approx(sum(x["hit"] for x in rows) / len(rows), abs=1e-4)
            assert "diagonal" not in r.scores and "anti_diagonal" not in r.scores
            assert r.label == label(r.scores)
            if sum(x["hit"] for x in rows) == len(rows):
                assert r.label == "fields"  # a head that aligns every field is labelled so, never "no pattern"
    number = prepare(model, "4817", "=四千八百一十七")  # not a date: no fields score
    assert "fields" not in label_block("cross", 0, trace_text(model, "4817", "=四千八百一十七")[1]
                                       .attention("cross", 0).weights, prep=number)[0].scores
