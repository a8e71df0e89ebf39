"""Logit lens page through the real app: the last row is the model's own prediction, the other rows equal the
residual stream read out by hand, the table follows the chosen position; bad input and Chinese."""
import numpy as np
import pytest
import torch

from harness.apptest import (
    EN,
    ENGLISH_ONLY,
    SMALL,
    array,
    assert_clean,
    figure,
    harness_language,
    messages,
    open_app,
    open_export,
    shown_texts,
)
from transformer_core import act_name, load_model, prepare, run, run_with_trace, token_labels
from transformer_core.errors import message
from ui.figures import token_heatmap, visible

PAGE = "lens"


def heat(at) -> dict:
    return figure(at, "lens_heat")["data"][0]


def position_table(at):
    return next(d.value for d in at.dataframe if EN["lens_col_rank"] in d.value.columns)


def by_hand(model, prep) -> list[torch.Tensor]:
    """(T, vocab) softmax of the residual stream after the embeddings and after each decoder layer, read out
    through the output layer (the shipped models have no final norm), computed here with the public API."""
    cross = model.is_encoder_decoder
    names = [act_name("embed", side="decoder")] + [act_name("addnorm_out", layer=i, block="dec_ffn", cross=cross)
                                                  for i in range(model.cfg.n_layers)]
    _, trace = run_with_trace(model, prep.src_ids, prep.tgt_ids, names=names)
    assert not model.cfg.final_norm
    with torch.inference_mode():
        return [torch.softmax(model.out(trace[n][0]).double(), dim=-1) for n in names]


@pytest.mark.parametrize("key, text, tgt", [("repeat", "d a c b g f d a c", None), ("reverse", "d a c b", "= b c a")])
def test_rows_equal_the_residual_stream_read_out_and_the_last_row_is_the_models_own_prediction(key, text, tgt):
    at = open_app(PAGE, model=f"shipped:{key}", text=text, lang="en", **({"tgt": tgt} if tgt else {}))
    assert_clean(at)
    model, _ = load_model(key)
    prep = prepare(model, text, tgt)
    own = torch.softmax(run(model, prep.src_ids, prep.tgt_ids)[0].double(), dim=-1)  # (T, vocab)
    top = own.argmax(-1)  # (T,)
    rows = by_hand(model, prep)
    torch.testing.assert_close(rows[-1], own)  # the lens of the last layer is exactly the model's own output
    z, cells = array(heat(at)["z"]), heat(at)["text"]
    assert z.shape == (model.cfg.n_layers + 1, top.numel())
    expected = np.stack([r.gather(-1, top[:, None])[:, 0].numpy() for r in rows])  # p of the final answer
    np.testing.assert_allclose(z, expected, atol=1e-5)
    assert cells[-1] == [visible(x) for x in token_labels(model, top.tolist())]
    assert cells[1] == [visible(x) for x in token_labels(model, rows[1].argmax(-1).tolist())]
    df = position_table(at)  # the last position by default: every row's top 5
    last = df[df[EN["lens_col_layer"]] == EN["lens_row_layer"].format(layer=model.cfg.n_layers - 1)]
    best = torch.topk(own[-1], 5)
    assert list(last[EN["lens_col_token"]]) == [visible(x) for x in token_labels(model, best.indices.tolist())]
    np.testing.assert_allclose(last[EN["lens_col_prob"]], best.values.numpy(), atol=1e-6)


def test_picking_a_position_and_k_changes_the_table():
    at = open_app(PAGE, model="shipped:repeat", text="d a c b g f d a c", lang="en")
    model, _ = load_model("repeat")
    prep = prepare(model, "d a c b g f d a c")
    rows = by_hand(model, prep)
    at.selectbox(key="lens_pos_9").set_value(6).run()
    at.slider(key="lens_k").set_value(3).run()
    assert_clean(at)
    df = position_table(at)
    assert len(df) == 3 * (model.cfg.n_layers + 1)
    first = df[df[EN["lens_col_layer"]] == EN["lens_row_layer"].format(layer=0)]
    best = torch.topk(rows[1][6], 3)
    np.testing.assert_allclose(first[EN["lens_col_prob"]], best.values.numpy(), atol=1e-6)
    text = " ".join(m.value for m in at.markdown)
    assert "‘␣a’" in text and EN["lens_row_layer"].format(layer=1) in text  # the copy forms after layer 1


def test_the_notebook_snippet_recomputes_the_heatmap():
    at = open_app(PAGE, model="shipped:reverse", text="d a c b", tgt="= b c a", lang="en")
    code = open_export(at, "logit_lens").code[0].value
    assert "logit_lens(model, prep, k=5)" in code and "load_model('reverse')" in code
    scope: dict = {}
    exec(code, scope)
    np.testing.assert_allclose(scope["arrays"]["final_prob"], array(heat(at)["z"]), atol=1e-6)


def test_random_init_preset_with_eight_layers_renders():
    at = open_app(PAGE, model=SMALL, lang="en")
    assert_clean(at)
    assert array(heat(at)["z"]).shape == (9, 13)  # embeddings + 8 layers, the course sentence's 13 tokens
    assert heat(at)["zmin"] == 0 and heat(at)["zmax"] == 1


def test_a_model_the_attribution_cannot_split_gets_its_message_without_an_intro_to_bars_never_drawn():
    """On the course's post-norm encoder-decoder the section said "the chosen token's logit splits exactly into one
    share per part. Bars above zero…" and then that direct logit attribution needs a pre-norm decoder."""
    at = open_app(PAGE, model=SMALL, lang="en")
    words = " ".join(m.value for m in at.markdown) + " " + " ".join(c.value for c in at.caption)
    assert message("dla_post_norm", "en") in messages(at)
    assert EN["dla_intro_plain"] not in words and EN["dla_intro_norm"] not in words
    assert EN["dla_answer"].split("{", 1)[0] not in words


def test_bad_inputs_give_messages_not_tracebacks():
    at = open_app(PAGE, model=SMALL, lang="en")
    for text in ("", "<|endoftext|>", "<script>alert(1)</script>", "同志们!我踩着地雷了 " * 10_000, "x"):
        at.sidebar.text_area(key="text").set_value(text).run()
        assert not at.exception, text[:20]
        assert not at.error, text[:20]
    assert array(heat(at)["z"]).shape == (9, 1)  # one token still has a prediction after it
    at.sidebar.text_area(key="text").set_value("").run()
    assert EN["err.empty_input"] in messages(at)


def test_chinese_page_has_no_english_labels():
    with harness_language("zh"):
        at = open_app(PAGE, model="shipped:reverse", lang="zh")
        assert_clean(at)
        assert at.title[0].value == "Logit 透镜"
        assert not [s for s in shown_texts(at) if s in ENGLISH_ONLY]


def test_what_to_look_for_counts_where_this_texts_answers_settle():
    at = open_app(PAGE, model="shipped:repeat", text="d a c b g f d a c", lang="en")
    assert_clean(at)
    model, _ = load_model("repeat")
    rows = by_hand(model, prepare(model, "d a c b g f d a c"))
    top = torch.stack([r.argmax(-1) for r in rows])  # (R, T) each row's top token
    final = top[-1]
    settled = [max([0] + [r + 1 for r in range(len(rows)) if top[r, p] != final[p]]) for p in range(final.numel())]
    names = [EN["lens_row_embed"]] + [EN["lens_row_layer"].format(layer=i) for i in range(model.cfg.n_layers)]
    where = "; ".join(EN["look_lens_at_one" if settled.count(r) == 1 else "look_lens_at"].format(
        row=names[r], n=settled.count(r)) for r in range(len(rows)) if settled.count(r))
    rise = " → ".join(f"{float(r.gather(-1, final[:, None]).mean()):.2f}" for r in rows)
    look = [m for m in messages(at) if m.startswith("What to look for")]
    assert look == [EN["look_lens"].format(scope=EN["look_lens_scope_all"], where=where, rise=rise)]
    assert "reverse" not in look[0]  # about the model shown, not the toy models


def test_the_rank_chart_ticks_in_one_two_five_steps_up_to_the_worst_rank():
    """A log axis with plotly's own ticks printed 2 … 9 on top of each other between 1 and 10."""
    at = open_app("lens", model="shipped:everyday-gpt", text="今天天气很好，我们去公园散步吧。")
    assert not at.exception, at.exception
    spec = figure(at, "lens_rank")
    ranks = array(spec["data"][0]["y"])
    axis = spec["layout"]["yaxis"]
    assert axis["type"] == "log" and axis["tickmode"] == "array"
    assert set(axis["tickvals"]) <= {m * 10**e for m in (1, 2, 5) for e in range(6)} and 1 in axis["tickvals"]
    assert max(axis["tickvals"]) <= max(2, ranks.max()) and axis["ticktext"] == [f"{v:,}" for v in axis["tickvals"]]


@pytest.mark.parametrize("model, norm, llama", [("shipped:everyday-gpt", None, False),
                                                ("shipped:modern-gpt", None, True),
                                                ("preset:course-gpt-modern@cl100k_base", "RMSNorm", False)])
def test_the_formula_and_the_words_name_a_final_norm_only_where_the_model_has_one(model, norm, llama):
    """Neither shipped decoder has a final norm: the page said "the final norm" in its formula and its text, then
    "This model has no final norm". modern-gpt, shown with Llama's parts, says that unlike Llama it has none."""
    at = open_app(PAGE, model=model, lang="en")
    assert_clean(at)
    loaded = at.session_state["model"]
    words = " ".join(m.value for m in at.markdown) + " " + " ".join(c.value for c in at.caption)
    formulas = " ".join(x.value for x in at.latex)
    if norm is None:
        assert EN["lens_intro_plain"] in words and EN["dla_intro_plain"] in words
        assert "norm" not in formulas.replace("\\mathrm{FFN}", "")
        assert "the final norm" not in words and EN["dla_scale_none"] in words
    else:
        assert EN["lens_intro_norm"] in words and EN["dla_intro_norm"] in words
        assert formulas.count(f"\\mathrm{{{norm}}}") == 2
    assert (EN["lens_unlike_llama"] in words) == llama, loaded


def test_an_answer_typed_outside_the_top_10_is_followed_by_its_first_token_in_the_row_and_the_attribution():
    from transformer_core import trace_text
    from transformer_core.analysis.answers import answer_of_text
    from transformer_core.analysis.attribution import direct_logit_attribution
    from transformer_core.analysis.logit_lens import answer_row

    text = "When Mabel and Amos went to the store, Amos gave a drink to"
    at = open_app(PAGE, model="shipped:everyday-gpt", text=text, lang="en")
    assert "‘␣Mabel’" not in at.selectbox(key="lens_answer").options
    at.selectbox(key="lens_answer").set_value(-1).run()
    at.text_input(key="lens_answer_text").input(" Mabel").run()
    assert_clean(at)
    model, _ = load_model("everyday-gpt")
    _, trace = trace_text(model, text)
    pos = trace.decoder_ids.numel() - 1
    row = answer_row(model, trace, pos, " Mabel")
    assert row.token == answer_of_text(model, " Mabel").first  # ' M', its first of two tokens
    df = next(d.value for d in at.dataframe if EN["lens_answer_col_logit"] in d.value.columns)
    np.testing.assert_allclose(df[EN["lens_answer_col_prob"]], row.probs, rtol=1e-4, atol=1e-7)
    assert df[EN["lens_answer_col_rank"]].tolist() == row.ranks.tolist()
    assert array(figure(at, "lens_rank")["data"][0]["y"]).tolist() == row.ranks.tolist()
    assert any(EN["lens_answer_first"].format(tok="␣M", n=2) == c.value for c in at.caption)
    bars = figure(at, "dla_bars")["data"]
    total = sum(np.sum(b["y"]) for b in bars if b["type"] == "bar")
    assert total == pytest.approx(direct_logit_attribution(model, trace, pos, row.token).logit, abs=1e-3)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_tuned_lens_sits_beside_the_logit_lens_with_both_kl_lines(lang):
    """The default ships a tuned lens: the KL chart draws both lenses (each recomputed here), and picking the tuned
    lens redraws the heatmap from the translated rows; the card's held-out figures are quoted."""
    from transformer_core.analysis.logit_lens import lens_from_trace
    from transformer_core.analysis.tuned_lens import load, shipped_folder, tuned_lens_from_trace
    from transformer_core.text.inputs import trace_text
    from ui.i18n import strings

    text = "The children walked to school in the rain. 孩子们冒雨走到学校。"
    with harness_language(lang):
        at = open_app(PAGE, model="shipped:everyday-gpt", text=text, lang=lang)
    assert_clean(at)
    model, _ = load_model("everyday-gpt")
    _, trace = trace_text(model, text)
    plain = lens_from_trace(model, trace, 5)
    tuned = tuned_lens_from_trace(model, trace, load(shipped_folder("everyday-gpt"), model), 5)
    pos = trace.src_ids.size(1) - 1
    lines = {d["name"]: array(d["y"]) for d in figure(at, "lens_kl")["data"]}
    names = strings()
    assert np.abs(lines[names["lens_which_logit"][lang]] - plain.kl[:, pos].numpy()).max() < 1e-4
    assert np.abs(lines[names["lens_which_tuned"][lang]] - tuned.kl[:, pos].numpy()).max() < 1e-4
    assert any(("tuned lens" if lang == "en" else "调校透镜") in c.value for c in at.caption)
    with harness_language(lang):  # the radio's labels are written in the page's language
        at.radio(key="lens_which").set_value("tuned").run()
    assert_clean(at)
    z = array(heat(at)["z"])  # each row's probability of the model's final token, now through the translators
    np.testing.assert_allclose(z, tuned.final_prob.numpy()[:, -z.shape[1]:], atol=1e-4)
    # the answer's row below follows the lens picked: each layer's probability of the final token, translated
    row = next(d.value for d in at.dataframe if names["lens_answer_col_rank"][lang] in d.value.columns)
    np.testing.assert_allclose(row[names["lens_answer_col_prob"][lang]], tuned.final_prob[:, pos].numpy(), rtol=1e-4)
    assert list(row[names["lens_answer_col_rank"][lang]]) == tuned.final_rank[:, pos].tolist()
    lines = {d["name"]: array(d["y"]) for d in figure(at, "lens_kl")["data"]}  # the logit lens read at pos alone now
    assert np.abs(lines[names["lens_which_logit"][lang]] - plain.kl[:, pos].numpy()).max() < 1e-4
    assert np.abs(lines[names["lens_which_tuned"][lang]] - tuned.kl[:, pos].numpy()).max() < 1e-4


def test_a_long_text_reads_the_window_it_draws_and_every_position_when_the_table_of_all_is_opened(monkeypatch):
    """Past 48 tokens the heatmap shows a window round the chosen position and the page reads only that window
    through the output layer (the tuned lens, not drawn, only at the chosen position: its KL line); its numbers are
    the whole lens's (the notebook snippet's), and the table of every position, built when opened, has them all."""
    from transformer_core.analysis import tuned_lens

    windows, lens = [], tuned_lens._lens

    def recorded(*args):
        windows.append(args[-1])
        return lens(*args)

    monkeypatch.setattr(tuned_lens, "_lens", recorded)
    text = " ".join(["The river ran past the old mill and on towards the grey sea."] * 5)
    at = open_app(PAGE, model="shipped:everyday-gpt", text=text, lang="en")
    assert_clean(at)
    n = len(prepare(load_model("everyday-gpt")[0], text).src.tokens)
    assert windows == [(n - 1, n)]  # the tuned lens read at the last position alone
    scope: dict = {}
    exec(open_export(at, "logit_lens").code[0].value, scope)
    whole = scope["arrays"]["final_prob"]  # (R, T): the whole text's lens, recomputed by the snippet
    T = whole.shape[1]
    assert T > 48 and array(heat(at)["z"]).shape == (whole.shape[0], 48)
    np.testing.assert_allclose(array(heat(at)["z"]), whole[:, T - 48:], atol=1e-6)  # the last position chosen
    assert not any(EN["lens_col_final"] in d.value.columns for d in at.dataframe)  # not built while closed
    scope = EN["look_lens_scope_window"].format(n=48, lo=T - 48, hi=T - 1, total=T)  # the hint counts the window
    assert any(m.startswith("What to look for") and scope in m for m in messages(at))
    at.session_state["lens_all_open"] = True
    at.run()
    table = next(d.value for d in at.dataframe if EN["lens_col_final"] in d.value.columns)
    assert len(table) == whole.size
    np.testing.assert_allclose(table[EN["lens_col_final"]], whole.ravel(), atol=1e-6)
    at.selectbox(key=f"lens_pos_{T}").set_value(3).run()  # near the start: the window is the first 48
    assert_clean(at)
    np.testing.assert_allclose(array(heat(at)["z"]), whole[:, :48], atol=1e-6)


def test_cell_words_that_would_overlap_on_a_phone_are_left_out_there_with_a_line_that_says_so():
    """At 420 px the lens wrote thirteen tokens into cells 17 px wide, each over the next. Where the words would run
    into each other on a phone, the page hides them there (CSS for the chart's element, narrow windows only) and says
    a tap reads a cell; a short text's words fit and stay, with no such line."""
    from ui.widgets import crowded_cells

    long = "The weather was nice, so we walked to the park after lunch."
    for text, crowded in ((long, True), ("The cat sat", False)):
        at = open_app(PAGE, model="shipped:everyday-gpt", text=text, lang="en")
        assert not at.exception
        rule = ".stMain .st-key-lens_heat .heatmap-label{display:none}"
        assert any(rule in h.value for h in at.html) == crowded, text
        assert any(EN["phone_cells"] in h.value for h in at.html) == crowded
    fig = token_heatmap(np.zeros((2, 13)), ["row 0", "row 1"], [f"t{i}" for i in range(13)])
    fig.update_traces(text=[["␣walked"] * 13] * 2, texttemplate="%{text}", textfont={"size": 11})
    assert crowded_cells(fig)  # 13 × 54 px against about 280
    fig.update_traces(text=[["a"] * 13] * 2)
    assert not crowded_cells(fig)  # 13 × 10 px fits
