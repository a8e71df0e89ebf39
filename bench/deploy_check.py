"""Deployment check: deploy/run_local.sh (2 replicas behind nginx), browser sessions through nginx, teardown.

    python bench/deploy_check.py [--quick] [--device cpu|cuda] [--replicas 2] [--sessions 6]

Each session (its own Playwright context, so its own sticky cookie) opens the app through nginx with its
own sentence, types a new one, visits the attention and logits pages (charts must draw, no exception).
nginx's access log (key = the sticky cookie, upstream = the replica) then tells which replica served each
session and whether every request of a session - page, websocket, media - went to that same replica.
The work dir (config, logs) is removed after a clean pass; kept with --keep or when something failed.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from common import COURSE_BASE, ROOT, WORDS, figure, parser, print_table, setup_env, write_result

from harness.server import server_alive

LOG_LINE = re.compile(r'"(?P<method>\S+) (?P<path>\S+) [^"]*" (?P<status>\d+) \d+ key=(?P<key>\S+) '
                      r"upstream=(?P<upstream>.+?) rt=")


def free_ports(n: int) -> int:
    """A first port p with p .. p+n-1 all free on localhost."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + n > 65535:
            continue
        try:
            socks = []
            for p in range(base, base + n):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", p))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no run of free ports")


def stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM run_local.sh's process group (its trap stops replicas and nginx), SIGKILL if it lingers."""
    for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 5)):
        if proc.poll() is not None:
            break
        try:
            os.killpg(proc.pid, sig)
            proc.wait(timeout=wait)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            continue
    try:  # anything of the group still alive (a replica that ignored SIGTERM)
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def group_members(pgid: int) -> list[int]:
    """Live processes (not zombies) in a process group, from /proc."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            pids.append(int(stat.parent.name))
    return pids


def drive(browser, url: str, i: int) -> dict:
    """One learner: open with own text, type a new one, attention and logits pages; what it saw."""
    from browser_bench import CHART, EXCEPTION, TEXTAREA, count, nav, root_url, wait_rendered

    ctx = browser.new_context()
    page = ctx.new_page()
    out = {"session": i, "marker": WORDS[i], "pages": [], "exceptions": 0, "error": None}
    start = time.perf_counter()
    try:
        page.goto(root_url(url, model=COURSE_BASE, text=f"The {WORDS[i]} opened the app."))
        wait_rendered(page)
        box = page.locator(TEXTAREA).first
        box.fill(f"The {WORDS[i]} typed a second sentence through the proxy.")
        box.press("Control+Enter")
        page.wait_for_url(re.compile("second"))
        wait_rendered(page)
        out["exceptions"] += count(page, EXCEPTION)
        for path in ("attention", "logits"):
            nav(page, path)
            wait_rendered(page, charts=True)
            out["pages"].append({"page": path, "charts": count(page, CHART), "exceptions": count(page, EXCEPTION)})
            out["exceptions"] += count(page, EXCEPTION)
        out["url_has_marker"] = WORDS[i] in page.url
    except Exception as exc:  # noqa: BLE001 - a failed session is a result
        out["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
    out["s"] = time.perf_counter() - start
    out["cookie"] = next((c["value"] for c in ctx.cookies() if c["name"] == "te_replica"), None)
    ctx.close()
    return out


def replicas_by_key(log: Path) -> dict[str, dict]:
    """Sticky key -> {upstreams: set, requests: n, websockets: n} from nginx's access log."""
    seen: dict[str, dict] = defaultdict(lambda: {"upstreams": set(), "requests": 0, "websockets": 0, "retried": 0})
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        m = LOG_LINE.search(line)
        if not m or m["upstream"] == "-":
            continue
        entry = seen[m["key"]]
        tried = [u.strip() for u in re.split(r"[,:] ", m["upstream"])]  # "a, b": a failed, b answered
        entry["upstreams"].add(tried[-1])
        entry["retried"] += len(tried) > 1
        entry["requests"] += 1
        entry["websockets"] += m["path"].startswith("/_stcore/stream")
    return seen


def main(argv=None) -> int:
    p = parser(__doc__)
    p.add_argument("--replicas", type=int, default=2)
    p.add_argument("--sessions", type=int, default=8)
    p.add_argument("--keep", action="store_true", help="keep the work dir (nginx config, access log, replica logs)")
    args = p.parse_args(argv)
    setup_env(args.device)
    from browser_bench import launch_browser
    from playwright.sync_api import sync_playwright

    n_sessions = min(args.sessions, 3) if args.quick else args.sessions
    base = free_ports(args.replicas + 1)
    url = f"http://127.0.0.1:{base}"
    work = Path(tempfile.mkdtemp(prefix="te-deploy-"))
    env = {**os.environ, "PORT": str(base), "BASE_PORT": str(base + 1), "WORKDIR": str(work),
           "STREAMLIT_BROWSER_GATHER_USAGE_STATS": "false"}
    out_log = open(work / "run_local.out", "w")  # noqa: SIM115 - closed in finally
    start = time.perf_counter()
    proc = subprocess.Popen(["bash", str(ROOT / "deploy" / "run_local.sh"), str(args.replicas)], cwd=ROOT, env=env,
                            stdout=out_log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    sessions, up_s, error = [], None, None
    try:
        deadline = time.monotonic() + 180
        while "ready:" not in (work / "run_local.out").read_text():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("deploy/run_local.sh did not get ready:\n"
                                   + (work / "run_local.out").read_text()[-3000:])
            time.sleep(0.5)
        while not server_alive(url):
            if time.monotonic() > deadline:
                raise RuntimeError(f"nginx on {url} does not answer")
            time.sleep(0.25)
        up_s = time.perf_counter() - start
        print(f"{args.replicas} replicas + nginx up in {up_s:.1f} s at {url} (work dir {work})", flush=True)
        with sync_playwright() as pw:
            browser = launch_browser(pw)
            for i in range(n_sessions):
                s = drive(browser, url, i)
                sessions.append(s)
                print(f"session {i}: {s['s']:.1f} s, charts {[x['charts'] for x in s['pages']]}, "
                      f"exceptions {s['exceptions']}, error {s['error']}", flush=True)
            browser.close()
    except Exception as exc:  # noqa: BLE001 - reported as a failed check
        error = f"{type(exc).__name__}: {exc}"
        print(error)
    finally:
        stop_group(proc)
        out_log.close()
    time.sleep(1.0)
    leftover = group_members(proc.pid)

    by_key = replicas_by_key(work / "logs" / "access.log") if (work / "logs" / "access.log").exists() else {}
    rows = []
    for s in sessions:
        entry = by_key.get(s["cookie"] or "", {"upstreams": set(), "requests": 0, "websockets": 0, "retried": 0})
        s["replicas"] = sorted(entry["upstreams"])
        s["requests"], s["websockets"], s["retried"] = entry["requests"], entry["websockets"], entry["retried"]
        s["ok"] = (not s["error"] and not s["exceptions"] and all(x["charts"] > 0 for x in s["pages"])
                   and len(s["pages"]) == 2)
        result = "ok" if s["ok"] else (s["error"] or f"{s['exceptions']} exceptions")[:60]
        rows.append((s["session"], s["marker"], ",".join(s["replicas"]) or "-", s["requests"], s["websockets"],
                     s["retried"], f"{s['s']:.1f}", result))
    print()
    print_table(("session", "marker", "replica", "requests", "websockets", "retried", "s", "result"), rows)
    served = sorted({r for s in sessions for r in s["replicas"]})
    not_sticky = sum(len(s["replicas"]) != 1 for s in sessions)
    figures = [
        figure("deploy: sessions rendered through nginx", sum(s["ok"] for s in sessions), "", len(sessions) or 1,
               ">=", note=error or f"of {len(sessions)}"),
        figure("deploy: sessions not sticky to one replica", not_sticky, "", 0, "<="),
        figure("deploy: replicas that served sessions", len(served), "", note=", ".join(served)),
        figure("deploy: requests retried on another replica", sum(s["retried"] for s in sessions), "", 0, "<=",
               note="nginx reused a connection the replica had closed"),
        figure("deploy: replicas + nginx up", up_s, "s"),
        figure("deploy: processes left after teardown", len(leftover), "", 0, "<="),
    ]
    for s in sessions:
        s["replicas"] = list(s["replicas"])
    if args.keep or error or not all(f["ok"] is not False for f in figures):
        print(f"nginx config and logs kept in {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    write_result("deploy_check", figures, sessions=sessions, work_dir=str(work), replicas=args.replicas, error=error)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
