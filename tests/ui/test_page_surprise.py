"""Surprise page through the real app: chips coloured by p(actual next token), the mean loss and perplexity, all
equal to softmax over the model's own logits; bad input gives messages; the page speaks Chinese."""
import math
import re

import numpy as np
import pytest
import torch

from harness.apptest import (
    EN,
    ENGLISH_ONLY,
    SMALL,
    assert_clean,
    harness_language,
    messages,
    open_app,
    open_export,
    shown_texts,
)
from transformer_core import load_model, prepare, run, token_labels
from ui.figures import visible

PAGE = "surprise"
REPEAT_TEXT = "d a c b g f d a c"


def chip_probs(at) -> list[float]:
    """The probability each chip carries (every token after the first)."""
    return [float(p) for h in at.html for p in re.findall(r"data-p='([^']+)'", h.value)]


def metric(at, key: str) -> float:
    return float(next(m.value for m in at.metric if m.label == EN[key]))


def expected(model_key: str, text: str, tgt: str | None = None) -> np.ndarray:
    """p(token t+1 | tokens ..t) by softmax of the model's logits, computed here with the public API."""
    model, _ = load_model(model_key)
    prep = prepare(model, text, tgt)
    ids = (prep.tgt_ids if tgt is not None else prep.src_ids)[0]
    probs = torch.softmax(run(model, prep.src_ids, prep.tgt_ids)[0].double(), dim=-1)  # (T, vocab)
    return probs[:-1].gather(-1, ids[1:, None])[:, 0].numpy()


def test_chips_loss_and_perplexity_equal_softmax_of_the_models_logits_on_repeat():
    at = open_app(PAGE, model="shipped:repeat", text=REPEAT_TEXT, lang="en")
    assert_clean(at)
    p = expected("repeat", REPEAT_TEXT)
    np.testing.assert_allclose(chip_probs(at), p, rtol=1e-5, atol=1e-9)
    loss = float(-np.log(p).mean())
    assert metric(at, "sur_loss") == pytest.approx(loss, abs=1e-4)
    assert metric(at, "sur_ppl") == pytest.approx(math.exp(loss), rel=1e-3)
    assert metric(at, "sur_bits") == pytest.approx(loss / math.log(2), abs=1e-4)
    df = next(d.value for d in at.dataframe if EN["sur_col_bits"] in d.value.columns)
    np.testing.assert_allclose(df[EN["sur_col_prob"]], p, rtol=1e-5)
    assert list(df[EN["sur_col_token"]])[:2] == ["␣a", "␣c"]  # whitespace made visible
    # what the caption says the shipped model shows: the untrained first half red, the copied half green
    assert p[:5].max() < 0.01 and p[-2:].min() > 0.99


def test_encoder_decoder_surprise_is_over_the_target():
    at = open_app(PAGE, model="shipped:reverse", text="d a c b", tgt="= b c a", lang="en")
    assert_clean(at)
    np.testing.assert_allclose(chip_probs(at), expected("reverse", "d a c b", "= b c a"), rtol=1e-5)
    assert EN["sur_target_note"] in [c.value for c in at.caption]


def test_the_notebook_snippet_recomputes_the_page_numbers():
    at = open_app(PAGE, model=SMALL, text="the cat sat on the mat", lang="en")
    assert_clean(at)
    code = open_export(at, "surprise").code[0].value
    assert "surprise(model, prep)" in code and "course-gpt" in code
    scope: dict = {}
    exec(code, scope)  # the page's own snippet, run as a learner would
    np.testing.assert_allclose(scope["arrays"]["prob"], chip_probs(at), rtol=1e-5)
    assert float(scope["arrays"]["mean_loss"]) == pytest.approx(metric(at, "sur_loss"), abs=1e-4)


def test_one_token_and_bad_inputs_give_messages_not_tracebacks():
    at = open_app(PAGE, model=SMALL, lang="en", text="hello")
    assert not at.exception and EN["err.surprise_one_token"] in messages(at)
    for text in ("", "<script>alert(1)</script>", "同志们!我踩着地雷了 " * 10_000):
        at.sidebar.text_area(key="text").set_value(text).run()
        assert not at.exception, text[:20]
        assert not at.error
        assert "<script" not in "".join(h.value for h in at.html)
    assert EN["err.empty_input"] not in messages(at)
    at.sidebar.text_area(key="text").set_value("<script>alert(1)</script>").run()
    assert "&lt;script" in "".join(h.value for h in at.html)  # shown, escaped


def test_a_text_the_toy_model_cannot_read_says_so():
    at = open_app(PAGE, model="shipped:repeat", lang="en", text="hello world")
    assert not at.exception
    assert any("only knows the" in m for m in messages(at))
    assert not at.get("plotly_chart")


def test_chinese_page_has_no_english_labels():
    with harness_language("zh"):
        at = open_app(PAGE, model="shipped:repeat", text=REPEAT_TEXT, lang="zh")
        assert_clean(at)
        assert at.title[0].value == "逐词元意外度"
        assert not [s for s in shown_texts(at) if s in ENGLISH_ONLY]


def test_the_try_buttons_load_the_experiments_their_caption_describes():
    at = open_app(PAGE, lang="en")  # the default model and text
    at.button(key="try_surprise_0").click().run()
    assert_clean(at)
    assert (at.session_state["model"], at.session_state["text"]) == ("shipped:repeat", REPEAT_TEXT)
    p = chip_probs(at)
    assert max(p[:6]) < 0.003 and min(p[6:]) > 0.998  # "the first half is red (p below 0.003) ... green (0.999)"
    at.button(key="try_surprise_1").click().run()
    assert_clean(at)
    assert (at.session_state["model"], at.session_state["text"]) == ("shipped:count", "4 7 10 13")
    p = chip_probs(at)
    assert round(p[1], 2) == 0.13 and min(p[2:]) > 0.98  # "‘7’ gets p 0.13, every later number about 0.99"


def test_what_to_look_for_names_the_most_and_least_surprising_tokens_of_this_text():
    at = open_app(PAGE, model="shipped:count", text="4 7 10 13", lang="en")
    assert_clean(at)
    p = expected("count", "4 7 10 13")
    model, _ = load_model("count")
    labels = [visible(x) for x in token_labels(model, prepare(model, "4 7 10 13").src_ids[0].tolist())]
    worst, best = int(p.argmin()), int(p.argmax())
    from ui.figures import prob_text

    prep = prepare(model, "4 7 10 13")
    probs = torch.softmax(run(model, prep.src_ids)[0].double(), dim=-1)[:-1]  # (T-1, vocab)
    exp = visible(token_labels(model, [int(probs[worst].argmax())])[0])
    look = EN["look_surprise"].format(worst=f"‘{labels[worst + 1]}’", wp=worst + 1, pw=prob_text(p[worst]),
                                      bw=-math.log2(p[worst]), exp=f"‘{exp}’", pe=prob_text(probs[worst].max()),
                                      best=f"‘{labels[best + 1]}’", bp=best + 1, pb=prob_text(p[best]),
                                      loss=float(-np.log(p).mean()), n=len(p))
    assert look in messages(at)


def test_tiny_probabilities_never_read_as_zero():
    from ui.figures import prob_text

    assert prob_text(0.25) == "0.2500" and prob_text(3.2e-7) == "3.2e-07" and prob_text(4e-5) == "4.0e-05"
    assert prob_text(0.0) == "0.0000" and prob_text(1e-4) == "0.0001"


def test_the_hint_names_both_extremes_by_position_and_what_the_model_expected_instead():
    """The hint named the most and the least surprising token by the same label ("␣g") with no position; it now
    gives each position, and the model's own top-1 (and its probability) where it was most surprised; the table
    has that top-1 for every token."""
    text = "the cat sat on the mat, the dog sat on the log"
    at = open_app(PAGE, model="shipped:everyday-gpt", text=text, lang="en")
    assert_clean(at)
    model, _ = load_model("everyday-gpt")
    prep = prepare(model, text)
    ids = prep.src_ids[0]
    probs = torch.softmax(run(model, prep.src_ids)[0].double(), dim=-1)  # (T, vocab)
    p = probs[:-1].gather(-1, ids[1:, None])[:, 0]  # (T-1,)
    top_p, top = probs[:-1].max(-1)
    worst, best = int((-p.log()).argmax()) + 1, int((-p.log()).argmin()) + 1
    labels = [visible(x) for x in token_labels(model, ids.tolist())]
    hint = next(m for m in messages(at) if m.startswith("What to look for"))
    exp = visible(token_labels(model, [int(top[worst - 1])])[0])
    assert (f"most surprised by ‘{labels[worst]}’ at position {worst} (p {float(p[worst - 1]):.4f}" in hint
            or f"at position {worst} (p {float(p[worst - 1]):.1e}" in hint), hint
    assert f"it expected ‘{exp}’ there, p {float(top_p[worst - 1]):.4f})" in hint
    assert f"least by ‘{labels[best]}’ at position {best} " in hint and worst != best
    df = next(d.value for d in at.dataframe if EN["sur_col_expected"] in d.value.columns)
    assert list(df[EN["sur_col_expected"]]) == [visible(x) for x in token_labels(model, top.tolist(),
                                                                                  context=ids.tolist())]
    np.testing.assert_allclose(df[EN["sur_col_expected_prob"]], top_p.numpy(), rtol=1e-5)
    hover = re.findall(r"title='#(\d+) · [^']*expected ‘([^’]*)’", " ".join(h.value for h in at.html))
    assert len(hover) == len(ids) - 1 and int(hover[worst - 1][0]) == worst
