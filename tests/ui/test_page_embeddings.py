"""Embeddings page through the real app: the model's embedding rows, the PE table, the course's numbers."""
import re

import numpy as np
import pytest

from harness.apptest import SMALL, array, figure, messages, open_app
from service import catalog
from transformer_core.model.positional import sinusoid_table
from transformer_core.train.defaults import SHIPPED_LMS
from ui.figures import BAR_BELOW_PX

DEFAULT_ENCODING = SHIPPED_LMS["everyday-gpt"]["subset"]["name"]  # the default model's vocabulary

PAGE = "embeddings"
BASE = "preset:course-base@cl100k_base"
SENT_1 = "同志们!我踩着地雷了"  # the course's sentence and its cl100k ids (doc 000)
IDS_1 = [42016, 78228, 80578, 0, 37046, 164, 116, 102, 84949, 222, 30590, 97565, 35287]
SENT_2, IDS_2 = "我现在开始排雷。", [37046, 47551, 19000, 56386, 61056, 97565, 1811]
BAD_INPUTS = {
    "endoftext": "<|endoftext|>",
    "script": "<script>alert(1)</script>",
    "emoji_zwj_rtl_combining": "👩‍👩‍👧‍👦 🏳️‍🌈 שלום عربي e\u0301 a\u0308\u0323",
    "hundred_thousand_chars": "同志们!我踩着地雷了 " * 9_091,
}


@pytest.fixture(scope="module")
def gpt():
    return catalog.load(SMALL, "cpu")[0]


def small_table(at):
    return next(df.value for df in at.dataframe if "sin i=0" in df.value.columns)


def test_course_base_shows_course_pe_table_and_real_embedding_rows():
    at = open_app(PAGE, model=BASE, text=SENT_1, tgt=SENT_2)
    assert not at.exception
    pe_small = small_table(at)
    assert pe_small.iloc[1, 1:].tolist() == [0.8415, 0.5403, 0.0100, 0.9999]  # the course's printed row 1
    assert pe_small.iloc[5, 1:].tolist() == [-0.9589, 0.2837, 0.0500, 0.9988]
    model = catalog.load(BASE, "cpu")[0]
    tok = figure(at, "emb_tok")["data"][0]
    assert figure(at, "emb_tok")["layout"]["yaxis"]["ticktext"][:4] == ["0 ‘同’", "1 ‘志’", "2 ‘们’", "3 ‘!’"]
    expected = model.encoder.embed.tok.weight.detach()[IDS_1, :64].numpy()
    np.testing.assert_allclose(array(tok["z"]), expected, atol=1e-6)
    np.testing.assert_allclose(array(figure(at, "emb_pe")["data"][0]["z"]), sinusoid_table(13, 512)[:, :64], atol=1e-6)
    np.testing.assert_allclose(array(figure(at, "emb_sum")["data"][0]["z"]),
                               expected + sinusoid_table(13, 512)[:, :64].numpy(), atol=1e-5)
    sim = array(figure(at, "emb_sim")["data"][0]["z"])
    assert sim.shape == (13, 13)
    np.testing.assert_allclose(np.diag(sim), 256.0, atol=1e-3)  # PE(p)·PE(p) = d_model / 2

    at.radio(key="emb_side").set_value("tgt").run()  # the decoder's input sequence
    assert not at.exception
    expected = model.decoder.embed.tok.weight.detach()[IDS_2, :64].numpy()
    np.testing.assert_allclose(array(figure(at, "emb_tok")["data"][0]["z"]), expected, atol=1e-6)

    at.slider(key="emb_dims_512").set_value((0, 511)).run()  # wider than the cap
    assert not at.exception
    assert array(figure(at, "emb_tok")["data"][0]["z"]).shape == (7, 128)
    assert any("0 to 127" in c.value for c in at.caption)


def test_dimension_range_and_more_positions():
    at = open_app(PAGE, model=SMALL)
    at.slider(key="emb_dims_64").set_value((10, 20)).run()
    tok = figure(at, "emb_tok")["data"][0]
    assert array(tok["z"]).shape == (13, 11) and tok["x"][0] == 10 and tok["x"][-1] == 20  # dimension numbers
    at.checkbox(key="emb_pos_more").check().run()  # course-gpt: max_len 16
    assert not at.exception
    np.testing.assert_allclose(array(figure(at, "emb_pe")["data"][0]["z"]), sinusoid_table(16, 64)[:, 10:21], atol=1e-6)
    assert array(figure(at, "emb_sim")["data"][0]["z"]).shape == (16, 16)
    curves = figure(at, "emb_curves")["data"]
    assert curves[0]["name"].startswith("d0 (sin") and len(array(curves[0]["y"])) == 16


def test_the_dimension_maps_keep_the_chart_s_width_with_their_colour_bar_underneath():
    """On a phone the colour bar beside a map and the rows' axis title took half its width: the bar now lies in a row
    of its own under the axis title, inside the chart (its bottom margin), across the map's width."""
    at = open_app(PAGE, model=SMALL, text="The cat sat on the mat.")
    for key in ("emb_tok", "emb_pe", "emb_sum"):
        fig = figure(at, key)
        layout, bar = fig["layout"], fig["data"][0]["colorbar"]
        assert bar["orientation"] == "h" and bar["len"] == 1 and "text" not in layout["yaxis"]["title"]
        plot_px = layout["height"] - layout["margin"]["t"] - layout["margin"]["b"]
        top = -bar["y"] * plot_px  # px below the plot where the bar starts
        assert layout["margin"]["b"] - BAR_BELOW_PX <= top and top + bar["thickness"] < layout["margin"]["b"]


def test_scaling_balance_shows_real_means(gpt):
    at = open_app(PAGE, model=SMALL, text=SENT_1)
    text = next(m.value for m in at.markdown if m.value.startswith("Mean |value|"))
    tok_mean = float(re.search(r"token embedding ([\d.]+)", text).group(1))
    expected = gpt.decoder.embed.tok.weight.detach()[IDS_1].abs().mean().item()
    assert tok_mean == pytest.approx(expected, abs=1e-3)
    assert "does not scale the token embedding (√d_model would be 8.0)" in text
    bars = array(figure(at, "emb_balance")["data"][0]["x"])
    assert bars[2] == pytest.approx(bars[0] * 8.0, rel=1e-5)  # × √64


def test_bad_inputs_never_raise():
    at = open_app(PAGE, model=SMALL)
    at.sidebar.text_area(key="text").set_value("").run()
    assert not at.exception and any("empty" in m for m in messages(at))
    for name, text in BAD_INPUTS.items():
        at.sidebar.text_area(key="text").set_value(text).run()
        assert not at.exception, name
        z = array(figure(at, "emb_tok")["data"][0]["z"])
        assert 1 <= z.shape[0] <= 16 and np.isfinite(z).all(), name


def test_chinese_headings():
    at = open_app(PAGE, model=SMALL)
    at.sidebar.radio(key="lang").set_value("zh").run()  # switched last: AppTest re-formats options in English
    assert not at.exception
    assert at.title[0].value == "词嵌入与位置编码"
    heads = [s.value for s in at.subheader]
    assert "词嵌入（词元 × 维度）" in heads and "课程中的小表：max_len 6，d_model 4" in heads
    assert all(re.search(r"[\u4e00-\u9fff]", h) for h in heads)


@pytest.mark.parametrize("lang, said", [("en", rf"is token (\d+) of {DEFAULT_ENCODING} and row (\d+) "),
                                        ("zh", r"的第 (\d+) 号词元，是这个模型嵌入矩阵 E 的第 (\d+) 行")])
def test_a_compacted_vocabulary_says_which_row_a_token_id_selects(lang, said):
    """The default keeps the tokens of its own vocabulary, numbered by the model: the Tokenizer's id is not the row
    of its embedding matrix. The caption's example is recomputed through the model's own map and embedding."""
    import re

    import torch

    from harness.apptest import harness_language
    from service import catalog
    from transformer_core import trace_text
    from transformer_core.text.inputs import real_ids

    text = "My sister bought fresh bread this morning."
    with harness_language(lang):
        at = open_app("embeddings", model="shipped:everyday-gpt", text=text, lang=lang)
    assert not at.exception, at.exception
    tid, row = next(tuple(map(int, m.groups())) for c in at.caption if (m := re.search(said, c.value)))
    model = catalog.load("shipped:everyday-gpt", "cpu")[0]
    # ids, not tokens: "keeps 12,293 tokens of cl100k_words" where the home page counts 12,288 tokens + 5 special
    from transformer_core.analysis.architecture import vocab_parts

    ids_tokens = (f"{model.cfg.vocab_size:,}", f"{vocab_parts(model.cfg).ordinary:,}")
    assert ids_tokens[0] != ids_tokens[1]
    caption = next(c.value for c in at.caption if re.search(said, c.value))
    assert all(n in caption for n in ids_tokens), (ids_tokens, caption)
    trace = trace_text(model, text)[1]
    ids = trace.src_ids[0].tolist()
    assert row in ids and real_ids(model, [row]) == [tid] and tid != row and row < model.cfg.vocab_size
    with torch.inference_mode():  # row `row` of E is the token embedding the trace recorded for that token
        emb = model.decoder.embed.tok.weight[row].float()
    assert torch.allclose(trace.embeddings("decoder").tok[0, ids.index(row)].float(), emb)


@pytest.mark.parametrize("model, scales", [("shipped:everyday-gpt", True), (SMALL, False)])
def test_the_balance_sentence_says_would_only_for_a_model_that_does_not_scale(model, scales):
    """The default model multiplies by √d_model, yet the page said "With √d_model scaling the token embedding would
    have mean |value| 0.523, 0.9× the PE's (as this model runs: 0.9×)": a model that scales gets the ratio it runs
    with; one that does not, what scaling would give beside what it runs with."""
    assert catalog.load(model, "cpu")[0].cfg.scale_embedding is scales
    at = open_app(PAGE, model=model, text=SENT_1)
    assert not at.exception
    shown = [m.value for m in at.markdown]
    would = [m for m in shown if m.startswith("With √d_model scaling")]
    runs = [m for m in shown if m.startswith("Scaled, the token embedding's mean |value| is")]
    assert (len(would), len(runs)) == ((0, 1) if scales else (1, 0)), shown


def test_the_course_s_small_table_shows_four_decimals_as_the_course_prints_them():
    """The caption quotes row 1 as "0.8415, 0.5403, 0.0100, 0.9999"; the table showed 0.01 and -0.99."""
    import json

    at = open_app(PAGE, model=SMALL, text=SENT_1)
    df = next(d for d in at.dataframe if "sin i=0" in d.value.columns)
    shown = {c: v["type_config"]["format"] for c, v in json.loads(df.proto.columns).items()}
    assert shown == dict.fromkeys(["sin i=0", "cos i=0", "sin i=1", "cos i=1"], "%.4f")
