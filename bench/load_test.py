"""A workshop's load: N concurrent browser sessions on one server, each with its own sentence, every page.

    python bench/load_test.py [--sessions 20] [--duration 120] [--ramp 10] [--train-one] [--quick]
                              [--device cpu|cuda] [--url http://host:port]

One Chromium, N Playwright contexts (own cookies, own websocket), started --ramp seconds apart in all.
Each session opens the app, types its own sentence (a unique marker word) into the sidebar text box, then
until --duration is over visits every page through the sidebar links and types a new sentence after each
round. Per action it records the time from the click/typing to the page being rendered: a script run it
caused is over (app idle; counted in the browser from the websocket's "script finished" messages), the new
page's URL or the new text in the URL, and every plotly chart drawn.

Reported: p50/p95 per action kind and overall, errors (stException elements shown, timeouts) and cross-talk
(another session's marker in this session's URL or main area; the own marker missing from the URL).

--train-one: first the run as above (idle), then the same run again with one extra session that starts a
training on the Train page; reports the explorers' p95 in both runs (target: with training <= 2x idle).
--url: drive an already running server (e.g. nginx in front of replicas) instead of starting one.
"""
from __future__ import annotations

import asyncio
import os
import re
import time
from urllib.parse import parse_qs, urlparse

from common import (
    COURSE_BASE,
    WORDS,
    cpu_seconds,
    figure,
    machine_busy_seconds,
    median,
    parser,
    percentile,
    print_table,
    setup_env,
    write_result,
)

from harness.browser import RUNS_ENDED_INIT

STATE_JS = """() => {
  const app = document.querySelector("[data-testid='stApp']");
  const charts = [...document.querySelectorAll("[data-testid='stPlotlyChart']")];
  const main = document.querySelector("[data-testid='stMain']");
  return {state: app ? app.getAttribute("data-test-script-state") : null,
          conn: app ? app.getAttribute("data-test-connection-state") : null,
          status: !!document.querySelector("[data-testid='stStatusWidget']"),
          charts: charts.length, drawn: charts.every(c => c.querySelector(".main-svg")),
          exc: [...document.querySelectorAll("[data-testid='stException']")].map(e => e.innerText.slice(0, 300)),
          h1: (main && main.querySelector("h1")) ? main.querySelector("h1").innerText : "",
          sig: main ? main.textContent.slice(0, 300) : "",
          runs: Number(sessionStorage.getItem('__runsEnded') || 0), href: location.href};
}"""
NAV_LINKS_JS = """() => [...document.querySelectorAll("[data-testid='stSidebarNav'] a")]
                     .map(a => new URL(a.href).pathname.replace(/^\\/+|\\/+$/g, ""))"""
MAIN_TEXT_JS = """() => (document.querySelector("[data-testid='stMain']") || {}).textContent || ''"""
P95_RATIO_TARGET = 2.0


class ActionTimeout(Exception):
    pass


def sentence(i: int, k: int) -> str:
    """Session i's k-th sentence: its marker word, plus a counter so every round traces a new text."""
    return f"The {WORDS[i % len(WORDS)]} walked {k + 1} times around the quiet lake before the sun went down."


def url_text(href: str) -> str:
    return parse_qs(urlparse(href).query).get("text", [""])[0]


async def rendered(page, done, *, timeout_s: float, poll_s: float = 0.25, settle_s: float = 0.3) -> tuple[float, dict]:
    """Wait until done(state) holds, the app is idle and every chart drawn, for settle_s; returns (the moment
    that first held, the state)."""
    deadline = time.perf_counter() + timeout_s
    ready_since = None
    while True:
        try:
            st = await page.evaluate(STATE_JS)
        except Exception:  # noqa: BLE001 - navigation in progress destroys the context
            st = None
        now = time.perf_counter()
        if st:
            idle = st["state"] == "notRunning" and st["conn"] == "CONNECTED" and not st["status"]
            ok = idle and st["drawn"] and done(st)
            if ok:
                ready_since = ready_since or now
                if now - ready_since >= settle_s:
                    return ready_since, st
            else:
                ready_since = None
        if now > deadline:
            raise ActionTimeout(f"not rendered after {timeout_s:.0f} s (last state: {st})")
        await asyncio.sleep(poll_s)


class Session:
    def __init__(self, i: int, markers: list[str], timeout_s: float, model: str | None):
        self.i, self.markers, self.timeout_s, self.model = i, markers, timeout_s, model
        self.own = WORDS[i % len(WORDS)]
        others = sorted({m for m in markers if m != self.own})
        self.foreign = re.compile(r"(?<![A-Za-z])(" + "|".join(others) + r")(?![A-Za-z])") if others else None
        self.actions: list[dict] = []
        self.crosstalk: list[str] = []
        self.text = ""

    def check(self, st: dict, where: str) -> None:
        """No other session's marker in this session's URL or main area; the own marker in the URL."""
        text = url_text(st["href"])
        if self.text and self.own not in text:
            self.crosstalk.append(f"{where}: own marker missing from URL text {text[:80]!r}")
        for place, content in (("URL", text), ("page", st["text"])):
            hit = self.foreign.search(content) if self.foreign else None
            if hit:
                self.crosstalk.append(f"{where}: foreign marker {hit.group(1)!r} in {place}")

    async def act(self, page, kind: str, where: str, start_action, done) -> None:
        """Time one action: from its start until a script run it caused is over, done(state) holds and every
        chart is drawn."""
        rec = {"session": self.i, "kind": kind, "page": where}
        try:
            before = {"runs": 0, "sig": ""} if kind == "open" else await page.evaluate(STATE_JS)
            rec["t"] = t0 = time.perf_counter()
            await start_action()
            ready, st = await rendered(page, lambda st: done(st, before), timeout_s=self.timeout_s)
            rec["s"] = ready - t0
            rec["charts"] = st["charts"]
            if st["exc"]:
                rec["error"] = "exception: " + st["exc"][0]
            st["text"] = await page.evaluate(MAIN_TEXT_JS)
            self.check(st, f"{kind} {where or 'home'}")
        except ActionTimeout as exc:
            rec["error"] = f"timeout: {exc}"
        except Exception as exc:  # noqa: BLE001 - playwright errors are results here
            rec["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
            try:
                rec["error"] += f" (app state: {await page.evaluate(STATE_JS)})"
            except Exception:  # noqa: BLE001 - the page itself is gone
                pass
        self.actions.append(rec)

    async def open(self, page, url: str) -> None:
        from browser_bench import root_url

        start = root_url(url, model=self.model) if self.model else url + "/"
        await self.act(page, "open", "", lambda: page.goto(start, timeout=self.timeout_s * 1000),
                       lambda st, before: st["runs"] > 0 or bool(st["sig"]))

    async def type(self, page, text: str) -> None:
        from browser_bench import TEXTAREA

        box = page.locator(TEXTAREA).first

        async def start():
            await box.fill(text, timeout=self.timeout_s * 1000)  # waits while the box is disabled (reconnecting)
            await box.press("Control+Enter")

        # the server puts the text into the URL while it runs the script: a run with the new text happened
        await self.act(page, "type", urlparse(page.url).path.strip("/"), start,
                       lambda st, before: url_text(st["href"]) == text)
        if "error" not in self.actions[-1]:
            self.text = text  # from now on this session's marker must be in its URL

    async def nav(self, page, path: str) -> None:
        link = page.locator(f"[data-testid='stSidebarNav'] a[href$='/{path}']").first
        await self.act(page, "nav", path, lambda: link.click(),
                       lambda st, before: urlparse(st["href"]).path.strip("/") == path and (
                           st["runs"] > before["runs"] or (st["sig"] and st["sig"] != before["sig"])))

    async def recover(self, page, url: str) -> None:
        """After a failed action: reload the app with this session's text from the URL state."""
        try:
            await page.goto(f"{url}/?{urlparse(page.url).query}", timeout=self.timeout_s * 1000)
            await rendered(page, lambda st: bool(st["sig"]), timeout_s=self.timeout_s)
        except Exception as exc:  # noqa: BLE001 - the next action records whatever is still wrong
            print(f"  session {self.i}: recovery failed: {type(exc).__name__}", flush=True)


async def explorer(browser, url: str, s: Session, start_at: float, stop_at: float) -> None:
    await asyncio.sleep(max(0.0, start_at - time.perf_counter()))
    ctx = await browser.new_context(viewport={"width": 1280, "height": 900})
    await ctx.add_init_script(RUNS_ENDED_INIT)  # the tests' run counter (harness/browser.py)
    page = await ctx.new_page()
    try:
        await s.open(page, url)
        if "error" in s.actions[-1]:
            await s.recover(page, url)
        paths = await page.evaluate(NAV_LINKS_JS)  # every page, in the sidebar's order
        if not paths:
            raise RuntimeError("no page links in the sidebar")
        k = 0
        await s.type(page, sentence(s.i, k))
        while time.perf_counter() < stop_at:
            for path in paths:
                if time.perf_counter() >= stop_at:
                    break
                if urlparse(page.url).path.strip("/") == path:
                    continue  # already there (the first round starts on the default page)
                await s.nav(page, path)
                if "error" in s.actions[-1]:
                    await s.recover(page, url)
            if time.perf_counter() < stop_at:
                k += 1
                await s.type(page, sentence(s.i, k))
                if "error" in s.actions[-1]:
                    await s.recover(page, url)
    finally:
        await ctx.close()


async def trainer(browser, url: str, stop_at: float, log: dict, button_re: str) -> None:
    """One session that starts a training on the Train page and keeps the page open until the run ends."""
    from browser_bench import root_url

    ctx = await browser.new_context(viewport={"width": 1280, "height": 900})
    page = await ctx.new_page()
    try:
        await page.goto(root_url(url, lang="en"), timeout=120_000)
        await rendered(page, lambda st: bool(st["sig"]), timeout_s=120)
        await page.locator("[data-testid='stSidebarNav'] a[href$='/train']").first.click()
        button = page.locator("[data-testid='stMain'] button:visible",
                              has_text=re.compile(button_re, re.IGNORECASE)).first
        try:
            await button.wait_for(state="visible", timeout=120_000)
        except Exception:  # noqa: BLE001 - reported with the buttons that are there
            labels = await page.eval_on_selector_all("[data-testid='stMain'] button", "bs => bs.map(b => b.innerText)")
            log["error"] = f"no button matching {button_re!r} on the Train page (buttons: {labels})"
            return
        log["button"] = (await button.inner_text()).strip()
        log["started"] = time.perf_counter()
        await button.click()
        progress = page.locator("[data-testid='stMain'] [data-testid='stProgress']")
        while time.perf_counter() < stop_at:
            st = await page.evaluate(STATE_JS)
            if st["exc"]:
                log["error"] = st["exc"][0]
            if await progress.count():
                log["progress"] = (await progress.first.inner_text()).strip()[:120]
                steps = re.search(r"(\d+)\D+(\d+)", log["progress"])
                if steps and int(steps.group(1)) > 0:
                    log.setdefault("stepping_after_s", time.perf_counter() - log["started"])
                    log["steps"] = int(steps.group(1))
            await asyncio.sleep(2.0)
    except Exception as exc:  # noqa: BLE001
        log["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
    finally:
        await ctx.close()


async def one_run(url: str, n: int, duration: float, ramp: float, timeout_s: float, train: str | None,
                  model: str | None) -> dict:
    from browser_bench import launch_browser
    from playwright.async_api import async_playwright

    markers = [WORDS[i % len(WORDS)] for i in range(n)]
    sessions = [Session(i, markers, timeout_s, model) for i in range(n)]
    train_log: dict = {}
    async with async_playwright() as pw:
        browser = await launch_browser(pw)
        t0 = time.perf_counter()
        stop_at = t0 + ramp + duration
        tasks = [explorer(browser, url, s, t0 + ramp * i / max(n - 1, 1), stop_at) for i, s in enumerate(sessions)]
        if train:
            tasks.append(trainer(browser, url, stop_at, train_log, train))
        results = await asyncio.gather(*tasks, return_exceptions=True)
        wall = time.perf_counter() - t0
        for s, res in zip(sessions, results):  # a session that broke down is an error, not a crashed bench
            if isinstance(res, BaseException):
                s.actions.append({"session": s.i, "kind": "session", "page": "",
                                  "error": f"session ended: {type(res).__name__}: {str(res)[:300]}"})
        await browser.close()
    actions = [a for s in sessions for a in s.actions]
    return {"actions": actions, "crosstalk": [c for s in sessions for c in s.crosstalk], "wall_s": wall,
            "train": train_log if train else None}


def summarise(run: dict) -> dict:
    acts = run["actions"]
    ok = [a["s"] for a in acts if "s" in a and "error" not in a]
    out = {"actions": len(acts), "ok": len(ok), "errors": sum("error" in a for a in acts),
           "timeouts": sum(a.get("error", "").startswith("timeout") for a in acts),
           "exceptions": sum(a.get("error", "").startswith("exception") for a in acts),
           "crosstalk": len(run["crosstalk"]), "p50": percentile(ok, 50), "p95": percentile(ok, 95),
           "max": max(ok) if ok else None, "by_kind": {}}
    for kind in sorted({a["kind"] + (":" + (a["page"] or "home") if a["kind"] == "nav" else "") for a in acts}):
        xs = [a["s"] for a in acts if "s" in a and "error" not in a
              and a["kind"] + (":" + (a["page"] or "home") if a["kind"] == "nav" else "") == kind]
        out["by_kind"][kind] = {"n": len(xs), "p50": percentile(xs, 50), "p95": percentile(xs, 95),
                                "median": median(xs)}
    return out


def show(label: str, summ: dict) -> None:
    print(f"\n{label}: {summ['actions']} actions, {summ['errors']} errors ({summ['timeouts']} timeouts, "
          f"{summ['exceptions']} exceptions), cross-talk {summ['crosstalk']}")
    print_table(("action", "n", "p50 s", "p95 s"),
                [(k, v["n"], f"{v['p50'] or 0:.2f}", f"{v['p95'] or 0:.2f}") for k, v in summ["by_kind"].items()]
                + [("ALL", summ["ok"], f"{summ['p50'] or 0:.2f}", f"{summ['p95'] or 0:.2f}")])


def run_against(args, train: str | None) -> dict:
    """train: None, or the regex of the Train page's start button (the run then has one training session)."""
    # with a server of its own, also the CPU the server and the whole machine used meanwhile
    model = args.model or None
    if args.url:
        return asyncio.run(one_run(args.url.rstrip("/"), args.sessions, args.duration, args.ramp, args.timeout, train,
                                   model))
    from browser_bench import server_env, start_app

    with start_app(env=server_env()) as (proc, url):
        cpu0, (busy0, total0) = cpu_seconds(proc.pid), machine_busy_seconds()
        out = asyncio.run(one_run(url, args.sessions, args.duration, args.ramp, args.timeout, train, model))
        cpu1, (busy1, total1) = cpu_seconds(proc.pid), machine_busy_seconds()
    n_cpu = os.cpu_count() or 1
    out["server_cpu_s"] = cpu1 - cpu0
    out["server_cores"] = (cpu1 - cpu0) / out["wall_s"]
    out["machine_busy"] = (busy1 - busy0) / max(total1 - total0, 1e-9)  # fraction of all cores
    out["other_cores"] = out["machine_busy"] * n_cpu - out["server_cores"]  # browser, bench, other work
    return out


def main(argv=None) -> int:
    p = parser(__doc__)
    p.add_argument("--sessions", type=int, default=20)
    p.add_argument("--duration", type=float, default=120.0, help="seconds of exploring after the ramp")
    p.add_argument("--ramp", type=float, default=10.0, help="seconds over which the sessions start")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds before an action counts as timed out")
    p.add_argument("--train-one", action="store_true", help="also run with one extra session training")
    p.add_argument("--train-button", default=r"^\s*(start|train|run)",
                   help="regex of the Train page's button that starts a training (case-insensitive)")
    p.add_argument("--url", default=None, help="an already running app (default: start one)")
    p.add_argument("--model", default=COURSE_BASE,
                   help=f"model key the sessions open with (default {COURSE_BASE}; '' = the app's default)")
    args = p.parse_args(argv)
    if args.quick:
        args.sessions, args.duration = min(args.sessions, 5), min(args.duration, 45.0)
    setup_env(args.device)

    idle = run_against(args, train=None)
    s_idle = summarise(idle)
    show(f"{args.sessions} sessions, {args.duration:.0f} s", s_idle)
    for c in idle["crosstalk"][:10]:
        print("  cross-talk:", c)
    errors = [a for a in idle["actions"] if "error" in a]
    for a in errors[:5]:
        print(f"  error (session {a['session']}, {a['kind']} {a['page']}): {a['error'][:200]}")
    figures = [
        figure(f"load {args.sessions} sessions: action p50", s_idle["p50"], "s"),
        figure(f"load {args.sessions} sessions: action p95", s_idle["p95"], "s"),
        figure(f"load {args.sessions} sessions: errors", s_idle["errors"], "", 0, "<=",
               note=f"{s_idle['timeouts']} timeouts, {s_idle['exceptions']} exceptions, {s_idle['actions']} actions"),
        figure(f"load {args.sessions} sessions: cross-talk", s_idle["crosstalk"], "", 0, "<="),
    ]
    if "server_cpu_s" in idle:
        per_action = idle["server_cpu_s"] / max(s_idle["actions"], 1)
        print(f"\nserver CPU {idle['server_cpu_s']:.0f} s over {idle['wall_s']:.0f} s ({idle['server_cores']:.2f} "
              f"cores), {per_action:.2f} CPU s per action; machine {100 * idle['machine_busy']:.0f}% busy, "
              f"{idle['other_cores']:.2f} cores for the browser and everything else")
        figures += [
            figure("server CPU per action", per_action, "s", note="sizing: see deploy/README.md"),
            figure("server cores used during the run", idle["server_cores"], "cores",
                   note=f"machine {100 * idle['machine_busy']:.0f}% busy; browser+rest {idle['other_cores']:.2f}"),
        ]
    data = {"sessions": args.sessions, "duration_s": args.duration, "ramp_s": args.ramp, "url": args.url,
            "idle": {"summary": s_idle, **idle}}
    if args.train_one:
        busy = run_against(args, train=args.train_button)
        s_busy = summarise(busy)
        show(f"{args.sessions} sessions + 1 training", s_busy)
        print("  trainer:", {k: v for k, v in (busy["train"] or {}).items()})
        ratio = s_busy["p95"] / s_idle["p95"] if s_busy["p95"] and s_idle["p95"] else None
        trained = bool(busy["train"] and busy["train"].get("steps") and "error" not in busy["train"])
        figures += [
            figure(f"load {args.sessions} + training: action p95", s_busy["p95"], "s"),
            figure("p95 with training / p95 idle", ratio if trained else None, "x", P95_RATIO_TARGET, "<=",
                   note=f"{busy['train'].get('steps')} training steps during the run" if trained else
                   f"not measured, no training step ran: {busy['train']}"),
            figure(f"load {args.sessions} + training: errors", s_busy["errors"], "", 0, "<="),
            figure(f"load {args.sessions} + training: cross-talk", s_busy["crosstalk"], "", 0, "<="),
        ]
        data["training"] = {"summary": s_busy, **busy}
    write_result("load_test", figures, **data)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
