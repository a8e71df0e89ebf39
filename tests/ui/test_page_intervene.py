"""Ablation and patching page through the real app: the loss change and the moved tokens equal ablate() and patch()
called directly, the shared model is left as it was, text B's bad input gives messages, and the page speaks Chinese."""
import json
import re

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
from transformer_core import load_model, prepare, run
from transformer_core.analysis.interventions import ablate, patch
from ui import cache

PAGE = "intervene"
A, B = "d a c b g f d a c", "e h k j e h k"
CROSS_1 = ["cross:1:0", "cross:1:1", "cross:1:2", "cross:1:3"]


def summary(at, which: int = 0):
    return [d.value for d in at.dataframe if EN["iv_col_what"] in d.value.columns][which]


def moved(at, which: int = 0):
    return [d.value for d in at.dataframe if {EN["iv_col_token"], EN["iv_col_change"]} <= set(d.value.columns)][which]


def top_tables(at) -> list:
    """(intact, edited) next-token tables of each section."""
    return [d.value for d in at.dataframe if list(d.value.columns) == [EN["iv_col_token"], EN["iv_col_prob"]]]


def test_ablating_all_layer_1_cross_heads_of_reverse_equals_ablate():
    at = open_app(PAGE, model="shipped:reverse", text="d a c b", tgt="= b c a", lang="en")
    assert_clean(at)
    assert EN["iv_pick_first"] in messages(at)  # nothing switched off yet
    at.multiselect(key="iv_heads_shipped:reverse").set_value(CROSS_1).run()
    assert_clean(at)
    model, _ = load_model("reverse")
    eff = ablate(model, prepare(model, "d a c b", "= b c a"), [("cross", 1, h) for h in range(4)]).effect
    df = summary(at)
    change = df[EN["iv_col_change"]].tolist()
    assert change[0] == pytest.approx(eff.loss_change, abs=1e-6)
    assert df[EN["iv_col_edited"]].tolist()[1] == pytest.approx(eff.top_prob_edited, abs=1e-6)
    assert eff.loss_change > 1.0 and eff.top_prob_edited < 0.5  # what the caption says the shipped model shows
    metric = next(m.value for m in at.metric if m.label == EN["iv_loss_change"])
    assert float(metric) == pytest.approx(eff.loss_change, abs=1e-4)
    np.testing.assert_allclose(moved(at)[EN["iv_col_edited"]], [m[2] for m in eff.moved], atol=1e-6)
    intact, edited = top_tables(at)[:2]  # the ablation section (the patching one follows)
    np.testing.assert_allclose(intact[EN["iv_col_prob"]], eff.intact.raw, atol=1e-6)
    np.testing.assert_allclose(edited[EN["iv_col_prob"]], eff.edited.raw, atol=1e-6)
    assert edited[EN["iv_col_token"]].iloc[0] == "#1 ‘␣d’"  # still the right letter, but far less sure
    bars = figure(at, "iv_ablate")["data"]
    np.testing.assert_allclose(array(bars[0]["x"]), [m[1] for m in eff.moved], atol=1e-6)  # intact
    np.testing.assert_allclose(array(bars[1]["x"]), [m[2] for m in eff.moved], atol=1e-6)  # switched off


def test_mean_ablation_of_an_ffn_equals_ablate_and_the_shared_model_is_unchanged():
    at = open_app(PAGE, model="shipped:reverse", text="d a c b", tgt="= b c a", lang="en")
    model, _ = cache.get_model("shipped:reverse", "cpu")  # the model every session shares
    prep = prepare(model, "d a c b", "= b c a")
    before = run(model, prep.src_ids, prep.tgt_ids).clone()
    at.multiselect(key="iv_ffns_shipped:reverse").set_value(["encoder:0"]).run()
    at.radio(key="iv_mode").set_value("mean").run()
    assert_clean(at)
    eff = ablate(model, prep, ffn_layers=[("encoder", 0)], mode="mean").effect
    assert summary(at)[EN["iv_col_change"]].tolist()[0] == pytest.approx(eff.loss_change, abs=1e-6)
    torch.testing.assert_close(run(model, prep.src_ids, prep.tgt_ids), before, rtol=0, atol=0)
    code = [c.value for c in open_export(at, "ablate").code if "ablate(" in c.value][0]
    assert "ffn_layers=[('encoder', 0)]" in code and "mode='mean'" in code
    scope: dict = {}
    exec(code, scope)  # the page's notebook code recomputes what it shows
    assert float(scope["arrays"]["loss"][1]) == pytest.approx(eff.loss_edited, abs=1e-5)


def test_patching_repeats_layer_1_head_3_from_text_b_equals_patch():
    at = open_app(PAGE, model="shipped:repeat", text=A, lang="en")
    at.text_area(key="iv_text_b").set_value(B).run()
    at.selectbox(key="iv_pt_head_4").set_value(3).run()
    assert_clean(at)
    assert at.selectbox(key="iv_pt_layer_2").value == 1  # the last layer by default
    model, _ = load_model("repeat")
    result = patch(model, prepare(model, A), prepare(model, B), "dec_self", 1, 3)
    metric = next(m for m in at.metric if m.label.startswith("p(‘"))
    assert float(metric.value) == pytest.approx(result.source_top_in_a[1], abs=1e-4)
    assert result.source_top_in_a[1] > 0.5  # B's next letter moves into A: the head carries the copied token
    np.testing.assert_allclose(moved(at, 0)[EN["iv_col_edited"]], [m[2] for m in result.effect.moved], atol=1e-6)
    assert summary(at, 0)[EN["iv_col_edited"]].tolist()[2] == pytest.approx(result.effect.kl, rel=1e-6)
    at.selectbox(key="iv_pt_head_4").set_value(2).run()  # another head of the same layer moves nothing
    assert_clean(at)
    assert patch(model, prepare(model, A), prepare(model, B), "dec_self", 1, 2).source_top_in_a[1] < 0.01


def test_text_b_bad_inputs_give_messages():
    at = open_app(PAGE, model="shipped:repeat", text=A, lang="en")
    at.text_area(key="iv_text_b").set_value("   ").run()
    assert not at.exception and EN["tb_empty"] in messages(at)
    at.text_area(key="iv_text_b").set_value("hello world").run()  # outside the toy model's letters
    assert not at.exception and any("only knows the" in m for m in messages(at))
    at.text_area(key="iv_text_b").set_value("d a c").run()
    at.radio(key="iv_pt_align").set_value("exact").run()  # unequal lengths cannot be patched one to one
    assert not at.exception and any("same length" in m for m in messages(at))
    at.text_area(key="iv_text_b").set_value("x" * 30_000).run()
    assert not at.exception and EN["tb_cut"].format(n="20,000") in [c.value for c in at.caption]
    assert len(at.text_area(key="iv_text_b").value) == 20_000


def test_html_and_long_text_b_on_a_full_vocabulary_model():
    at = open_app(PAGE, model=SMALL, lang="en")
    at.text_area(key="iv_text_b").set_value("<script>alert(1)</script> " * 50).run()
    assert_clean(at)
    assert EN["tb_truncated"].format(n=16) in messages(at)
    assert "<script" not in "".join(h.value for h in at.html)
    assert any(m.label.startswith("p(‘") for m in at.metric)


def test_encoder_decoder_needs_target_b():
    at = open_app(PAGE, model="shipped:reverse", text="d a c b", tgt="= b c a", lang="en")
    assert at.text_area(key="iv_tgt_b").value == "= b c a"
    at.text_area(key="iv_tgt_b").set_value("").run()
    assert not at.exception and EN["tb_tgt_empty"] in messages(at)


def test_chinese_page_has_no_english_labels():
    with harness_language("zh"):
        at = open_app(PAGE, model="shipped:reverse", lang="zh")
        at.multiselect(key="iv_heads_shipped:reverse").set_value(CROSS_1[:2]).run()
        assert_clean(at)
        assert at.title[0].value == "消融与激活修补"
        assert not [s for s in shown_texts(at) if s in ENGLISH_ONLY]


def test_the_try_buttons_load_the_experiments_their_captions_describe():
    at = open_app(PAGE, lang="en")
    at.button(key="try_ablation_0").click().run()
    assert_clean(at)
    assert at.session_state["model"] == "shipped:reverse"
    assert at.multiselect(key="iv_heads_shipped:reverse").value == CROSS_1
    df = summary(at)
    assert round(df[EN["iv_col_change"]].tolist()[0] + df[EN["iv_col_intact"]].tolist()[0], 1) == 1.6  # loss 1.6
    assert round(df[EN["iv_col_edited"]].tolist()[1], 2) == 0.31  # "the top token falls from 1.00 to 0.31"
    at.button(key="try_ablation_1").click().run()
    assert_clean(at)
    assert at.multiselect(key="iv_heads_shipped:repeat").value == ["dec_self:1:3"]
    assert round(summary(at)[EN["iv_col_edited"]].tolist()[1], 2) == 0.05  # "‘ b’ falls from 0.999 to 0.05"
    at.button(key="try_patching_0").click().run()
    assert_clean(at)
    assert (at.text_area(key="iv_text_b").value, at.selectbox(key="iv_pt_head_4").value) == (B, 3)
    metric = next(m for m in at.metric if m.label.startswith("p(‘␣j’ | A)"))  # B's next token, read in A
    lengths = EN["cb_lengths"].format(a=9, b=7, why="")  # B is shorter: the position-wise sweeps say they cannot run
    assert at.selectbox(key="iv_pt_layer_2").value == 1 and messages(at) == [lengths], messages(at)
    assert round(float(metric.value), 2) == 0.66  # "B's next token ‘ j’ goes from 0.000 to 0.66 in A"


def test_picked_heads_have_short_names_that_fit_their_chips():
    at = open_app(PAGE, model="shipped:reverse", text="d a c b", tgt="= b c a", lang="en")
    box = at.multiselect(key="iv_heads_shipped:reverse")
    names = list(box.options)  # as the picker shows them
    assert "cross L1 H3" in names and max(map(len, names)) <= 12
    assert any("L = layer, H = head" in c.value for c in at.caption)


IOI_NAMES = "When Mabel and Amos went to the store, Amos gave a drink to"  # " M|abel", " Am|os": two tokens each here
GPT = "shipped:everyday-gpt"


def type_answer(at, which: str, text: str):
    """Pick "any text…" for answer A or B of the sweep and type `text`."""
    at.selectbox(key=f"he_{which}_{GPT}").set_value(-1).run()
    return at.text_input(key=f"he_{which}_{GPT}_text").input(text).run()


def test_answers_typed_outside_the_top_10_give_the_cores_numbers_on_every_sweep():
    from transformer_core.analysis.answers import answer_of_text, score_answer
    from transformer_core.analysis.corruptions import ioi_corruption
    from transformer_core.analysis.head_effects import head_effects, head_patching, residual_effects

    at = open_app(PAGE, model=GPT, text=IOI_NAMES, lang="en")
    assert_clean(at)
    model, _ = load_model("everyday-gpt")
    quick = at.selectbox(key=f"he_a_{GPT}").options
    assert "‘␣Mabel’" not in quick and "‘␣Amos’" not in quick  # neither name is a quick pick
    assert [at.text_input(key=f"he_{w}_{GPT}_text").value for w in "ab"] == [" Mabel", " Amos"]  # IOI's answers
    assert EN["ans_ioi_default"].format(io="Mabel", s="Amos", a="A", b="B") in [c.value for c in at.caption]
    clean = prepare(model, IOI_NAMES)
    for typed in (" Johnathan", " Mabel"):  # typed, as a learner does
        type_answer(at, "a", typed)
        assert_clean(at)
        captions = [c.value for c in at.caption]
        assert EN["ans_multi_note"] in captions
        scores = next(d.value for d in at.dataframe if EN["ans_col_sum"] in d.value.columns)
        a, jack = score_answer(model, clean, typed), score_answer(model, clean, " Amos")
        np.testing.assert_allclose(scores[EN["ans_col_sum"]], [a.total, jack.total], atol=1e-5)
        effects = head_effects(model, clean, "logit_diff", typed, " Amos")
        assert effects.intact == pytest.approx(a.total - jack.total, abs=1e-5)
        said = next(m.value for m in at.markdown if m.value.startswith("Intact, log p(A) − log p(B) is"))
        assert f"**{effects.intact:.4f}**" in said
        grid_spec = next(json.loads(f.proto.spec) for f in at.get("plotly_chart") if "he_grid" in f.proto.id)
        z = array(grid_spec["data"][0]["z"]).astype(float)
        np.testing.assert_allclose(z[:, :-1], effects.heads["dec_self"], atol=1e-5)
        rows = grid_spec["layout"]["yaxis"]  # one block: named once on the axis, the rows "layer N"
        assert rows["title"]["text"] == EN["hd_kind_gpt_self"]
        assert rows["ticktext"][0] == EN["hd_row_layer"].format(layer=0)
    assert "‘␣Mabel’ = 2 tokens (␣M | abel)." in captions

    # text B: the IOI corruption by default, of the same length, so both sweeps run on request
    corrupted = ioi_corruption(IOI_NAMES)
    assert at.radio(key="iv_b_preset").value == "swap" and at.text_area(key="iv_text_b").value == corrupted
    at.toggle(key="rp_run").set_value(True).run()
    assert_clean(at)
    bad = prepare(model, corrupted)
    grid = residual_effects(model, bad, clean, "logit_diff", " Mabel", " Amos")
    spec = figure(at, "rp_grid")["data"][0]
    np.testing.assert_allclose(array(spec["z"]).astype(float), grid.normalised(), atol=1e-4)
    np.testing.assert_allclose(np.array(spec["customdata"])[..., 0], grid.patched, atol=1e-4)  # raw on hover
    heads = head_patching(model, bad, clean, "logit_diff", " Mabel", " Amos")
    np.testing.assert_allclose(array(figure(at, "hp_grid")["data"][0]["z"]).astype(float), heads.normalised(),
                               atol=1e-4)
    # its rows are the heads of each layer, named as in the knock-out grid (they were "after layer 0", the residual's):
    # "layer 0" under the block's name (on each row, the name took most of a phone's width)
    axis = figure(at, "hp_grid")["layout"]["yaxis"]
    assert (axis["ticktext"][0], axis["title"]["text"]) == (EN["hd_row_layer"].format(layer=0), EN["hd_kind_gpt_self"])
    assert any(f"**{grid.source:.4f}** on the clean text A" in m.value for m in at.markdown)
    code = [c.value for c in open_export(at, "head_patch").code if "head_patching(" in c.value][0]
    assert "' Mabel'" in code and "' Amos'" in code
    scope: dict = {}
    exec(code, scope)  # the notebook code recomputes the grid shown
    np.testing.assert_allclose(scope["arrays"]["normalised"], heads.normalised(), atol=1e-5)
    assert len(answer_of_text(model, " Mabel")) == 2


def test_bad_answers_give_messages_in_the_learners_language():
    at = open_app(PAGE, model=GPT, text="The weather was nice, so we walked to the park and", lang="en")
    at.selectbox(key=f"he_a_{GPT}").set_value(-1).run()
    assert not at.exception and EN["ans_type"] in messages(at)
    for text, shown in [("   ", EN["err.answer_blank"]), ("x" * 2000, EN["err.answer_long"].format(n="2,000", max=200)),
                        (" Mabel", None)]:
        at.text_input(key=f"he_a_{GPT}_text").input(text).run()
        assert not at.exception
        assert shown is None or shown in messages(at), messages(at)
    at.text_input(key=f"he_a_{GPT}_text").input("<|endoftext|>").run()
    assert_clean(at)
    assert any(EN["ans_special"] in c.value for c in at.caption)
    with harness_language("zh"):
        zh = open_app(PAGE, model=GPT, text="今天天气很好，我们去公园散步吧。", lang="zh")
        zh.selectbox(key=f"he_a_{GPT}").set_value(-1).run()
        zh.text_input(key=f"he_a_{GPT}_text").input("   ").run()
        assert not zh.exception and "答案只有空白" in " ".join(messages(zh))


def test_a_swap_of_names_of_different_lengths_says_what_still_works():
    at = open_app(PAGE, model=GPT, text="When Mabel and John went to the store, John gave a drink to", lang="en")
    assert_clean(at)
    assert at.text_area(key="iv_text_b").value == "When Mabel and John went to the store, Mabel gave a drink to"
    note = [m for m in messages(at) if m.startswith("Text A has 15 tokens and text B has 16")]
    assert note and "‘␣John’ = 1 token" in note[0] and "‘␣Mabel’ = 2 tokens" in note[0]
    assert not [f for f in at.get("plotly_chart") if "rp_grid" in f.proto.id]
    at.radio(key="iv_b_preset").set_value("random").run()  # random tokens: always the same length
    assert_clean(at)
    random_b = at.text_area(key="iv_text_b").value
    model, _ = load_model("everyday-gpt")
    assert prepare(model, random_b).src_ids.size(1) == 15
    at.text_area(key="iv_text_b").input("my own text").run()  # editing text B makes it the learner's own
    assert at.radio(key="iv_b_preset").value == "hand" and at.text_area(key="iv_text_b").value == "my own text"


def test_a_new_text_starts_the_answers_on_its_own_top_tokens():
    """Quick picks of the text before that the new text's top 10 lacks start afresh on the new text's first and
    second choices (they both fell back to the first once: the sweep then said the answers were the same)."""
    at = open_app(PAGE, model=GPT, text="The old keeper climbed the stairs every evening and", lang="en")
    first = [at.selectbox(key=f"he_{w}_{GPT}").value for w in "ab"]
    at.session_state["text"] = "清晨的菜市场里人声鼎沸，卖豆腐的大爷一边称重一边和老顾客聊天。"
    at.run()
    assert_clean(at)
    model, _ = load_model("everyday-gpt")
    top = run(model, prepare(model, at.session_state["text"]).src_ids)[0, -1].topk(10).indices.tolist()
    assert not set(first) <= set(top)  # the case: a pick of the text before is none of this text's quick picks
    assert [at.selectbox(key=f"he_{w}_{GPT}").value for w in "ab"] == top[:2]
    assert EN["he_same"] not in messages(at)
    assert any("he_grid" in f.proto.id for f in at.get("plotly_chart"))  # the sweep ran


def test_the_sweep_names_the_head_the_answer_needs_when_the_largest_move_is_a_rise():
    """On the name-mover model's IOI sentence the summary named only layer 0 head 0 (+6.94: switched off, the right
    name wins by more); a teacher looks for the heads it needs: layer 1 head 0 lowers the difference most."""
    from transformer_core.analysis.head_effects import head_effects

    text = "When Tom and Anna arrived at the party, Anna handed the gift to"
    at = open_app(PAGE, model="shipped:name-movers", text=text, lang="en")
    assert_clean(at)
    model, _ = load_model("name-movers")
    res = head_effects(model, prepare(model, text), "logit_diff", " Tom", " Anna")
    kind, layer, head, change = res.most_needed()
    said = next(m.value for m in at.markdown if m.value.startswith("Intact, logit(A) − logit(B) is"))
    assert EN["he_summary_needed"].format(block=EN["hd_kind_gpt_self"], layer=layer, head=head, change=change) in said
    assert res.largest()[:3] != (kind, layer, head)


@pytest.mark.parametrize("lang, text, several", [
    ("zh", "张伟和李娜到了聚会上，李娜把礼物递给了", True),
    ("en", "When Tom and Anna arrived at the party, Anna handed the gift to", False)])
def test_the_metric_is_named_log_p_when_an_answer_takes_several_tokens(lang, text, several):
    """In 中文 the name-mover sentence's answers are two tokens each (张 | 伟): the metric's radio said
    "logit(A) − logit(B)" above a number that is log p(A) − log p(B). It names the one it measures."""
    from ui.i18n import strings

    words = {k: v[lang] for k, v in strings().items()}
    with harness_language(lang):
        at = open_app(PAGE, model="shipped:name-movers", text=text, lang=lang)
        assert_clean(at)
        options = at.radio(key="he_metric").options
    named = words["he_metric_logit_diff_multi" if several else "he_metric_logit_diff"]
    assert options[0] == named, options
    assert at.radio(key="he_metric").value == "logit_diff"


def test_the_name_mover_model_opens_on_its_prompt_with_its_two_names_as_answers():
    """The name-mover card's example ended with the answer ("… gave a drink to Mary."): opened with no text, every page
    measured the token after "Mary." and the two names were never the answers. It opens on the prompt now."""
    at = open_app(PAGE, model="shipped:name-movers", lang="en")
    assert_clean(at)
    assert at.session_state["text"] == "When Mary and John went to the store, John gave a drink to"
    assert EN["ans_ioi_default"].format(io="Mary", s="John", a="A", b="B") in shown_texts(at)


def test_the_probability_of_an_answer_the_model_does_not_expect_reads_in_powers_of_ten():
    """p(A) of an unexpected answer is about 1e-7: the sweep's cells, its summary and the hover read "+0.000000" and
    "0.0000" everywhere. They say the numbers now (4.3e-07)."""
    at = open_app(PAGE, model=GPT, text="The weather was nice, so we walked to the park after", lang="en")
    at.radio(key="he_metric").set_value("prob").run()
    type_answer(at, "a", " photosynthesis")
    assert_clean(at)
    said = next(m.value for m in at.markdown if m.value.startswith(EN["he_summary"].split("{")[0]))
    assert "0.0000" not in said and re.search(r"\d\.\de-\d\d", said), said
    cells = next(tr for tr in figure(at, "he_grid_0")["data"] if tr.get("name") == "heads")
    assert not any(set(x) <= set("+-0.") for x in cells["text"]), cells["text"][:5]
