"""Information-flow page through the real app: the table's edges and shares are the core's routes recomputed from a
trace of the test's own; the threshold prunes; Chinese shows no English; an encoder-decoder gets a message."""
import re

import numpy as np

from harness.apptest import EN, ENGLISH_ONLY, assert_clean, figure, harness_language, messages, open_app, shown_texts
from transformer_core import load_model, trace_text
from transformer_core.analysis.flow import information_flow

PAGE = "flow"
CAT = "The cat sat on the mat. The cat sat on the"


def edge_table(at):
    return next(d.value for d in at.dataframe if EN["flow_col_share"] in d.value.columns)


def test_the_table_and_the_graph_are_the_routes_of_the_model_s_own_flow():
    at = open_app(PAGE, model="shipped:everyday-gpt", text=CAT, lang="en")
    assert_clean(at)
    model, _ = load_model("everyday-gpt")
    prep, trace = trace_text(model, CAT)
    T = prep.src_ids.size(1)
    edges = [e for e in information_flow(model, trace).routes(0.04) if e.kind != "residual"]
    table = edge_table(at)
    assert len(table) == len(edges)
    np.testing.assert_allclose(sorted(table[EN["flow_col_share"]]), sorted(e.share for e in edges), atol=1e-6)
    row = table[(table[EN["flow_col_layer"]] == 2) & (table[EN["flow_col_from"]] == "5 ‘␣m’")
                & (table[EN["flow_col_to"]] == f"{T - 1} ‘␣the’")]
    assert len(row) == 1 and row[EN["flow_col_share"]].iloc[0] > 0.08 and "H7" in row[EN["flow_col_heads"]].iloc[0]
    clickable = next(d for d in figure(at, f"flow_graph_{T - 1}_0")["data"] if d.get("name") == "edges")
    assert len(clickable["customdata"]) == len(edges)  # one dot per attention edge and FFN

    at.slider(key="flow_threshold").set_value(0.2).run()
    assert_clean(at)
    assert 0 < len(edge_table(at)) < len(table)
    assert (edge_table(at)[EN["flow_col_share"]] >= 0.2).all()


def test_chinese_page_shows_no_english_and_an_encoder_decoder_gets_a_message():
    with harness_language("zh"):
        at = open_app(PAGE, model="shipped:everyday-gpt", text="我们明天早上去公园，然后我们去吃饭。", lang="zh")
        assert_clean(at)
        left = [s for s in shown_texts(at) if s in ENGLISH_ONLY]
        assert not left, left
        assert [r"\text{份额}(p) =" in f.value for f in at.latex] == [True]  # the prose's word, not "share"
    at = open_app(PAGE, model="shipped:reverse", text="d a c b", tgt="= b c a", lang="en")
    assert_clean(at)
    assert EN["err.flow_decoder_only"] in messages(at)


def test_the_try_caption_s_figures_are_the_routes_of_the_models_it_names():
    """The caption's experiments quote shares and heads: recomputed here from the models' own flow, in both languages
    (a model trained again changes them)."""
    from ui.i18n import strings

    ioi = "When Mary and John went to the store, John gave a drink to"
    quoted = []
    for name, text, edges in (("everyday-gpt", CAT, [(2, 5, 12), (0, 4, 5)]),
                              ("name-movers", ioi, [(2, 1, 13), (2, 9, 13)])):
        model, _ = load_model(name)
        _, trace = trace_text(model, text)
        routes = {(e.layer, e.source[2], e.target[2]): e for e in information_flow(model, trace).routes()
                  if e.kind == "attention"}
        flow = information_flow(model, trace)
        for key in edges:
            e = routes[key]
            per_head = flow.heads[e.layer, :, e.target[2], e.source[2]]
            quoted.append((f"{e.share:.2f}", [int(h) for h in np.argsort(-per_head)]))  # as the table's heads column
    for caption in strings()["try_flow"].values():
        shares = [s for s, _ in quoted]
        assert [s for s in shares if s in caption] == shares, (caption, quoted)
        for share, heads in quoted:  # each share is followed by its edge's heads, the largest first (the table's)
            after = caption[caption.index(share) + len(share):]
            named = [int(h) for h in re.findall(r"\d+", after[:after.find("）") if "）" in after else after.find(")")])]
            assert named and named == heads[:len(named)], (share, heads, caption)


def test_the_summary_names_the_strongest_edge_into_the_predicting_token_and_says_so():
    """It said "The strongest attention edge: layer 1, ‘␣on’ → ‘␣the’, share 0.169" above a table whose first
    attention edge had 0.325 (into another token): the edge it names is the strongest into the token that predicts."""
    at = open_app(PAGE, model="shipped:everyday-gpt", text=CAT, lang="en")
    assert_clean(at)
    model, _ = load_model("everyday-gpt")
    _, trace = trace_text(model, CAT)
    last = trace.src_ids.size(1) - 1
    attention = [e for e in information_flow(model, trace).routes(0.04, last) if e.kind == "attention"]
    best = max((e for e in attention if e.target[2] == last), key=lambda e: e.share)
    assert max(e.share for e in attention) > best.share  # the case: a stronger edge elsewhere
    said = next(m.value for m in at.markdown if m.value.startswith("Kept:"))
    assert f"into ‘␣the’, the token that predicts: layer {best.layer}" in said and f"share {best.share:.3f}" in said
