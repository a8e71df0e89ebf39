"""Real browser (Debian Chromium): every page renders, typed text reaches the tokens and the URL,
HTML in the text stays text, 中文 titles render. Screenshots go to artifacts/screenshots/ (git-ignored)."""
import re
import time
from urllib.parse import parse_qs, quote, urlparse

import pytest
from browser_support import CHART_SVG, ROOT, full_screenshot, page_problem, require_browser, start_app, wait_rendered

from ui.i18n import strings

sync_api = require_browser()

SHOTS = ROOT / "artifacts" / "screenshots"
# url_path -> (nav string key, the page must draw a plotly chart); Streamlit serves the default page at "/"
PAGES = {
    "home": ("app_title", False),
    "tokenizer": ("nav_tokenizer", False),
    "embeddings": ("nav_embeddings", True),
    "attention": ("nav_attention", True),
    "logits": ("nav_logits", True),
    "model": ("nav_model", True),
    "train": ("nav_train", False),
}
INPUT_LABEL = "Input text (encoder / prompt)"
XSS = '<script>window.__xss=1</script><img src=x onerror="window.__xss=2">'
# free text needs a model with the whole cl100k vocabulary and a long context (shipped trained models have a
# compacted vocabulary and refuse other tokens): the course's random-init base preset
FULL_VOCAB = "model=" + quote("preset:course-base@cl100k_base", safe="")
FIRST_RUN_MS = 180_000  # a first run may build a random-init ~200M preset (course-base) on a 2-core CPU
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


@pytest.fixture(scope="module")
def warm(server, browser):
    """One visit to the root first: builds the default model once, so later pages get normal timeouts."""
    ctx = browser.new_context(locale="en-US")
    page = ctx.new_page()
    page.goto(server[1] + "/")
    wait_rendered(page, timeout=FIRST_RUN_MS)
    ctx.close()
    return server


def assert_no_exception(page, server, where: str) -> None:
    """No exception box and no modal."""
    problem = page_problem(page, server[0])
    if problem:
        pytest.fail(f"{where}: {problem}")


def type_text(page, text: str) -> None:
    """Type into the sidebar input text and apply it (Ctrl+Enter, as a learner would, or blur)."""
    box = page.get_by_role("textbox", name=INPUT_LABEL, exact=True)
    box.fill(text)
    box.press("Control+Enter")


def test_shared_link_on_a_fresh_server_runs_the_app_entry(server, tab):
    """The first visit after a server start may be a shared deep link: it must still get the sidebar and state."""
    tab.goto(f"{server[1]}/attention?text={quote('Hello world')}&lang=en")
    wait_rendered(tab, timeout=FIRST_RUN_MS)
    assert_no_exception(tab, server, "deep link /attention as the first visit")
    sync_api.expect(tab.get_by_role("textbox", name=INPUT_LABEL, exact=True)).to_have_value("Hello world")
    sync_api.expect(tab.locator("h1").first).to_have_text(title("attention"))


@pytest.mark.parametrize("name", list(PAGES))
def test_page_renders_in_a_real_browser(warm, tab, name):
    tab.goto(page_url(warm[1], name))
    try:
        wait_rendered(tab)
        assert_no_exception(tab, warm, f"/{name}")
        sync_api.expect(tab.locator("h1").first).to_have_text(title(name), timeout=5_000)
        if PAGES[name][1]:
            wait_rendered(tab, charts=True)
            assert tab.locator(CHART_SVG).count() >= 1
        assert not tab.dialogs
    finally:
        full_screenshot(tab, SHOTS / f"{name}.png")  # also of a failing page, to see what went wrong


def test_tokenizer_url_path_opens_the_tokenizer(warm, tab):
    """app.py gives the tokenizer url_path="tokenizer": /tokenizer must open it, not "Page not found"."""
    tab.goto(f"{warm[1]}/tokenizer")
    wait_rendered(tab)
    assert_no_exception(tab, warm, "/tokenizer")
    sync_api.expect(tab.locator("h1").first).to_have_text(title("tokenizer"), timeout=5_000)


def test_typed_text_becomes_tokens_and_goes_into_the_url(warm, tab):
    tab.goto(page_url(warm[1], "tokenizer", FULL_VOCAB))
    wait_rendered(tab, timeout=FIRST_RUN_MS)
    type_text(tab, "Hello world")
    chips = tab.locator("[data-testid='stMain'] [data-testid='stHtml']").first
    sync_api.expect(chips).to_contain_text("1917")
    wait_rendered(tab)
    assert tab.evaluate(CHIP_IDS_JS)[:2] == [9906, 1917]  # cl100k: "Hello", " world"
    sync_api.expect(tab).to_have_url(re.compile(r"[?&]text=Hello(\+|%20)world(&|$)"))
    assert parse_qs(urlparse(tab.url).query)["text"] == ["Hello world"]
    # the URL is a shareable link: opened in a new tab, another page shows the same text
    shared = urlparse(tab.url)._replace(path="/attention").geturl()
    other = tab.context.new_page()
    other.goto(shared)
    wait_rendered(other)
    assert_no_exception(other, warm, "shared link /attention")
    sync_api.expect(other.get_by_role("textbox", name=INPUT_LABEL, exact=True)).to_have_value("Hello world")


def test_html_in_the_text_is_shown_literally_and_never_runs(warm, tab):
    # the default model (which may refuse these tokens with a message that quotes them): shown as text
    tab.goto(page_url(warm[1], "tokenizer", f"text={quote(XSS, safe='')}"))
    wait_rendered(tab)
    assert_no_exception(tab, warm, "tokenizer with HTML text, default model")
    assert "<script" in tab.locator("[data-testid='stMain']").inner_text()
    assert tab.evaluate("() => typeof window.__xss") == "undefined"
    # a full-vocabulary model: the payload typed into the sidebar becomes token chips, as text
    tab.goto(page_url(warm[1], "tokenizer", FULL_VOCAB))
    wait_rendered(tab, timeout=FIRST_RUN_MS)
    type_text(tab, XSS)
    sync_api.expect(tab.locator("[data-testid='stMain'] [data-testid='stHtml']").first).to_contain_text("script")
    wait_rendered(tab)
    assert_no_exception(tab, warm, "tokenizer with HTML text")
    shown = "".join(tab.evaluate(CHIP_LABELS_JS)).replace("␣", " ")
    assert "<script>window.__xss=1</script>" in shown
    assert '<img src=x onerror="window.__xss=2">' in shown
    assert tab.evaluate("() => typeof window.__xss") == "undefined"
    assert tab.locator("[data-testid='stMain'] script, img[src='x']").count() == 0
    # token labels also reach chart axes and tables on the other pages: nothing may run there either
    query = urlparse(tab.url).query
    for name in ("embeddings", "attention", "logits"):
        tab.goto(page_url(warm[1], name, query))
        wait_rendered(tab)
        assert_no_exception(tab, warm, f"/{name} with HTML text")
        assert tab.evaluate("() => typeof window.__xss") == "undefined", name
    assert tab.dialogs == []


def test_chinese_switch_renders_chinese_titles(warm, tab):
    tab.goto(page_url(warm[1], "tokenizer"))
    wait_rendered(tab)
    tab.locator("[data-testid='stSidebar'] [data-testid='stRadio']").get_by_text("中文", exact=True).click()
    sync_api.expect(tab.locator("h1").first).to_have_text(title("tokenizer", "zh"))
    wait_rendered(tab)
    assert "分词器" in title("tokenizer", "zh")
    nav = tab.locator("[data-testid='stSidebarNav']")
    for name in PAGES:  # the overview's menu entry is "总览"; its heading is the app's title
        label = strings()["nav_home"]["zh"] if name == "home" else title(name, "zh")
        sync_api.expect(nav).to_contain_text(label)
    sync_api.expect(tab).to_have_url(re.compile(r"[?&]lang=zh(&|$)"))
    assert_no_exception(tab, warm, "tokenizer in Chinese")
    full_screenshot(tab, SHOTS / "tokenizer_zh.png")
    tab.goto(page_url(warm[1], "attention", "lang=zh"))
    wait_rendered(tab)
    assert_no_exception(tab, warm, "attention in Chinese")
    sync_api.expect(tab.locator("h1").first).to_have_text(title("attention", "zh"))
    full_screenshot(tab, SHOTS / "attention_zh.png")

