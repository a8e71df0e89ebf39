"""Real browser (Debian Chromium), the views in English and 中文: attention readable at 60 tokens (a label per token,
hover with every number, a click on a cell explains it, colour scales, before/after masking side by side), the whole
model in one picture (a click opens its block), the FFN & residual page, "what to look for" on every step, complete
中文, a URL that reproduces the view on a fresh server, small defects that must stay gone, and downloads (PNG, SVG,
CSV).

Models are named in every URL (shipped reverse / repeat / copy, the course-base preset), never the default. The
server is the one the browser modules share (a second, fresh one only for the shared-link test). With SCREENSHOTS=1,
screenshots go to screenshots/ (git-ignored).
"""
import io
import json
import re
import time
from csv import reader as csv_rows
from urllib.parse import parse_qs, unquote, urlparse

import pytest

from harness.browser import (
    ATT_PAIR,
    ATT_VIEW,
    ERROR_BOX,
    INFO_BOX,
    LOOK_BOX,
    MAIN,
    SIDEBAR,
    WARNING_BOX,
    app_text,
    app_url,
    assert_clean,
    camera,
    choose,
    click_plot,
    combobox_value,
    download,
    english_only,
    english_shown,
    enter_number,
    enter_text,
    legend_texts,
    new_tab,
    next_token,
    not_chinese,
    pair_hover,
    pair_state,
    pick_layer,
    pick_mask,
    plot_index,
    plots,
    press_slider,
    radio,
    require_browser,
    run_after,
    runs_ended,
    s,
    screenshot,
    settle,
    shown_layer,
    shown_mask,
    slider,
    trace_point,
    type_into,
    view_cell,
    view_head,
    view_pick,
    view_settled,
    view_state,
)
from harness.server import ROOT, fresh_app
from ui.i18n import strings

sync_api = require_browser()
expect = sync_api.expect

SHOTS = ROOT / "screenshots"
S = strings()
REVERSE, REPEAT, COPY = "shipped:reverse", "shipped:repeat", "shipped:copy"
COURSE_BASE = "preset:course-base@cl100k_base"
FIRST_RUN_MS = 300_000  # the first run builds the random-init course-base preset (~200M parameters) on 2 busy cores
# 58 cl100k tokens, every one labelled on both axes of the large map
LONG_TEXT = ("The quick brown fox jumps over the lazy dog while the curious cat watches from the warm windowsill, and "
             "a small bird sings softly in the old oak tree as the morning sun rises slowly over the quiet green "
             "hills, the river, the meadow and the distant sleepy village far below us.")
MODEL_NAMES = ("reverse", "repeat", "copy", "sort", "count", "course-base", "course-gpt")
ENGLISH_ONLY = english_only(S, ignore=MODEL_NAMES)
# what some tests see and later tests judge (so that a check costs no page load of its own)
SEEN: dict[str, object] = {}
# the view's key labels (one per column of the large map): their font size and the least room between two neighbours
X_LABELS_JS = """root => {
    const boxes = Array.from(root.querySelectorAll('.xlab div'), e => e.getBoundingClientRect());
    const gaps = boxes.slice(1).map((b, i) => b.left - boxes[i].right);
    return {n: boxes.length, font: parseFloat(getComputedStyle(root.querySelector('.xlab')).fontSize),
            gap: Math.min(...gaps), width: Math.min(...boxes.map(b => b.width)),
            rows: root.querySelectorAll('.ylab div').length};
}"""


def go(page, app, path: str = "", lang: str = "en", *, charts: bool = True, timeout: float = 120_000,
       **params) -> None:
    page.goto(app_url(app, path, lang, **params))
    settle(page, timeout=timeout, charts=charts)
    assert_clean(page, app, f"/{path} ({lang})")


def type_sidebar_text(page, text: str, lang: str = "en") -> None:
    enter_text(page, s("input_text", lang), text, SIDEBAR)


def main_title(head: int, lang: str = "en", scale: str = "01", *, layer: int = 0) -> str:
    return s("att_main_title", lang, layer=layer, head=head, scale=s(f"att_scale_{scale}", lang))


def number_after(label: str, text: str) -> float:
    found = re.search(re.escape(label) + r"\s*=?\s*\**(-?[0-9.]+(?:e-?[0-9]+)?)", text)
    assert found, f"no number after {label!r} in {text!r}"
    return float(found.group(1))


def check_attention_map(page, lang: str, n_q: int, n_k: int, layer: int = 0) -> dict:
    """The large map (the browser's view): one label per token on both axes, a hover with the query, the key and the
    weight; before/after masking side by side; one small map per head."""
    view = view_state(page)
    assert (view["n_q"], view["n_k"]) == (n_q, n_k) and view["title"] == main_title(0, lang, layer=layer)
    assert len(set(view["q"])) == n_q and all(lab.startswith(f"{j} ‘") for j, lab in enumerate(view["q"]))
    labels = page.locator(ATT_VIEW).evaluate(X_LABELS_JS)
    assert (labels["rows"], labels["n"]) == (n_q, n_k), labels  # every token labelled, none dropped
    q, k = min(10, n_q - 1), min(5, n_k - 1)
    hover = view_cell(page, q, k, hover=True)
    weight = view["weights"][0][q][k]
    assert hover == [f"{s('attn_queries', lang)}: {view['q'][q]}", f"{s('attn_keys', lang)}: {view['k'][k]}",
                     f"{s('attn_col_weight', lang)} = {weight:.4f}" if weight is not None
                     else f"{s('att_masked_hover', lang)} → 0"], hover
    pair = pair_state(page)  # before / after masking, side by side, every row labelled on each
    box_b, box_a = pair["panels"]
    assert abs(box_b["y"] - box_a["y"]) < 5 and box_a["x"] > box_b["x"] + box_b["width"], (box_b, box_a)
    grey = not pair["marks"] and any(None in row for row in pair["after"])  # masked cells grey, no ✕: says so
    assert [p["title"] for p in pair["panels"]] == [s("att_before", lang), s(f"att_after{'_grey' * grey}", lang)]
    assert box_b["labels"] == box_a["labels"] == n_q and (pair["n_q"], pair["n_k"]) == (n_q, n_k)
    score = pair["before"][q][k]
    assert pair_hover(page, 0, q, k) == [f"{s('attn_queries', lang)}: {view['q'][q]}",
                                         f"{s('attn_keys', lang)}: {view['k'][k]}", f"{score:.4f}"]
    assert pair_hover(page, 1, q, k)[-1] == (f"{score:.4f}" if weight is not None else s("att_masked_hover", lang))
    assert page.locator(f"{ATT_VIEW} .thumb").count() == len(view["weights"]) >= 2
    return {"q": q, "k": k, "hover": " ".join(hover), "view": view}


def check_cell_click(page, lang: str, seen: dict) -> None:
    """A click on a cell: "Why <query> gives <key> this weight" with q·k, the scaling and the weight of that cell."""
    view, q, k = seen["view"], seen["q"], seen["k"]
    view_cell(page, q, k)
    title = s("att_cell_title", lang, q=view["q"][q], k=view["k"][k])
    expect(page.locator(MAIN).get_by_role("heading", name=title)).to_be_visible()
    numbers = page.locator(MAIN).locator("[data-testid='stMarkdownContainer']").filter(has_text="√d_k = √").first
    text = numbers.inner_text()
    assert "q·k" in text
    weight = number_after(s("attn_col_weight", lang), seen["hover"])
    assert f"{weight:.4f}" in text, f"the cell's weight {weight:.4f} is not in {text!r}"


def check_scales(page, lang: str, head: int = 0, layer: int = 0) -> None:
    """0–1, per row (each row's largest weight is 1) and log (log10 of the weights) colour the same map differently;
    each is drawn in the browser, then recorded in the link."""
    z01 = view_state(page)["drawn"]
    view_pick(page, scale="row")
    row = view_state(page)
    assert row["drawn"] != z01 and row["title"] == main_title(head, lang, "row", layer=layer)
    n = row["n_k"]
    rows = [row["drawn"][i:i + n] for i in range(0, len(row["drawn"]), n)]
    assert all(max(v for v in r if v is not None) == pytest.approx(1.0) for r in rows if any(r))
    view_pick(page, scale="log")
    z_log = view_state(page)["drawn"]
    assert all(-6.0 - 1e-6 <= v <= 1e-6 for v in z_log if v is not None)
    assert z_log != z01 and z_log != row["drawn"]
    assert parse_qs(urlparse(page.url).query).get("scale") == ["log"], page.url


# ---- attention you can read at any length -------------------------------------------------------------------------

def see_chinese(page, where: str) -> None:
    """Record what a page in 中文 shows that is not Chinese (judged by the tests below)."""
    SEEN.setdefault("zh_legends", {})[where] = not_chinese(legend_texts(page), S)
    SEEN.setdefault("zh_stars", {})[where] = app_text(page).count("**")
    SEEN["zh_nav"] = page.locator("[data-testid='stSidebarNav']").inner_text()


def test_attention_is_readable_at_60_tokens(app, tab):
    """58 tokens on course-base (encoder self-attention): a label per token on both axes of the large map, a hover
    with query, key and the weight, a small map of every head, before/after masking side by side, the random-weights
    guidance; a click on a cell explains that cell (q·k, the scaling, the weight)."""
    from transformer_core.text.tokenizer import load_encoding

    n = len(load_encoding("cl100k_base").encode(LONG_TEXT))  # the shipped BPE file: no download, no cache needed
    t0 = time.monotonic()
    go(tab, app, "attention", model=COURSE_BASE, text=LONG_TEXT, block="enc_self", timeout=FIRST_RUN_MS)
    print(f"\nattention, {n} tokens on course-base: first view in {time.monotonic() - t0:.1f} s")
    seen = check_attention_map(tab, "en", n, n)
    SEEN["x_labels_58"] = tab.locator(ATT_VIEW).evaluate(X_LABELS_JS)
    expect(tab.locator(INFO_BOX).filter(has_text=s("look_attention_random").split(":")[0])).to_be_visible()
    screenshot(tab, SHOTS / "attention_60_tokens_en.png")
    t0 = time.monotonic()
    check_cell_click(tab, "en", seen)
    print(f"\nattention, 58 tokens: a click on a cell explained in {time.monotonic() - t0:.1f} s")
    assert_clean(tab, app, "attention, 60 tokens")


def test_attention_in_chinese_hover_cell_scale_and_masks(app, tab):
    """The same in 中文 on reverse (decoder self-attention, causal mask marked after masking), and the colour scales:
    per row (each row's largest weight is 1) and log change the map's values."""
    go(tab, app, "attention", "zh", model=REVERSE, layer=1, block="dec_self")
    seen = check_attention_map(tab, "zh", 4, 4, layer=1)
    SEEN["hover"] = seen["hover"]
    pair = pair_state(tab)  # the causal mask's cells are marked (✕) after masking, the scores kept before it
    assert pair["marks"] and [row.count(None) for row in pair["after"]] == [3, 2, 1, 0]
    assert all(None not in row for row in pair["before"])
    check_cell_click(tab, "zh", seen)
    check_scales(tab, "zh", layer=1)
    screenshot(tab, SHOTS / "attention_zh.png")
    assert_clean(tab, app, "attention in Chinese")
    see_chinese(tab, "/attention")
    check_narrow_pair(tab)
    # last: a click on head 2's small map (judged by the test below)
    view_pick(tab, head=2, thumbnail=True)
    shown = view_state(tab)
    SEEN["thumbnail"] = {"errors": tab.locator(ERROR_BOX).all_inner_texts(), "title": shown["title"],
                         "head": view_head(tab), "chosen": shown["chosen"], "url": tab.url}


def test_the_views_drawn_in_the_browser_switch_language_with_the_sidebar(app, tab):
    """The Attention and Logits pages' views after the sidebar's 中文: their own controls in Chinese (they kept their
    English words: a view wrote them once), the picks kept."""
    go(tab, app, "attention", model=REPEAT, layer=1, head=2, mask="none")
    radio(tab, s("language"), "中文", where=SIDEBAR)
    settle(tab, charts=True)
    view = tab.locator(".av")
    expect(view.locator(".field.layer")).to_contain_text(s("att_layer", "zh"))
    masks = view.locator(".field.mask .option").all_inner_texts()
    assert masks and all(any(m == s(k, "zh") for k in strings() if k.startswith("mask_")) for m in masks), masks
    assert (shown_layer(tab, "zh"), view_head(tab), view_state(tab)["mask"]) == ("1", "2", "none")
    tab.locator(SIDEBAR).locator("[data-testid='stSidebarNav'] a").filter(has_text=s("nav_logits", "zh")).click()
    settle(tab, charts=True)
    expect(tab.locator(".sv label[for='sv-T']")).to_contain_text(s("log_temperature", "zh"))
    radio(tab, s("language"), "English", where=SIDEBAR)
    settle(tab, charts=True)
    expect(tab.locator(".sv label[for='sv-T']")).to_contain_text(s("log_temperature"))
    assert_clean(tab, app, "the views after the language switches")


PICK_JS = """([root, name, value]) => {  // pick as a learner does, then read what is drawn in the same task
    const radio = name === 'scale' || name === 'mask';
    const box = root.querySelector(radio ? `input[name='${name}'][value='${value}']` : `select[name='${name}']`);
    if (radio) box.checked = true; else box.value = value;
    box.dispatchEvent(new Event('change'));
    const drawn = Array.from(root.__z, v => Number.isNaN(v) ? null : v);
    return {title: root.querySelector('.title').textContent, drawn};
}"""


def layer_picked_in_the_view(tab, root, trace, layer: int, head: int):
    """Pick `layer` in the view's list: drawn in the same task as the pick, before any server run, titled by the
    layer, its head `head` the trace's weights (to the view's 4 decimals) with its masked cells; returns (weights,
    kept) of that head."""
    import numpy as np

    runs = runs_ended(tab)
    drawn = tab.evaluate(PICK_JS, [root, "layer", str(layer)])
    assert runs_ended(tab) == runs and drawn["title"] == main_title(head, layer=layer)
    stages = trace.attention("dec_self", layer)
    w, kept = stages.weights[0][head].float().numpy(), stages.mask[0][head].numpy().astype(bool)
    got = np.array([np.nan if v is None else v for v in drawn["drawn"]]).reshape(w.shape)
    assert np.array_equal(np.isnan(got), ~kept) and np.nanmax(np.abs(got - np.where(kept, w, np.nan))) <= 5e-5
    return w, kept


def check_narrow_pair(tab) -> None:
    """A window resized narrower (or the sidebar opened) redraws the pair and the view in the room they have, with no
    run: the small pair stays side by side, its cells smaller (its labels measured in the font they are drawn in)."""
    size = tab.viewport_size
    before = pair_state(tab)["panels"]
    tab.set_viewport_size({"width": 1000, "height": size["height"]})
    try:
        for _ in range(100):  # redrawn by the element's ResizeObserver: no run, nothing to wait for but the drawing
            box_b, box_a = pair_state(tab)["panels"]
            if box_b["width"] < before[0]["width"]:
                break
            tab.wait_for_timeout(100)
        assert abs(box_b["y"] - box_a["y"]) < 5 and box_a["x"] > box_b["x"] + box_b["width"], (box_b, box_a)
        assert 4 * 20 <= box_b["width"] < before[0]["width"]
    finally:
        tab.set_viewport_size(size)


def test_the_views_numbers_are_the_traces_and_a_pick_is_drawn_before_the_server_hears_of_it(app, tab):
    """The default model, layer 2: every head's weights the view holds are the trace's to the 4 decimals the hover
    shows (masked cells none); on each colour scale the colours stand for what ui.figures.scaled_weights gives the
    server's charts (to the view's precision); a pick of head, scale or (a short text: the view holds every layer
    under both masks) layer and mask is drawn in the same task as the click, before any server run, and then reaches
    the link."""
    import numpy as np

    from transformer_core import load_model, trace_text
    from ui.figures import scaled_weights

    text = "The cat sat on the mat. The cat sat on the"
    go(tab, app, "attention", model="shipped:everyday-gpt", text=text, layer=2)
    model, _ = load_model("shipped:everyday-gpt")
    _, trace = trace_text(model, text)
    stages = trace.attention("dec_self", 2)
    w, kept = stages.weights[0].float().numpy(), stages.mask[0].numpy().astype(bool)
    held = view_state(tab)["weights"]  # the server traces on as many threads as this process (tests/conftest.py)
    expected = [[[f"{v:.4f}" if k else None for v, k in zip(wr, kr, strict=True)]
                 for wr, kr in zip(wh, kh, strict=True)] for wh, kh in zip(w, kept, strict=True)]
    assert [[[None if v is None else f"{v:.4f}" for v in row] for row in h] for h in held] == expected
    root = tab.locator(ATT_VIEW).element_handle()
    runs = runs_ended(tab)
    drawn = tab.evaluate(PICK_JS, [root, "head", "3"])
    assert drawn["title"] == main_title(3, layer=2) and runs_ended(tab) == runs  # drawn before the server heard of it
    top = np.nanmax(np.where(kept[3], w[3], np.nan), axis=1, keepdims=True)  # each row's largest weight
    # the view's precision: 4 decimals; their ratio to the row's largest; 255 steps over 6 decades
    tol = {"01": 5e-5, "row": 1e-4 / top, "log": 3 / 255}
    for scale in ("row", "log", "01"):
        drawn = tab.evaluate(PICK_JS, [root, "scale", scale])
        assert drawn["title"] == main_title(3, scale=scale, layer=2)
        z, _ = scaled_weights(np.where(kept[3], w[3], np.nan), scale)
        got = np.array([np.nan if v is None else v for v in drawn["drawn"]]).reshape(z.shape)
        assert np.array_equal(np.isnan(got), np.isnan(z)), scale
        off = np.abs(got - z) - np.broadcast_to(tol[scale], z.shape)
        assert np.nanmax(off) <= 1e-6, (scale, np.nanmax(off))
    settle(tab)
    params = parse_qs(urlparse(tab.url).query)
    assert params.get("head") == ["3"] and "scale" not in params, tab.url  # told once, after the last pick
    pair = pair_state(tab)  # the run the pick started: head 3's scores before and after masking, drawn here
    scaled = stages.head("scaled", 3).numpy()
    before = np.array(pair["before"], dtype=float)
    after = np.array([[np.nan if v is None else v for v in row] for row in pair["after"]])
    assert np.abs(before - scaled).max() <= 5e-5 + 1e-6 and np.array_equal(np.isnan(after), ~kept[3])
    assert pair["lim"] == pytest.approx(float(np.abs(scaled).max()), rel=1e-6)
    assert_clean(tab, app, "attention after picks in the view")
    shown = view_state(tab)  # a text this short: every layer under both masks came with the page's run
    assert shown["layers"] == 4 and shown["layer"] == 2 and sorted(shown["held"]) == [[m, layer] for m in (0, 1)
                                                                                        for layer in range(4)]
    assert not tab.locator(f"{MAIN} [data-testid='stSelectbox']").filter(has_text=s("att_layer")).count()  # no box
    w0, kept0 = layer_picked_in_the_view(tab, root, trace, 0, 3)  # layer 0's head 3
    settle(tab)
    params = parse_qs(urlparse(tab.url).query)
    assert "layer" not in params and params.get("head") == ["3"], tab.url  # layer 0: the default, left out
    held = view_state(tab)
    assert held["layer"] == 0 and held["weights"][3] == [[None if not k else float(f"{v:.4f}") for v, k in
                                                          zip(wr, kr, strict=True)] for wr, kr in zip(w0, kept0,
                                                                                                       strict=True)]
    assert_clean(tab, app, "attention after a layer picked in the view")
    # the mask, likewise: no mask, every key kept
    assert shown["mask"] == "both" and shown["modes"] == {"none": 0, "causal": 1, "padding": 0, "both": 1}
    runs = runs_ended(tab)
    drawn = tab.evaluate(PICK_JS, [root, "mask", "none"])
    assert runs_ended(tab) == runs
    _, unmasked = trace_text(model, text, masks={"dec_self": "none"})
    wn = unmasked.attention("dec_self", 0).weights[0][3].float().numpy()
    got = np.array([np.nan if v is None else v for v in drawn["drawn"]]).reshape(wn.shape)
    assert not np.isnan(got).any() and np.abs(got - wn).max() <= 5e-5
    settle(tab)
    assert parse_qs(urlparse(tab.url).query).get("mask") == ["none"], tab.url
    assert view_state(tab)["mask"] == "none" and shown_mask(tab) == s("mask_none")
    assert_clean(tab, app, "attention after a mask picked in the view")


LONGER = "The cat sat on the mat and looked at the dog, and the dog looked back at the cat for a very long while"
LONGER = LONGER + ". " + LONGER  # 53 tokens: the page's run sends one layer's maps, the view asks for the others
# a mask picked as a learner does, without the pointer on the radio first: what is drawn in the same task
UNASKED_JS = """([root, mode]) => {
    const box = root.querySelector(`input[name='mask'][value='${mode}']`);
    box.checked = true;
    box.dispatchEvent(new Event('change'));
    return {title: root.querySelector('.title').textContent, waiting: root.classList.contains('waiting'),
            asking: root.hasAttribute('data-asking')};
}"""


def test_a_longer_texts_view_asks_for_the_maps_it_lacks_then_draws_a_pick_before_the_server_hears(app, tab):
    """53 tokens on the default model: the page's run sends the chosen layer's maps (light, and nothing more until
    the learner goes for the Layer list or the mask radio); the pointer on the list makes the view ask for its mask's
    other layers with a run of its own, on the radio for the layer under the other mask; then a pick in the view is
    drawn in the same task as the click, with the trace's numbers, and reaches the link. A mask picked before its
    maps came is named as on its way, its maps faded, until a run sends them."""
    import numpy as np

    from transformer_core import load_model, trace_text

    go(tab, app, "attention", model="shipped:everyday-gpt", text=LONGER, layer=1)
    view_settled(tab)
    runs = runs_ended(tab)
    tab.wait_for_timeout(500)
    first = view_state(tab)
    # the chosen layer's maps under the causal mask (set 1), and the nearest one that fits beside it (FIRST_CELLS)
    assert first["held"] == [[1, 1], [1, 0]] and first["layers"] == 4 and not first["asking"]
    assert runs_ended(tab) == runs  # no ask of its own yet
    assert not tab.locator(f"{MAIN} [data-testid='stSelectbox']").filter(has_text=s("att_layer")).count()  # no box
    tab.locator(f"{ATT_VIEW} .field.layer").hover()
    view_settled(tab)
    shown = view_state(tab)
    assert sorted(shown["held"]) == [[1, layer] for layer in range(4)] and not shown["asking"]
    assert shown["layer"] == 1 and shown["n_q"] == 53
    model, _ = load_model("shipped:everyday-gpt")
    _, trace = trace_text(model, LONGER)
    root = tab.locator(ATT_VIEW).element_handle()
    layer_picked_in_the_view(tab, root, trace, 3, 0)
    settle(tab)
    assert parse_qs(urlparse(tab.url).query).get("layer") == ["3"], tab.url
    assert view_state(tab)["layer"] == 3 and not tab.locator(f"{ATT_VIEW}.waiting").count()
    # no mask, picked before its maps came: on their way, the maps drawn faded (no ask: the run that tells the server
    # the pick sends them); then drawn from that run's
    waiting = tab.evaluate(UNASKED_JS, [root, "none"])
    assert waiting == {"title": s("att_view_asking", layer=3), "waiting": True, "asking": False}
    view_settled(tab)
    _, unmasked = trace_text(model, LONGER, masks={"dec_self": "none"})
    after = view_state(tab)
    assert after["mask"] == "none" and [0, 3] in after["held"] and not after["waiting"]
    w = unmasked.attention("dec_self", 3).weights[0][0].float().numpy()
    assert np.abs(np.array(after["drawn"]).reshape(w.shape) - w).max() <= 5e-5
    assert parse_qs(urlparse(tab.url).query).get("mask") == ["none"], tab.url
    # the pointer on the list again: no mask's other layers come (3 of 53 x 53 x 8 cells: one ask), then a pick of
    # one is drawn at once
    tab.locator(f"{ATT_VIEW} .field.layer").hover()
    view_settled(tab)
    assert sorted(view_state(tab)["held"]) == [[m, layer] for m in (0, 1) for layer in range(4)]
    layer_picked_in_the_view(tab, root, unmasked, 0, 0)
    settle(tab)
    # and back to the causal mask through the radio, the pointer on it first: held, nothing asked
    runs = runs_ended(tab)
    tab.locator(f"{ATT_VIEW} .field.mask").hover()
    tab.wait_for_timeout(300)
    assert runs_ended(tab) == runs and not view_state(tab)["asking"]
    drawn = tab.evaluate(PICK_JS, [root, "mask", "both"])
    assert runs_ended(tab) == runs and drawn["title"] == main_title(0, layer=0)
    settle(tab)
    assert_clean(tab, app, "attention after picks in the view of a longer text")


def test_the_kind_filter_narrows_the_views_small_maps_of_its_layer(app, tab):
    """The kind filter's pills (the server's, per layer): the view shows small only the heads of the kinds picked for
    the chosen layer; another layer picked in the view shows every head at once."""
    go(tab, app, "attention", model="shipped:everyday-gpt", text="The cat sat on the mat. The cat sat on the", layer=2)
    view_settled(tab)
    thumbs = tab.locator(f"{ATT_VIEW} .thumb")
    assert thumbs.count() == 8
    pill = tab.locator(f"{MAIN} [data-testid='stButtonGroup'] button", has_text=s("head_kind_induction"))
    run_after(tab, pill.click)
    view_settled(tab)
    kept = [int(h) for h in thumbs.evaluate_all("fs => fs.map(f => f.dataset.head)")]
    assert 0 < len(kept) < 8 and all(s("head_kind_induction") in thumbs.nth(i).inner_text() for i in range(len(kept)))
    root = tab.locator(ATT_VIEW).element_handle()
    tab.evaluate(PICK_JS, [root, "layer", "0"])
    assert thumbs.count() == 8  # drawn at once: the filter is layer 2's (its pills)
    settle(tab)
    assert thumbs.count() == 8
    assert_clean(tab, app, "attention with the kind filter")


def seen(key: str):
    if key not in SEEN:
        pytest.skip(f"the test that looks at this ({key}) did not run")
    return SEEN[key]


def test_clicking_a_thumbnail_shows_that_head_large():
    clicked = seen("thumbnail")
    assert not clicked["errors"], clicked["errors"]
    # head 2 large, in the colour scale chosen last (check_scales ends on log): a click keeps the learner's choice
    assert clicked["title"] == main_title(2, "zh", "log", layer=1), clicked["title"]
    assert clicked["head"] == "2" and clicked["chosen"] == [2]
    assert parse_qs(urlparse(clicked["url"]).query).get("head") == ["2"], clicked["url"]


def test_hover_numbers_are_rounded():
    long_numbers = re.findall(r"-?\d+\.\d{7,}", seen("hover"))
    assert not long_numbers, f"hover shows unrounded numbers: {long_numbers} in {seen('hover')!r}"


def test_key_labels_of_a_60_token_map_do_not_overlap():
    x = seen("x_labels_58")
    assert x["gap"] >= -0.5 and x["font"] >= 7 and x["width"] >= x["font"] - 2, x


# ---- the whole model in one picture ---------------------------------------------------------------------------------

# the model map's block labels (its "labels" trace) and, per block, whether its drawn label lies inside its drawn
# box (the i-th shape is the i-th block, as is the i-th text point)
MAP_JS = """(i) => {
    const p = document.querySelectorAll("[data-testid='stPlotlyChart'] .js-plotly-plot")[i];
    const k = p._fullData.findIndex(d => d.name === 'labels');
    const boxes = p.querySelectorAll('.shapelayer path');
    const points = p.querySelectorAll('.scatterlayer .trace')[k].querySelectorAll('.textpoint');
    const outside = [];
    boxes.forEach((b, j) => {
        const r = b.getBoundingClientRect(), t = points[j].getBoundingClientRect();
        if (t.left < r.left - 1 || t.right > r.right + 1 || t.top < r.top - 1 || t.bottom > r.bottom + 1)
            outside.push(points[j].textContent);
    });
    return {labels: Array.from(p._fullData[k].text), outside: outside};
}"""


def map_blocks(page) -> tuple[int, str]:
    """The model map's index and all its block labels (a title wrapped in a narrow box read on one line)."""
    i = next(j for j, p in enumerate(plots(page)) if "blocks" in p["names"])
    labels = [re.sub(r"<b>(.*?)</b>", lambda m: "<b>" + m[1].replace("<br>", " ") + "</b>", a)
              for a in page.evaluate(MAP_JS, i)["labels"]]
    return i, "\n".join(labels)


def text_outside_boxes(page, i: int) -> list[str]:
    return page.evaluate(MAP_JS, i)["outside"]


def click_block(page, index: int, target: str) -> None:
    blocks = trace_point(page, index, "blocks")
    pt = trace_point(page, index, "blocks", blocks["customdata"].index(target))
    click_plot(page, index, pt["x"], pt["y"])


def test_whole_model_picture_encoder_decoder_and_a_click_opens_the_block(app, tab):
    """Every block of reverse (tokens, embedding, self-attention, Add & Norm, FFN, memory, cross-attention, logits,
    softmax) with live shapes; a click on layer 1's cross-attention opens the attention page there; its colour
    scales (English)."""
    go(tab, app, "", model=REVERSE)
    look = tab.locator(INFO_BOX).filter(has_text=s("look_map").split(":")[0])
    expect(look).to_be_visible()
    i, text = map_blocks(tab)
    for key, fmt in (("map_tokens", {"side": s("map_side_encoder")}), ("map_tokens", {"side": s("map_side_decoder")}),
                     ("map_embed", {}), ("map_enc_self", {}), ("map_dec_self", {}), ("map_cross", {}),
                     ("map_addnorm", {}), ("map_ffn", {}), ("map_memory", {}), ("map_softmax", {})):
        assert f"<b>{s(key, **fmt)}</b>" in text, f"block {key} missing from the picture:\n{text}"
    assert s("map_logits") in text or s("map_logits_norm") in text
    assert "1×4×128" in text and "1×4×21" in text  # live shapes: embeddings (d_model 128) and logits (21 tokens)
    assert text_outside_boxes(tab, i) == []  # ten boxes a row: every text still inside its box
    screenshot(tab, SHOTS / "whole_model_en_reverse.png")
    click_block(tab, i, "attention:1:cross")
    expect(tab.locator("h1").first).to_have_text(s("nav_attention"))
    assert urlparse(tab.url).path == "/attention"
    assert shown_layer(tab) == "1"
    assert combobox_value(tab, s("att_block")) == s("block_cross")
    box = tab.locator(MAIN).get_by_role("combobox", name=s("att_block"), exact=True)
    assert box.evaluate("e => e.scrollWidth <= e.clientWidth + 1")  # whole ("cross-attention (queries: decode")
    assert_clean(tab, app, "attention opened from the picture")
    check_scales(tab, "en", layer=1)


def test_whole_model_picture_in_chinese_decoder_only(app, tab):
    """The picture of repeat (decoder-only: no cross-attention) in 中文; a click on layer 1's attention opens it."""
    go(tab, app, "", "zh", model=REPEAT)
    i, text = map_blocks(tab)
    for key in ("map_embed", "map_dec_self", "map_addnorm", "map_ffn", "map_softmax"):
        assert f"<b>{s(key, 'zh')}</b>" in text, f"block {key} missing from the picture:\n{text}"
    assert s("map_cross", "zh") not in text and s("map_memory", "zh") not in text  # decoder-only: no cross-attention
    assert text_outside_boxes(tab, i) == []
    assert not english_shown(app_text(tab), ENGLISH_ONLY)
    screenshot(tab, SHOTS / "whole_model_zh_repeat.png")
    click_block(tab, i, "attention:1:dec_self")
    expect(tab.locator("h1").first).to_have_text(s("nav_attention", "zh"))
    assert shown_layer(tab, "zh") == "1"
    assert_clean(tab, app, "attention opened from the picture, in Chinese")


# ---- guidance, the FFN & residual stream, complete 中文 --------------------------------------------------------------

LOOK = {"en": "What to look for", "zh": "看点"}
STEP_PAGES = ("", "embeddings", "attention", "ffn", "logits")


def check_ffn(page, lang: str) -> None:
    """The FFN & residual page: its four charts (stream mean, norms per token and step, what each sub-layer adds, the
    LayerNorm's histogram), the LayerNorm's numbers for one token and the table of what each step adds."""
    titles = [p["title"] for p in plots(page)]
    assert len(titles) >= 4, titles
    heat = plots(page)[plot_index(page, s("ffn_stream_tokens", lang))]
    assert len(heat["yticks"]) == 4  # the encoder's 4 tokens (its stack is shown first)
    assert len(heat["xticks"]) == 1 + 2 * 2  # the embeddings, then self-attention and FFN in each of the 2 layers
    ln = page.locator(MAIN).locator("[data-testid='stMarkdownContainer']").filter(has_text="LayerNorm").filter(
        has_text=re.compile(r"\d+\.\d{3}")).first
    assert len(re.findall(r"-?\d+\.\d{2,3}", ln.inner_text())) >= 6, ln.inner_text()
    assert page.locator(MAIN).locator("[data-testid='stDataFrame']").count() >= 1


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_each_step_page_says_what_to_look_for(app, tab, lang):
    """Overview, embeddings, attention, FFN and logits each show one "what to look for" box (with this model's own
    numbers); the FFN & residual page draws its charts and numbers; in 中文 no English-only string shows."""
    english = {}
    for path in STEP_PAGES:
        go(tab, app, path, lang, model=REVERSE)
        box = tab.locator(LOOK_BOX).filter(has_text=LOOK[lang])
        assert box.count() == 1, f"/{path}: {box.count()} boxes saying {LOOK[lang]!r}"
        assert len(box.inner_text()) > 40, box.inner_text()
        if path == "ffn":
            check_ffn(tab, lang)
        if lang == "zh":
            english.update({f"/{path}: {k}": p for k, p in english_shown(app_text(tab), ENGLISH_ONLY)})
            see_chinese(tab, f"/{path}")
            if path in ("ffn", "logits"):
                screenshot(tab, SHOTS / f"{path}_zh.png")
    assert not english, f"English shown in 中文: {english}"


def test_tokenizer_says_what_to_look_for_in_a_chinese_text(app, tab):
    """A text whose characters cl100k splits into byte pieces gets the tokenizer's guidance."""
    go(tab, app, "tokenizer", model=COURSE_BASE, text="同志们!我踩着地雷了", charts=False, timeout=FIRST_RUN_MS)
    expect(tab.locator(INFO_BOX).filter(has_text=LOOK["en"])).to_be_visible()


def test_chinese_pages_show_no_english_only_string(app, tab):
    """Every string whose English and Chinese differ: its English never shows in 中文 (sidebar, text, chart titles
    and labels) on the tokenizer and model pages (the step pages: above) and in a message from the core (a text
    the model cannot read)."""
    found = {}
    for path in ("tokenizer", "model"):
        go(tab, app, path, "zh", model=REVERSE, charts=path == "model")
        expect(tab.locator("h1").first).to_have_text(s(f"nav_{path}", "zh"))
        found.update({f"/{path}: {k}": p for k, p in english_shown(app_text(tab), ENGLISH_ONLY)})
        see_chinese(tab, f"/{path}")
        if path == "tokenizer":  # the model's own example text, all ASCII (judged by a test below)
            SEEN["tokenizer_look"] = tab.locator(INFO_BOX).filter(has_text=LOOK["zh"]).count()
        screenshot(tab, SHOTS / f"{path}_zh.png")
    go(tab, app, "attention", "zh", model=REVERSE, text="hello world", charts=False)
    expect(tab.locator(WARNING_BOX).filter(has_text=s("err.tokens_not_in_vocab", "zh")[:8])).to_be_visible()
    found.update({f"/attention, unreadable text: {k}": p for k, p in english_shown(app_text(tab), ENGLISH_ONLY)})
    screenshot(tab, SHOTS / "attention_unreadable_text_zh.png")
    assert not found, f"English shown in 中文: {found}"


def test_tokenizer_says_what_to_look_for_in_any_text():
    assert seen("tokenizer_look") == 1


def test_chinese_sidebar_menu_has_no_english_button():
    assert not re.search(r"View \d+ more|View less", seen("zh_nav")), seen("zh_nav")


def test_chart_legends_are_chinese():
    bad = {k: v for k, v in seen("zh_legends").items() if v}
    assert not bad, f"legend entries in 中文 without Chinese: {bad}"


def test_no_markdown_asterisks_shown_in_chinese():
    shown = {k: v for k, v in seen("zh_stars").items() if v}
    assert not shown, f"literal ** shown: {shown}"


# ---- the URL reproduces the view ------------------------------------------------------------------------------------

def generated_chips(page) -> list[str]:
    """The token chips of the logits page's sequence."""
    return page.locator(MAIN).locator("[data-testid='stHtml']").first.locator("span").all_inner_texts()


def test_url_reproduces_the_view_on_a_fresh_server(app, tab, browser, tmp_path):
    """Model, text, layer, head, block, mask, colour scale, temperature, top-k, top-p, seed and two generated tokens
    set by hand; the page's link, opened in a new browser on a fresh server, shows all of them (in 中文, chosen too)."""
    go(tab, app, "attention", model=COPY)
    choose(tab, s("model"), f"reverse · {s('kind_shipped')}", where=SIDEBAR)
    type_sidebar_text(tab, "b d a c")
    pick_layer(tab, 1)
    choose(tab, s("att_block"), s("block_enc_self"))
    view_pick(tab, head=2)
    pick_mask(tab, "none")
    view_pick(tab, scale="log")
    assert view_state(tab)["title"] == main_title(2, scale="log", layer=1)
    assert_clean(tab, app, "attention, every control set")
    run_after(tab, tab.locator("[data-testid='stSidebarNav']").get_by_text(s("nav_logits"), exact=True).click,
              charts=True)
    press_slider(tab, s("log_temperature"), times=2)  # 1.00 -> 0.90 (each step a run that tells the server)
    press_slider(tab, s("log_topp"), times=10)  # 1.00 -> 0.90
    enter_number(tab, s("log_topk"), 5)
    check_view_downloads(tab, tmp_path)
    radio(tab, s("log_mode"), s("log_sample"))
    enter_number(tab, s("log_seed"), 7)
    next_token(tab, 1)
    next_token(tab, 2)
    chips = generated_chips(tab)
    radio(tab, s("language"), "中文", where=SIDEBAR)
    assert_clean(tab, app, "logits, every control set")
    link = tab.url
    params = parse_qs(urlparse(link).query)
    expected = {"text": "b d a c", "layer": "1", "head": "2", "block": "enc_self", "mask": "none",
                "scale": "log", "T": "0.9", "k": "5", "p": "0.9", "seed": "7", "lang": "zh"}
    assert {k: params.get(k, [None])[0] for k in expected} == expected, link
    assert len(params["gen"][0].split(",")) == 2
    assert str(ROOT) not in unquote(link) and "checkpoints" not in unquote(link) and len(link) < 2500  # no paths

    with fresh_app(tmp_path / "fresh") as fresh:
        other = new_tab(browser)
        try:
            shared = link.replace(app.url, fresh.url)
            other.goto(shared)  # the first request this server ever gets
            settle(other, charts=True)
            assert_clean(other, fresh, "shared logits link on a fresh server")
            expect(other.locator("h1").first).to_have_text(s("nav_logits", "zh"))
            side = other.locator(SIDEBAR)
            expect(side.get_by_role("textbox", name=s("input_text", "zh"), exact=True)).to_have_value("b d a c")
            assert combobox_value(other, s("model", "zh"), SIDEBAR) == f"reverse · {s('kind_shipped', 'zh')}"
            assert slider(other, s("log_temperature", "zh")).input_value() == "0.9"
            assert slider(other, s("log_topp", "zh")).input_value() == "0.9"
            assert other.locator(MAIN).get_by_label(s("log_topk", "zh"), exact=True).first.input_value() == "5"
            assert other.locator(MAIN).get_by_label(s("log_seed", "zh"), exact=True).first.input_value() == "7"
            expect(side.get_by_text(s("log_gen_count", "zh", n=2))).to_be_visible()
            assert generated_chips(other) == chips
            screenshot(other, SHOTS / "shared_link_logits_zh.png")
            other.goto(urlparse(shared)._replace(path="/attention").geturl())
            settle(other, charts=True)
            assert_clean(other, fresh, "shared attention link on a fresh server")
            assert shown_layer(other, "zh") == "1"
            assert combobox_value(other, s("att_block", "zh")) == s("block_enc_self", "zh")
            assert shown_mask(other, "zh") == s("mask_none", "zh")
            shown = view_state(other)
            assert (shown["head"], shown["scale"], shown["title"]) == (2, "log", main_title(2, "zh", "log", layer=1))
        finally:
            other.context.close()


def test_home_and_a_model_s_plain_name_open_from_a_link(app, tab):
    """Before: `/home` said "Page not found" and `?model=dates-zh` opened the default model with "not available
    to you here". /home opens the home page (at "/", the link's parameters kept) on the model the link names."""
    go(tab, app, "home", model="dates-zh")
    expect(tab.locator("h1").first).to_have_text(s("app_title"))
    assert combobox_value(tab, s("model"), SIDEBAR) == f"dates-zh · {s('kind_shipped')}"
    link = urlparse(tab.url)
    assert link.path == "/" and parse_qs(link.query).get("model") == ["shipped:dates-zh"], tab.url
    assert s("err.url_model_unknown") not in tab.locator(SIDEBAR).inner_text()
    go(tab, app, "", model="modern-gpt")  # and "/" still opens it
    expect(tab.locator("h1").first).to_have_text(s("app_title"))
    assert combobox_value(tab, s("model"), SIDEBAR) == f"modern-gpt · {s('kind_shipped')}"


def test_a_text_too_long_for_a_link_is_left_out_with_a_note(app, tab, browser):
    """A 2240-character text (in 中文): the link leaves it out and the sidebar says so; the link opens on the model's
    example text."""
    go(tab, app, "surprise", "zh", model=REPEAT)
    long_text = "a b c d e f g h " * 140  # 2240 characters
    box = tab.locator(SIDEBAR).get_by_role("textbox", name=s("input_text", "zh"), exact=True)
    type_into(tab, box, long_text, "Control+Enter", paste=True, charts=True)
    assert_clean(tab, app, "a 2240-character text")
    expect(tab.locator(SIDEBAR).get_by_text(s("text_not_in_url", "zh"))).to_be_visible()
    assert "text" not in parse_qs(urlparse(tab.url).query) and len(tab.url) < 2500, tab.url
    other = new_tab(browser)
    try:
        other.goto(tab.url)
        settle(other, charts=True)
        box = other.locator(SIDEBAR).get_by_role("textbox", name=s("input_text", "zh"), exact=True)
        example = json.loads((ROOT / "assets" / "models" / "repeat" / "card.json").read_text())["example_src"]
        expect(box).to_have_value(example)  # the model's example text instead
    finally:
        other.context.close()


# ---- small defects that must stay gone -------------------------------------------------------------------------------

@pytest.mark.parametrize("lang", ["en", "zh"])
def test_defects_are_gone(app, tab, lang):
    """Temperature and top-p stop above 0; no character counter, no Deploy button; generated tokens go when the text
    changes; the text survives a model switch."""
    go(tab, app, "logits", lang, model=REVERSE, text="c a d b")
    for label, low in (("log_temperature", "0.05"), ("log_topp", "0.01")):
        box = slider(tab, s(label, lang))
        assert box.get_attribute("min") == low, box.get_attribute("min")
        press_slider(tab, s(label, lang), "Home")
        assert slider(tab, s(label, lang)).input_value() == low
    expect(tab.locator(WARNING_BOX).filter(has_text=s("log_bad_sampling", lang)[:10])).to_have_count(0)
    side = tab.locator(SIDEBAR)
    assert not re.search(r"\d+\s*/\s*2[,.]?000[,.]?000", side.inner_text()), "a character counter shows"
    assert tab.locator("[data-testid='stAppDeployButton']").count() == 0
    assert tab.get_by_role("button", name="Deploy").count() == 0
    expect(tab.locator(LOOK_BOX).filter(has_text=LOOK[lang])).to_be_visible()
    next_token(tab, 1, lang)
    assert "gen" in parse_qs(urlparse(tab.url).query)
    type_sidebar_text(tab, "d b a c", lang)
    expect(side.get_by_text(s("log_gen_count", lang, n=1))).to_have_count(0)
    assert "gen" not in parse_qs(urlparse(tab.url).query)
    choose(tab, s("model", lang), f"copy · {s('kind_shipped', lang)}", where=SIDEBAR)
    expect(side.get_by_role("textbox", name=s("input_text", lang), exact=True)).to_have_value("d b a c")
    assert_clean(tab, app, f"logits after a model switch ({lang})")


def check_view_downloads(page, tmp_path) -> None:
    """The Logits page's view (static/views/sampling.js) downloads its chart (PNG, the sidebar's default, named as the
    other charts' downloads) and the table it shows at full precision, without a run."""
    runs = runs_ended(page)
    png = download(page, s("chart_download", fmt="PNG"), page.locator(f"{MAIN} .sv"))
    assert png.suggested_filename == "transformer-explorer-log_probs-reverse.png", png.suggested_filename
    png.save_as(tmp_path / "bars.png")
    assert (tmp_path / "bars.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    csv = download(page, s("download_csv"), page.locator(f"{MAIN} .sv"))
    assert csv.suggested_filename == "log_top.csv"
    csv.save_as(tmp_path / "log_top.csv")
    rows = list(csv_rows((tmp_path / "log_top.csv").read_text(encoding="utf-8").splitlines()))
    assert rows[0] == [s(c) for c in ("col_token", "col_id", "col_logit", "col_prob", "col_prob_raw")], rows[0]
    shown = [[td.inner_text() for td in tr.locator("td").all()]
             for tr in page.locator(f"{MAIN} .sv table tbody tr").all()]
    assert len(rows) - 1 == len(shown) == 10
    for row, seen in zip(rows[1:], shown, strict=True):
        assert row[:2] == seen[:2] and f"{float(row[2]):.4f}" == seen[2], (row, seen)
        assert all(float(a) == pytest.approx(float(b), rel=5e-4) for a, b in zip(row[3:], seen[3:], strict=True))
    assert runs_ended(page) == runs, "the view's download ran the page"


def test_a_view_whose_script_cannot_load_says_so_in_the_learners_language(app, tab):
    """The views' scripts come from the server (static/views, ui/views.py). Where they cannot be fetched (a proxy that
    drops them), each view's place (the maps, the scores before and after masking) says so in the learner's language
    instead of staying empty, and the page's tables are drawn."""
    views = "**/app/static/views/**"
    tab.route(views, lambda route: route.fulfill(status=404, body="not here"))
    try:
        for lang in ("en", "zh"):
            go(tab, app, "attention", lang, charts=False, text="The cat sat on the mat")
            expect(tab.locator(f"{MAIN} .load-failed")).to_have_text([s("view_load_failed", lang)] * 2)
            assert tab.locator(ATT_VIEW).count() == tab.locator(ATT_PAIR).count() == 0
            expect(tab.locator(f"{MAIN} [data-testid='stDataFrame']:visible").first).to_be_visible()
    finally:
        tab.unroute(views)
    enter_text(tab, s("input_text", "zh"), "The cat sat on the mat.")  # served again: the next run draws the view, and
    # the note is gone
    expect(tab.locator(ATT_VIEW)).to_be_visible()
    expect(tab.locator(ATT_PAIR)).to_be_visible()
    expect(tab.locator(f"{MAIN} .load-failed")).to_have_count(0)


def test_the_views_sampling_rule_is_the_cores(tab):
    """sampling.js's temperature, top-k and top-p against transformer_core's distribution(), on rows of the default
    model's vocabulary size: the same kept tokens, and probabilities, entropy and sum to within float64 rounding."""
    import torch

    from transformer_core.analysis.next_token import Sampling, distribution
    from ui.views import source

    source = source("sampling")
    tab.goto("about:blank")
    torch.manual_seed(0)
    rows = [torch.randn(12_293) * 4, torch.randn(300) * 0.5, torch.randn(12_293) * 12]
    rules = [Sampling(), Sampling(0.7, 5, 0.9), Sampling(0.05, 0, 1.0), Sampling(5.0, 0, 0.5), Sampling(1.3, 40, 1.0),
             Sampling(0.7, 0, 0.01), Sampling(1.0, 3, 1.0, banned=(1, 7)), Sampling(2.0, 12_293, 0.95, banned=(0,))]
    for row in rows:
        for rule in rules:
            got = tab.evaluate(SAMPLE_JS, {"source": source, "row": row.tolist(), "banned": list(rule.banned),
                                           "T": rule.temperature, "k": rule.top_k, "p": rule.top_p})
            want = distribution(row, rule, top=row.numel())
            probs = dict(zip(want.ids, want.probs, strict=True))
            assert got["kept"] == want.kept, (rule, row.numel())
            assert got["probs"] == pytest.approx([probs[i] for i in range(row.numel())], rel=1e-9, abs=1e-15)
            assert got["entropy"] == pytest.approx(want.entropy, rel=1e-9) and got["sum"] == pytest.approx(want.total)


SAMPLE_JS = """async ({source, row, banned, T, k, p}) => {
    const url = URL.createObjectURL(new Blob([source], {type: "text/javascript"}));
    const { sample } = await import(url);
    const out = sample(new Float32Array(row), banned, T, k, p);
    return {probs: Array.from(out.probs), kept: out.kept, entropy: out.entropy, sum: out.sum};
}"""


# ---- downloads ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("lang", ["en", "zh"])
def test_chart_downloads_png_then_svg_and_table_downloads_csv(app, tab, lang, tmp_path):
    """The chart toolbar's camera saves transformer-explorer-….png, then .svg once the sidebar says SVG; the maps the
    browser draws (the view's large map, the scores before masking) save likewise; a table's Download CSV saves its
    columns."""
    go(tab, app, "embeddings", lang, model=REVERSE)
    png = camera(tab, 0)
    assert png.suggested_filename.startswith("transformer-explorer-") and png.suggested_filename.endswith(".png")
    png.save_as(tmp_path / "chart.png")
    assert (tmp_path / "chart.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    radio(tab, s("img_fmt", lang), "SVG", where=SIDEBAR)
    svg = camera(tab, 0)
    assert svg.suggested_filename.startswith("transformer-explorer-") and svg.suggested_filename.endswith(".svg")
    svg.save_as(tmp_path / "chart.svg")
    assert "<svg" in (tmp_path / "chart.svg").read_text(encoding="utf-8", errors="replace")[:2000]
    go(tab, app, "attention", lang, model=REVERSE)
    view_settled(tab)
    pair = tab.locator(ATT_PAIR)
    png = download(tab, s("chart_download", lang, fmt="PNG"), pair)  # the scores before masking, as PNG
    assert png.suggested_filename == "transformer-explorer-att_before-reverse.png"
    png.save_as(tmp_path / "before.png")
    assert (tmp_path / "before.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    radio(tab, s("img_fmt", lang), "SVG", where=SIDEBAR)
    view_settled(tab)
    after = download(tab, s("chart_download", lang, fmt="SVG"), pair.locator(".panel").nth(1))
    assert after.suggested_filename == "transformer-explorer-att_after-reverse.svg"
    after.save_as(tmp_path / "after.svg")
    drawn = (tmp_path / "after.svg").read_text(encoding="utf-8")
    assert drawn.startswith("<svg") and s("att_after", lang).replace("<", "&lt;") in drawn
    big = download(tab, s("chart_download", lang, fmt="SVG"), tab.locator(ATT_VIEW))  # the view's large map
    assert big.suggested_filename == "transformer-explorer-att_main-reverse.svg"
    big.save_as(tmp_path / "map.svg")
    drawn = (tmp_path / "map.svg").read_text(encoding="utf-8")
    assert drawn.startswith("<svg") and main_title(0, lang) in drawn and "data:image/png;base64," in drawn
    runs = runs_ended(tab)
    csv = download(tab, s("download_csv", lang))
    assert csv.suggested_filename.endswith(".csv")
    tab.wait_for_timeout(1_000)
    assert runs_ended(tab) == runs, "the download click ran the page again"  # (its file id would change under it)
    csv.save_as(tmp_path / "table.csv")
    header = (tmp_path / "table.csv").read_text(encoding="utf-8").splitlines()[0]
    assert s("attn_col_key", lang) in header and s("attn_col_weight", lang) in header, header
    assert_clean(tab, app, f"attention after downloads ({lang})")


CUT_LINKS = """() => [...document.querySelectorAll("[data-testid='stMain'] [data-testid='stPageLink-NavLink'] span")]
    .filter(e => e.scrollWidth > e.clientWidth + 1).map(e => e.innerText)"""


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_parts_table_names_each_page_whole_at_1300_px(app, tab, lang):
    """The Model page's table of parts cut its "Where to look" links at 1300 px ("FFN & residua", "前馈网络与残"):
    Streamlit keeps a page link's label on one line, in a column a sixth of the page wide. They wrap now."""
    size = tab.viewport_size
    tab.set_viewport_size({"width": 1300, "height": size["height"]})
    try:
        go(tab, app, "model", lang, charts=False, model="shipped:name-movers")
        links = tab.locator(f"{MAIN} [data-testid='stPageLink-NavLink']").filter(has_text=s("nav_attention", lang))
        expect(links.first).to_be_visible()
        assert links.count() >= 3  # the table's three rows on attention
        assert tab.evaluate(CUT_LINKS) == []
    finally:
        tab.set_viewport_size(size)


def test_the_logits_bars_fit_a_phone(app, tab):
    """At 420 px the Logits view drew its 720 px bars: the title ran off the edge and the top bar's value with it. The
    bars take the width the page gives, and a long title wraps."""
    size = tab.viewport_size
    tab.set_viewport_size({"width": 420, "height": size["height"]})
    try:
        go(tab, app, "logits", "zh")
        svg = tab.locator(f"{MAIN} .sv .bars svg").first
        expect(svg).to_be_visible()
        fit = svg.evaluate("""s => ({width: +s.getAttribute('width'), box: s.parentElement.clientWidth,
            ends: [...s.querySelectorAll('text')].map(e => e.getBBox().x + e.getBBox().width),
            titles: s.querySelectorAll('text.title').length})""")
        assert fit["width"] <= fit["box"] and max(fit["ends"]) <= fit["width"] + 1, fit
        assert fit["titles"] >= 2  # the title wraps at this width
    finally:
        tab.set_viewport_size(size)


PLOT_ROOM = """() => [...document.querySelectorAll("[data-testid='stMain'] [data-testid='stPlotlyChart']")].map(c => ({
    plot: c.querySelector('.nsewdrag')?.getBoundingClientRect().width ?? 0, chart: c.getBoundingClientRect().width,
    title: c.querySelector('.gtitle')?.textContent, axis: c.querySelector('.ytitle')?.textContent,
    rows: [...c.querySelectorAll('.ytick text')].map(t => t.textContent)}))"""


@pytest.mark.parametrize("path", ["heads", "ffn", "lens"])
def test_every_chart_keeps_its_plot_on_a_phone(app, tab, path):
    """At 390 px charts gave their plot a sixth to a third of their 358 px: a legend on the right (FFN 64 px beside
    "‖added‖ (mean)" and "‖residual after‖ (mean)", the Lens's KL, the Heads page's bars) and "masked self-attention ·
    layer 0" on every row of the Heads grid took the rest. Legends lie under the plot, and a grid of one block names
    it once, on its axis, its rows "layer N"."""
    size = tab.viewport_size
    tab.set_viewport_size({"width": 390, "height": size["height"]})
    try:
        go(tab, app, path, "zh")
        charts = tab.evaluate(PLOT_ROOM)
        assert charts and [c for c in charts if c["plot"] < 0.45 * c["chart"]] == [], charts
        if path == "heads":
            grid = charts[0]
            assert grid["axis"] == s("hd_kind_gpt_self", "zh") and grid["rows"][0] == s("hd_row_layer", "zh", layer=0)
    finally:
        tab.set_viewport_size(size)


CUT_TITLES = """() => [...document.querySelectorAll("[data-testid='stMain'] [data-testid='stPlotlyChart']")].map(c => {
    const t = c.querySelector('.gtitle');
    if (!t || !t.getClientRects().length) return null;
    return t.getBoundingClientRect().right > c.getBoundingClientRect().right + 1 ? t.textContent : null;
}).filter(x => x)"""


def edge_shades(element) -> tuple[bool, bool]:
    """Whether the first and the last column of an element's picture are shaded: grey over most of their height (a
    glyph at the edge darkens a few rows only)."""
    from PIL import Image

    im = Image.open(io.BytesIO(element.screenshot())).convert("L")
    w, h = im.size
    return tuple(sorted(im.getpixel((x, y)) for y in range(h))[h // 2] < 230 for x in (0, w - 1))


def test_a_long_chart_title_wraps_on_a_phone(app, tab):
    """A plotly title is one line of SVG text: at 420 px the Logit lens page cut "Probability of the model's final
    answer, read after each layer (…)" at the chart's edge, and six titles of other pages likewise. On a narrow window
    a long title is written above its chart, where it wraps; a wide window shows the chart's own title alone. A
    formula wider than a phone scrolls, and a shadow on the side where more of it lies says so."""
    size = tab.viewport_size
    copies = f"{MAIN} .phone-title"
    try:
        tab.set_viewport_size({"width": 420, "height": size["height"]})
        go(tab, app, "lens", "zh")  # the default model: a pre-norm decoder, whose logit the attribution splits
        expect(tab.locator(copies).first).to_be_visible()
        assert tab.evaluate(CUT_TITLES) == []
        title = tab.locator(copies).first.inner_text()
        assert title.startswith(s("lens_heat_title", "zh").split("{")[0][:8]), title
        assert tab.locator(copies).first.evaluate("e => e.getBoundingClientRect().height") > 30  # two lines or more
        formula = tab.locator(f"{MAIN} .katex-display").last  # the attribution's formula: wider than a phone
        assert formula.evaluate("e => e.scrollWidth > e.clientWidth + 20")
        assert edge_shades(formula) == (False, True)  # a shadow on the right: more of it lies there
        formula.evaluate("e => { e.scrollLeft = e.scrollWidth }")
        assert edge_shades(formula) == (True, False)
        tab.set_viewport_size({"width": 1300, "height": size["height"]})
        expect(tab.locator(copies).first).to_be_hidden()
        assert tab.evaluate(CUT_TITLES) == []
        assert edge_shades(formula) == (False, False)  # it fits: no shadow
        shown = tab.evaluate(f"""() => [...document.querySelectorAll("{MAIN} .gtitle")]
            .filter(t => t.getClientRects().length).map(t => t.textContent)""")
        assert title in shown, (title, shown)
    finally:
        tab.set_viewport_size(size)
