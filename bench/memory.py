"""Server memory with 1 and with 10 browser sessions, each on the attention page with its own text.

    python bench/memory.py [--quick] [--device cpu|cuda] [--sessions 10] [--model KEY]

RSS (VmRSS from /proc, summed over the streamlit process and its children) is read after the server is up
(no session), with session 1 rendered, and after each further session; growth per extra session =
(RSS with N - RSS with 1) / (N - 1). Each session is its own Playwright context (own cookies, own
websocket) opening the app with its own sentence, then the attention page. Target: < 30 MB per session.
"""
from __future__ import annotations

import time

from common import (
    COURSE_BASE,
    WORDS,
    figure,
    parser,
    print_table,
    setup_env,
    tree_rss_mb,
    write_result,
)

GROWTH_TARGET_MB = 30


def sentence(i: int) -> str:
    """Session i's own sentence: a unique marker word in an ordinary sentence (about 14 tokens)."""
    return f"The {WORDS[i % len(WORDS)]} number {i} walked slowly to the river to drink some water."


def settle(pid: int, seconds: float = 2.0) -> float:
    """RSS after a short pause (the server finishes sending; allocator settles)."""
    time.sleep(seconds)
    return tree_rss_mb(pid)


def main(argv=None) -> int:
    p = parser(__doc__)
    p.add_argument("--sessions", type=int, default=10)
    p.add_argument("--model", default=COURSE_BASE, help=f"model key (default {COURSE_BASE}: free text, full size)")
    args = p.parse_args(argv)
    setup_env(args.device)
    from browser_bench import launch_browser, server_env, start_app, visit
    from playwright.sync_api import sync_playwright

    n = max(2, args.sessions if not args.quick else min(args.sessions, 5))
    state = {"model": args.model}
    rows, errors = [], 0
    with start_app(env=server_env()) as (proc, url), sync_playwright() as pw:
        browser = launch_browser(pw)
        rss0 = settle(proc.pid)
        rows.append((0, rss0, "-"))
        print(f"server up, no session: {rss0:.0f} MB", flush=True)
        contexts = []
        for i in range(n):
            ctx = browser.new_context()
            page = ctx.new_page()
            contexts.append(ctx)
            took = visit(page, url, "attention", text=sentence(i), **state)
            errors += page.locator("[data-testid='stException']").count()
            rss = settle(proc.pid)
            rows.append((i + 1, rss, f"{took:.1f}"))
            print(f"{i + 1:3d} sessions: {rss:.0f} MB  (this session rendered in {took:.1f} s)", flush=True)
        for ctx in contexts:
            ctx.close()
        rss_closed = settle(proc.pid, 5.0)
        browser.close()
    print()
    print_table(("sessions", "RSS MB", "render s"), [(k, f"{v:.0f}", s) for k, v, s in rows])
    rss1, rssn = rows[1][1], rows[-1][1]
    growth = (rssn - rss1) / (n - 1)
    figures = [
        figure("server RSS, no session", rss0, "MB"),
        figure("server RSS, 1 session", rss1, "MB", note="model loaded"),
        figure(f"server RSS, {n} sessions", rssn, "MB"),
        figure("RSS growth per extra session", growth, "MB", GROWTH_TARGET_MB, note=f"(RSS{n} - RSS1) / {n - 1}"),
        figure(f"server RSS after closing all {n}", rss_closed, "MB",
               note="closed sessions are kept 120 s (server.disconnectedSessionTTL)"),
        figure("exceptions shown", errors, "", 0, "<="),
    ]
    write_result("memory", figures, rss_by_sessions=[{"sessions": k, "rss_mb": v, "render_s": s} for k, v, s in rows],
                 rss_after_close_mb=rss_closed, sessions=n, model=args.model)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
