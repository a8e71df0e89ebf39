"""Chromium's CPU for the Attention page of a long text: what one learner's tab costs their laptop.

    python bench/browser_cpu.py [--tokens 1000] [--model preset:course-base@cl100k_base] [--device cpu|cuda]

Opens the app in Chromium, types the text into the sidebar, goes to the Attention page through its link and waits until
every chart is drawn; reports Chromium's main-thread busy time for that visit (the DevTools Performance domain's
TaskDuration and ScriptDuration, seconds of CPU spent by the page), the wall time, the DOM's node count and the
size of each chart's arrays as the page holds them (JSON text; the wire carries them as base64 float32).
Target: the 1000-token page under 10 s of browser CPU (it was ~300 s before long maps were drawn in blocks with a
readable subset of labels).
"""
from __future__ import annotations

import time

from common import figure, parser, setup_env, text_of_tokens, write_result

CPU_TARGET_S = 10.0


def metrics(cdp) -> dict[str, float]:
    return {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}


def main(argv=None) -> int:
    p = parser(__doc__)
    p.add_argument("--tokens", type=int, default=1000)
    p.add_argument("--model", default="preset:course-base@cl100k_base")  # a context of 1000+ tokens
    args = p.parse_args(argv)
    env = setup_env(args.device)
    from browser_bench import TEXTAREA, launch_browser, nav, root_url, server_env, start_app, wait_rendered
    from playwright.sync_api import sync_playwright

    text = text_of_tokens(args.tokens, "The weather was nice, so we walked to the park after lunch. ")
    with sync_playwright() as pw, start_app(env={**env, **server_env()}) as (_proc, url):
        browser = launch_browser(pw)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.goto(root_url(url, model=args.model, tgt="short", block="enc_self", lang="en"))
        wait_rendered(page)
        box = page.locator(TEXTAREA).first  # typed, not linked: a link carries at most 2,000 characters
        box.fill(text)
        box.press("Control+Enter")
        wait_rendered(page, timeout=600_000)
        cdp = page.context.new_cdp_session(page)
        cdp.send("Performance.enable")
        before, start = metrics(cdp), time.perf_counter()
        nav(page, "attention")
        wait_rendered(page, charts=True, timeout=600_000, chart_timeout=600_000)
        wall = time.perf_counter() - start
        after = metrics(cdp)
        task, script = (after[k] - before[k] for k in ("TaskDuration", "ScriptDuration"))
        charts = page.evaluate("""() => [...document.querySelectorAll('.js-plotly-plot')].map(el =>
            JSON.stringify((el.data || []).map(t => ({z: t.z, x: t.x, y: t.y, text: t.text, hovertext: t.hovertext,
              customdata: t.customdata}))).length)""")
        nodes = page.evaluate("document.getElementsByTagName('*').length")
        browser.close()
    figs = [figure("browser CPU (main thread busy)", round(task, 2), "s", CPU_TARGET_S),
            figure("of which script", round(script, 2), "s"),
            figure("wall time to every chart drawn", round(wall, 2), "s"),
            figure("largest chart's arrays, decoded in the page, as JSON text", max(charts, default=0), "bytes",
                   note="not the wire size: plotly sends float32 arrays base64-encoded (4 bytes a number)"),
            figure("charts", len(charts)), figure("DOM nodes", nodes)]
    write_result("browser_cpu", figs, tokens=args.tokens, model=args.model, chart_bytes=charts)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
