"""Soak: a workshop's shared server under normal use, two trainings and hostile participants, for a few minutes.

    python bench/soak.py [--sessions 20] [--duration 180] [--json out.json] [--think 1 3] [--timeout 120]
                         [--model KEY] [--no-browser] [--seed 0]

A fresh server (`streamlit run app.py`) with a temporary checkpoints folder, then --sessions simulated learners
speaking Streamlit's own websocket protocol (harness/st_protocol.py, no browsers) for --duration seconds:

* learners (all but five): bench/protocol_load.py's walk (type a sentence, attention, layer/head/mask, logits,
  temperature, append tokens, tokenizer, embeddings, home) on --model, over and over;
* two trainers, through the Train page's widgets (tr_target, tr_<target>_<field>, tr_start, tr_stop): small
  trainings run to the end one after another; the second trainer also stops one long training with its Stop button
  and abandons another (closes its connection mid-training): the server must stop it and free its slot within a
  minute (the job's record in CHECKPOINTS/.jobs disappears);
* three attackers, each action a new session as a shared link is: hostile URL values (?layer=², a 5000-digit layer,
  ?model=../../etc/passwd, ?block=<script>, ?model=gpt2:file:../x, over-long texts), a 1000-token text on the
  course's 198 M-parameter preset (cut to what the memory budget allows), training settings that would exhaust
  memory (batch 512 x context 1024 x d_model 1024), and opening a trainer's private model by its URL key;
* one Chromium tab (Playwright; --no-browser skips it, with a note) uploading the hostile model files of
  harness.model_files.hostile_model_files in turn (200 000 layers, a zip bomb, a stride-0 tensor, deep nesting, a
  float d_model, a path as encoding): the protocol client cannot upload files.

Every refusal the app is expected to give (a notice, a warning or an error box naming the limit) is counted as an
expected refusal; an exception, any other error box, a timeout, a disconnect, a missing refusal, another browser's
model opened, or the server down is an error. Printed: per-action latencies, then one table with sessions, actions,
errors, expected refusals, peak server RSS, server CPU seconds, the checkpoints folder's growth and the trainings
completed / stopped / abandoned. Exit status 1 when there was any error.
"""
from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import os
import random
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote, urlencode

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT / "bench", ROOT):  # protocol_load, and harness
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

import protocol_load as pl  # noqa: E402

from harness.server import folder_bytes, fresh_app  # noqa: E402
from harness.st_protocol import MissingWidget, ProtocolError, RunResult, StreamlitClient  # noqa: E402

COURSE_BASE = pl.COURSE_BASE
# a substring of a message -> the kind of expected refusal it is (the more specific first)
REFUSALS = [
    ("not available to you here", "url_model_unknown"),
    ("Only the first", "trace_cut"),
    ("The link", "url_notice"),
    ("This training would need about", "train_memory"),
    ("This model would have", "train_too_big"),
    ("The server is already running", "jobs_full"),
    ("The server's memory is busy", "memory_busy"),
    ("one task may use at most", "memory_too_big"),
    ("Unpacked, the file would take", "upload_too_big_unpacked"),
    ("is a view that repeats or shares memory", "upload_tensor_view"),
    ("must be between", "config_range"),
    ("nested too deeply", "config_too_deep"),
    ("wrong type or size", "config_type"),
    ("Unknown tokenizer encoding", "encoding_unknown"),
]
URL_ATTACKS = [  # (url path, query string): each must give a one-line notice and open the defaults
    ("/", "layer=%C2%B2"),
    ("/", "layer=" + "9" * 5000),
    ("/", "model=" + quote("../../etc/passwd", safe="")),
    ("/", "block=" + quote("<script>alert(1)</script>", safe="")),
    ("/", "model=" + quote("gpt2:file:../x", safe="")),
    ("/", "model=user:m-0123456789abcdef"),
    ("/", "text=" + "x" * 2500),
    ("/", "text=" + "x" * 30_000),
]
QUICK = {"batch_size": 16, "d_model": 32, "n_layers": 1, "n_heads": 2, "max_iters": 200, "eval_interval": 0}
LONG = {**QUICK, "max_iters": 100_000}
HUGE = {"batch_size": 512, "context": 1024, "d_model": 1024}  # 130 GB of activations with 1 layer; 101 M params with 8
ABANDON_LIMIT_S = 60.0  # a closed tab's training is stopped within a minute (45 s without heartbeat, 5 s janitor)


def refusal_kind(text: str) -> str | None:
    return next((kind for needle, kind in REFUSALS if needle in text), None)


class Client(StreamlitClient):
    """StreamlitClient that also keeps the markdown texts (captions: the URL notice) of its latest run."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.texts: list[str] = []

    async def rerun(self, **kwargs) -> RunResult:
        self.texts = []
        return await super().rerun(**kwargs)

    def _delta(self, msg) -> None:
        super()._delta(msg)
        d = msg.delta
        if d.WhichOneof("type") == "new_element" and d.new_element.WhichOneof("type") == "markdown":
            self.texts.append(d.new_element.markdown.body[:400])

    def has(self, key: str) -> bool:
        try:
            self.widget(key)
            return True
        except MissingWidget:
            return False


@dataclass
class Stats:
    refusals: collections.Counter = field(default_factory=collections.Counter)
    trainings: collections.Counter = field(default_factory=collections.Counter)
    sessions_opened: int = 0
    abandoned: list[dict] = field(default_factory=list)  # {"id", "closed": t, "freed": t | None}
    problems: list[str] = field(default_factory=list)  # errors outside any action (server down, ...)
    health: list[float | None] = field(default_factory=list)  # seconds /_stcore/health took, every 5 s
    lock: threading.Lock = field(default_factory=threading.Lock)

    def refused(self, kinds) -> None:
        with self.lock:
            self.refusals.update(kinds)


@dataclass
class Soak:
    url: str
    folder: Path
    deadline: float
    think: tuple[float, float]
    timeout: float
    rec: pl.Recorder
    stats: Stats

    def client(self) -> Client:
        self.stats.sessions_opened += 1
        return Client(self.url, timeout=self.timeout)

    def record(self, who: int, action: str, res: RunResult | None, texts=(), expect: str | None = None,
               error: str = "", skipped: str = "") -> list[str]:
        """Record one action: error boxes and warnings that are expected refusals are counted as such, not as
        errors; `expect`: the refusal this action must meet (its absence is an error)."""
        res = res or RunResult(errors=[error] if error else [])
        kinds, keep = [], []
        for e in res.errors:
            kind = refusal_kind(e) if e.startswith("st.error") else None
            (kinds.append(kind) if kind else keep.append(e))
        kinds += [k for w in res.warnings if (k := refusal_kind(w))]
        kinds += [k for t in texts if "🔗" in t and (k := refusal_kind(t))]
        if expect and expect not in kinds and not keep and res.status not in ("TIMEOUT", "DISCONNECTED"):
            keep.append(f"no refusal: expected {expect}, got {kinds or 'nothing'}")
        res.errors = keep
        self.rec.add(who, action, res, skipped=skipped)
        self.stats.refused(kinds)
        return kinds

    def left(self) -> float:
        return self.deadline - time.perf_counter()

    async def pause(self, rng: random.Random, scale: float = 1.0) -> None:
        await asyncio.sleep(max(0.0, min(scale * rng.uniform(*self.think), self.left())))


# ---- trainers ----------------------------------------------------------------------------------------------------

def job_records(folder: Path) -> dict[str, dict]:
    out = {}
    for p in (folder / ".jobs").glob("*.json") if (folder / ".jobs").is_dir() else []:
        with contextlib.suppress(OSError, ValueError):
            out[p.stem] = json.loads(p.read_text(encoding="utf-8"))
    return out


async def set_training(s: Soak, c: Client, who: int, target: str, values: dict, name: str) -> None:
    res = await c.set_value("tr_target", target)
    s.record(who, "train_settings", res)
    for f, v in values.items():
        s.record(who, "train_settings", await c.set_value(f"tr_{target}_{f}", v))
    s.record(who, "train_settings", await c.set_value(f"tr_{target}_name", name))


async def start_training(s: Soak, c: Client, who: int, rng: random.Random) -> bool:
    """Press Start until the server has a slot (jobs_full is an expected refusal meanwhile); True when it runs."""
    while s.left() > 5:
        res = await c.click("tr_start")
        kinds = s.record(who, "train_start", res)
        if c.has("tr_stop"):
            s.stats.trainings["started"] += 1
            return True
        if "jobs_full" not in kinds:
            return False
        await s.pause(rng, 2)
    return False


async def poll_training(s: Soak, c: Client, who: int, seconds: float | None = None) -> bool:
    """Rerun the Train page every 2 s (as the live part does; it also sends the heartbeat) until the training ends
    (True) or `seconds` pass (False)."""
    until = time.perf_counter() + (seconds if seconds is not None else 1e9)
    while time.perf_counter() < until and s.left() > 0:
        await asyncio.sleep(2)
        s.record(who, "train_poll", await c.rerun())
        if not c.has("tr_stop"):
            return True
    return False


async def trainer(s: Soak, who: int, role: int, start_delay: float) -> None:
    """Role 0: small trainings to the end, one after another. Role 1: first a long training abandoned (the connection
    closed mid-training: its slot stays taken until the server stops it, so the next Start meets jobs_full), then a
    long training stopped with its Stop button, then small ones like role 0."""
    rng = random.Random(1000 + who)
    await asyncio.sleep(start_delay)
    plan = ["abandon", "stop"] if role == 1 else []
    c = None
    n = 0
    try:
        while s.left() > 10:
            step = plan.pop(0) if plan else "quick"
            n += 1
            target = ("reverse", "copy")[(n + role) % 2]
            try:
                if c is None:
                    c = s.client()
                    s.record(who, "open", await c.open("/"))
                    s.record(who, "goto_train", await c.goto("train"))
                await set_training(s, c, who, target, QUICK if step == "quick" else LONG, f"soak-{who}-{n}")
                before = set(job_records(s.folder))
                if not await start_training(s, c, who, rng):
                    continue
                if step == "quick":
                    if await poll_training(s, c, who):
                        s.stats.trainings["completed" if c.has("tr_open_job") else "ended_unsaved"] += 1
                elif step == "stop":
                    await poll_training(s, c, who, 15)
                    s.record(who, "train_stop", await c.click("tr_stop"))
                    if await poll_training(s, c, who, 60):
                        s.stats.trainings["stopped"] += 1
                else:  # abandon: the learner closes the tab mid-training
                    await poll_training(s, c, who, 5)
                    new = [j for j in job_records(s.folder) if j not in before]
                    await c.close()
                    c = None
                    s.stats.trainings["abandoned"] += 1
                    s.stats.abandoned.append({"id": new[0] if new else None, "closed": time.perf_counter(),
                                              "freed": None})
                    await asyncio.sleep(10)
            except (MissingWidget, ProtocolError, TimeoutError, OSError) as exc:
                if isinstance(exc, (MissingWidget, ProtocolError)):
                    s.record(who, "train_step", None, skipped=f"{type(exc).__name__}: {exc}")
                else:
                    s.record(who, "train_step", None, error=f"disconnect: {type(exc).__name__}: {exc}")
                if c is not None:
                    with contextlib.suppress(Exception):
                        await c.close()
                c = None
            await s.pause(rng)
    finally:
        if c is not None:
            await c.close()


# ---- attackers ---------------------------------------------------------------------------------------------------

async def attack_url(s: Soak, who: int, k: int) -> None:
    path, query = URL_ATTACKS[k % len(URL_ATTACKS)]
    c = s.client()
    try:
        res = await c.open(path, query)
        expect = "url_model_unknown" if "model=" in query else "url_notice"
        s.record(who, "attack_url", res, c.texts, expect=expect)
        if c.has("model") and str(c.value("model")).endswith("trained here"):
            s.record(who, "attack_url", None, error=f"cross-talk: {query[:40]} opened {c.value('model')!r}")
    finally:
        await c.close()


async def attack_long_text(s: Soak, who: int, k: int, model: str) -> None:
    c = s.client()
    try:
        s.record(who, "open", await c.open("/", urlencode({"model": model})))
        s.record(who, "goto_logits", await c.goto("logits"))
        text = f"attack {who} {k}:" + " cat" * 1100  # over course-base's 1000 tokens, a new trace each time
        s.record(who, "attack_long_text", await c.set_value("text", text), expect="trace_cut")
    finally:
        await c.close()


async def attack_train_memory(s: Soak, who: int, k: int) -> None:
    from transformer_core.train.corpus import TEXT
    from ui.i18n import strings

    c = s.client()
    try:
        s.record(who, "open", await c.open("/"))
        s.record(who, "goto_train", await c.goto("train"))
        label = strings()["tr_text"]["en"]  # the radio's option for "your text"
        s.record(who, "train_settings", await c.set_value("tr_target", label))
        s.record(who, "train_settings", await c.set_value("tr_txt_body", TEXT * 16))  # long enough for 1024
        layers = (1, 8)[(k // 6) % 2]
        for f, v in {**HUGE, "n_layers": layers}.items():
            s.record(who, "train_settings", await c.set_value(f"tr_text_{f}", v))
        s.record(who, "attack_train_memory", await c.click("tr_start"),
                 expect="train_memory" if layers == 1 else "train_too_big")
        if c.has("tr_stop"):
            s.record(who, "attack_train_memory", None, error="a training that cannot fit was started")
    finally:
        await c.close()


async def attack_private_model(s: Soak, who: int) -> None:
    refs = sorted(p.name for p in s.folder.glob("m-*") if p.is_dir())
    if not refs:
        s.record(who, "attack_private", None, skipped="no model saved yet")
        return
    ref = random.Random(who).choice(refs)
    c = s.client()
    try:
        res = await c.open("/attention", urlencode({"model": f"user:{ref}"}))
        s.record(who, "attack_private", res, c.texts, expect="url_model_unknown")
        if c.has("model") and str(c.value("model")).endswith("trained here"):
            s.record(who, "attack_private", None, error=f"cross-talk: another browser's model {ref} opened")
    finally:
        await c.close()


async def attacker(s: Soak, who: int, start_delay: float, model: str) -> None:
    rng = random.Random(2000 + who)
    await asyncio.sleep(start_delay)
    k = who
    while s.left() > 5:
        kind = ("url", "long_text", "url", "train_memory", "url", "private")[k % 6]
        try:
            if kind == "url":
                await attack_url(s, who, k)
            elif kind == "long_text":
                await attack_long_text(s, who, k, model)
            elif kind == "train_memory":
                await attack_train_memory(s, who, k)
            else:
                await attack_private_model(s, who)
        except (MissingWidget, ProtocolError) as exc:
            s.record(who, f"attack_{kind}", None, skipped=f"{type(exc).__name__}: {exc}")
        except (TimeoutError, OSError) as exc:
            s.record(who, f"attack_{kind}", None, error=f"disconnect: {type(exc).__name__}: {exc}")
        k += 1
        await s.pause(rng, 2)


# ---- one browser tab uploading hostile model files --------------------------------------------------------------

def browser_uploads(s: Soak, proc, files: list[tuple[Path, str]], ready: threading.Event) -> None:
    """In its own thread (Playwright's sync API): upload each hostile file in turn on the Train page."""
    from playwright.sync_api import sync_playwright

    from harness.browser import (
        ERROR_BOX,
        IDLE_APP,
        MAIN,
        launch_browser,
        new_tab,
        page_problem,
        upload_model_file,
        wait_rendered,
    )

    rng = random.Random(7)
    try:
        with sync_playwright() as p:
            browser = launch_browser(p)
            page = new_tab(browser)
            page.goto(f"{s.url}/train")
            wait_rendered(page, timeout=300_000)
            ready.set()
            k = 0
            while s.left() > 15:
                path, message = files[k % len(files)]
                k += 1
                t0 = time.perf_counter()
                res = RunResult()
                try:
                    upload_model_file(page, path, f"upload-{k}")
                    box = page.locator(MAIN).locator(ERROR_BOX)
                    try:  # the refusal, not the previous file's (under load the run may start late)
                        box.filter(has_text=message).first.wait_for(state="visible", timeout=s.timeout * 1000)
                    except Exception:  # noqa: BLE001 - reported below with what the page shows
                        pass
                    shown = " | ".join(box.all_inner_texts())
                    problem = page_problem(page, proc)
                    if problem:
                        res.errors.append(f"exception: {problem[:200]}")
                    elif message in shown:
                        res.errors.append(f"st.error: {message}")  # classified as the expected refusal below
                    else:
                        state = "idle" if page.locator(IDLE_APP).count() else "still running"
                        alerts = " | ".join(page.locator(f"{MAIN} [data-testid='stAlert']").all_text_contents())
                        opened = page.locator(f"{MAIN} [data-testid='stFileUploader']").is_visible()
                        shot = Path(tempfile.gettempdir()) / f"soak-upload-{k}.png"
                        page.screenshot(path=str(shot), full_page=True)
                        res.errors.append(f"no refusal for {path.name} within {s.timeout:.0f} s (page {state}, "
                                          f"upload box {'open' if opened else 'closed'}, alerts {alerts[:160]!r}; "
                                          f"screenshot {shot})")
                except Exception as exc:  # noqa: BLE001 - Playwright timeouts and the like: an error of this action
                    res.errors.append(f"timeout: {type(exc).__name__}: {str(exc)[:160]}")
                res.elapsed, res.status = time.perf_counter() - t0, "FINISHED_SUCCESSFULLY"
                s.record(-1, f"up_{path.stem}{'_st' if path.suffix == '.safetensors' else ''}", res)
                time.sleep(max(0.0, min(rng.uniform(4, 8), s.left())))
            browser.close()
    except Exception as exc:  # noqa: BLE001
        s.stats.problems.append(f"browser uploads stopped: {type(exc).__name__}: {exc}")
    finally:
        ready.set()


# ---- the run -----------------------------------------------------------------------------------------------------

HEALTH_TIMEOUT_S = 20.0  # a busy 2-core machine can keep the server from answering for a few seconds


def health_seconds(url: str) -> float | None:
    """Seconds /_stcore/health took to answer 200, None when it did not within HEALTH_TIMEOUT_S."""
    t0 = time.perf_counter()
    try:
        with urllib.request.urlopen(f"{url}/_stcore/health", timeout=HEALTH_TIMEOUT_S) as r:
            return time.perf_counter() - t0 if r.status == 200 else None
    except OSError:
        return None


async def monitor(s: Soak, sampler: pl.ProcSampler, disk: dict, stop: asyncio.Event) -> None:
    """Every 0.5 s: the server's RSS and CPU, the checkpoints folder's size, abandoned trainings' records; every 5 s
    whether the server answers its health check."""
    last_health = 0.0
    while not stop.is_set():
        sampler.sample()
        disk["peak"] = max(disk["peak"], folder_bytes(s.folder))
        now = time.perf_counter()
        records = job_records(s.folder)
        for a in s.stats.abandoned:
            if a["freed"] is None and a["id"] and a["id"] not in records:
                a["freed"] = now
        if now - last_health > 5:
            last_health = now
            took = await asyncio.to_thread(health_seconds, s.url)
            s.stats.health.append(took)
            if took is None:
                s.stats.problems.append(f"server down at {now - s.rec.t0:.0f} s (no answer to /_stcore/health "
                                        f"within {HEALTH_TIMEOUT_S:.0f} s)")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.5)
    sampler.sample()


async def run(s: Soak, pid: int, n_sessions: int, model: str, lcfg: pl.Config) -> dict:
    n_trainers = min(2, n_sessions)
    n_attackers = min(3, n_sessions - n_trainers)
    n_learners = n_sessions - n_trainers - n_attackers
    sampler = pl.ProcSampler(pid)
    disk = {"start": folder_bytes(s.folder), "peak": 0}
    stop = asyncio.Event()
    mon = asyncio.create_task(monitor(s, sampler, disk, stop))
    ramp = min(10.0, (s.deadline - time.perf_counter()) / 4)
    tasks = [trainer(s, i, i, 1.0 + i) for i in range(n_trainers)]
    tasks += [attacker(s, n_trainers + j, 2.0 + 2 * j, model) for j in range(n_attackers)]
    s.stats.sessions_opened += n_learners
    tasks += [pl.learner_loop(100 + i, lcfg, s.rec, ramp * i / max(n_learners, 1), s.deadline)
              for i in range(n_learners)]
    load0 = os.getloadavg()
    await asyncio.gather(*tasks)
    # an abandoned training still running at the end: wait for its slot (up to twice the limit) before judging it
    while any(a["freed"] is None and time.perf_counter() - a["closed"] < 2 * ABANDON_LIMIT_S
              for a in s.stats.abandoned):
        await asyncio.sleep(1)
    stop.set()
    await mon
    disk["end"] = folder_bytes(s.folder)
    return {"server": sampler.result(), "disk": disk, "roles": {"learners": n_learners, "trainers": n_trainers,
                                                                 "attackers": n_attackers},
            "loadavg_start": load0, "loadavg_end": os.getloadavg()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sessions", type=int, default=20, help="simulated learners at once (default 20)")
    ap.add_argument("--duration", type=float, default=180.0, help="seconds of load (default 180)")
    ap.add_argument("--think", type=float, nargs=2, default=(1.0, 3.0), metavar=("MIN", "MAX"),
                    help="think time between actions, uniform in seconds (default 1 3)")
    ap.add_argument("--timeout", type=float, default=120.0, help="per action, seconds (default 120)")
    ap.add_argument("--model", default=COURSE_BASE, help=f"the learners' and the long-text attack's model "
                    f"(default {COURSE_BASE})")
    ap.add_argument("--no-browser", action="store_true", help="skip the Chromium tab that uploads hostile files")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="write the summary and every sample here")
    args = ap.parse_args(argv)

    tmp = Path(tempfile.mkdtemp(prefix="soak-"))
    folder = tmp / "checkpoints"
    files = []
    if not args.no_browser:
        from harness.browser import CHROMIUM
        from harness.model_files import hostile_model_files

        if os.access(CHROMIUM, os.X_OK):
            files = hostile_model_files(tmp / "hostile")
        else:
            print(f"note: {CHROMIUM} is missing: no uploads (run scripts/install_browser.sh)")
    else:
        print("note: --no-browser: the hostile uploads are skipped (the protocol client cannot upload files)")
    with fresh_app(folder) as app:
        print(f"server {app.url} (pid {app.proc.pid}), checkpoints folder {folder}")
        lcfg = pl.Config(app.url, args.duration, tuple(args.think), args.timeout, args.model, None, args.seed)
        print(f"warm-up walk: {asyncio.run(pl.warmup(lcfg)):.1f} s")
        rec, stats = pl.Recorder(), Stats()
        ready = threading.Event()
        deadline = time.perf_counter() + 1e9
        s = Soak(app.url, folder, deadline, tuple(args.think), args.timeout, rec, stats)
        uploader = None
        if files:
            uploader = threading.Thread(target=browser_uploads, args=(s, app.proc, files, ready), daemon=True)
            uploader.start()
            ready.wait(300)  # the tab is on the Train page before the clock starts
        rec.t0 = time.perf_counter()
        s.deadline = rec.t0 + args.duration
        print(f"{args.sessions} sessions for {args.duration:.0f} s" + (" + 1 Chromium tab uploading" if files else ""))
        out = asyncio.run(run(s, app.proc.pid, args.sessions, args.model, lcfg))
        wall = time.perf_counter() - rec.t0
        if uploader is not None:
            uploader.join(60)
        alive = app.alive()
        log = app.log(200_000)
    return report(args, out, rec, stats, wall, alive, log, bool(files))


def report(args, out, rec: pl.Recorder, stats: Stats, wall: float, alive: bool, log: str, browser: bool) -> int:
    order = ["open", "train_settings", "train_start", "train_poll", "train_stop", "attack_url", "attack_long_text",
             "attack_train_memory", "attack_private"] + [a.name for a in pl.SCRIPT]
    rows = pl.summarize(rec.samples, order)
    print()
    pl.print_table(rows)
    srv, disk, roles = out["server"], out["disk"], out["roles"]
    errors = [(smp.learner, smp.action, e) for smp in rec.samples for e in smp.errors]
    errors += [(None, "server", p) for p in stats.problems]
    if not alive:
        errors.append((None, "server", "not alive at the end"))
    tracebacks = log.count("Traceback (most recent call last)")
    if tracebacks:
        errors.append((None, "server", f"{tracebacks} traceback(s) in the server log"))
    never = [a for a in stats.abandoned if a["freed"] is None]  # still holding its slot at the end: an error
    for a in never:
        errors.append((None, "janitor", f"abandoned training {a['id']} was never stopped"))
    freed = [round(a["freed"] - a["closed"]) for a in stats.abandoned if a["freed"] is not None]
    late = [x for x in freed if x > ABANDON_LIMIT_S]  # reported, not an error: a busy machine delays the janitor
    answered = [h for h in stats.health if h is not None]
    actions = sum(1 for smp in rec.samples if not smp.skipped)
    all_row = next(r for r in rows if r["action"] == "all")
    tr = stats.trainings
    refusal_list = ", ".join(f"{k} {v}" for k, v in stats.refusals.most_common())
    table = [
        ("sessions", f"{args.sessions} at once ({roles['learners']} learners, {roles['trainers']} trainers, "
                     f"{roles['attackers']} attackers){' + 1 Chromium tab uploading' if browser else ''}; "
                     f"{stats.sessions_opened} websocket sessions opened"),
        ("duration", f"{wall:.0f} s (think {args.think[0]:g}-{args.think[1]:g} s, model {args.model})"),
        ("actions", f"{actions} (p50 {fmt(all_row['p50'])} s, p95 {fmt(all_row['p95'])} s; "
                    f"{all_row['skipped']} skipped)"),
        ("errors", f"{len(errors)}"),
        ("expected refusals seen", f"{sum(stats.refusals.values())} ({refusal_list or 'none'})"),
        ("peak server RSS", f"{srv['rss_peak_mb']:.0f} MB sampled, VmHWM {srv['vm_hwm_mb']:.0f} MB "
                            f"(start {srv['rss_start_mb']:.0f}, end {srv['rss_end_mb']:.0f} MB)"),
        ("server CPU", f"{srv['cpu_s']:.0f} s over {srv['wall_s']:.0f} s wall ({srv['cpu_per_wall']:.2f} cores)"),
        ("checkpoints folder", f"{disk['start']:,} -> {disk['end']:,} bytes (growth {disk['end'] - disk['start']:,}, "
                               f"peak {disk['peak']:,})"),
        ("trainings", f"started {tr['started']}, completed {tr['completed']}, stopped {tr['stopped']}, abandoned "
                      f"{tr['abandoned']} (slot freed after {', '.join(f'{x} s' for x in freed) or '-'}"
                      f"{f'; LATE: over {ABANDON_LIMIT_S:.0f} s' if late else ''})"),
        ("health check", f"{len(answered)} of {len(stats.health)} answered (every 5 s), slowest "
                         f"{fmt(max(answered, default=None))} s"),
        ("load average", f"{fmt_load(out['loadavg_start'])} at start, {fmt_load(out['loadavg_end'])} at end "
                         f"({os.cpu_count()} CPUs)"),
    ]
    print()
    width = max(len(k) for k, _ in table)
    for k, v in table:
        print(f"{k:<{width}}  {v}")
    if errors:
        print(f"\nerrors (first 15 of {len(errors)}):")
        for who, action, text in errors[:15]:
            print(f"  {who} {action}: {text[:200]}")
    if args.json:
        doc = {"config": vars(args), "table": dict(table), "summary": rows, "server": srv, "disk": disk,
               "refusals": dict(stats.refusals), "trainings": dict(tr), "abandoned_freed_s": freed,
               "errors": [list(e) for e in errors], "loadavg_start": out["loadavg_start"],
               "loadavg_end": out["loadavg_end"], "samples": [smp.__dict__ for smp in rec.samples]}
        Path(args.json).write_text(json.dumps(doc, indent=1, ensure_ascii=False, default=str), encoding="utf-8")
        print(f"\nwrote {args.json}")
    return 1 if errors else 0


def fmt(v) -> str:
    return "-" if v is None else f"{v:.2f}"


def fmt_load(la) -> str:
    return "/".join(f"{x:.2f}" for x in la)


if __name__ == "__main__":
    sys.exit(main())
