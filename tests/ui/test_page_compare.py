"""Compare page through the real app: both texts' next token, per-token surprise and one head's attention equal
compare() and the model's own numbers, the differences are marked; bad text B gives messages; Chinese."""
import re
from collections import Counter

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
    page_file,
    shown_texts,
)
from transformer_core import act_name, load_model, prepare, run, run_with_trace, token_labels
from transformer_core.analysis.compare import compare
from ui.figures import visible

PAGE = "compare"
A, B = "d a c b g f d a c", "d a c b g f d a b"


def metric(at, label: str) -> float:
    return float(next(m.value for m in at.metric if m.label == label))


def chips(at, which: int) -> tuple[list[float], str]:
    """(probabilities, html) of the chips of text A (0) or B (1)."""
    body = [h.value for h in at.html][which]
    return [float(p) for p in re.findall(r"data-p='([^']+)'", body)], body


def test_repeat_with_one_letter_changed_equals_compare_and_the_model():
    at = open_app(PAGE, model="shipped:repeat", text=A, lang="en")
    at.text_area(key="cmp_text_b").set_value(B).run()
    at.selectbox(key="cmp_layer_2").set_value(1).run()
    at.selectbox(key="cmp_head_4").set_value(3).run()
    assert_clean(at)
    model, _ = load_model("repeat")
    pa, pb = prepare(model, A), prepare(model, B)
    comp = compare(model, pa, pb, "dec_self", 1, 3)
    assert metric(at, EN["cmp_tv"]) == pytest.approx(comp.diff.total_variation, abs=1e-4)
    assert comp.diff.total_variation > 0.99 and comp.diff.top_prob_b < 1e-3  # the copy is broken
    for which, prep in ((0, pa), (1, pb)):  # chips: softmax of the model's own logits at the actual next token
        probs = torch.softmax(run(model, prep.src_ids)[0].double(), dim=-1)
        ids = prep.src_ids[0]
        np.testing.assert_allclose(chips(at, which)[0], probs[:-1].gather(-1, ids[1:, None])[:, 0], rtol=1e-5)
        bars = figure(at, f"cmp_next_{'ab'[which]}")["data"][0]
        np.testing.assert_allclose(array(bars["x"]), torch.topk(probs[-1], 10).values, atol=1e-6)
    assert chips(at, 1)[0][-1] < 0.01  # the changed letter is a surprise
    # B has ' b' twice and ' c' once (A the reverse): its second ' b' is the occurrence beyond A's count
    assert re.findall(r"2px solid #c0392b[^>]*>([^<]*)<", chips(at, 1)[1]) == ["␣b"]
    said = " ".join(m.value for m in at.markdown)
    assert "Tokens A has more often: ‘␣c’ (2 in A, 1 in B). Tokens B has more often: ‘␣b’ (2 in B, 1 in A)." in said
    name = act_name("weights", layer=1, block="dec_self", cross=False)
    w_a = run_with_trace(model, pa.src_ids, names=[name])[1][name][0, 3].numpy()
    w_b = run_with_trace(model, pb.src_ids, names=[name])[1][name][0, 3].numpy()
    np.testing.assert_allclose(array(figure(at, "cmp_att_a")["data"][0]["z"]), w_a, atol=1e-6)
    np.testing.assert_allclose(array(figure(at, "cmp_delta")["data"][0]["z"]), w_b - w_a, atol=1e-6)
    df = next(d.value for d in at.dataframe if EN["cmp_col_p_b"] in d.value.columns)
    assert df[EN["cmp_col_same"]].tolist() == [EN["cmp_yes"]] * 8 + [EN["cmp_no"]]
    np.testing.assert_allclose(df[EN["cmp_col_p_b"]][1:], chips(at, 1)[0], rtol=1e-6)


def test_reverse_default_and_the_notebook_snippet():
    at = open_app(PAGE, model="shipped:reverse", text="d a c b", tgt="= b c a", lang="en")
    assert_clean(at)
    assert at.text_area(key="cmp_text_b").value == "b c a d"  # the sidebar's words, reversed
    assert at.selectbox(key="cmp_kind").value == "cross"
    code = open_export(at, "compare").code[0].value
    assert "compare(model, prep, prep_b, 'cross', 0, 0, top=10)" in code
    scope: dict = {}
    exec(code, scope)  # the page's notebook code recomputes what it shows
    np.testing.assert_allclose(scope["arrays"]["b_weights"], array(figure(at, "cmp_att_b")["data"][0]["z"]), atol=1e-6)
    assert float(scope["arrays"]["difference"][2]) == pytest.approx(metric(at, EN["cmp_tv"]), abs=1e-4)
    only = " ".join(m.value for m in at.markdown)
    assert EN["cmp_same_tokens"] in only  # the same letters in another order


def test_different_lengths_and_tokens_only_in_one_text_are_marked():
    at = open_app(PAGE, model=SMALL, text="the cat sat", lang="en")
    at.text_area(key="cmp_text_b").set_value("a dog sat on the mat").run()
    assert_clean(at)
    assert EN["cmp_delta_shape"] in [c.value for c in at.caption]
    text = " ".join(m.value for m in at.markdown)
    assert "‘␣cat’" in text and "‘␣dog’" in text
    marked = re.findall(r"2px solid #c0392b[^>]*>([^<]*)<", chips(at, 0)[1])
    assert marked == ["the", "␣cat"]  # B has ' the' (with its space), not 'the', and no ' cat'
    assert "‘the’ (1 in A, 0 in B), ‘␣cat’ (1 in A, 0 in B)" in text
    table = next(d for d in at.dataframe if EN["cmp_col_p_a"] in d.value.columns)
    assert table.value[EN["cmp_col_token_a"]].isna().sum() == 3  # A is 3 tokens shorter than B
    assert table.proto.placeholder == "—"  # a missing cell reads "—", not a grey "None"


def test_text_b_bad_inputs_give_messages():
    at = open_app(PAGE, model="shipped:repeat", text=A, lang="en")
    at.text_area(key="cmp_text_b").set_value("").run()
    assert not at.exception and EN["tb_empty"] in messages(at)
    at.text_area(key="cmp_text_b").set_value("你好").run()
    assert not at.exception and any("only knows the" in m for m in messages(at))
    at = open_app(PAGE, model=SMALL, lang="en")
    at.text_area(key="cmp_text_b").set_value("<script>alert(1)</script><img src=x onerror=alert(1)>").run()
    assert_clean(at)
    body = "".join(h.value for h in at.html)
    assert "<script" not in body and "<img" not in body and "&lt;script" in body
    at.text_area(key="cmp_text_b").set_value("x").run()  # one token: no surprise, still a comparison
    assert_clean(at)
    assert EN["cmp_one_token"] in [c.value for c in at.caption]
    at = open_app(PAGE, model="shipped:reverse", lang="en")
    at.text_area(key="cmp_tgt_b").set_value(" ").run()
    assert not at.exception and EN["tb_tgt_empty"] in messages(at)


def test_text_b_is_shared_with_the_intervene_page():
    at = open_app(PAGE, model="shipped:repeat", text=A, lang="en")
    at.text_area(key="cmp_text_b").set_value(B).run()
    at.switch_page(page_file("intervene")).run()
    assert not at.exception
    assert at.text_area(key="iv_text_b").value == B


def test_chinese_page_has_no_english_labels():
    with harness_language("zh"):
        at = open_app(PAGE, model="shipped:reverse", lang="zh")
        assert_clean(at)
        assert at.title[0].value == "对比两段文本"
        assert not [s for s in shown_texts(at) if s in ENGLISH_ONLY]


def test_the_try_buttons_load_the_experiments_their_caption_describes():
    at = open_app(PAGE, lang="en")
    at.button(key="try_compare_0").click().run()
    assert_clean(at)
    ss = at.session_state
    assert (ss["model"], ss["text"], ss["cmp_text_b"]) == ("shipped:repeat", A, B)
    assert metric(at, EN["cmp_tv"]) > 0.99  # "total variation 0.999": A's copy is broken in B
    at.button(key="try_compare_1").click().run()
    assert_clean(at)
    assert (ss["model"], ss["text"], ss["tgt"]) == ("shipped:reverse", "d a c b", "= b c a")
    assert (ss["cmp_text_b"], ss["cmp_tgt_b"]) == ("b c a d", "= d a c b")
    assert at.text_area(key="cmp_text_b").value == "b c a d"


IOI_A = "When Mabel and John went to the store, John gave a drink to"
IOI_B = "When Mabel and John went to the store, Mabel gave a drink to"


def test_tokens_are_compared_as_multisets_and_a_picked_pair_is_scored_after_both_texts():
    """B has ' Mabel' twice and ' John' once, A the reverse: the page said "A and B use the same tokens (perhaps in
    another order)". It now counts them; and the learner's own pair (' Mabel', ' John') is scored after A and B by
    log p, recomputed here from the model's logits."""
    at = open_app(PAGE, model="shipped:everyday-gpt", text=IOI_A, lang="en")
    at.text_area(key="cmp_text_b").set_value(IOI_B).run()
    assert_clean(at)
    text = " ".join(m.value for m in at.markdown)
    assert EN["cmp_same_tokens"] not in text
    model, _ = load_model("everyday-gpt")
    ids = {k: prepare(model, v).src_ids[0].tolist() for k, v in (("A", IOI_A), ("B", IOI_B))}
    labels = dict(zip(sum(ids.values(), []), token_labels(model, sum(ids.values(), [])), strict=True))
    count = {k: Counter(v) for k, v in ids.items()}
    for side, other in (("A", "B"), ("B", "A")):  # every token one text has more often, with both counts
        more = [i for i in dict.fromkeys(ids[side]) if count[side][i] > count[other][i]]
        assert more
        listed = ", ".join(f"‘{visible(labels[i])}’ ({count[side][i]} in {side}, {count[other][i]} in {other})"
                           for i in more)
        assert f"Tokens {side} has more often: {listed}." in text
    marked_b = re.findall(r"2px solid #c0392b[^>]*>([^<]*)<", chips(at, 1)[1])
    seen, beyond = Counter(), []
    for i in ids["B"]:
        seen[i] += 1
        if seen[i] > count["A"][i]:
            beyond.append(visible(labels[i]))
    assert marked_b == beyond and beyond  # the second ' Mabel' of B (its pieces), beyond A's one
    x = next(s for s in at.selectbox if s.key.startswith("cmp_x_"))
    y = next(s for s in at.selectbox if s.key.startswith("cmp_y_"))
    x.set_value(-1).run()
    y.set_value(-1).run()
    at.text_input(key=f"{x.key}_text").input(" Mabel").run()
    at.text_input(key=f"{y.key}_text").input(" John").run()
    assert_clean(at)

    def logp(text: str, answer: str) -> float:  # summed log p of the answer's tokens, each after those before it
        base, ans = prepare(model, text).src_ids[0], prepare(model, answer).src_ids[0]
        full = torch.cat([base, ans[:-1]])[None]
        lp = torch.log_softmax(run(model, full)[0].double(), -1)  # (T + n - 1, vocab)
        return float(sum(lp[len(base) - 1 + k, int(a)] for k, a in enumerate(ans)))

    margins = [logp(t_, " Mabel") - logp(t_, " John") for t_ in (IOI_A, IOI_B)]
    assert metric(at, EN["cmp_pair_margin_a"]) == pytest.approx(margins[0], abs=1e-3)
    assert metric(at, EN["cmp_pair_margin_b"]) == pytest.approx(margins[1], abs=1e-3)
    sentence = next(m.value for m in at.markdown if m.value.startswith("After A"))
    win = "␣Mabel" if margins[0] > 0 else "␣John"
    assert f"prefers ‘{win}’" in sentence and f"by {abs(margins[0]):.3f} nats" in sentence
    assert f"by {margins[1] - margins[0]:+.3f} nats" in sentence
    assert EN["cmp_pair_multi"] in [c.value for c in at.caption]  # ' Mabel' is two tokens here: ␣M | abel


def test_the_answers_picked_survive_an_empty_text_b():
    """Text B emptied (the page stops before the answers) and written again: the picked answer Y is still Y, and the
    box the browser draws afresh starts from it (it started from the first option, which it then sent back: Y became
    X)."""
    at = open_app(PAGE, model="shipped:repeat", text=A, lang="en")

    def box():
        return next(b for b in at.selectbox if str(b.key).startswith("cmp_y_"))

    model, _ = load_model("repeat")
    third = run(model, prepare(model, A).src_ids)[0, -1].topk(3).indices[2].item()  # A's third choice next
    box().set_value(third).run()
    at.text_area(key="cmp_text_b").set_value("").run()
    assert not [b for b in at.selectbox if str(b.key).startswith("cmp_y_")]  # the answers are not drawn
    at.text_area(key="cmp_text_b").set_value(B).run()
    assert_clean(at)
    assert box().value == third and box().proto.default == box().index == 2


@pytest.mark.parametrize("lang, text, right, repeated", [
    ("zh", "张伟和李娜到了聚会上，李娜把礼物递给了", "张伟", "李娜"),
    ("en", "When Mabel and Amos went to the shop, Amos gave a drink to", " Mabel", " Amos")])
def test_an_ioi_text_starts_the_answers_on_its_two_names_as_the_ablation_page_does(lang, text, right, repeated):
    """In 中文 the name-mover sentence's answers started on X = ‘张’ and Y = ‘␣Smith’ (the model's top two single
    tokens: the names are two tokens each), and the page said the model prefers ‘张’ to ‘␣Smith’: the Ablation page
    started on the two names, Compare did not. Both start on them now (X the right name, Y the repeated one)."""
    model = "shipped:name-movers" if lang == "zh" else "shipped:everyday-gpt"
    with harness_language(lang):
        at = open_app(PAGE, model=model, text=text, lang=lang)
        assert_clean(at)
        boxes = {k: next(b for b in at.selectbox if str(b.key).startswith(f"cmp_{k}_")) for k in "xy"}
        assert [b.value for b in boxes.values()] == [-1, -1]  # "any text…", typed
        assert [at.text_input(key=f"{b.key}_text").value for b in boxes.values()] == [right, repeated]
    from ui.i18n import strings

    note = strings()["ans_ioi_default"][lang].format(io=right.strip(), s=repeated.strip(), a="X", b="Y")
    assert note in [c.value for c in at.caption]


def test_tokens_that_are_markdown_are_shown_as_they_are():
    """"aaa $x$ and $y$ then **bold**": the list of tokens A has more often drew the text between two ‘$’ tokens as a
    formula and between two ‘**’ as bold (the counts could not be read): every token in a sentence is escaped."""
    text_a = "aaa $x$ and $y$ then **bold** and [lnk](javascript:alert(1)) done"
    at = open_app(PAGE, model="shipped:everyday-gpt", text=text_a, lang="en")
    at.text_area(key="cmp_text_b").set_value("aaa done").run()
    assert_clean(at)
    line = next(m.value for m in at.markdown if m.value.startswith("Tokens A has more often"))
    assert "‘\\$’" in line, line  # the token ‘$’, escaped
    for mark in ("$", "*", "[", "`"):  # none left for markdown (or its LaTeX) to read as markup
        assert not re.search(r"(?<!\\)" + re.escape(mark), line), (mark, line)


def test_chinese_sentences_follow_each_other_with_no_space_and_lists_use_the_chinese_comma():
    """"差 10.242 奈特。 在 B 之后" (a space after the full stop) and "‘李’（A 中 2 次，B 中 1 次）, ‘娜’" (an English
    comma): sentences joined in the learner's language (ui.i18n.sentences, list_sep)."""
    with harness_language("zh"):
        at = open_app(PAGE, model="shipped:name-movers", text="张伟和李娜到了聚会上，李娜把礼物递给了", lang="zh")
        at.text_area(key="cmp_text_b").set_value("张伟和李娜到了聚会上，张伟把礼物递给了").run()
    assert_clean(at)
    shown = [m.value for m in at.markdown] + [c.value for c in at.caption]
    assert not [s for s in shown if "。 " in s or "） " in s], shown
    more = [s for s in shown if "次）" in s]
    assert more and not [s for s in more if "）, " in s], more
