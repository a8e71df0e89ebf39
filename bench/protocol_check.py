"""Check the protocol client against a real browser: the same action timed both ways on one server.

    python bench/protocol_check.py [--start-server | --url http://127.0.0.1:8501] [--reps 6]
                                   [--page attention] [--key head] [--model KEY] [--json out.json]

Chromium (Debian's /usr/bin/chromium through Playwright) and one harness/st_protocol.py client open the same
page with the same text and model; then, alternating, each changes the select box `--key` to the same next
option. Reported per repetition and as medians:

- browser, change -> status widget gone: from the option's click event (in-page clock) until
  [data-testid='stStatusWidget'] is removed after the run's script_finished (if it never showed: until
  the app's script state is back to notRunning);
- browser, send -> script_finished: from the rerun BackMsg leaving the page's WebSocket to the
  script_finished ForwardMsg arriving (an instrumented WebSocket, in-page clock);
- protocol, send -> script_finished: what bench/protocol_load.py measures.

It also decodes the BackMsg the browser sent for the change and compares it with the client's: page hash,
query string, the widget keys with their value fields and values, and the cached_message_hashes count.
"""
from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import statistics
import sys
from pathlib import Path
from urllib.parse import urlencode, urlsplit

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # harness, when run as a script
    sys.path.insert(0, str(ROOT))

from protocol_load import Server, pid_listening_on, sentence  # noqa: E402
from streamlit.proto.BackMsg_pb2 import BackMsg  # noqa: E402
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg  # noqa: E402

from harness.browser import CHROMIUM, CHROMIUM_ARGS  # noqa: E402
from harness.st_protocol import StreamlitClient  # noqa: E402

IDLE = "[data-testid='stApp'][data-test-script-state='notRunning'][data-test-connection-state='CONNECTED']"

# Instruments the page before streamlit's code runs: WebSocket sends and script_finished arrivals (found by
# walking the ForwardMsg's top-level protobuf fields: script_finished is field 6, a varint), the status
# widget's appearance/removal and the last click, all on the page's performance.now() clock.
INIT_JS = r"""
(() => {
  const te = window.__te = {sends: [], finished: [], statusShown: [], statusGone: [], click: null};
  function readVarint(b, i) { let x = 0, s = 0; for (;;) { const c = b[i++]; x += (c & 0x7f) * 2 ** s; s += 7;
                                                            if (c < 0x80) return [x, i]; } }
  function finishedStatus(buf) {
    const b = new Uint8Array(buf); let i = 0;
    while (i < b.length) {
      let tag; [tag, i] = readVarint(b, i);
      const field = Math.floor(tag / 8), wt = tag & 7;
      if (wt === 0) { let v; [v, i] = readVarint(b, i); if (field === 6) return v; }
      else if (wt === 2) { let n; [n, i] = readVarint(b, i); i += n; }
      else if (wt === 1) i += 8; else if (wt === 5) i += 4; else return -1;
    }
    return -1;
  }
  const Orig = window.WebSocket;
  window.WebSocket = function (...args) {
    const ws = new Orig(...args);
    ws.addEventListener("message", ev => {
      if (ev.data instanceof ArrayBuffer) {
        const st = finishedStatus(ev.data);
        if (st >= 0) te.finished.push([performance.now(), st]);
      }
    });
    const send = ws.send.bind(ws);
    ws.send = data => { te.sends.push(performance.now()); return send(data); };
    return ws;
  };
  window.WebSocket.prototype = Orig.prototype;
  Object.assign(window.WebSocket, {CONNECTING: 0, OPEN: 1, CLOSING: 2, CLOSED: 3});
  document.addEventListener("click", () => { te.click = performance.now(); }, true);
  let shown = false;
  new MutationObserver(() => {
    const now = !!document.querySelector("[data-testid='stStatusWidget']");
    if (now !== shown) { (now ? te.statusShown : te.statusGone).push(performance.now()); shown = now; }
  }).observe(document, {subtree: true, childList: true});
})();
"""
RESET_JS = """() => { const t = window.__te; t.sends = []; t.finished = []; t.statusShown = []; t.statusGone = [];
                     t.click = null; }"""
STATE_JS = """() => ({...window.__te, now: performance.now(),
  idle: !!document.querySelector("[data-testid='stApp'][data-test-script-state='notRunning']"),
  status: !!document.querySelector("[data-testid='stStatusWidget']")})"""


def proc_cpu(pids) -> float:
    """User+system CPU seconds of these processes (those that vanished count 0)."""
    tick, total = os.sysconf("SC_CLK_TCK"), 0.0
    for pid in pids:
        try:
            f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(f[11]) + int(f[12])) / tick
    return total


def descendants(root: int) -> list[int]:
    """Every process below `root` (here: Playwright's driver and the Chromium it launched)."""
    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int(Path(d, "stat").read_text().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            children.setdefault(ppid, []).append(int(d.name))
    out, todo = [], [root]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


class CpuMeter:
    """CPU seconds the server and the browser use during one action."""

    def __init__(self, server_pid: int | None):
        self.server_pid = server_pid

    def snap(self) -> tuple[float, float, float]:
        import time
        server = {self.server_pid, *descendants(self.server_pid)} if self.server_pid else set()
        return (time.perf_counter(), proc_cpu([self.server_pid]) if self.server_pid else float("nan"),
                proc_cpu([p for p in descendants(os.getpid()) if p not in server]))

    @staticmethod
    def diff(a, b) -> dict:
        return {"wall": b[0] - a[0], "server_cpu": b[1] - a[1], "browser_cpu": b[2] - a[2]}


def decode_rerun(payload) -> dict | None:
    """The parts of a rerun_script BackMsg worth comparing (None for other BackMsgs)."""
    msg = BackMsg()
    msg.ParseFromString(payload if isinstance(payload, bytes) else payload.encode("latin-1"))
    if msg.WhichOneof("type") != "rerun_script":
        return None
    r = msg.rerun_script
    widgets = {}
    for w in r.widget_states.widgets:
        f = w.WhichOneof("value")
        v = getattr(w, f) if f else None
        v = list(v.data) if hasattr(v, "data") else v
        widgets[w.id.split("-", 2)[-1]] = (f, v)
    return {"page_script_hash": r.page_script_hash, "page_name": r.page_name, "query_string": r.query_string,
            "widgets": widgets, "n_cached_hashes": len(r.cached_message_hashes)}


def half_bytes_time(received: list[tuple[float, int]], t0: float) -> float | None:
    """Seconds from t0 until half of the run's bytes had arrived."""
    frames = [(t, n) for t, n in received if t >= t0]
    total, acc = sum(n for _, n in frames), 0
    for t, n in frames:
        acc += n
        if acc * 2 >= total:
            return t - t0
    return None


class NetFrames:
    """WebSocket frames as Chromium's network stack saw them (CDP Network.webSocketFrame*; its timestamps)."""

    def __init__(self):
        self.sent: list[tuple[float, dict | None]] = []
        self.finished: list[tuple[float, int]] = []
        self.received: list[tuple[float, int]] = []  # (timestamp, bytes) of every binary frame

    async def attach(self, page) -> None:
        cdp = await page.context.new_cdp_session(page)
        cdp.on("Network.webSocketFrameSent", self._sent)
        cdp.on("Network.webSocketFrameReceived", self._received)
        await cdp.send("Network.enable")

    def clear(self) -> None:
        self.sent.clear()
        self.finished.clear()
        self.received.clear()

    def _sent(self, ev) -> None:
        r = ev["response"]
        if r.get("opcode") == 2:
            self.sent.append((ev["timestamp"], decode_rerun(base64.b64decode(r["payloadData"]))))

    def _received(self, ev) -> None:
        r = ev["response"]
        if r.get("opcode") == 2:
            data = base64.b64decode(r["payloadData"])
            self.received.append((ev["timestamp"], len(data)))
            msg = ForwardMsg()
            msg.ParseFromString(data)
            if msg.WhichOneof("type") == "script_finished":
                self.finished.append((ev["timestamp"], msg.script_finished))


async def browser_change(page, net: NetFrames, key: str, value: str, timeout_s: float = 120) -> dict:
    """Pick `value` in the select box with user key `key`; time it in the page and on the wire."""
    await page.evaluate(RESET_JS)
    await page.locator(f".st-key-{key} [role='combobox']").click()
    option = page.get_by_role("option", name=value, exact=True)
    await option.wait_for()
    await page.evaluate("() => { window.__te.click = null; window.__te.sends = []; }")
    net.clear()
    await option.click()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        st = await page.evaluate(STATE_JS)
        fin = [t for t, s in st["finished"] if s in (0, 1, 3)]
        if fin and st["idle"] and not st["status"] and st["now"] - fin[-1] > 300:
            break
        if loop.time() > deadline:
            raise TimeoutError(f"browser: no finished run {timeout_s} s after picking {key}={value}")
        await asyncio.sleep(0.05)
    click, send, done = st["click"], st["sends"][0] if st["sends"] else None, fin[-1]
    gone = [t for t in st["statusGone"] if t >= done - 1]
    end = gone[0] if gone else done  # the status widget never showed: the run's end
    await asyncio.sleep(0.2)  # CDP events trail the page
    reruns = [(t, m) for t, m in net.sent if m]
    net_fin = [t for t, s in net.finished if s in (0, 1, 3)]
    return {"change_to_status_gone": (end - click) / 1000, "send_to_finished": (done - send) / 1000 if send else None,
            "change_to_send": (send - click) / 1000 if send else None, "status_shown": bool(st["statusShown"]),
            "net_send_to_finished": (net_fin[-1] - reruns[0][0]) if reruns and net_fin else None,
            "net_first_msg": next((t - reruns[0][0] for t, _ in net.received if t >= reruns[0][0]), None)
            if reruns else None,
            "net_half_bytes": half_bytes_time(net.received, reruns[0][0]) if reruns else None,
            "msg": reruns[0][1] if reruns else None}


def chromium_executable(cpus: str | None) -> str:
    """/usr/bin/chromium, or a wrapper that starts it under `taskset -c CPUS` (to keep it off the server's CPU)."""
    if not cpus:
        return CHROMIUM
    import tempfile
    wrapper = Path(tempfile.mkdtemp(prefix="chromium-taskset-")) / "chromium"
    wrapper.write_text(f'#!/bin/sh\nexec taskset -c {cpus} {CHROMIUM} "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper)


async def main_async(args, url: str, server_pid: int | None) -> dict:
    from playwright.async_api import async_playwright

    qs = urlencode({k: v for k, v in {"model": args.model, "text": sentence(3, 0)}.items() if v})
    client = StreamlitClient(url, timeout=180)
    warm = await client.open("/" + args.page, qs)  # first load of the model and trace: not measured
    print(f"protocol client opened /{args.page}: {warm.elapsed:.2f} s {warm.status} {warm.errors[:1]}")
    options = client.widget(args.key).options
    net = NetFrames()
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=chromium_executable(args.chromium_cpus), args=CHROMIUM_ARGS)
        page = await browser.new_page(viewport={"width": 1400, "height": 1000})
        await page.add_init_script(INIT_JS)
        await net.attach(page)
        await page.goto(f"{url}/{args.page}?{qs}")
        await page.wait_for_selector(IDLE, timeout=180_000)
        await page.wait_for_timeout(1500)
        rows = []
        meter = CpuMeter(server_pid)
        for i in range(args.reps):
            value = options[(i + 1) % len(options)]
            order = ("browser", "protocol") if i % 2 == 0 else ("protocol", "browser")
            row = {"rep": i, "value": value}
            for who in order:
                before = meter.snap()
                if who == "browser":
                    row["browser"] = await browser_change(page, net, args.key, value)
                    row["browser_msg"] = row["browser"].pop("msg")
                else:
                    res = await client.set_value(args.key, value)
                    row["protocol"] = {"send_to_finished": res.elapsed, "status": res.status, "errors": res.errors,
                                       "first_msg": res.first_msg, "kb": res.n_bytes / 1024}
                    row["protocol_msg"] = decode_rerun(client.last_rerun.SerializeToString())
                row[who]["cpu"] = CpuMeter.diff(before, meter.snap())
                await asyncio.sleep(1.0)
            rows.append(row)
            b, p = row["browser"], row["protocol"]
            print(f"rep {i} {args.key}={value}: browser change->status gone {b['change_to_status_gone']:.3f} s "
                  f"(change->send {b['change_to_send']:.3f}, send->finished in page {b['send_to_finished']:.3f}, "
                  f"on the wire {b['net_send_to_finished']:.3f}, "
                  f"status widget {'shown' if b['status_shown'] else 'never shown'}); "
                  f"protocol send->finished {p['send_to_finished']:.3f} s {p['errors'][:1]}")
            print(f"      first ForwardMsg after: browser {b['net_first_msg']:.3f} s, protocol {p['first_msg']:.3f} s; "
                  f"half of the run's bytes in the browser after {b['net_half_bytes']:.3f} s ({p['kb']:.0f} KB)")
            print(f"      CPU s during the browser's action: server {b['cpu']['server_cpu']:.2f}, Chromium "
                  f"{b['cpu']['browser_cpu']:.2f} (over {b['cpu']['wall']:.2f} s); during the protocol client's: "
                  f"server {p['cpu']['server_cpu']:.2f}, Chromium {p['cpu']['browser_cpu']:.2f} "
                  f"(over {p['cpu']['wall']:.2f} s); load average {os.getloadavg()[0]:.2f}")
        await browser.close()
    await client.close()
    return {"rows": rows, "options": options}


def compare_msgs(bm: dict | None, pm: dict | None) -> list[str]:
    """Differences between the browser's rerun BackMsg and the client's (for the same state)."""
    if not bm or not pm:
        return ["a rerun message is missing"]
    diffs = []
    for k in ("page_script_hash", "page_name", "query_string"):
        if bm[k] != pm[k]:
            diffs.append(f"{k}: browser {bm[k][:60]!r} vs protocol {pm[k][:60]!r}")
    for key in sorted(set(bm["widgets"]) | set(pm["widgets"])):
        b, p = bm["widgets"].get(key), pm["widgets"].get(key)
        if b is None or p is None or b[0] != p[0]:
            diffs.append(f"widget {key}: browser {b} vs protocol {p}")
        elif b[1] != p[1] and key not in ("text",):
            diffs.append(f"widget {key} value: browser {b[1]!r} vs protocol {p[1]!r}")
    return diffs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:8501")
    ap.add_argument("--start-server", action="store_true")
    ap.add_argument("--page", default="attention", help="url path of the page (default attention)")
    ap.add_argument("--key", default="head", help="user key of the select box to change (default head)")
    ap.add_argument("--model", help="registry key sent as ?model=KEY")
    ap.add_argument("--reps", type=int, default=6)
    ap.add_argument("--chromium-cpus", help="run Chromium under `taskset -c CPUS` (e.g. 1)")
    ap.add_argument("--server-cpus", help="pin the server (all its threads) with `taskset -a -p -c CPUS` (e.g. 0)")
    ap.add_argument("--json")
    args = ap.parse_args()
    if not os.access(CHROMIUM, os.X_OK):
        print(f"{CHROMIUM} is missing: run `bash scripts/install_browser.sh`")
        return 2
    server = Server([]) if args.start_server else None
    try:
        if server:
            server.__enter__()
            print(f"started {server.url}")
        url = server.url if server else args.url.rstrip("/")
        pid = server.proc.pid if server else pid_listening_on(urlsplit(url).port or 80)
        if args.server_cpus and pid:
            import subprocess
            subprocess.run(["taskset", "-a", "-p", "-c", args.server_cpus, str(pid)], check=True,
                           stdout=subprocess.DEVNULL)
        out = asyncio.run(main_async(args, url, pid))
    finally:
        if server:
            server.__exit__(None, None, None)
    rows = out["rows"]

    def med(get):
        xs = [get(r) for r in rows if get(r) is not None]
        return statistics.median(xs) if xs else float("nan")

    summary = {"browser_change_to_status_gone": med(lambda r: r["browser"]["change_to_status_gone"]),
               "browser_change_to_send": med(lambda r: r["browser"]["change_to_send"]),
               "browser_send_to_finished": med(lambda r: r["browser"]["send_to_finished"]),
               "browser_wire_send_to_finished": med(lambda r: r["browser"]["net_send_to_finished"]),
               "protocol_send_to_finished": med(lambda r: r["protocol"]["send_to_finished"]),
               "server_cpu_browser_action": med(lambda r: r["browser"]["cpu"]["server_cpu"]),
               "server_cpu_protocol_action": med(lambda r: r["protocol"]["cpu"]["server_cpu"]),
               "chromium_cpu_browser_action": med(lambda r: r["browser"]["cpu"]["browser_cpu"])}
    print(f"\nmedians over {len(rows)} changes of {args.key!r} on /{args.page}:")
    for k, v in summary.items():
        print(f"  {k:<34}{v:.3f} s")
    diffs = compare_msgs(rows[-1].get("browser_msg"), rows[-1].get("protocol_msg"))
    bm = rows[-1].get("browser_msg") or {}
    print(f"\nrerun BackMsg, browser vs protocol client (last repetition): {len(bm.get('widgets', {}))} widget "
          f"states from the browser; cached_message_hashes browser {bm.get('n_cached_hashes')} vs protocol "
          f"{(rows[-1].get('protocol_msg') or {}).get('n_cached_hashes')}")
    print("  identical page hash, query string, widget keys, value fields and values" if not diffs
          else "\n".join("  " + d for d in diffs))
    if args.json:
        Path(args.json).write_text(json.dumps({"summary": summary, **out, "diffs": diffs}, indent=1,
                                              ensure_ascii=False, default=str), encoding="utf-8")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
