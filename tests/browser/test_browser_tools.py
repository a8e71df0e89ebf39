"""Real browser (Debian Chromium): each tool on a shipped model (repeat: decoder-only, induction heads; BPE
on reverse) in English, then every one in 中文: the page loads with no traceback or error, shows its main chart or
chips, one interaction works (the logit lens's position, a click in the head catalogue, ablating a head, typing text
B, the BPE step slider), and the Export expander's .npz download holds the page's numbers.

Models are named in every URL. The server is the one the browser modules share (conftest.py's `app`).
With SCREENSHOTS=1, screenshots go to screenshots/ (git-ignored).
"""
import io
import re
from urllib.parse import parse_qs, urlparse

import numpy as np
import pytest

from harness.browser import (
    MAIN,
    SIDEBAR,
    app_text,
    app_url,
    assert_clean,
    choose,
    click_plot,
    combobox_value,
    download,
    english_only,
    english_shown,
    enter_text,
    legend_texts,
    next_token,
    not_chinese,
    plot_index,
    plots,
    press_button,
    press_slider,
    radio,
    radio_value,
    require_browser,
    run_after,
    s,
    screenshot,
    set_value,
    settle,
    shown_layer,
    trace_point,
    type_into,
    view_head,
)
from harness.server import ROOT
from transformer_core import load_model, prepare, run
from transformer_core.text.inputs import token_labels
from ui.figures import visible
from ui.i18n import strings

sync_api = require_browser()
expect = sync_api.expect

SHOTS = ROOT / "screenshots"
S = strings()
REPEAT, REVERSE = "shipped:repeat", "shipped:reverse"
TEXT = "d a c b g d a c b g"  # repeat's alphabet; the second half repeats the first (its induction heads read it)
ENGLISH_ONLY = english_only(S, ignore=("reverse", "repeat", "copy", "sort", "count"))
STREAMLIT_ENGLISH = re.compile(r"Choose options|Choose an option|No results|View \d+ more")  # Streamlit's own words
PLACEHOLDERS_JS = """() => Array.from(document.querySelectorAll("[data-testid='stMain'] :placeholder-shown"),
    e => e.placeholder)"""  # the placeholders a learner sees (empty boxes)
SEEN: dict[str, object] = {}  # what the Chinese test saw, for the test of Streamlit placeholders


def go(page, app, path: str, lang: str = "en", *, charts: bool = True, **params) -> None:
    page.goto(app_url(app, path, lang, **params))
    settle(page, charts=charts)
    assert_clean(page, app, f"/{path} ({lang})")
    expect(page.locator("h1").first).to_have_text(s(f"nav_{path}", lang))


def export_npz(page, lang: str, tmp_path, stem: str, *, last: bool = False) -> dict:
    """Open the first (or the last) Export expander, download its .npz; the arrays in it (file name checked)."""
    expanders = page.locator(MAIN).locator("[data-testid='stExpander']").filter(has_text=s("xp_title", lang))
    expander = expanders.last if last else expanders.first
    # opening it builds its content in a run of its own: a download clicked before that run is over asked for a file
    # the run then replaced, and never came (a busy machine)
    run_after(page, expander.locator("summary").click)
    dl = download(page, s("xp_npz", lang), where=expander)
    name = dl.suggested_filename
    assert name.startswith(f"transformer-explorer-{stem}") and name.endswith(".npz"), name
    path = tmp_path / dl.suggested_filename
    dl.save_as(path)
    with np.load(io.BytesIO(path.read_bytes()), allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    assert arrays and any(a.size for a in arrays.values()), f"{dl.suggested_filename} holds no numbers: {arrays}"
    expect(expander.locator("[data-testid='stCode']")).to_contain_text("transformer_core")  # the notebook snippet
    return arrays


def markdown_with(page, text: str) -> str:
    return page.locator(MAIN).locator("[data-testid='stMarkdownContainer']").filter(has_text=text).first.inner_text()


# ---- one test per tool, in English -----------------------------------------------------------------------------------

def test_logit_lens_reads_every_layer_and_follows_the_position(app, tab, tmp_path):
    """A row per read-out (embeddings, after each layer) and a column per position; choosing another position
    retitles the table and the sentence on where the answer forms; the .npz holds (layers, positions, k) arrays."""
    go(tab, app, "lens", model=REPEAT, text=TEXT)
    heat = plots(tab)[plot_index(tab, s("lens_heat_title"))]
    assert heat["yticks"] == [s("lens_row_embed"), s("lens_row_layer", layer=0), s("lens_row_layer", layer=1)]
    assert len(heat["xticks"]) == 10  # every position of the 10-token text
    last = heat["xticks"][-1]
    expect(tab.locator(MAIN).get_by_role("heading", name=s("lens_table_title", k=5, pos=last))).to_be_visible()
    screenshot(tab, SHOTS / "tool_lens_en.png")
    choose(tab, s("lens_position"), heat["xticks"][3])
    expect(tab.locator(MAIN).get_by_role("heading", name=s("lens_table_title", k=5, pos=heat["xticks"][3]))) \
        .to_be_visible()
    assert heat["xticks"][3] in markdown_with(tab, "p 0.")  # "At 3 ‘b’ the model's final answer is ..."
    arrays = export_npz(tab, "en", tmp_path, "logit_lens", last=True)  # the first is the answer row's
    assert any(a.ndim == 3 for a in arrays.values()), {k: a.shape for k, a in arrays.items()}  # (layers, positions, k)
    assert_clean(tab, app, "logit lens after a new position")


def test_head_catalogue_labels_every_head_and_a_click_opens_its_attention(app, tab, tmp_path):
    """A square per head (2 layers x 4), the count of labelled heads, the sinks section, the .npz; a click on a square
    opens the attention page on that layer and head (widgets and URL)."""
    go(tab, app, "heads", model=REPEAT, text=TEXT)
    i = plot_index(tab, s("hd_chart_title"))
    heads = trace_point(tab, i, "heads")
    assert len(heads["customdata"]) == 2 * 4  # 2 layers x 4 heads of repeat
    expect(tab.locator(MAIN).get_by_text(re.compile(r"of 8 heads have a clear pattern"))).to_be_visible()
    expect(tab.locator(MAIN).get_by_role("heading", name=s("sk_title"))).to_be_visible()
    arrays = export_npz(tab, "en", tmp_path, "heads")
    assert arrays
    screenshot(tab, SHOTS / "tool_heads_en.png")
    pt = trace_point(tab, plot_index(tab, s("hd_chart_title")), "heads", 6)  # layer 1, head 2 (row-major)
    click_plot(tab, plot_index(tab, s("hd_chart_title")), pt["x"], pt["y"], pt["xaxis"], pt["yaxis"])
    settle(tab, charts=True)
    expect(tab.locator("h1").first).to_have_text(s("nav_attention"))
    assert shown_layer(tab) == str(int(pt["y"]))
    assert view_head(tab) == str(int(pt["x"]))  # the head shown large in the browser's view
    params = parse_qs(urlparse(tab.url).query)
    assert params.get("layer") == [str(int(pt["y"]))] and params.get("head") == [str(int(pt["x"]))], tab.url
    assert_clean(tab, app, "attention opened from the head catalogue")


def test_a_click_on_an_edge_of_the_information_flow_opens_its_head_at_that_cell(app, tab, tmp_path):
    """The flow graph of the repeat model's last token: a dot per attention edge and FFN, the .npz of the shares; a
    click on the strongest attention edge's dot opens the Attention page on its layer and head, with that query and
    key's cell open (why the head looks there)."""
    go(tab, app, "flow", model=REPEAT, text=TEXT)
    i = plot_index(tab, s("flow_graph_title").split("‘")[0])
    dots = trace_point(tab, i, "edges")
    assert dots["customdata"]
    arrays = export_npz(tab, "en", tmp_path, "flow")
    assert arrays["tokens"].ndim == 3 and arrays["heads"].ndim == 4
    screenshot(tab, SHOTS / "tool_flow_en.png")
    hovers = [(k, h) for k, h in enumerate(tab.evaluate(
        "(i) => document.querySelectorAll(\"[data-testid='stPlotlyChart'] .js-plotly-plot\")[i].data"
        ".find(t => t.name === 'edges').hovertext", i)) if "click: open head" in h]
    assert hovers
    k, hover = hovers[0]
    layer, head = (int(x) for x in re.search(r"layer (\d+):.*head (\d+) at", hover.replace("<br>", " ")).groups())
    pt = trace_point(tab, i, "edges", k)
    click_plot(tab, i, pt["x"], pt["y"], pt["xaxis"], pt["yaxis"])
    settle(tab, charts=True)
    expect(tab.locator("h1").first).to_have_text(s("nav_attention"))
    assert (shown_layer(tab), view_head(tab)) == (str(layer), str(head))
    expect(tab.locator(MAIN).get_by_text(re.compile(r"^Why .* looks at "))).to_be_visible()
    assert_clean(tab, app, "attention opened from the information flow")


def test_ablating_a_head_changes_the_loss(app, tab, tmp_path):
    """Nothing switched off: a hint; head 1.0 switched off: a non-zero loss change, the summary and a moved-tokens
    chart appear; the .npz."""
    go(tab, app, "intervene", model=REPEAT, text=TEXT)
    expect(tab.locator(MAIN).get_by_text(s("iv_pick_first"))).to_be_visible()
    before = [p["title"] for p in plots(tab)]
    head = s("iv_head_short", kind="", layer=1, head=0)
    box = tab.locator(MAIN).locator("[data-testid='stMultiSelect']").filter(
        has=tab.get_by_role("combobox", name=s("iv_heads"), exact=True))

    def pick():
        box.get_by_role("combobox").click()
        tab.get_by_role("option", name=head, exact=True).click()
        tab.keyboard.press("Escape")

    set_value(tab, pick, lambda: box.get_by_text(head, exact=True).count() > 0, what=f"head {head} ablated",
              charts=True)
    assert_clean(tab, app, "intervene, one head ablated")
    loss = tab.locator(MAIN).locator("[data-testid='stMetric']").filter(has_text=s("iv_loss_change")).first
    value = loss.locator("[data-testid='stMetricValue']").inner_text()
    assert re.fullmatch(r"[+-]\d+\.\d{4}", value) and float(value) != 0.0, value
    after = [p["title"] for p in plots(tab)]
    assert after.count(s("iv_moved_title")) == before.count(s("iv_moved_title")) + 1, (before, after)
    screenshot(tab, SHOTS / "tool_intervene_en.png")
    export_npz(tab, "en", tmp_path, "ablate")


def test_a_new_text_starts_the_answers_on_its_own_top_tokens_in_the_browser(app, tab):
    """On the default model, typing a text whose top 10 lacks the answers picked before: the select boxes show the new
    text's first and second choices (the browser kept showing the old ones when the server's state was only dropped)
    and the sweep runs (A and B both fell back to the first choice once)."""
    go(tab, app, "intervene", text="The old keeper climbed the stairs every evening and")
    text = "清晨的菜市场里人声鼎沸，卖豆腐的大爷一边称重一边和老顾客聊天。"
    enter_text(tab, s("input_text"), text, charts=True)
    assert_clean(tab, app, "intervene, a Chinese text after an English one")
    model, _ = load_model("everyday-gpt")
    ids = prepare(model, text).src_ids
    top = run(model, ids)[0, -1].topk(2).indices.tolist()
    labels = token_labels(model, top, ids[0].tolist())
    assert [combobox_value(tab, s(k)) for k in ("he_token_a", "he_token_b")] == [f"‘{visible(x)}’" for x in labels]
    assert tab.locator(MAIN).get_by_text(s("he_same")).count() == 0


def test_the_controls_keep_their_picks_in_the_other_language(app, tab):
    """A radio and a select box picked in English, the sidebar switched to 中文: they show the same picks in Chinese
    (the radio showed none and the box its English label: the browser holds an option's label), and they keep them
    after the next action (the old label it sent back set them to their defaults). A multiselect's list says "Select
    all" and, filtered down to nothing, "No results" in Chinese too, a box being typed in "Press Enter to apply", and a
    number box given a number out of range its range (Streamlit writes them in English)."""
    go(tab, app, "intervene", model=REPEAT, text=TEXT)
    radio(tab, s("iv_mode"), s("iv_mode_mean"))
    radio(tab, s("language"), "中文", where=SIDEBAR)
    settle(tab)

    def shown() -> tuple[str, str]:
        return radio_value(tab, s("iv_mode", "zh")), combobox_value(tab, s("pt_kind", "zh"))

    picks = (s("iv_mode_mean", "zh"), s("hd_kind_gpt_self", "zh"))
    assert shown() == picks
    radio(tab, s("pt_align", "zh"), s("pt_align_start", "zh"))
    assert shown() == picks
    assert_clean(tab, app, "intervene, after the language switch")
    heads = tab.locator(f"{MAIN} [data-testid='stMultiSelect']").filter(has_text=s("iv_heads", "zh"))
    heads.locator("input").click()
    tab.keyboard.press("ArrowDown")  # its list opens; the first line is 全选
    item = tab.locator("[role='option'][data-key='__select_all__'] [data-item-hl]")
    assert item.evaluate("e => [getComputedStyle(e).fontSize, getComputedStyle(e, '::after').content]") == [
        "0px", '"全选"'], "the multiselect's own “Select all” shows in English"
    tab.keyboard.type("zzqx")  # a filter that matches nothing: Streamlit's "No results", in the learner's language
    empty = tab.locator("[role='listbox'][data-empty='true'] [role='option'] span")
    assert empty.evaluate("e => [getComputedStyle(e).fontSize, getComputedStyle(e, '::after').content]") == [
        "0px", f'"{s("no_results", "zh")}"'], "an empty list says “No results” in English"
    tab.keyboard.press("Escape")
    # a box being typed in says "Press Enter to apply" (a text area: "Press Ctrl+Enter to apply") in Chinese too

    def typed_in(box, words: str) -> None:
        box.locator("textarea, input").first.press("End")
        tab.keyboard.type("1")
        hint = box.locator("[data-testid='InputInstructions'] span").first
        assert hint.evaluate("e => [getComputedStyle(e).fontSize, getComputedStyle(e, '::after').content]") == [
            "0px", f'"{words}"'], f"a box's {hint.inner_text()!r} shows in English"
    typed_in(tab.locator(f"{SIDEBAR} [data-testid='stTextArea']").first, s("apply_ctrl_enter", "zh"))
    go(tab, app, "learn", "zh", charts=False)  # its own one-line text box
    typed_in(tab.locator(f"{MAIN} [data-testid='stTextInput']").first, s("apply_enter", "zh"))
    # a number out of range: Streamlit's "Number is outside the allowed range…" on the box's error mark, in Chinese
    go(tab, app, "logits", "zh", charts=False, model=REPEAT, text=TEXT)
    box = tab.locator(f"{MAIN} .st-key-log_show")
    box.locator("input").fill("500")
    box.locator("input").press("Enter")
    box.locator("[data-testid='stTooltipErrorHoverTarget']").hover()
    tip = tab.locator("[data-testid='stTooltipErrorContent'] p")
    assert tip.evaluate("e => [getComputedStyle(e).fontSize, getComputedStyle(e, '::after').content]") == [
        "0px", f'"{s("number_range", "zh", lo=1, hi=100)}"'], "a number out of range is answered in English"


def test_the_metric_renamed_by_a_longer_answer_keeps_its_pick(app, tab):
    """An answer of several tokens typed on the Ablation page renames the metric "logit(A) − logit(B)" to
    "log p(A) − log p(B)": the radio still shows it picked, and keeps it after the next action (a relabelled option
    is sent again with its new name, ui.state.resend_choices)."""
    go(tab, app, "intervene", model="shipped:name-movers",
       text="When Tom and Anna arrived at the party, Anna handed the gift to")
    radio(tab, s("iv_mode"), s("iv_mode_mean"))
    assert radio_value(tab, s("he_metric")) == s("he_metric_logit_diff")
    box = tab.locator(MAIN).get_by_role("textbox", name=s("ans_text"), exact=True).first
    type_into(tab, box, "张伟", "Enter", charts=True)  # two tokens for this model
    assert radio_value(tab, s("he_metric")) == s("he_metric_logit_diff_multi")
    radio(tab, s("pt_align"), s("pt_align_start"))
    assert (radio_value(tab, s("he_metric")), radio_value(tab, s("iv_mode"))) == (
        s("he_metric_logit_diff_multi"), s("iv_mode_mean"))
    assert_clean(tab, app, "intervene, after a longer answer")


def metric(page, label: str) -> str:
    return page.locator(MAIN).locator("[data-testid='stMetric']").filter(has_text=label).first.locator(
        "[data-testid='stMetricValue']").inner_text()


def test_compare_shows_what_differs_when_text_b_changes(app, tab, tmp_path):
    """A new text B (its last letter changed) changes the total variation; both next-token charts, the B − A
    attention and the surprise chips of both texts show; the .npz."""
    go(tab, app, "compare", model=REPEAT, text=TEXT)
    expect(tab.locator(MAIN).get_by_role("heading", name=s("cmp_diff"))).to_be_visible()
    tv_before = metric(tab, s("cmp_tv"))
    enter_text(tab, s("tb_text"), "d a c b g d a c b f", where=MAIN, charts=True)
    assert_clean(tab, app, "compare with a new text B")
    tv_after = metric(tab, s("cmp_tv"))
    assert tv_after != tv_before, (tv_before, tv_after)
    titles = [p["title"] for p in plots(tab)]
    assert titles.count(s("cmp_next_title")) == 2 and s("cmp_delta_title") in titles, titles
    chips = tab.locator(MAIN).locator("[data-testid='stHtml'] span[data-p]")
    assert chips.count() >= 2 * 9  # text A and text B, 10 tokens each: every token after the first has p
    screenshot(tab, SHOTS / "tool_compare_en.png")
    export_npz(tab, "en", tmp_path, "compare")


def test_bpe_step_slider_merges_the_parts(app, tab, tmp_path):
    """A typed word (' unbelievable'): step 0 shows its bytes; the step slider's last step shows fewer parts holding
    the same text; the merges chart; the .npz."""
    go(tab, app, "bpe", model=REVERSE)
    radio(tab, s("bpe_source"), s("bpe_src_word"))
    type_into(tab, tab.locator(MAIN).get_by_role("textbox", name=s("bpe_word"), exact=True), " unbelievable",
              charts=True)
    assert_clean(tab, app, "BPE with a word")
    caption = tab.locator(MAIN).locator("[data-testid='stCaptionContainer']")
    expect(caption.filter(has_text=s("bpe_step0", n=8).split("8")[0])).to_be_visible()  # "Step 0: the token's"
    parts_before = chip_texts(tab)
    press_slider(tab, s("bpe_step"), "End")
    step = caption.filter(has_text=re.compile(r"Step (\d+) of \1:")).first
    expect(step).to_be_visible()
    parts_after = chip_texts(tab)
    assert len(parts_after) < len(parts_before), (parts_before, parts_after)
    assert "".join(parts_after) == "".join(parts_before)  # the same bytes, merged into fewer parts
    assert s("bpe_chart_title") in [p["title"] for p in plots(tab)]
    screenshot(tab, SHOTS / "tool_bpe_en.png")
    export_npz(tab, "en", tmp_path, "bpe_token")


def chip_texts(page) -> list[str]:
    """The parts of the one-token playback (the first row of chips)."""
    return page.locator(MAIN).locator("[data-testid='stHtml']").first.locator("span").all_inner_texts()


def test_surprise_colours_each_token_and_gives_loss_and_perplexity(app, tab, tmp_path):
    """A chip per token with p for all but the first, the repeated half expected (p > 0.5), perplexity = e^loss, the
    surprisal chart; the .npz."""
    go(tab, app, "surprise", model=REPEAT, text=TEXT)
    chips = tab.locator(MAIN).locator("[data-testid='stHtml'] span")
    assert chips.count() == 10
    probs = [float(p) for p in chips.evaluate_all("els => els.map(e => e.dataset.p).filter(p => p !== undefined)")]
    assert len(probs) == 9 and all(0.0 <= p <= 1.0 for p in probs)
    assert min(probs[-4:]) > 0.5  # the repeated half is predicted (induction)
    loss, ppl = float(metric(tab, s("sur_loss"))), float(metric(tab, s("sur_ppl")))
    assert ppl == pytest.approx(np.exp(loss), rel=1e-3)
    assert s("sur_chart_title") in [p["title"] for p in plots(tab)]
    screenshot(tab, SHOTS / "tool_surprise_en.png")
    export_npz(tab, "en", tmp_path, "surprise")


# ---- every tool once in 中文 -----------------------------------------------------------------------------------------

EXPORT_STEM = {"lens": "lens_answer", "intervene": "head_effects", "bpe": "bpe_token"}  # the first Export expander
MAIN_CHART = {"lens": "lens_heat_title", "heads": "hd_chart_title", "intervene": "iv_moved_title",
              "compare": "cmp_delta_title", "bpe": "bpe_chart_title", "surprise": "sur_chart_title"}


def test_the_generation_stepper_grows_the_cache_marks_the_new_row_and_stops_at_the_end(app, tab):
    """Logits page, default model: each "next token" grows the key/value cache by one position (its caption and
    growth chart), measured cached and full steps are shown; the Attention page then outlines the newest query
    row; the translator stops at the end-of-text token with its buttons disabled."""
    text = "The weather was nice, so we walked"
    go(tab, app, "logits", model="shipped:everyday-gpt", text=text)
    expect(tab.locator(MAIN).get_by_text(s("kv_none"))).to_be_visible()
    sizes = []
    for n in (1, 2):
        next_token(tab, n)
        total = tab.locator(MAIN).get_by_text(re.compile(r"bytes in \d+ layers for \d+ tokens")).first.inner_text()
        sizes.append(int(re.search(r"for (\d+) tokens", total).group(1)))
    assert sizes[1] == sizes[0] + 1
    run_after(tab, tab.locator(MAIN).get_by_text(s("kv_measure")).click, charts=True)  # the timing, on request
    expect(tab.locator(MAIN).locator("[data-testid='stMetric']").filter(has_text=s("kv_cached"))).to_be_visible()
    growth = plots(tab)[plot_index(tab, s("kv_growth_title"))]
    assert growth["title"] == s("kv_growth_title")
    assert_clean(tab, app, "logits after two generated tokens")
    screenshot(tab, SHOTS / "tool_kv_cache_en.png")
    tab.goto(tab.url.replace("/logits", "/attention"))  # the link keeps the generated tokens
    settle(tab, charts=True)
    expect(tab.locator(MAIN).get_by_text(re.compile(r"Below the dashed line: the 2 generated token"))).to_be_visible()
    assert_clean(tab, app, "attention with generated rows")
    go(tab, app, "logits", model="shipped:dates-zh", text="23 November 2026", tgt="=")
    for _ in range(5):
        button = tab.locator(MAIN).get_by_role("button", name=s("log_steps"), exact=True).first
        if button.is_disabled():
            break
        press_button(tab, s("log_steps"), charts=True)
    expect(tab.locator(MAIN).get_by_text(s("log_stopped_eot")).first).to_be_visible()
    assert tab.locator(MAIN).get_by_role("button", name=s("log_next"), exact=True).first.is_disabled()
    assert_clean(tab, app, "translation stopped at the end of text")


def test_every_tool_in_chinese(app, tab, tmp_path):
    """Each tool page in 中文: no English-only string (text, chart titles and axes, legends), its main chart titled in
    Chinese, its .npz export."""
    english, legends, SEEN["streamlit"] = {}, {}, {}
    for path, chart in MAIN_CHART.items():
        go(tab, app, path, "zh", model=REPEAT, text=TEXT)
        assert s(chart, "zh") in [p["title"] for p in plots(tab)], (path, [p["title"] for p in plots(tab)])
        text = app_text(tab)
        english.update({f"/{path}: {k}": p for k, p in english_shown(text, ENGLISH_ONLY)})
        legends.update({f"/{path}": bad for bad in [not_chinese(legend_texts(tab), S)] if bad})
        shown = tab.locator(MAIN).inner_text() + "\n".join(tab.evaluate(PLACEHOLDERS_JS))
        SEEN["streamlit"][f"/{path}"] = STREAMLIT_ENGLISH.findall(shown)
        export_npz(tab, "zh", tmp_path, EXPORT_STEM.get(path, path))
        screenshot(tab, SHOTS / f"tool_{path}_zh.png")
    assert not english, f"English shown in 中文: {english}"
    assert not legends, f"legend entries in 中文 without Chinese: {legends}"


def test_streamlit_placeholders_are_chinese_too():
    if "streamlit" not in SEEN:
        pytest.skip("test_every_tool_in_chinese did not run")
    shown = {k: v for k, v in SEEN["streamlit"].items() if v}
    assert not shown, f"Streamlit's English in 中文: {shown}"
