"""Real browser (Debian Chromium): every step page renders, a shared deep link works as a fresh server's first
request, typed text reaches the tokens and the URL, HTML in the text stays text, 中文 titles render. Models are named
in every URL (never the default). With SCREENSHOTS=1, screenshots go to artifacts/screenshots/ (git-ignored)."""
import re
import time
from urllib.parse import parse_qs, quote, urlparse

import pytest

from harness.browser import (
    CHART_SVG,
    MAIN,
    SIDEBAR,
    browser_context,
    full_screenshot,
    new_tab,
    page_problem,
    require_browser,
    settle,
    type_into,
    view_pick,
)
from harness.server import ROOT, start_app
from ui.i18n import strings

sync_api = require_browser()

SHOTS = ROOT / "artifacts" / "screenshots"
# url_path -> (title string key, the page must draw a plotly chart); Streamlit serves the default page at "/"
PAGES = {
    "home": ("app_title", True),
    "tokenizer": ("nav_tokenizer", False),
    "embeddings": ("nav_embeddings", True),
    "attention": ("nav_attention", True),
    "ffn": ("nav_ffn", True),
    "logits": ("nav_logits", True),
    "model": ("nav_model", True),
    "train": ("nav_train", False),
}
INPUT_LABEL = strings()["input_text"]["en"]
XSS = '<script>window.__xss=1</script><img src=x onerror="window.__xss=2">'
REVERSE = "model=" + quote("shipped:reverse", safe="")  # a trained encoder-decoder; reads its letters only
# free text needs a model with the whole cl100k vocabulary and a long context (shipped trained models have a
# compacted vocabulary and refuse other tokens): the course's random-init base preset
FULL_VOCAB = "model=" + quote("preset:course-base@cl100k_base", safe="")
# the small course GPT (whole vocabulary, 16 positions): quick to trace where a page also runs the head detector
SMALL_VOCAB = "model=" + quote("preset:course-gpt@cl100k_base", safe="")
FIRST_RUN_MS = 180_000  # a first run may build a random-init ~200M preset (course-base) on a 2-core CPU
CHIPS = "[data-testid='stMain'] [data-testid='stHtml']"
CHIP_LABELS_JS = """() => Array.from(document.querySelectorAll("[data-testid='stMain'] [data-testid='stHtml'] span"))
    .map(s => Array.from(s.childNodes).filter(n => n.nodeType === Node.TEXT_NODE).map(n => n.textContent).join(''))"""
CHIP_IDS_JS = """() => Array.from(document.querySelectorAll("[data-testid='stMain'] [data-testid='stHtml'] span sub"))
    .map(s => Number(s.textContent))"""


def page_url(base: str, name: str, query: str = "") -> str:
    """Where the page is served: the default (first) page lives at the app root."""
    path = "" if name == next(iter(PAGES)) else name
    return f"{base}/{path}" + (f"?{query}" if query else "")


def title(page_name: str, lang: str = "en") -> str:
    return strings()[PAGES[page_name][0]][lang]


@pytest.fixture(scope="module")
def server():
    t0 = time.monotonic()
    with start_app() as (proc, url):
        yield proc, url
    print(f"\nbrowser e2e: server up for {time.monotonic() - t0:.1f} s")


def assert_no_exception(page, server, where: str) -> None:
    """No exception box and no modal."""
    problem = page_problem(page, server[0])
    if problem:
        pytest.fail(f"{where}: {problem}")


def type_text(page, text: str) -> None:
    """Type into the sidebar input text, apply it (Ctrl+Enter, as a learner would) and wait until it shows."""
    type_into(page, page.locator(SIDEBAR).get_by_role("textbox", name=INPUT_LABEL, exact=True), text, "Control+Enter")


def test_shared_link_on_a_fresh_server_runs_the_app_entry(server, tab):
    """The first visit after a server start may be a shared deep link: it must still get the sidebar and state."""
    tab.goto(f"{server[1]}/attention?{REVERSE}&text={quote('b d a c')}&lang=en")
    settle(tab, timeout=FIRST_RUN_MS, charts=True)
    assert_no_exception(tab, server, "deep link /attention as the first visit")
    sync_api.expect(tab.get_by_role("textbox", name=INPUT_LABEL, exact=True)).to_have_value("b d a c")
    sync_api.expect(tab.locator("h1").first).to_have_text(title("attention"))


@pytest.mark.parametrize("name", list(PAGES))
def test_page_renders_in_a_real_browser(server, tab, name):
    tab.goto(page_url(server[1], name, REVERSE))
    try:
        settle(tab, charts=PAGES[name][1])
        assert_no_exception(tab, server, f"/{name}")
        sync_api.expect(tab.locator("h1").first).to_have_text(title(name), timeout=5_000)
        if PAGES[name][1]:
            assert tab.locator(CHART_SVG).count() >= 1
        assert not tab.dialogs
    except BaseException:
        full_screenshot(tab, SHOTS / f"{name}.png", always=True)  # a failing page, to see what went wrong
        raise
    full_screenshot(tab, SHOTS / f"{name}.png")


def test_typed_text_becomes_tokens_and_goes_into_the_url(server, tab):
    tab.goto(page_url(server[1], "tokenizer", FULL_VOCAB))
    settle(tab, timeout=FIRST_RUN_MS)
    type_text(tab, "Hello world")
    sync_api.expect(tab.locator(CHIPS).first).to_contain_text("1917")
    assert tab.evaluate(CHIP_IDS_JS)[:2] == [9906, 1917]  # cl100k: "Hello", " world"
    sync_api.expect(tab).to_have_url(re.compile(r"[?&]text=Hello(\+|%20)world(&|$)"))
    assert parse_qs(urlparse(tab.url).query)["text"] == ["Hello world"]
    # the URL is a shareable link: opened in a new tab, another page shows the same text
    shared = urlparse(tab.url)._replace(path="/embeddings").geturl()
    other = tab.context.new_page()
    other.goto(shared)
    settle(other, charts=True)
    assert_no_exception(other, server, "shared link /embeddings")
    sync_api.expect(other.get_by_role("textbox", name=INPUT_LABEL, exact=True)).to_have_value("Hello world")


def test_html_in_the_text_is_shown_literally_and_never_runs(server, tab):
    # a trained model with a small alphabet refuses these tokens with a message that quotes them: shown as text
    tab.goto(page_url(server[1], "tokenizer", f"{REVERSE}&text={quote(XSS, safe='')}"))
    settle(tab)
    assert_no_exception(tab, server, "tokenizer with HTML text, a small-alphabet model")
    assert "<script" in tab.locator(MAIN).inner_text()
    assert tab.evaluate("() => typeof window.__xss") == "undefined"
    # a full-vocabulary model: the payload typed into the sidebar becomes token chips, as text
    tab.goto(page_url(server[1], "tokenizer", FULL_VOCAB))
    settle(tab, timeout=FIRST_RUN_MS)
    type_text(tab, XSS)
    sync_api.expect(tab.locator(CHIPS).first).to_contain_text("script")
    assert_no_exception(tab, server, "tokenizer with HTML text")
    shown = "".join(tab.evaluate(CHIP_LABELS_JS)).replace("␣", " ")
    assert "<script>window.__xss=1</script>" in shown
    assert '<img src=x onerror="window.__xss=2">' in shown
    assert tab.evaluate("() => typeof window.__xss") == "undefined"
    assert tab.locator(f"{MAIN} script, img[src='x']").count() == 0
    # token labels also reach chart axes and tables on the other pages: nothing may run there either
    query = f"{SMALL_VOCAB}&text={quote(XSS, safe='')}"
    for name in ("embeddings", "attention", "logits"):
        tab.goto(page_url(server[1], name, query))
        settle(tab, charts=True)
        assert_no_exception(tab, server, f"/{name} with HTML text")
        assert tab.evaluate("() => typeof window.__xss") == "undefined", name
        assert tab.locator(f"{MAIN} script, img[src='x']").count() == 0, name
    assert tab.dialogs == []


def test_chinese_switch_renders_chinese_titles(server, tab):
    tab.goto(page_url(server[1], "tokenizer", REVERSE))
    settle(tab)
    tab.locator(f"{SIDEBAR} [data-testid='stRadio']").get_by_text("中文", exact=True).click()
    sync_api.expect(tab.locator("h1").first).to_have_text(title("tokenizer", "zh"))
    settle(tab)
    assert "分词器" in title("tokenizer", "zh")
    nav = tab.locator("[data-testid='stSidebarNav']")
    for name in PAGES:  # the overview's menu entry is "整个模型"; its heading is the app's title
        label = strings()["nav_home"]["zh"] if name == "home" else title(name, "zh")
        if name == "train":  # the menu shows the first pages of each section; "View 4 more" opens the rest
            continue
        sync_api.expect(nav).to_contain_text(label)
    sync_api.expect(tab).to_have_url(re.compile(r"[?&]lang=zh(&|$)"))
    assert_no_exception(tab, server, "tokenizer in Chinese")
    full_screenshot(tab, SHOTS / "tokenizer_zh.png")
    tab.goto(page_url(server[1], "attention", f"{REVERSE}&lang=zh"))
    settle(tab, charts=True)
    assert_no_exception(tab, server, "attention in Chinese")
    sync_api.expect(tab.locator("h1").first).to_have_text(title("attention", "zh"))
    full_screenshot(tab, SHOTS / "attention_zh.png")


# the first chart of the page: its tick labels as drawn (SVG text) and as its data say, its template, revision, colours
FIRST_CHART_JS = """() => { const p = document.querySelector("[data-testid='stPlotlyChart'] .js-plotly-plot");
    return {drawn: Array.from(p.querySelectorAll('.yaxislayer-above .ytick text'), t => t.textContent),
            labels: Array.from(p._fullLayout.yaxis._vals || [], v => v.text),
            template: p.layout.template === undefined ? null : 'set', revision: p.layout.datarevision,
            bg: p._fullLayout.paper_bgcolor, font: p._fullLayout.font.color,
            drawnZ: Array.from(p.calcdata[0][0].z, r => Array.from(r)),
            dataZ: Array.from(p._fullData[0].z, r => Array.from(r))}; }"""


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_a_chart_is_drawn_anew_with_new_data_and_in_the_browsers_light_or_dark_look(server, browser, scheme):
    """Charts carry their look (no template: ui.chart_theme) and a datarevision; plotly then skips comparing data
    arrays, so a new text must give a new revision and the chart drawn must show the new tokens, not the old (the
    Attention page's Q, K and V of the head: its token rows)."""
    from ui.chart_theme import PALETTES

    context = browser_context(browser, color_scheme=scheme)
    tab = new_tab(browser, context)
    try:
        tab.goto(page_url(server[1], "attention", f"{REVERSE}&block=enc_self&text={quote('b d a c')}"))
        settle(tab)
        tab.get_by_text(strings()["att_qkv"]["en"], exact=True).click()  # opened: the page's one plotly chart
        settle(tab, charts=True)
        first = tab.evaluate(FIRST_CHART_JS)
        view_pick(tab, head=2)  # the same tokens, other numbers: only data arrays change (the head's Q, K, V)
        settle(tab, charts=True)
        head = tab.evaluate(FIRST_CHART_JS)
        type_text(tab, "c a d b a")
        settle(tab, charts=True)
        second = tab.evaluate(FIRST_CHART_JS)
        assert_no_exception(tab, server, f"attention, {scheme}")
    finally:
        context.close()
    text, _title, _legend, bg, *_ = PALETTES[scheme]
    for chart in (first, head, second):
        assert chart["template"] is None and chart["bg"] == bg and chart["font"] == text
        assert chart["drawn"] and chart["drawn"] == chart["labels"]  # what is drawn is what the data say
        assert chart["drawnZ"] == chart["dataZ"]
    assert head["drawn"] == first["drawn"] and head["dataZ"] != first["dataZ"] and head["revision"] != first["revision"]
    assert second["revision"] != first["revision"] and len(second["drawn"]) == len(first["drawn"]) + 1
