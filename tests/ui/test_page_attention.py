"""Attention page through the real app: before/after masking, softmax rows, every head, one query's arithmetic.

The large map and the thumbnails are the server's charts here (`server_charts`: what a text longer than the browser's
view gets, here on short texts too); the browser's view of a shorter text: tests/ui/test_attention_view.py."""
import json
import math
import re

import numpy as np
import pytest
import torch

from harness.apptest import (
    CAT,
    DEFAULT,
    EN,
    ENGLISH_ONLY,
    SMALL,
    array,
    assert_clean,
    attention_pair,
    figure,
    harness_language,
    messages,
    open_app,
    pair_drawn,
    set_layer,
    set_mask,
    shown_mask,
    shown_texts,
)
from transformer_core.analysis.attention_steps import (
    query_steps,
    row_sums,
)
from transformer_core.model.config import preset
from transformer_core.model.masks import attention_mask
from transformer_core.model.trace import run_with_trace
from transformer_core.model.transformer import build_model
from transformer_core.text.tokenizer import load_encoding
from ui.figures import token_heatmap
from ui.masked_cells import mark_cells
from ui.panels import LEVELS

PAGE = "attention"


@pytest.fixture(autouse=True)
def server_charts(monkeypatch):
    monkeypatch.setattr("ui.attention_view.VIEW_TOKENS", 0)

BASE = "preset:course-base@cl100k_base"
SRC_TOKENS, TGT_TOKENS = 13, 7  # the app's default pair 早上好!我们今天一起学习 / 现在开始上课。 in cl100k
WEIGHT, MASKED, KEY = "softmax weight", "masked score", "key token"
BAD_INPUTS = {
    "empty": "",
    "endoftext": "<|endoftext|>",
    "script": "<script>alert(1)</script>",
    "emoji_combining_rtl": "👩‍👩‍👧‍👦 🏳️‍🌈 שלום عربي e\u0301 a\u0308\u0323 \u202eabc",
    "hundred_thousand_chars": "同志们!我踩着地雷了 " * 9_091,
}


def values(fig: dict) -> list[np.ndarray]:
    """The value heatmaps of a figure (mask overlays left out)."""
    return [array(tr["z"]) for tr in fig["data"] if tr["type"] == "heatmap" and tr.get("name") != "mask"]


def hover_values(fig: dict) -> list[np.ndarray]:
    """The value heatmaps with each masked (NaN) cell read from its subplot's mask overlay, as hover shows it."""
    overlays = {tr.get("xaxis", "x"): array(tr["z"]) for tr in fig["data"] if tr.get("name") == "mask"}
    out = []
    for tr in fig["data"]:
        if tr["type"] == "heatmap" and tr.get("name") != "mask":
            z, over = array(tr["z"]), overlays.get(tr.get("xaxis", "x"))
            out.append(z if over is None else np.where(np.isnan(z), over, z))
    return out


def step_table(at):
    return next(df.value for df in at.dataframe if WEIGHT in df.value.columns)


def chart_bytes(at) -> int:
    return sum(len(c.proto.spec.encode("utf-8")) for c in at.get("plotly_chart"))


def main_values(at) -> np.ndarray:
    return values(figure(at, "att_main"))[0]


def test_decoder_only_page_shows_zero_weights_above_the_diagonal_and_rows_summing_to_one():
    at = open_app(PAGE, model=SMALL, lang="en")
    assert_clean(at)
    assert at.session_state["block"] == "dec_self" and at.session_state["mask_mode"] == "both"
    df = step_table(at)
    q = int(at.session_state["att_query_idx"])
    w = df[WEIGHT].to_numpy()
    assert (w[q + 1:] == 0).all() and (w[: q + 1] > 0).all()
    assert list(df[MASKED][q + 1:]) == ["−∞"] * (len(df) - q - 1)
    assert w.sum() == pytest.approx(1.0, abs=1e-6)
    numbers = json.loads(next(d for d in at.dataframe if WEIGHT in d.value.columns).proto.columns)
    assert {c: v["type_config"]["format"] for c, v in numbers.items()} == dict.fromkeys(
        ["q·k", "q·k / √d_k", WEIGHT], "%.4f")  # every number shown with 4 decimals, like the masked column
    assert all(re.fullmatch(r"-?\d+\.\d{4}|−∞", x) for x in df[MASKED])
    main = figure(at, "att_main")
    assert (main["data"][0]["zmin"], main["data"][0]["zmax"]) == (0, 1)
    assert len(main["layout"]["yaxis"]["ticktext"]) == main_values(at).shape[0]  # every token labelled
    for m, raw in zip(hover_values(main)[:1], values(main)[:1], strict=True):
        assert (np.triu(m, k=1) == 0).all() and np.isnan(raw[np.triu_indices_from(raw, 1)]).all()
        np.testing.assert_allclose(m.sum(-1), 1.0, atol=1e-5)
    thumbs = figure(at, "att_thumbs_0")
    assert len(values(thumbs)) == 4  # course-gpt has 4 heads
    for raw in values(thumbs):  # colour codes, one byte a cell: the masked ones transparent
        assert raw.dtype == np.uint8 and (raw[np.triu_indices_from(raw, 1)] == LEVELS + 1).all()
    shown = values(thumbs)[int(at.session_state["head"])]  # the head drawn large: its colours, to half a step
    np.testing.assert_allclose(np.tril(shown) / LEVELS, np.tril(np.nan_to_num(values(main)[0])), atol=0.5 / LEVELS)
    bar = thumbs["layout"]["coloraxis"]
    assert (bar["cmin"], bar["cmax"]) == (0, LEVELS + 1) and bar["colorbar"]["ticktext"][::4] == ["0", "1"]
    assert bar["colorscale"][-1][1] == "rgba(0,0,0,0)"
    lo, hi = map(float, re.findall(r"\d\.\d{6}", next(s for s in messages(at) if s.startswith("Row sums"))))
    assert lo == pytest.approx(1.0, abs=1e-5) and hi == pytest.approx(1.0, abs=1e-5)
    assert any("flat" in s for s in shown_texts(at))  # the course's uniform-softmax mistake, explained


@pytest.mark.parametrize("mode", ["none", "causal", "padding", "both"])
def test_each_mask_mode_recomputes_the_weights(mode):
    at = open_app(PAGE, model=SMALL, lang="en")
    set_mask(at, mode)
    assert_clean(at)
    q = int(at.session_state["att_query_idx"])
    df = step_table(at)
    w = df[WEIGHT].to_numpy()
    assert w.sum() == pytest.approx(1.0, abs=1e-6)
    causal = mode in ("causal", "both")  # one sentence has no padding: the padding mask hides nothing
    assert ((w[q + 1:] == 0).all() if causal else (w > 0).all())
    assert (df[MASKED] == "−∞").sum() == (len(df) - q - 1 if causal else 0)
    scores, kept, pair = pair_drawn(at)  # before and after masking, drawn in the browser
    upper = np.triu(np.ones_like(kept), k=1)
    assert np.array_equal(~kept, upper if causal else np.zeros_like(upper)) and not np.isnan(scores).any()
    assert pair["marks"] and pair["text"]["after"] == EN["att_after"]  # a small map: an ✕ on each masked cell
    main = figure(at, "att_main")
    m = hover_values(main)[0]
    np.testing.assert_allclose(m.sum(-1), 1.0, atol=1e-5)
    assert (np.triu(m, k=1) == 0).all() == causal
    marks = [tr for tr in main["data"] if tr.get("name") == "mask"]
    assert len(marks) == (1 if causal else 0)
    if causal:  # like "after masking": blank + ✕, and hover says the weight is exactly 0
        upper = np.triu(np.ones_like(values(main)[0], dtype=bool), k=1)
        assert np.isnan(values(main)[0][upper]).all() and (array(marks[0]["z"])[upper] == 0).all()
        assert "masked" in marks[0]["hovertemplate"] and "→ 0" in marks[0]["hovertemplate"]


@pytest.mark.parametrize("scale", ["row", "log"])
def test_colour_scales_per_row_and_log(scale):
    at = open_app(PAGE, model=SMALL, lang="en", text="the cat sat on the mat")
    weights = hover_values(figure(at, "att_main"))[0]
    at.radio(key="att_scale").set_value(scale).run()
    assert_clean(at)
    main = figure(at, "att_main")
    z = values(main)[0]
    live = ~np.isnan(z)
    if scale == "row":
        np.testing.assert_allclose(np.nanmax(z, axis=-1), 1.0, atol=1e-6)  # each row by its largest weight
        assert (main["data"][0]["zmin"], main["data"][0]["zmax"]) == (0, 1)
    else:
        np.testing.assert_allclose(z[live], np.log10(np.maximum(weights[live], 1e-6)), atol=1e-5)
        assert main["data"][0]["colorbar"]["ticktext"] == ["1e-6", "1e-4", "1e-2", "1e0"]


def test_encoder_decoder_opens_on_cross_attention_with_encoder_keys():
    at = open_app(PAGE, model=BASE, lang="en")
    assert_clean(at)
    assert at.session_state["block"] == "cross"  # no block chosen yet: cross-attention
    assert at.session_state["mask_mode"] == "padding"
    at.selectbox(key="block").set_value("dec_self").run()
    assert_clean(at)
    assert len(step_table(at)) == TGT_TOKENS  # decoder self-attention: keys are the decoder's tokens
    at.selectbox(key="block").set_value("cross").run()
    assert_clean(at)
    df = step_table(at)
    assert len(df) == SRC_TOKENS and df[KEY].iloc[2] == "2 ‘上’" and df[KEY].iloc[4] == "4 ‘!’"
    assert at.selectbox(key="att_query_idx").options[0] == "0 ‘现’"  # queries: the decoder's tokens
    assert len(at.selectbox(key="att_query_idx").options) == TGT_TOKENS
    assert df[WEIGHT].sum() == pytest.approx(1.0, abs=1e-6)
    assert any("DecoderBlock" in s for s in shown_texts(at))  # the cross-attention mistake, explained
    set_mask(at, "causal")  # never causal over the encoder memory
    assert_clean(at)
    assert (step_table(at)[MASKED] != "−∞").all()
    set_layer(at, 2)  # a new layer keeps the kind of block
    assert_clean(at)
    assert at.session_state["block"] == "cross"
    at.session_state["att_qkv_maps_open"] = True  # Q, K, V: built when opened
    at.run()
    q_fig = figure(at, "att_q")
    assert array(q_fig["data"][0]["z"]).shape == (TGT_TOKENS, 64)  # d_k = 512 / 8
    kv_fig = figure(at, "att_kv")  # K and V share the encoder's token rows, Q has the decoder's
    assert [array(tr["z"]).shape for tr in kv_fig["data"]] == [(SRC_TOKENS, 64)] * 2


def test_q_k_and_v_of_a_self_attention_head_are_one_chart_of_three_panels_over_the_same_token_rows():
    """The page's Q, K and V of the chosen head against the projections W_q, W_k, W_v read by hooks written here."""
    from transformer_core.model.trace import run
    from transformer_core.text.inputs import prepare
    from ui import cache

    text = "the cat sat on the mat because it was warm"
    at = open_app(PAGE, model=SMALL, lang="en", text=text)
    assert_clean(at)
    assert not [c for c in at.get("plotly_chart") if c.proto.id.endswith("-att_qkv")]  # closed: nothing sent
    at.session_state["att_qkv_maps_open"] = True
    at.run()
    layer, head = int(at.session_state["layer"]), int(at.session_state["head"])
    model, _ = cache.get_model(SMALL, "cpu")
    attn, seen = model.decoder.layers[layer].self_attn, {}
    handles = [getattr(attn, f"W_{s}").register_forward_hook(lambda _m, _i, out, s=s: seen.setdefault(s, out))
               for s in "qkv"]
    try:
        prep = prepare(model, text)
        run(model, prep.src_ids, prep.tgt_ids)
    finally:
        for handle in handles:
            handle.remove()
    hs, n = model.cfg.d_model // model.cfg.n_heads, seen["q"].size(1)
    fig = figure(at, "att_qkv")
    assert [tr["name"] for tr in fig["data"]] == [f"{s} ({n}, {hs})" for s in "QKV"]
    for tr, s in zip(fig["data"], "qkv", strict=True):
        np.testing.assert_allclose(array(tr["z"]), seen[s][0, :, head * hs:(head + 1) * hs].numpy(), atol=1e-5)
    layout = fig["layout"]
    assert len(layout["yaxis"]["ticktext"]) == n  # the token rows labelled once, on the left
    assert layout["yaxis2"]["matches"] == layout["yaxis3"]["matches"] == "y"
    assert not layout["yaxis2"]["showticklabels"] and not layout["yaxis3"]["showticklabels"]


def test_chart_data_stays_under_one_megabyte_at_64_tokens():
    enc = load_encoding("cl100k_base")
    text = enc.decode(enc.encode("the quick brown fox jumps over the lazy dog " * 20)[:64])
    at = open_app(PAGE, model=BASE, lang="en", text=text, tgt=text, block="dec_self")
    assert_clean(at)
    assert main_values(at).shape == (64, 64) and pair_drawn(at)[0].shape == (64, 64)
    print("chart bytes at 64 tokens:", chart_bytes(at))
    assert chart_bytes(at) < 1_000_000


def test_long_sequence_is_drawn_in_blocks_with_readable_labels_and_a_window_of_single_tokens():
    enc = load_encoding("cl100k_base")
    text = enc.decode(enc.encode("the quick brown fox jumps over the lazy dog " * 40)[:300])
    at = open_app(PAGE, model=BASE, lang="en", text=text, tgt="short target")
    at.selectbox(key="block").set_value("enc_self").run()
    assert_clean(at)
    main = figure(at, "att_main")
    assert main_values(at).shape == (150, 150)  # blocks of 2 × 2 tokens (more than MAIN_CAP = 256)
    rows = main["data"][0]["y"]  # each block named by its tokens (the axis's categories): hover names them all
    assert rows[0].startswith("0–1: 0 ‘") and rows[1].startswith("2–3: 2 ‘") and len(set(rows)) == 150
    assert main["layout"]["yaxis"]["type"] == "category" and "%{y}" in main["data"][0]["hovertemplate"]
    scores, _, pair = pair_drawn(at)  # a window of single tokens before and after masking, each named
    assert pair["k"][:2] == ["0 ‘the’", "1 ‘␣quick’"] and scores.shape == (256, 256) and len(set(pair["k"])) == 256
    assert any("block of 2 × 2 tokens" in c.value for c in at.caption)
    assert at.slider(key="att_window")
    assert values(figure(at, "att_thumbs_0"))[0].shape == (75, 75)  # thumbnails pooled (every 4th)
    assert len(step_table(at)) == 300  # the table keeps every key
    for c in at.get("plotly_chart"):  # every chart light, and no two labels of an axis drawn over each other
        assert len(c.proto.spec.encode("utf-8")) < 1_000_000
        fig = json.loads(c.proto.spec)
        layout = fig["layout"]
        for axis, room in (("yaxis", layout.get("height", 450) - 120), ("xaxis", 800)):
            labels = layout.get(axis, {}).get("ticktext")
            if labels:
                size = layout[axis]["tickfont"]["size"]
                assert len(labels) * (size + 3) <= room + size + 3, (axis, len(labels), size, room)
    print("chart bytes at 300 tokens:", chart_bytes(at))


def test_label_step_and_block_max():
    from ui.figures import block_max, label_step

    assert label_step(40, 800, 9) == 1 and label_step(300, 780, 9) == 5
    z = np.arange(25, dtype=np.float32).reshape(5, 5)
    z[0, 0] = np.nan
    pooled = block_max(z, 2)
    assert pooled.shape == (3, 3) and pooled[0, 0] == 6 and pooled[2, 2] == 24
    assert np.isnan(block_max(np.full((4, 4), np.nan), 2)).all()


@pytest.mark.parametrize("text", list(BAD_INPUTS.values()), ids=list(BAD_INPUTS))
def test_bad_inputs_never_raise(text):
    at = open_app(PAGE, model=SMALL, lang="en")
    at.sidebar.text_area(key="text").set_value(text).run()
    assert not at.exception, [e.value for e in at.exception]
    if text.strip():
        assert step_table(at)[WEIGHT].sum() == pytest.approx(1.0, abs=1e-6)
    else:
        assert at.warning and not at.get("plotly_chart")


def test_one_token_weights_keep_the_zero_to_one_colour_scale():
    at = open_app(PAGE, model=SMALL, lang="en", text="hello")
    assert_clean(at)
    main = figure(at, "att_main")["data"][0]
    assert array(main["z"]).tolist() == [[1.0]] and (main["zmin"], main["zmax"]) == (0, 1)
    assert values(figure(at, "att_thumbs_0"))[0].tolist() == [[LEVELS]]  # weight 1: the top of the scale


def test_chinese_page_has_no_english_labels():
    with harness_language("zh"):
        at = open_app(PAGE, model=BASE, lang="zh")
        assert_clean(at)
        assert not [s for s in shown_texts(at) if s in ENGLISH_ONLY]
        assert at.selectbox(key="att_query_idx").label == "查询词元（query）"
        assert any("键词元（key）" in df.value.columns for df in at.dataframe)


# --- the small pure helpers the page reads the trace with -------------------------------------------------------

@pytest.fixture(scope="module")
def tiny():
    return build_model(preset("tiny", vocab_size=100277), "cpu")


def test_query_steps_are_the_traced_numbers_and_match_the_reference_attention(tiny):
    src, tgt = torch.tensor([[5, 6, 7, 8, 9]]), torch.tensor([[1, 2, 3]])
    _, trace = run_with_trace(tiny, src, tgt)
    stages = trace.attention("dec_self", 1)
    s = query_steps(stages, head=1, query=1)
    torch.testing.assert_close(s.scaled, s.raw / math.sqrt(s.d_k))
    assert s.mask.tolist() == [True, True, False] and math.isinf(float(s.masked[2]))
    assert float(s.weights[2]) == 0.0 and float(s.weights.sum()) == pytest.approx(1.0, abs=1e-6)
    mask = attention_mask("causal", 1, 3, 3)[:, :, 1:2]  # (1, 1, 1, 3): query 1's row
    q, k, v = stages["q"][:, 1:2, 1:2], stages["k"][:, 1:2], stages["v"][:, 1:2]
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # an independent reference
    torch.testing.assert_close(s.output, ref[0, 0, 0])
    torch.testing.assert_close(s.weights @ s.v, s.output)
    torch.testing.assert_close(s.output, s.traced_output)  # the model computed the same row in its forward
    assert s.max_difference < 1e-5


def test_row_sums_skip_and_count_fully_masked_rows():
    weights = torch.tensor([[0.25, 0.75], [0.0, 0.0], [1.0, 0.0]])
    mask = torch.tensor([[True, True], [False, False], [True, False]])
    assert row_sums(weights, mask) == (1.0, 1.0, 1)


def test_mask_marks_overlay_marks_only_masked_cells():
    masked = np.triu(np.ones((3, 3), dtype=bool), k=1)
    fig = token_heatmap(np.where(masked, np.nan, 1.0), list("abc"), list("xyz"))
    mark_cells(fig, masked, hovertemplate="masked")
    main, overlay = fig.data
    assert main.hoverongaps is False and overlay.name == "mask" and "masked" in overlay.hovertemplate
    assert [list(r) for r in overlay.text] == [["", "✕", "✕"], ["", "", "✕"], ["", "", ""]]
    assert (np.isnan(np.asarray(overlay.z, dtype=float)) == ~masked).all()
    empty = token_heatmap(np.ones((2, 2)), ["a", "b"], ["x", "y"])
    mark_cells(empty, np.zeros((2, 2), dtype=bool), hovertemplate="")
    assert len(empty.data) == 1


def test_categorical_maps_name_every_token_and_keep_the_mask_on_the_same_cells():
    from ui.figures import block_labels

    labels = [f"{i} ‘t{i}’" for i in range(10)]
    assert block_labels(labels, 4) == ["0–3: 0 ‘t0’ 1 ‘t1’ 2 ‘t2’ 3 ‘t3’", "4–7: 4 ‘t4’ 5 ‘t5’ 6 ‘t6’ 7 ‘t7’",
                                       "8–9: 8 ‘t8’ 9 ‘t9’"]
    assert block_labels(labels, 6, shown=2)[0] == "0–5: 0 ‘t0’ 1 ‘t1’ …" and block_labels(labels, 1) == labels
    z = np.tril(np.ones((10, 10)))
    fig = token_heatmap(np.where(z > 0, z, np.nan), labels, labels, categories=(labels, labels))
    mark_cells(fig, z == 0, hovertemplate="masked")
    assert fig.layout.xaxis.type == "category" and list(fig.data[1].x) == labels == list(fig.data[1].y)
    assert list(fig.layout.xaxis.tickvals) == labels  # ticks name categories, not positions


def test_long_key_labels_get_height_of_their_own_so_rows_keep_their_room():
    z = np.zeros((13, 13))
    short = [str(i) for i in range(13)]
    long = [f"{i} ‘<0xE7><0x9D>’" for i in range(13)]  # byte tokens of Chinese text, as cl100k shows them
    numbered = token_heatmap(z, long, None).layout.height  # plotly's own short ticks: no room added
    assert token_heatmap(z, short, short).layout.height - numbered < 20
    assert token_heatmap(z, long, long).layout.height - numbered >= 16 * 12 * 0.6 * 0.86  # 0.6 em a char, at 60°


def test_generated_rows_are_marked_and_the_newest_query_outlined():
    from transformer_core import load_model
    from transformer_core.analysis.next_token import generate
    from transformer_core.text.inputs import prepare

    text = "The weather was nice, so we walked"
    model, _ = load_model("everyday-gpt")
    prompt = prepare(model, text).src_ids[0].tolist()
    gen = generate(model, prompt, 3)
    at = open_app(PAGE, model="shipped:everyday-gpt", text=text, gen=",".join(map(str, gen)), lang="en")
    assert_clean(at)
    main = figure(at, "att_main")
    n = len(prompt) + len(gen)
    assert main_values(at).shape == (n, n)
    shapes = main["layout"]["shapes"]
    line = next(s for s in shapes if s["type"] == "line")
    box = next(s for s in shapes if s["type"] == "rect")
    assert line["y0"] == len(prompt) - 0.5 and (box["y0"], box["y1"]) == (n - 1.5, n - 0.5)
    assert any("3 generated token" in c.value and f"row {n - 1}" in c.value for c in at.caption)


def test_a_head_shows_each_label_with_the_input_it_was_measured_on():
    """repeat's layer 1 head 1: induction 0.60 on the probe; the page says so, and that it is not the text's score."""
    at = open_app(PAGE, model="shipped:repeat", text="d a c b g f d a c", lang="en")
    set_layer(at, 1)
    at.selectbox(key="head").set_value(1).run()
    assert_clean(at)
    info = next(i.value for i in at.info if EN_HEAD_WHAT in i.value)
    assert "**induction** pattern" in info and "random tokens written twice (the probe), not on your text" in info
    set_layer(at, 0)
    at.selectbox(key="head").set_value(1).run()
    info = next(i.value for i in at.info if EN_HEAD_WHAT in i.value)
    assert "**own token** pattern" in info and "Measured on your text." in info and "probe" not in info


EN_HEAD_WHAT = "Head 1: **"


@pytest.mark.parametrize("lang, named", [("en", r"layer 0, head \d: "), ("zh", r"第 0 层第 \d 个头：")])
def test_the_look_for_box_names_each_head_by_layer_and_head(lang, named):
    """Not "head 0.6" (read in Chinese as "the 0.6th head"): the layer and the head, each said."""
    from harness.apptest import harness_language

    with harness_language(lang):
        at = open_app("attention", model="shipped:everyday-gpt", text="The cat sat on the mat, and the cat sat.",
                      lang=lang)
    look = at.info[0].value
    assert re.search(named, look) and not re.search(r"\d\.\d+ ?(个头|:)", look), look


def test_thumbnail_rows_leave_their_titles_room_and_draw_no_tick_marks():
    from ui.panels import TITLE_ROOM_PX, thumbnails

    fig = thumbnails([np.eye(12)] * 8, [f"head {h}<br>previous token 0.9" for h in range(8)], cols=4)
    layout = fig.to_plotly_json()["layout"]
    plot_px = layout["height"] - layout["margin"]["t"] - layout["margin"]["b"]
    first, second = layout["yaxis"]["domain"], layout["yaxis5"]["domain"]  # rows 0 and 1, first column
    assert (first[0] - second[1]) * plot_px >= TITLE_ROOM_PX - 0.5  # the second row's two-line title fits above it
    axes = [a for k, a in layout.items() if k.startswith(("xaxis", "yaxis"))]
    assert len(axes) == 16 and all(a["ticks"] == "" and a["showticklabels"] is False for a in axes)


def test_key_labels_stand_upright_when_slanted_ones_would_touch():
    """20 Chinese tokens in half a page (the before/after pair) overlapped at -60°; 8 short ones still slant."""
    from ui.figures import COLUMN_PX

    zh = [f"{i} ‘{c}’" for i, c in enumerate("今天天气很好，我们去公园散步吧。今天天气很")]
    wide = token_heatmap(np.zeros((20, 20)), zh, zh, width_px=COLUMN_PX, fixed_margins=True)
    assert wide.layout.xaxis.tickangle == -90
    short = [f"{i} ‘{w}’" for i, w in enumerate("abcdefgh")]
    assert token_heatmap(np.zeros((8, 8)), short, short, width_px=COLUMN_PX).layout.xaxis.tickangle == -60


def test_right_to_left_tokens_are_isolated_so_labels_keep_their_order():
    from ui.figures import axis_labels, visible

    assert visible("hello world") == "hello␣world"  # left-to-right text unchanged
    label = axis_labels(["مرحبا", " the"])
    assert label[0] == "0 ‘\u2067مرحبا\u2069’" and label[1] == "1 ‘␣the’"
    # each right-to-left run isolated alone: a piece's "2/2" stays after its letter ("ا 2/2" was drawn "2/2 ا")
    assert visible("ا 2/2") == "\u2067ا\u2069␣2/2" and visible(" שלום עולם!") == "␣\u2067שלום␣עולם\u2069!"
    at = open_app("attention", model="shipped:everyday-gpt", text="مرحبا بالعالم، كيف حالك اليوم؟")
    assert not at.exception, at.exception
    ticks = figure(at, "att_main")["layout"]["yaxis"]["ticktext"]
    assert all(re.fullmatch(r"\d+ ‘.*’", t) for t in ticks)
    assert any("\u2067" in t and t.index("\u2067") < t.index("\u2069") for t in ticks)


def expected_look(records) -> str:
    """ui.guidance.attention_hint's line, recomputed from the records (the two clearest labelled heads)."""
    from harness.apptest import EN

    best = sorted((r for r in records if r.label), key=lambda r: -r.strength)[:2]
    if not best:
        return EN["look_attention_none"]
    return EN["look_attention"].format(heads=EN["look_list_sep"].join(
        EN["look_head"].format(layer=r.layer, head=r.head, kind=EN[f"head_kind_{r.label}"], score=r.strength)
        for r in best))


def expected_verdict(record) -> str:
    from harness.apptest import EN

    if record.label is None:
        return EN["head_what_none"].format(head=record.head)
    return EN["head_what"].format(head=record.head, kind=EN[f"head_kind_{record.label}"],
                                  score=record.scores[record.label])


def test_the_translator_s_target_follows_its_text_and_every_verdict_is_recomputed_from_its_map():
    """dates-zh, before: on "4817" the decoder read the last example's "=2026年11月23日", and the look-for box
    called that 8 x 2 map "diagonal (same position)"; on "23 November 2026" head 0 read "no single clear pattern"
    beside an alignment table aligning 4 of 4 fields. The target now follows the text (the model's own greedy
    answer), "diagonal" needs a square map, and each verdict is the label of the scores recomputed here."""
    from harness.apptest import EN
    from transformer_core import load_model, trace_text
    from transformer_core.analysis.alignment import prep_rows
    from transformer_core.analysis.heads import label_block
    from transformer_core.train.translation import translate

    model, _ = load_model("dates-zh")
    at = open_app(PAGE, model="shipped:dates-zh", text="4817", lang="en")  # a link with a text and no target
    assert_clean(at)
    for text in ("4817", "23 November 2026"):
        if text != at.session_state["text"]:
            at.sidebar.text_area(key="text").set_value(text).run()
            assert_clean(at)
        tgt = at.session_state["tgt"]
        assert tgt == "=" + translate(model, text)
        prep, trace = trace_text(model, text, tgt)
        w = trace.attention("cross", 0).weights  # the page opens on cross-attention, layer 0, head 0
        records = label_block("cross", 0, w, prep=prep)
        infos = [i.value for i in at.info]
        assert expected_look(records) in infos[0], (infos[0], expected_look(records))
        assert any(i.startswith(expected_verdict(records[0])) for i in infos), infos
        if w.size(-2) != w.size(-1):
            assert "diagonal" not in " ".join(infos)
    rows = prep_rows(prep, w[0, 0])  # "23 November 2026": the alignment table of head 0 and its verdict agree
    hits = sum(r["hit"] for r in rows)
    assert hits == len(rows) == 4 and records[0].label == "fields" and records[0].scores["fields"] == 1.0
    assert any(f"{hits} of {len(rows)} output date tokens" in c.value for c in at.caption)
    assert EN["head_does_fields"] in " ".join(i.value for i in at.info)
    at.sidebar.text_area(key="tgt").set_value("=2026年1月2日").run()  # a target typed by hand stays
    assert at.session_state["tgt"] == "=2026年1月2日"
    at.selectbox(key="head").set_value(2).run()
    assert at.session_state["tgt"] == "=2026年1月2日"
    at.sidebar.text_area(key="text").set_value("5 May 2031").run()  # until the text changes
    assert at.session_state["tgt"] == "=" + translate(model, "5 May 2031")


def test_masked_cells_of_a_larger_map_are_grey_without_an_x_and_the_title_says_so():
    """Up to 32 × 32 cells each masked cell carries an ✕ (a text element each in the browser: at 64 tokens they were
    about a quarter of a head switch's redraw); on a larger map they are grey only, and the after-mask title says grey.
    The values are the same either way: masked cells blank in the map, 0 in the main map's overlay."""
    text = " ".join(["The cat sat on the mat."] * 8)  # 56 tokens on the default
    at = open_app(PAGE, model="shipped:everyday-gpt", text=text, lang="en")
    assert_clean(at)
    assert shown_mask(at) in ("causal", "both")  # one sentence: nothing is padding
    main, (scores, kept, pair) = figure(at, "att_main"), pair_drawn(at)
    n = scores.shape[0]
    upper = np.triu(np.ones((n, n), dtype=bool), k=1)
    assert n * n > 32 * 32 and np.array_equal(~kept, upper)
    assert pair["text"]["after"] == EN["att_after_grey"] and not pair["marks"]
    [overlay] = [tr for tr in main["data"] if tr.get("name") == "mask"]
    assert (np.isnan(array(overlay["z"])) == ~upper).all() and not overlay.get("text")


def test_a_map_without_click_targets_names_its_tokens_by_the_axes_and_hovers_the_traced_numbers():
    """Between the click cap (64) and the hover cap (96) tokens the main map hovers q·k, q·k/√d_k and the weight of
    every cell; the tokens come from the axes' categories (one string per row and column), not from per-cell strings
    (2 × rows × columns of them: half the map's JSON at 88 tokens)."""
    from transformer_core import load_model, trace_text

    text = " ".join(["The cat sat on the mat."] * 11)
    at = open_app(PAGE, model="shipped:everyday-gpt", text=text, lang="en")
    assert_clean(at)
    main = figure(at, "att_main")
    [heat] = [tr for tr in main["data"] if tr["type"] == "heatmap" and tr.get("name") != "mask"]
    n = len(heat["y"])
    assert 64 < n <= 96 and not any(tr["type"] == "scatter" for tr in main["data"])  # no click targets
    assert main["layout"]["yaxis"]["type"] == main["layout"]["xaxis"]["type"] == "category"
    assert len(set(heat["y"])) == n and heat["y"][5].startswith("5 ‘")
    assert "text" not in heat and "hovertext" not in heat
    assert "%{y}" in heat["hovertemplate"] and "%{x}" in heat["hovertemplate"]
    model, _ = load_model("everyday-gpt")
    _, trace = trace_text(model, text)
    stages = trace.attention("dec_self", at.session_state["layer"])
    head = at.session_state["head"]
    custom = array(heat["customdata"]).reshape(n, n, 3)
    for i, stage in enumerate(("scores", "scaled", "weights")):
        np.testing.assert_allclose(custom[..., i], stages.head(stage, head).numpy(), atol=1e-5)


def drawn_numbers(node) -> int:
    """How many numbers a chart's traces draw (plain lists and typed arrays of z, x, y, customdata ...)."""
    if isinstance(node, dict):
        return array(node).size if "bdata" in node else sum(drawn_numbers(v) for v in node.values())
    if isinstance(node, list):
        if node and all(isinstance(x, (int, float)) or x is None for x in node):
            return len(node)
        return sum(drawn_numbers(v) for v in node)
    return 0


@pytest.mark.parametrize("switch", ["head", "layer"])
def test_a_switch_reads_from_the_trace_about_what_it_draws(switch):
    """A trace stays where the forward ran (on a GPU: copying all of it to the CPU cost 20x the forward) and a page
    brings over only what it reads: a head or layer switch reads at most 1.25x the numbers its charts and tables
    draw (4 bytes each), a few percent of the trace, and each whole stage once per run."""
    import ui.cache

    text = " ".join(["The cat sat on the mat."] * 11)  # 88 tokens on the default: the server's charts
    at = open_app(PAGE, model="shipped:everyday-gpt", text=text, lang="en")
    assert_clean(at)
    for value, _ in ui.cache.TRACES._items.values():
        value[1].fetched_bytes = 0
    at.selectbox(key=switch).set_value(3 if switch == "head" else 2).run()  # a long text keeps a layer per trace
    assert_clean(at)
    traces = [value[1] for value, _ in ui.cache.TRACES._items.values()]
    fetched = sum(trace.fetched_bytes for trace in traces)
    pair = attention_pair(at)  # the scores before and after masking and their mask, drawn in the browser
    drawn = 4 * (sum(drawn_numbers(json.loads(c.proto.spec)["data"]) for c in at.get("plotly_chart"))
                 + sum(df.value.size for df in at.dataframe) + 2 * pair["n_q"] * pair["n_k"])
    whole = max(ui.cache.held_bytes(trace) for trace in traces)
    assert 0 < fetched <= 1.25 * drawn and fetched < 0.05 * whole, (fetched, drawn, whole)


def test_one_querys_tables_are_the_traces_numbers_each_row_named_by_its_first_column(cat_trace):
    """One query step by step: the key table's and the output's numbers are the trace's; their first column names each
    row (the key with its position, the dimension), so they come without row numbers and without pandas' metadata
    (fewer bytes in every run after a switch)."""
    import pyarrow as pa

    _, _, trace = cat_trace
    at = open_app(PAGE, model=DEFAULT, text=CAT, lang="en", layer="2", head="7")
    assert_clean(at)
    query = at.selectbox(key="att_query_idx").value
    s = query_steps(trace.attention("dec_self", 2), 7, query)
    keys, out = (df for df in at.dataframe if df.value.columns[0] in ("key token", "dimension of the head"))
    np.testing.assert_allclose(keys.value["q·k"].to_numpy(), s.raw.numpy(), atol=1e-5)
    np.testing.assert_allclose(keys.value["softmax weight"].to_numpy(), s.weights.numpy(), atol=1e-6)
    assert keys.value["key token"].tolist()[:2] == ["0 ‘The’", "1 ‘␣cat’"]
    assert out.value["dimension of the head"].tolist() == list(range(len(s.output)))
    np.testing.assert_allclose(out.value["z"].to_numpy(), s.output.numpy(), atol=1e-6)
    for df in (keys, out):
        schema = pa.ipc.open_stream(df.proto.arrow_data.data).schema
        assert schema.metadata is None and schema.names == list(df.value.columns)  # no index column, no pandas
