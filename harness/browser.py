"""Drive the app with Debian Chromium through Playwright: launch, wait for a run to be over, read and act on a page.

Importable without Playwright installed (tests skip through require_browser()). The server these pages come from is
harness.server's start_app / fresh_app.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

from harness.server import ROOT, App, log_tail

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync",
                 # the tabs of one browser context share one renderer process: a tab in a process of its own cost the
                 # CPU about 2 s more than one in the process already running the app's scripts (a Streamlit page
                 # opened, 2-core machine), most of the browser tests' Chromium time
                 "--renderer-process-limit=1", "--disable-site-isolation-trials",
                 "--disable-features=site-per-process,IsolateOrigins"]
APP = "[data-testid='stApp']"
IDLE_APP = "[data-testid='stApp'][data-test-script-state='notRunning'][data-test-connection-state='CONNECTED']"
RUN_GOING = "[data-testid='stApp'][data-test-script-state='running']"
RUNNING_ICON = "[data-testid='stStatusWidgetRunningIcon'], [data-testid='stStatusWidgetRunningManIcon']"
CHART = "[data-testid='stPlotlyChart']"
# a plotly chart, or a view's own drawing (the Logits page's bars, the Attention page's maps)
CHART_SVG = "[data-testid='stPlotlyChart'] .main-svg, .sv svg, .av canvas.cells, .ap canvas.cells"
EXCEPTION = "[data-testid='stException']"

# what a page shows where a chart was awaited (a failure's message): its title, its views' state, its messages
SHOWN_JS = """() => {
    const text = (sel) => Array.from(document.querySelectorAll(sel), (e) => e.innerText.trim().slice(0, 160));
    const views = Array.from(document.querySelectorAll('.av, .ap, .sv'), (v) => ({
        view: v.className, asking: v.hasAttribute('data-asking'), title: v.querySelector('.title')?.textContent,
        canvas: v.querySelector('canvas.cells')?.getBoundingClientRect().toJSON()}));
    return JSON.stringify({h1: text('h1')[0], views, plotly: document.querySelectorAll('.main-svg').length,
        messages: text("[data-testid='stAlert'], [data-testid='stException']"),
        stale: document.querySelectorAll("[data-stale='true']").length});
}"""


def launch_browser(playwright, **kwargs):
    """Debian's Chromium through Playwright (Playwright cannot download its own browser here)."""
    return playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, **kwargs)


def wait_rendered(page, *, charts: bool = False, timeout: float = 120_000, chart_timeout: float = 20_000,
                  settle_ms: int = 400) -> None:
    """Wait until the app shows and its script run is over (and stays over for settle_ms).

    With charts=True, also wait (up to chart_timeout ms more) for a plotly chart whose svg has drawn,
    and raise AssertionError if none does. Timeouts are in milliseconds, like Playwright's.
    """
    page.wait_for_selector(APP, state="attached", timeout=timeout)
    deadline = time.monotonic() + timeout / 1000
    idle_since = None
    while True:
        idle = page.locator(IDLE_APP).count() > 0 and page.locator(RUNNING_ICON).count() == 0
        now = time.monotonic()
        if idle:
            idle_since = idle_since or now
            if (now - idle_since) * 1000 >= settle_ms:
                break
        else:
            idle_since = None
        if now > deadline:
            raise TimeoutError(f"the app was still running after {timeout / 1000:.0f} s")
        page.wait_for_timeout(100)
    if charts:
        try:
            page.wait_for_selector(CHART_SVG, state="visible", timeout=chart_timeout)
        except Exception as exc:  # playwright's TimeoutError
            raise AssertionError(f"no chart drew on {page.url} within {chart_timeout / 1000:.0f} s; "
                                 f"the page shows: {page.evaluate(SHOWN_JS)}") from exc


# screenshots are for a person to look at (SCREENSHOTS=1 python3 -m pytest tests/browser): each one relays every chart
# out at the page's full height and encodes a large PNG, CPU a test run spends on nothing it asserts
SCREENSHOTS = os.environ.get("SCREENSHOTS", "0") not in ("", "0")


def full_screenshot(page, path, *, max_height: int = 12_000, always: bool = False) -> None:
    """A screenshot of the whole page when SCREENSHOTS=1 (or always): Streamlit scrolls inside stMain, so grow the
    viewport to fit first."""
    if not (SCREENSHOTS or always):
        return
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    size = page.viewport_size
    height = page.evaluate("""() => Math.max(...['stMain', 'stSidebarContent'].map(
        id => document.querySelector(`[data-testid='${id}']`)?.scrollHeight || 0))""")
    page.set_viewport_size({"width": size["width"], "height": min(max(height, size["height"]), max_height)})
    try:
        page.wait_for_timeout(500)  # plotly relayouts on resize
        page.screenshot(path=str(path), full_page=True)
    finally:
        page.set_viewport_size(size)


def require_browser():
    """playwright.sync_api, or skip the calling test module when Playwright or Chromium is missing."""
    import pytest

    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright (python) is not installed")
    if not os.access(CHROMIUM, os.X_OK):
        pytest.skip(f"{CHROMIUM} is missing (run scripts/install_browser.sh)", allow_module_level=True)
    return sync_api


def page_problem(page, proc: subprocess.Popen) -> str | None:
    """Why a rendered page is broken: an exception box, or a modal (Streamlit's "Page not found" makes the
    page inert); None when neither is shown."""
    modals = page.locator("[role='dialog']")
    if modals.count():
        return f"a modal is open: {modals.first.inner_text()[:300]!r}"
    boxes = page.locator(EXCEPTION)
    if boxes.count():
        return (f"exception shown in the page:\n{boxes.first.inner_text()[:1500]}\n"
                f"--- server log ---\n{log_tail(proc, 1500)}")
    return None


def check_clean(page, app: App, where: str) -> None:
    """No traceback, no modal, no JS dialog (a tab from new_tab records them), and the server still answers."""
    import pytest

    problem = page_problem(page, app.proc)
    if problem:
        pytest.fail(f"{where}: {problem}")
    assert not getattr(page, "crashed", False), f"{where}: the tab's renderer crashed"
    assert getattr(page, "dialogs", []) == [], f"{where}: a JS dialog opened: {page.dialogs}"
    assert app.alive(), f"{where}: the server is down:\n{app.log(3000)}"


# ---- hostile / workshop tests: the sidebar's models, script runs, the Train page's upload -------------------------

MAIN = "[data-testid='stMain']"
SIDEBAR = "[data-testid='stSidebar']"


def s(key: str, lang: str = "en", **fmt) -> str:
    """A UI string as a learner reads it in `lang` (formatted when fmt is given)."""
    from ui.i18n import strings

    text = strings()[key][lang]
    return text.format(**fmt) if fmt else text


def app_url(app, path: str = "", lang: str = "en", **params) -> str:
    """A page of a running app with its URL state (values quoted), in `lang`."""
    from urllib.parse import quote

    query = "&".join(f"{k}={quote(str(v), safe='')}" for k, v in {**params, "lang": lang}.items())
    return f"{app.url}/{path}?{query}"


def _shipped_shown() -> list[str]:
    """The shipped models as the sidebar lists them (catalog order), the default first."""
    cards = [json.loads(p.read_text(encoding="utf-8")) for p in (ROOT / "assets" / "models").glob("*/card.json")]
    return [f"{c['name']} · trained" for c in sorted(cards, key=lambda c: (c.get("order", 99), c["name"]))]


SHIPPED_SHOWN = _shipped_shown()
DEFAULT_SHOWN = SHIPPED_SHOWN[0]
ERROR_BOX = "[data-testid='stAlertContentError']"
WARNING_BOX = "[data-testid='stAlertContentWarning']"
# React tracks a text box's value through its prototype setter: set it there, then say it changed (a paste)
SET_TEXTAREA_JS = """(el, value) => {  // a text area or a one-line box: the setter of its own kind
    Object.getOwnPropertyDescriptor(Object.getPrototypeOf(el), 'value').set.call(el, value);
    el.dispatchEvent(new Event('input', {bubbles: true}));
}"""


def sidebar_model_options(page) -> list[str]:
    """The labels of the sidebar's model select box ("reverse · trained", ...), read by opening it. A long list is
    virtualised (only the options in view are in the page), so the list is scrolled to its end, collecting each."""
    select = page.locator(SIDEBAR).locator("[data-testid='stSelectbox']").first
    select.click()
    options = page.get_by_role("option")
    options.first.wait_for(state="visible")
    labels: list[str] = []
    for _ in range(100):
        new = [x.strip() for x in options.all_inner_texts() if x.strip() not in labels]
        labels += new
        moved = page.evaluate("""() => {  // the options' scrolling box, one screen further; false at its end
            let box = document.querySelector('[role="option"]');
            while (box && box.scrollHeight <= box.clientHeight + 1) box = box.parentElement;
            if (!box) return false;
            const before = box.scrollTop;
            box.scrollTop = before + box.clientHeight * 0.8;
            return box.scrollTop > before; }""")
        if not moved and not new:
            break
        page.wait_for_timeout(100)
    page.keyboard.press("Escape")
    return labels


# Counts the script runs a tab has seen end: the server's "script finished" messages on the app's websocket (a
# ForwardMsg whose field 6 is set; a run cut short for a rerun, status 2, is not counted), a frame after each message
# so that the page has drawn it. Not the app element's data-test-script-state: on a busy machine the browser handles
# a fast run's "running" and "finished" in one render, and the attribute never changes. Kept in sessionStorage: the
# count goes on across a reload or a link to another page in the same tab. Installed in every page of a context that
# browser_context() made, before the app's own scripts.
RUNS_ENDED_INIT = """(() => {
    const KEY = '__runsEnded';
    const bump = () => sessionStorage.setItem(KEY, String(Number(sessionStorage.getItem(KEY) || 0) + 1));
    const finished = bytes => {  // the top-level fields of one protobuf message: field 6's varint, or -1
        let i = 0;
        const varint = () => { let v = 0, m = 1, c; do { c = bytes[i++]; v += (c & 127) * m; m *= 128; }
                               while (c & 128 && i < bytes.length); return v; };
        while (i < bytes.length) {
            const key = varint(), field = Math.floor(key / 8), wire = key & 7;
            if (wire === 0) { const v = varint(); if (field === 6) return v; }
            else if (wire === 2) { const length = varint(); i += length; }  // (not i += varint(): i is read first)
            else if (wire === 1) i += 8;
            else if (wire === 5) i += 4;
            else return -1;
        }
        return -1;
    };
    const Native = window.WebSocket;
    window.WebSocket = class extends Native {
        constructor(...args) {
            super(...args);
            this.addEventListener('message', e => {
                if (!(e.data instanceof ArrayBuffer)) return;
                const status = finished(new Uint8Array(e.data));
                if (status >= 0 && status !== 2) setTimeout(() => requestAnimationFrame(() => setTimeout(bump)));
            });
        }
    };
})()"""
RUNS_ENDED_JS = "() => Number(sessionStorage.getItem('__runsEnded') || 0)"
ENDED_SINCE_JS = f"(n) => ({RUNS_ENDED_JS})() > n"


# a learner's browser, English; prefers reduced motion: Streamlit's skeletons, spinners and fades, repainted every frame
# while they show, cost the suite's renderer CPU it spends on nothing it asserts
CONTEXT = {"locale": "en-US", "viewport": {"width": 1400, "height": 1000}, "reduced_motion": "reduce"}
POLL_MS = 50  # how often a wait for a run's end looks (not every frame: a frame's work the page would not need)


def browser_context(browser, **options):
    """A new browser context (another browser, with its own cookies: another learner) whose pages count their runs
    (runs_ended); CONTEXT unless `options` say otherwise."""
    context = browser.new_context(**{**CONTEXT, **options})
    context.add_init_script(RUNS_ENDED_INIT)
    return context


def runs_ended(page) -> int:
    """Script runs this tab has seen end (a page of a context that browser_context made)."""
    return page.evaluate(RUNS_ENDED_JS)


def ended_since(page, before: int, start_ms: float, timeout: float = 120_000) -> bool:
    """Whether a run ended after runs_ended() said `before`: one that ends within start_ms, or one still going then
    (waited for up to `timeout` ms, never taken for lost); False if none ended and none is going."""
    try:
        page.wait_for_function(ENDED_SINCE_JS, arg=before, timeout=start_ms, polling=POLL_MS)
        return True
    except Exception:  # noqa: BLE001 - playwright's TimeoutError: no run has ended yet
        if not page.locator(RUN_GOING).count():
            return False
    page.wait_for_function(ENDED_SINCE_JS, arg=before, timeout=timeout, polling=POLL_MS)
    return True


def act_until_run(page, action, *, tries: int = 4, start_ms: float = 20_000, timeout: float = 120_000) -> None:
    """Do `action` and wait for the script run it causes to end; when no run has ended after start_ms and none is
    going (the event was lost: a click or an upload that landed while the element was being redrawn on a busy
    machine), do it again. A run still going is waited for (up to `timeout`), never doubled."""
    for _ in range(tries):
        before = runs_ended(page)
        action()
        if ended_since(page, before, start_ms, timeout):
            wait_rendered(page, timeout=timeout)
            return
    raise TimeoutError(f"no script run followed the action after {tries} tries")


# ---- setting a widget's value: do it, then wait until the widget shows it and the run it started is over ----------
# A busy machine loses keys and clicks, and a run that started before a change may put the value it read back on the
# widget (the app re-assigns widget values in every run). So every helper that types, presses keys or clicks a value
# in checks what the widget shows afterwards, and sets it again when it is not what was set.

WIDGET_JS = """el => {  // what a text, number or range input shows, and whether it still waits for Enter to apply it
    const box = el.closest("[data-testid='stTextArea'], [data-testid='stTextInput'], [data-testid='stNumberInput']");
    const hint = box && box.querySelector("[data-testid='InputInstructions']");
    return {value: el.value, pending: !!hint && /apply/i.test(hint.textContent)};
}"""


def run_after(page, act, *, start_ms: float = 10_000, timeout: float = 120_000, charts: bool = False) -> bool:
    """Do `act()`, then wait for the script run it starts to be over and the page to settle; False when no run ended
    within start_ms and none is going (the action changed nothing, or a busy machine lost it)."""
    before = runs_ended(page)
    act()
    ran = ended_since(page, before, start_ms, timeout)
    settle(page, timeout=timeout, charts=charts)
    return ran


def set_value(page, act, shown, *, what: str, tries: int = 4, start_ms: float = 10_000, timeout: float = 120_000,
              charts: bool = False) -> None:
    """Set a widget's value and wait until the widget shows it: do `act()` (type, press keys, click), wait for the run
    it starts to be over and the page to settle, then ask `shown()`; when the widget does not show the value (a lost
    key or click, an older value a run put back), do `act()` again, at most `tries` times. A value the widget already
    shows is left as it is (it would start no run)."""
    if shown():
        settle(page, timeout=timeout, charts=charts)
        return
    for _ in range(tries):
        run_after(page, act, start_ms=start_ms, timeout=timeout, charts=charts)
        if shown():
            return
    raise AssertionError(f"{what}: the widget does not show it after {tries} tries")


def input_state(box) -> dict:
    """{"value": what a text / number / range input shows, "pending": whether it still says "Press Enter to apply"}."""
    return box.evaluate(WIDGET_JS)


def _same(shown: str, value) -> bool:
    """A box's text against the value set: equal, or the same number ("5" and "5.00")."""
    if shown == str(value):
        return True
    try:
        return float(shown) == float(value)
    except (TypeError, ValueError):
        return False


def type_into(page, box, value, key: str = "Enter", *, paste: bool = False, run: bool = True, charts: bool = False,
              timeout: float = 120_000) -> None:
    """Put `value` into a text or number box (a locator) and apply it with `key` (Enter, Control+Enter, Tab), then wait
    until the box shows it applied (Streamlit's "Press Enter to apply" gone) and, with run=True, the run it started is
    over. paste=True sets the whole text in one input event, as a paste does (fill types a long text far too slowly).
    run=False returns once the box shows the value applied (several tabs sending at once)."""
    text = str(value)

    def act():
        if paste:
            box.evaluate(SET_TEXTAREA_JS, text)
        else:
            box.fill(text)
        box.press(key)

    def shown():
        state = input_state(box)
        return _same(state["value"], text) and not state["pending"]

    if run:
        set_value(page, act, shown, what=f"{text[:60]!r} typed", charts=charts, timeout=timeout)
        return
    for _ in range(4):
        act()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if shown():
                return
            page.wait_for_timeout(100)
    raise AssertionError(f"{text[:60]!r} typed: the box does not show it applied")


def upload_model_file(page, path, name: str | None = None) -> None:
    """On the Train page: open "Upload a model", choose the file, (type a name), press "Check and add"; returns once
    the run it starts is over (read the outcome from the expander's alerts). Each step waits for the run it causes
    (the file's upload ends in a run of its own: a click before it would be lost in it), and the expander is opened
    again whenever a rerun closed it (it does when the elements above it change)."""
    from ui.i18n import strings

    s = strings()
    upload = page.locator(MAIN).locator("[data-testid='stExpander']").filter(has_text=s["tr_ckpt_title"]["en"])
    chooser = upload.locator("[data-testid='stFileUploader']")

    def opened():
        if not chooser.is_visible():
            wait_rendered(page)  # a run still going may not have drawn the expander again yet
            try:
                upload.locator("summary").click()
            except Exception as exc:  # playwright's TimeoutError: say what the page shows instead
                shown = "nothing: its renderer crashed" if getattr(page, "crashed", False) else app_text(page)[-1500:]
                raise AssertionError(f"no expander {s['tr_ckpt_title']['en']!r}; the page shows:\n{shown}") from exc
            chooser.wait_for(state="visible")
        return upload

    remove = opened().get_by_role("button", name=f"Remove {Path(path).name}", exact=True)
    if remove.count():  # the same file again: the uploader would see no change (and start no run)
        remove.click()  # gone from the page once the removal is done (a run may or may not follow)
        remove.wait_for(state="detached", timeout=120_000)
        wait_rendered(page)

    def choose_file():
        chosen = opened().locator("[data-testid='stFileUploader'] input[type='file']")
        chosen.evaluate("el => { el.value = ''; }")  # an input still holding this very file would ignore it
        chosen.set_input_files(str(path))

    # the upload is complete and its run is over. Streamlit's uploader sometimes sends the file (the server answers
    # 204) yet starts no run; the harness saw it in about half of a tab's first uploads: choose the file again after
    # 5 s with no run ended and none going (the uploader keeps one file, so a second choice replaces the first)
    act_until_run(page, choose_file, start_ms=5_000)
    if name is not None:
        box = opened().get_by_role("textbox", name=s["tr_name"]["en"], exact=True)
        if box.input_value() != name:
            # typed and committed (Tab leaves the box) until the box shows it applied, then the run that started (if
            # one was seen) waited for: a retry that typed the same name again would change nothing and start no
            # run (CI, why10). The button pressed below sends the committed name with its own run.
            run_after(page, lambda: type_into(page, box, name, "Tab", run=False))
    opened().get_by_text(Path(path).name).first.wait_for(state="visible")  # the file is still chosen
    no_file = upload.get_by_text(s["tr_ckpt_pair"]["en"])
    for _ in range(5):  # a busy machine: the page may still say no file was chosen; press again
        act_until_run(page, lambda: opened().get_by_role("button", name=s["tr_ckpt_import"]["en"], exact=True).click())
        if not no_file.count():
            break
        page.wait_for_timeout(1_000)


def set_number(page, label: str, value) -> None:
    """Type a value into the main area's number input with this label, commit it (Enter) and wait until it shows."""
    enter_number(page, label, value)


def new_tab(browser, context=None):
    """An English tab (in a new browser context, i.e. another browser with its own cookies, unless `context` is
    given) that records every JS dialog in `tab.dialogs` and whether its renderer crashed in `tab.crashed`
    (tests/browser/conftest.py's `tab` fixture is one)."""
    ctx = context or browser_context(browser)
    page = ctx.new_page()
    page.set_default_timeout(60_000)
    page.dialogs, page.crashed = [], False
    page.on("dialog", lambda d: (page.dialogs.append(d.message), d.dismiss()))
    page.on("crash", lambda _: setattr(page, "crashed", True))
    return page


# ---- views and tools: settled pages, plotly charts read from the DOM, language checks --------------------------------

PLOTS = "[data-testid='stPlotlyChart'] .js-plotly-plot"
INFO_BOX = "[data-testid='stAlertContentInfo']"
LOOK_BOX = f"{INFO_BOX}, .sv .look"  # a "what to look for" box: Streamlit's, or the Logits page's view's own
NOT_SETTLED = "[data-testid='stSkeleton'], [data-stale='true']"
# every drawn plotly chart: its title (tags removed), trace names, the token ticks of its axes
PLOTS_JS = """() => Array.from(document.querySelectorAll("[data-testid='stPlotlyChart'] .js-plotly-plot")).map(p => {
    const title = (p.layout.title && (p.layout.title.text ?? p.layout.title)) || '';
    const ticks = a => (p.layout[a] && p.layout[a].ticktext) ? Array.from(p.layout[a].ticktext) : null;
    return {title: String(title).replace(/<[^>]*>/g, ''), names: p._fullData.map(d => d.name), xticks: ticks('xaxis'),
            yticks: ticks('yaxis'), annotations: (p.layout.annotations || []).map(a => a.text || '')};
})"""
# page coordinates of a data point (x, y) on one chart's axes (the chart must be in view)
PLOT_POINT_JS = """([i, xa, ya, x, y]) => {
    const p = document.querySelectorAll("[data-testid='stPlotlyChart'] .js-plotly-plot")[i];
    const X = p._fullLayout[xa], Y = p._fullLayout[ya], r = p.getBoundingClientRect();
    return [r.left + X._offset + X.l2p(x), r.top + Y._offset + Y.l2p(y)];
}"""
PLOT_Z_JS = """([i, name]) => {
    const p = document.querySelectorAll("[data-testid='stPlotlyChart'] .js-plotly-plot")[i];
    const d = p._fullData.find(t => t.name === name);
    return Array.from(d.z, row => Array.from(row, v => (v === null || Number.isNaN(v)) ? null : v));
}"""
# a point of a named trace: its data coordinates and the axes it is drawn on
TRACE_POINT_JS = """([i, name, k]) => {
    const p = document.querySelectorAll("[data-testid='stPlotlyChart'] .js-plotly-plot")[i];
    const d = p._fullData.find(t => t.name === name);
    const axis = (a, n) => a + 'axis' + (n.length > 1 ? n.slice(1) : '');
    return {x: d.x[k], y: d.y[k], xaxis: axis('x', d.xaxis), yaxis: axis('y', d.yaxis),
            customdata: d.customdata ? Array.from(d.customdata) : null};
}"""
HOVER_JS = "() => Array.from(document.querySelectorAll('.hoverlayer .hovertext')).map(e => e.textContent)"
# the visible text of the app (main area and sidebar), without formulas (KaTeX spells out its letters) or code blocks
APP_TEXT_JS = """() => ['stSidebarUserContent', 'stSidebarNav', 'stMain'].map(id => {
    const el = document.querySelector(`[data-testid='${id}']`);
    if (!el) return '';
    const copy = el.cloneNode(true);
    const hidden = ".katex, [data-testid='stCode'], code, [data-testid='stTooltipIcon']";
    copy.querySelectorAll(hidden).forEach(e => e.remove());
    copy.style.position = 'absolute'; copy.style.left = '-10000px';
    document.body.appendChild(copy);
    const text = copy.innerText;
    copy.remove();
    const views = [...el.querySelectorAll('*')].filter(e => e.shadowRoot)  // components.v2 views (shadow roots)
        .map(e => [...e.shadowRoot.children].filter(c => c.tagName !== 'STYLE')  // (the view's CSS: not read)
            .map(c => c.innerText || '').join('\\n'));
    return [text, ...views].join('\\n');
}).join('\\n')"""
RERUN_STARTED_JS = """() => document.querySelector("[data-testid='stApp']")?.dataset.testScriptState === 'running'
    || !!document.querySelector("[data-stale='true']")"""
INTERNAL_WORDS = ("hook_", "seed's", "seed’s", "/work/", "/home/", "/root/", "/tmp/", "site-packages", ".py",
                  "checkpoints/", "Traceback")


def settle(page, *, timeout: float = 120_000, charts: bool = False) -> None:
    """wait_rendered, then until no skeleton placeholder or stale (faded) element is left (Streamlit reports the run
    over a moment before the last elements replace their placeholders) and the Attention view has the layers it asked
    for (view_settled)."""
    wait_rendered(page, timeout=timeout, charts=charts, settle_ms=250)
    if page.locator(NOT_SETTLED).count():
        page.wait_for_function(f"() => !document.querySelector(\"{NOT_SETTLED}\")", timeout=30_000, polling=POLL_MS)
        wait_rendered(page, timeout=timeout, settle_ms=250)
    if page.locator(f"{ATT_VIEW}[data-asking]").count():  # the Attention view's own run for every layer: awaited too
        page.locator(f"{ATT_VIEW}:not([data-asking])").wait_for(state="attached", timeout=timeout)
        wait_rendered(page, timeout=timeout, settle_ms=250)


def rerun_settled(page, *, timeout: float = 120_000, charts: bool = False) -> None:
    """After an action that reruns the script (a click, a new value): wait for the run to start (at most 2 s: an
    action may change nothing), then to be over and settled."""
    try:
        page.wait_for_function(RERUN_STARTED_JS, timeout=2_000)
    except Exception:  # noqa: BLE001 - playwright's TimeoutError: no rerun came
        pass
    settle(page, timeout=timeout, charts=charts)


def plots(page) -> list[dict]:
    """The drawn plotly charts, in page order: {"title", "names", "xticks", "yticks", "annotations"}."""
    return page.evaluate(PLOTS_JS)


def plot_index(page, title: str) -> int:
    """The index of the first chart whose title contains `title` (AssertionError when none does)."""
    found = [i for i, p in enumerate(plots(page)) if title in p["title"]]
    assert found, f"no chart titled {title!r}: {[p['title'] for p in plots(page)]}"
    return found[0]


def plot_point(page, index: int, x: float, y: float, xaxis: str = "xaxis", yaxis: str = "yaxis") -> tuple[float, float]:
    """Scroll chart `index` into view; the page coordinates of data point (x, y) on its axes."""
    page.locator(PLOTS).nth(index).scroll_into_view_if_needed()
    page.wait_for_timeout(200)
    return tuple(page.evaluate(PLOT_POINT_JS, [index, xaxis, yaxis, x, y]))


def plot_z(page, index: int, trace: str = "values") -> list[list[float | None]]:
    """The z values of a chart's heatmap trace (by name), as plotly decoded them (None for NaN)."""
    return page.evaluate(PLOT_Z_JS, [index, trace])


def trace_point(page, index: int, name: str, k: int = 0) -> dict:
    """Point k of the trace named `name` on chart `index`: {"x", "y", "xaxis", "yaxis", "customdata" (all points)}."""
    return page.evaluate(TRACE_POINT_JS, [index, name, k])


def hover_texts(page, index: int, x: float, y: float, xaxis: str = "xaxis", yaxis: str = "yaxis",
                tries: int = 3) -> list[str]:
    """Move the mouse over a data point of a chart until its hover labels show (a busy machine may miss a move); the
    labels' text ([] when none showed after `tries` moves)."""
    for _ in range(tries):
        px, py = plot_point(page, index, x, y, xaxis, yaxis)
        page.mouse.move(px - 3, py - 3)
        page.mouse.move(px, py)
        try:
            page.wait_for_function("() => document.querySelectorAll('.hoverlayer .hovertext').length > 0",
                                   timeout=5_000)
        except Exception:  # noqa: BLE001 - playwright's TimeoutError: no label yet, move again
            page.mouse.move(0, 0)
            continue
        return page.evaluate(HOVER_JS)
    return []


def click_plot(page, index: int, x: float, y: float, xaxis: str = "xaxis", yaxis: str = "yaxis") -> None:
    """Click a data point of a chart (a plotly selection event: the app reruns) and wait for the run it starts to be
    over; a click no run followed (lost on a busy machine) is made again."""
    px, py = plot_point(page, index, x, y, xaxis, yaxis)

    def click():
        page.mouse.move(px, py)
        page.mouse.click(px, py)

    for _ in range(3):
        if run_after(page, click):
            return


def app_text(page) -> str:
    """What a learner reads in the sidebar and the main area (chart titles and labels included; formulas, code and
    tooltips left out)."""
    return page.evaluate(APP_TEXT_JS)


ALWAYS_SHOWN = ("English",)  # the sidebar's language picker offers "English" on a page in either language


def english_only(strings: dict[str, dict[str, str]], ignore=()) -> list[tuple[str, str]]:
    """(key, phrase): literal English pieces of the UI strings whose Chinese differs, that no Chinese string uses
    itself and that are long enough not to be a token or a model name: a page in Chinese must show none of them.
    A piece is a run of text between {placeholders} and markdown marks, with at least two words or one word of 5+
    letters that is the whole string (a label)."""
    import re

    zh_all = "\n".join(v.get("zh", "") for v in strings.values()).lower()
    out = []
    for key, entry in strings.items():
        en, zh = entry.get("en", ""), entry.get("zh", "")
        if not en or en == zh:
            continue
        for piece in re.split(r"\{[^}]*\}|\*\*|`|\n|[()（）:;：；·|]", en):
            piece = piece.strip(" .,!?'\"‘’“”-–—→=+/")
            words = re.findall(r"[A-Za-z]{2,}", piece)
            label = len(words) == 1 and len(words[0]) >= 5 and piece == words[0] and piece == en.strip()
            if not (len(words) >= 2 and len(piece) >= 10) and not label:
                continue
            if piece.lower() in zh_all or piece.lower() in {i.lower() for i in (*ignore, *ALWAYS_SHOWN)}:
                continue
            out.append((key, piece))
    return out


def english_shown(text: str, phrases: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The phrases (key, English) that occur in a page's text as whole words."""
    import re

    # not inside an identifier: the navigation's icon names ("text_fields") are in the page's text too
    return [(k, p) for k, p in phrases if re.search(rf"(?<![A-Za-z_]){re.escape(p)}(?![A-Za-z_])", text)]


def internal_words(text: str) -> list[str]:
    """Words a learner must never read (hook names, the seed documents, file paths, tracebacks) found in a text."""
    return [w for w in INTERNAL_WORDS if w in text]


def screenshot(page, path) -> None:
    """A settled full-page screenshot (charts drawn), for a person to look at (taken when SCREENSHOTS=1)."""
    try:
        settle(page)
    finally:
        full_screenshot(page, path)  # (it waits for plotly's relayout)


def assert_clean(page, app: App, where: str) -> None:
    """No traceback, no modal, no error box, and none of the words a learner must never read."""
    problem = page_problem(page, app.proc)
    assert not problem, f"{where}: {problem}"
    errors = page.locator(ERROR_BOX).all_inner_texts()
    assert not errors, f"{where}: error shown: {errors}\n--- server log ---\n{app.log(3000)}"
    leaked = internal_words(app_text(page))
    assert not leaked, f"{where}: internal words shown to the learner: {leaked}"


def choose(page, label: str, option: str, where: str = MAIN) -> None:
    """Pick an option of a select box (by its label) and wait until the box shows it and the run is over."""
    box = page.locator(where).get_by_role("combobox", name=label, exact=True)

    def act():
        box.click()
        page.get_by_role("option", name=option, exact=True).click()

    set_value(page, act, lambda: box.input_value() == option, what=f"{label}: {option}")


def combobox_value(page, label: str, where: str = MAIN) -> str:
    """What a select box shows."""
    return page.locator(where).get_by_role("combobox", name=label, exact=True).input_value()


def radio(page, label: str, option: str, where: str = MAIN) -> None:
    """Click an option of a radio group (by the group's label) and wait for the run it starts to be over (a click no
    run followed, lost on a busy machine, is made again; an option already selected is only clicked)."""
    group = page.locator(where).locator("[data-testid='stRadio']").filter(has_text=label).first
    if radio_value(page, label, where) == option:
        group.get_by_text(option, exact=True).click()
        settle(page)
        return
    for _ in range(3):  # the group's label may change with the option (the language): no check by label afterwards
        if run_after(page, lambda: group.get_by_text(option, exact=True).click()):
            return


def radio_value(page, label: str, where: str = MAIN) -> str:
    """The selected option of a radio group (by the group's label)."""
    group = page.locator(where).locator("[data-testid='stRadio']").filter(has_text=label).first
    return group.evaluate("""g => Array.from(g.querySelectorAll("[data-testid='stRadioOption']"))
        .filter(o => o.dataset.selected === 'true' || o.querySelector('input').checked)
        .map(o => o.innerText.trim()).join('|')""")


def enter_text(page, label: str, text: str, where: str = SIDEBAR, *, charts: bool = False) -> None:
    """Type into a text box (by its label), apply it (Ctrl+Enter, as a learner would) and wait until it shows."""
    type_into(page, page.locator(where).get_by_role("textbox", name=label, exact=True), text, "Control+Enter",
              charts=charts)


def enter_number(page, label: str, value, where: str = MAIN) -> None:
    """Type a value into a number input (by its label), commit it (Enter) and wait until it shows."""
    type_into(page, page.locator(where).get_by_label(label, exact=True).first, value)


def slider(page, label: str, where: str = MAIN):
    """A slider's input (type=range: value, min and max are attributes); its accessible name also holds the value."""
    return page.locator(where).get_by_role("slider", name=label)


def set_slider(page, label: str, value: float, where: str = MAIN, *, timeout: float = 120_000) -> None:
    """Move a slider to `value` with the keyboard as a learner does, one key at a time (Home / End for its ends, an
    arrow for one step): after each press, wait until the slider shows the step and the run it started is over; a
    press that was lost, or undone by a run that read the value before it, is made again."""
    box = slider(page, label, where)
    low, high, step = (float(box.get_attribute(a)) for a in ("min", "max", "step"))
    target = min(max(float(value), low), high)
    deadline = time.monotonic() + timeout / 1000

    def now() -> float:
        return float(input_state(box)["value"])

    while abs(now() - target) >= step / 2:  # read after the page settled: a later run cannot move it any more
        if time.monotonic() > deadline:
            raise AssertionError(f"slider {label!r}: shows {now()}, not {target}, after {timeout / 1000:.0f} s")
        was = now()
        key = ("Home" if target == low else "End" if target == high
               else "ArrowLeft" if was > target else "ArrowRight")
        set_value(page, lambda key=key: box.press(key), lambda was=was: abs(now() - was) >= step / 2,
                  what=f"slider {label!r}: {key} from {was:g}", timeout=timeout)


def press_slider(page, label: str, key: str = "ArrowLeft", times: int = 1, where: str = MAIN) -> None:
    """Move a slider with the keyboard (each press one step; Home / End: its ends) and wait until it shows where
    those presses lead (set_slider: one press at a time, each waited for)."""
    box = slider(page, label, where)
    low, high, step = (float(box.get_attribute(a)) for a in ("min", "max", "step"))
    now = float(input_state(box)["value"])
    target = {"Home": low, "End": high, "ArrowLeft": now - times * step, "ArrowDown": now - times * step,
              "ArrowRight": now + times * step, "ArrowUp": now + times * step}[key]
    set_slider(page, label, target, where)


def press_button(page, name: str, where: str = MAIN, *, charts: bool = False) -> None:
    """Click a button (by its name) and wait for the run it starts to be over; a click no run followed within 20 s
    (lost on a busy machine) is made again, unless the button is disabled by then: a disabled button shows that the
    click was taken (its run disabled it, e.g. a stepper at its end), and clicking it again would wait in vain."""
    button = page.locator(where).get_by_role("button", name=name, exact=True).first

    def click() -> None:
        try:
            button.click(timeout=30_000)
        except Exception:  # playwright's TimeoutError: disabled meanwhile by the run of a click before
            if not button.is_disabled():
                raise

    for attempt in range(3):
        if attempt and button.is_disabled():
            settle(page, charts=charts)
            return
        if run_after(page, click, start_ms=20_000, charts=charts):
            return


def next_token(page, n: int, lang: str = "en") -> None:
    """Press the Logits page's "Next token" until the sidebar counts `n` generated tokens (a press lost on a busy
    machine, or a run that ended for another reason, is not taken for the press)."""
    button = page.locator(MAIN).get_by_role("button", name=s("log_next", lang), exact=True).first
    set_value(page, button.click, lambda: page.locator(SIDEBAR).get_by_text(s("log_gen_count", lang, n=n)).count() > 0,
              what=f"generated token {n}", charts=True)


def camera(page, index: int):
    """Click the camera of chart `index`'s toolbar; the Playwright Download it starts."""
    chart = page.locator(PLOTS).nth(index)
    chart.scroll_into_view_if_needed()
    chart.hover()
    with page.expect_download() as dl:
        chart.locator(".modebar-btn[data-title^='Download']").click()
    return dl.value


def download(page, name: str, where=MAIN, *, wait_ms: float = 120_000):
    """Click a download button (by its name, inside `where`: a selector or a locator) once the page has settled; the
    Download it starts. A button whose file is built on the click (data given as a function) asks the server for it
    and stays disabled until the answer: on a busy machine that takes long, so the click waits up to `wait_ms` (a
    second click cannot help while the button is disabled)."""
    root = page.locator(where) if isinstance(where, str) else where
    settle(page)
    with page.expect_download(timeout=wait_ms) as dl:
        root.get_by_role("button", name=name, exact=True).first.click()
    return dl.value


LEGENDS_JS = """() => Array.from(document.querySelectorAll("[data-testid='stPlotlyChart'] .legendtext"))
    .map(e => e.textContent)"""
CJK = re.compile(r"[\u3400-\u9fff\uff00-\uffef]")


def legend_texts(page) -> list[str]:
    """The legend entries of every drawn chart."""
    return page.evaluate(LEGENDS_JS)


def not_chinese(texts, strings: dict[str, dict[str, str]]) -> list[str]:
    """The texts (legend entries, labels) a page in 中文 shows in English: a word of 4+ letters, no Chinese, and
    spelled by no Chinese string (formulas such as "d0 (sin, i=0)" pass)."""
    zh = {v.get("zh", "") for v in strings.values()}
    return [x for x in texts if re.search(r"[A-Za-z]{4,}", x) and not CJK.search(x) and x not in zh]


# ---- the Attention page's view (ui/attention_view.py, static/views/attention.js) ----------------------------------
ATT_VIEW = ".av"
# every head's weights of the layer and mask shown as the view holds them (4 decimals; None where masked), the values
# its colours stand for on each scale (the chosen head), and what it shows: the layer (and the layers it holds, with
# whether its list is shown), the mask (whether its radio is shown), the head, the scale, the title
ATT_VIEW_JS = """root => {
    const d = root.__data, n = d.n_q * d.n_k, heads = [], list = root.querySelector("select[name='layer']");
    const MAPS = root.__maps;
    const layer = Number(list.value), mask = root.querySelector("input[name='mask']:checked").value;
    const maps = MAPS.blocks.get(`${d.modes[mask]}|${layer}`), kept = MAPS.masks[d.modes[mask]];
    for (let h = 0; maps && h < d.heads; h++) {
        const rows = [];
        for (let q = 0; q < d.n_q; q++) {
            rows.push(Array.from({length: d.n_k}, (_, k) => kept[q * d.n_k + k] ? maps.four[h * n + q * d.n_k + k] / 1e4
                                                                                 : null));
        }
        heads.push(rows);
    }
    const drawn = root.__z ? Array.from(root.__z, v => Number.isNaN(v) ? null : v) : null;
    return {weights: maps ? heads : null, drawn, layer, layers: d.layers, mask, modes: d.modes,
            held: [...MAPS.blocks.keys()].filter(() => MAPS.text === d.key).map(b => b.split("|").map(Number)),
            asking: root.hasAttribute("data-asking"), waiting: root.classList.contains("waiting"),
            head: Number(root.querySelector("select[name='head']").value),
            scale: root.querySelector("input[name='scale']:checked").value, n_q: d.n_q, n_k: d.n_k,
            title: root.querySelector('.title').textContent, q: d.q, k: d.k,
            chosen: Array.from(root.querySelectorAll('.thumb.chosen'), f => Number(f.dataset.head))};
}"""


def view_state(page) -> dict:
    """What the Attention page's view holds and shows (ATT_VIEW_JS)."""
    return page.locator(ATT_VIEW).evaluate(ATT_VIEW_JS)


# the scores before and after masking drawn in the browser (ui/attention_pair.py): the values drawn (None where
# masked after masking), the panels' titles and boxes, the ✕ rule, the colour bar's reach
ATT_PAIR = ".ap"
ATT_PAIR_JS = """root => {
    const d = root.__data, rows = (z) => Array.from({length: d.n_q}, (_, q) => Array.from(
        z.subarray(q * d.n_k, (q + 1) * d.n_k), v => Number.isNaN(v) ? null : v));
    const panels = Array.from(root.querySelectorAll('.panel'), p => {
        const b = p.querySelector('canvas.cells').getBoundingClientRect();
        return {title: p.querySelector('.title').textContent, x: b.x, y: b.y, width: b.width, height: b.height,
                labels: p.querySelectorAll('.ylab div').length};
    });
    return {before: rows(root.__z.before), after: rows(root.__z.after), panels, marks: d.marks, lim: d.lim,
            n_q: d.n_q, n_k: d.n_k};
}"""


def pair_state(page) -> dict:
    """What the Attention page's scores before and after masking show (ATT_PAIR_JS)."""
    return page.locator(ATT_PAIR).evaluate(ATT_PAIR_JS)


def pair_hover(page, panel: int, q: int, k: int) -> list[str]:
    """The hover box's lines over cell (q, k) of the pair's panel (0: before masking, 1: after)."""
    root = page.locator(ATT_PAIR)
    root.scroll_into_view_if_needed()
    state = pair_state(page)
    box = state["panels"][panel]
    page.mouse.move(box["x"] + (k + 0.5) * box["width"] / state["n_k"],
                    box["y"] + (q + 0.5) * box["height"] / state["n_q"])
    page.wait_for_timeout(50)
    return root.locator(".tip div").all_inner_texts()


def view_head(page) -> str:
    """The head the Attention page's view shows large (its list's value)."""
    return page.locator(f"{ATT_VIEW} select[name='head']").input_value()


def view_settled(page, timeout: float = 120_000) -> None:
    """Wait until the Attention page's view has drawn its maps and has those it asked for (attention.js asks with a
    run of its own when the pointer or the focus reaches its Layer list or mask radio, and marks itself data-asking
    until that run's data has come), then for the page to settle."""
    page.locator(f"{ATT_VIEW} .title").wait_for(state="visible", timeout=timeout)
    page.locator(f"{ATT_VIEW}:not(.waiting):not([data-asking])").wait_for(state="attached", timeout=timeout)
    settle(page, timeout=timeout)


def _view_holds(page, field: str) -> bool:
    """Whether the Attention page's view shows its own `field` ("layer" or "mask") rather than the server's box or
    radio. The view draws its data after the run is over, so this waits for it first (view_settled): a look before
    would take the view's list, drawn a moment later, for the server's box (both are named by the same label)."""
    view_settled(page)
    return page.locator(f"{ATT_VIEW} .field.{field}:not([hidden])").count() > 0


def pick_layer(page, layer: int, lang: str = "en") -> None:
    """Choose the Attention page's layer as a learner does: in the view's list (a text of up to VIEW_TOKENS tokens),
    else in the server's Layer box."""
    if _view_holds(page, "layer"):
        view_pick(page, layer=layer)
    else:
        choose(page, s("att_layer", lang), str(layer))


def pick_mask(page, mode: str, lang: str = "en") -> None:
    """Choose the Attention page's mask mode as a learner does: in the view's radio (a text of up to VIEW_TOKENS
    tokens), else in the server's radio."""
    if _view_holds(page, "mask"):
        view_pick(page, mask=mode)
    else:
        radio(page, s("att_mask_mode", lang), s(f"mask_{mode}", lang))


def shown_mask(page, lang: str = "en") -> str:
    """The mask mode the Attention page shows (its name in `lang`): the view's radio, else the server's."""
    if _view_holds(page, "mask"):
        return s(f"mask_{view_state(page)['mask']}", lang)
    return radio_value(page, s("att_mask_mode", lang))


def shown_layer(page, lang: str = "en") -> str:
    """The layer the Attention page shows: the view's list where the view holds every layer, else the server's box."""
    if _view_holds(page, "layer"):
        return str(view_state(page)["layer"])
    return combobox_value(page, s("att_layer", lang))


def view_pick(page, *, layer: int | None = None, mask: str | None = None, head: int | None = None,
              scale: str | None = None, thumbnail: bool = False) -> None:
    """Pick a layer (in the view's list) or a mask mode (in its radio), the pointer on it first, as a learner's: the
    view asks for the maps it lacks there), a head (in the view's list, or with thumbnail=True a click on its small
    map) or a colour scale in the Attention page's view, and wait for the run that tells the server to be over (the
    view redraws at once)."""
    view = page.locator(ATT_VIEW)
    if layer is not None:
        view.locator(".field.layer").hover()
        view_settled(page)
        run_after(page, lambda: view.locator("select[name='layer']").select_option(str(layer)))
    if mask is not None:
        view.locator(".field.mask").hover()
        view_settled(page)
        run_after(page, view.locator(f"input[name='mask'][value='{mask}']").check)
    if head is not None:
        if thumbnail:
            run_after(page, view.locator(f".thumb[data-head='{head}']").click)
        else:
            run_after(page, lambda: view.locator("select[name='head']").select_option(str(head)))
    if scale is not None:
        run_after(page, view.locator(f"input[name='scale'][value='{scale}']").check)


def view_cell(page, q: int, k: int, *, hover: bool = False) -> list[str]:
    """Hover (hover=True) or click the cell (query q, key k) of the view's large map; returns the hover's lines (after
    a click, once the run it starts is over: the server's explanation is on the page)."""
    canvas = page.locator(f"{ATT_VIEW} canvas.cells")
    canvas.scroll_into_view_if_needed()
    box = canvas.bounding_box()
    d = page.locator(ATT_VIEW).evaluate("root => [root.__data.n_q, root.__data.n_k]")
    x, y = box["x"] + (k + 0.5) * box["width"] / d[1], box["y"] + (q + 0.5) * box["height"] / d[0]
    page.mouse.move(x - 2, y - 2)
    page.mouse.move(x, y)
    tip = page.locator(f"{ATT_VIEW} .tip")
    tip.wait_for(state="visible")
    lines = tip.locator("div").all_inner_texts()
    if not hover:
        run_after(page, lambda: page.mouse.click(x, y))
    return lines
