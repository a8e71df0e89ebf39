"""A workshop's load at the protocol level: N simulated learners on one Streamlit server, no browsers.

    python bench/protocol_load.py --learners 20 --duration 120 [--url http://127.0.0.1:8501]
                                  [--start-server [--replicas N]] [--model KEY] [--think 1 3] [--ramp S]
                                  [--json out.json]

Each learner is one websocket on /_stcore/stream speaking streamlit's BackMsg/ForwardMsg protobufs
(harness/st_protocol.py), so 20 to 60 of them cost the client almost nothing. A learner opens the app, types
its own sentence (40-64 cl100k tokens, English or Chinese, a learner-specific name in front so no two
learners share a cached trace), and then walks SCRIPT (a list of actions; edit it to change the walk) with
a random think time between actions, over and over until --duration is over (each new round types the
learner's next sentence). Widgets are found by their user key, pages by their url path.

Per action it measures the time from sending the rerun request to the `script_finished` of that run, and
counts errors: an exception element, an st.error alert, a page-not-found, a disconnect, a timeout. It
samples the server process's CPU time and RSS (psutil if installed, else /proc) and prints per action kind:
count, p50, p95, max, errors, skipped (an action that could not apply, e.g. a disabled button). What a
learner's browser does by itself is done too and counted in rows of their own: the Attention view's ask for the
maps it lacks when the pointer reaches its Layer list, before a layer switch (view_asks_layers), or its mask radio,
before a mask switch (view_asks_masks); the CPU line gives the server's CPU per run and per learner action.

--start-server: start `streamlit run app.py --server.headless true --server.port P
--browser.gatherUsageStats false` on a free port (TIKTOKEN_CACHE_DIR: the environment's, else a copy of
../shared/tiktoken-cache), wait for /_stcore/health, run, stop it. --replicas N: N such servers, learner i
always on server i mod N (what nginx's sticky sessions do in deploy/), each server's torch on cores / N
threads (as deploy/run_local.sh sets); the CPU and memory figures are per server and summed.
Without --start-server, --url names a running server (or several, separated by commas); its process is found
by the listening port (or give --server-pid) to sample CPU and memory.
--model KEY: learners arrive with ?model=KEY in the URL (a registry key, e.g. preset:course-base@cl100k_base,
the course's Transformer), like a shared link; a KEY that is instead the label of an option of the "model"
select box is chosen there after opening; `--model app` (the default) keeps the app's default model.
"""
from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from urllib.parse import urlencode, urlsplit

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # harness, when run as a script
    sys.path.insert(0, str(ROOT))

from harness.server import free_port, server_alive  # noqa: E402
from harness.st_protocol import MissingWidget, ProtocolError, RunResult, StreamlitClient, random_other  # noqa: E402

# ../shared/tiktoken-cache from the project root (or from a checkout one level further down)
SHARED_CACHE = next((p / "shared" / "tiktoken-cache" for p in ROOT.parents[:2]
                     if (p / "shared" / "tiktoken-cache").is_dir()), ROOT.parent / "shared" / "tiktoken-cache")


@dataclass(frozen=True)
class Action:
    """One step of a learner: `kind` says what to do, `name` is the row it is reported under."""
    name: str
    kind: str  # open | text | page | pick | slider | temperature | head | layer | mask | click
    arg: str = ""  # url path (page), widget key (text, pick, slider, click)
    values: tuple = ()  # slider: (low, high) a learner drags within


# The walk every learner repeats after opening the app (edit freely: widget keys and url paths only).
SCRIPT: list[Action] = [
    Action("type_text", "text", "text"),
    Action("goto_attention", "page", "attention"),
    Action("layer", "layer", "layer"),
    Action("head", "head", "head"),
    Action("mask_mode", "mask", "mask_mode"),
    Action("goto_logits", "page", "logits"),
    Action("temperature", "temperature", "log_T", (0.3, 2.0)),
    Action("append_five", "click", "log_five"),
    Action("goto_tokenizer", "page", "tokenizer"),
    Action("goto_embeddings", "page", "embeddings"),
    Action("goto_home", "page", ""),
]
OPEN = Action("open", "open")


def every_page_script() -> list[Action]:
    """--every-page: type a new sentence, then visit every page of the navigation once (its first visit with this
    text: the page computes what it shows for it), in the order of pages/."""
    files = sorted((ROOT / "pages").glob("*.py"), key=lambda f: int(f.stem.split("_")[0]))
    names = [f.stem.split("_", 1)[1] for f in files]
    return [Action("type_text", "text", "text"),
            *(Action(f"first_{n}", "page", "" if n == "home" else n) for n in names)]
# --analyses: the analyses a learner reaches for (direct logit attribution and the lens's rank / KL on the
# lens page, every head knocked out alone on the intervene page, the learn page, the FFN page with its neuron)
ANALYSES: list[Action] = [
    Action("type_text", "text", "text"),
    Action("goto_lens", "page", "lens"),
    Action("goto_intervene", "page", "intervene"),
    Action("goto_learn", "page", "learn"),
    Action("goto_ffn", "page", "ffn"),
]
COURSE_BASE = "preset:course-base@cl100k_base"  # the course's Transformer (d_model 512, 6 layers, cl100k)

# 40-64 cl100k tokens each with the learner's name in front (43-56 measured; see loadgen_NOTES.md)
SENTENCES = [
    "The old lighthouse keeper climbed the spiral stairs every evening, lit the lamp, and watched the fishing "
    "boats return through the thick fog while his grey cat slept beside the warm brass lens at the very top "
    "of the tower.",
    "When the river flooded in early spring, the villagers carried heavy sandbags to the wooden bridge, "
    "shared bread and hot tea with tired strangers, and stayed awake all night until the brown water finally "
    "began to fall again.",
    "A curious student opened the notebook, traced each arrow from the input tokens to the attention weights, "
    "and suddenly understood why the small model kept looking back at the very first word of every sentence "
    "it was given.",
    "Every morning the baker in our narrow street sells warm rolls to the bus drivers, sweeps the pavement in "
    "front of his little shop, and greets the sleepy children walking slowly to the school at the corner of "
    "the square.",
    "The orchestra tuned their instruments in silence, the young conductor raised both of her hands, and for "
    "one long second the whole crowded hall held its breath before the first quiet note of the new symphony "
    "began to play.",
    "After three days of heavy rain the mountain path was slippery and steep, so the hikers tied their boots "
    "tighter, checked the old paper map again, and decided to wait in the stone hut until the low clouds "
    "finally lifted.",
    "My grandmother keeps a box of old letters under her bed, and on long winter nights she reads them aloud "
    "to all of us, laughing at the spelling mistakes her three brothers made when they were young sailors far "
    "from home.",
    "The friendly robot in the science museum answers questions about the planets, but when a small child "
    "asked it whether the distant stars were lonely at night, it paused for a moment and said that it really "
    "did not know.",
    "同志们，今天我们一起学习注意力机制，先把句子切成词元，再计算每个词元之间的相关程度。",
    "清晨的菜市场里人声鼎沸，卖豆腐的大爷一边称重一边和老顾客聊天。",
    "我们在山顶等了整整一个小时，云海终于慢慢散开，远处的村庄出现在眼前。",
    "老师在黑板上画了一个矩阵，告诉我们每一行代表一个查询，每一列代表一个键，被遮住的位置权重为零。",
]
NAMES = ["Ada", "Ben", "Chen", "Dora", "Eli", "Fay", "Gus", "Hana", "Ivo", "Jun", "Kai", "Lea"]


LONG = False  # --tokens 128: each text three or four sentences of the same language (the default reads its first 128)
SHORT = False  # --tokens 32: each sentence's first clause (up to its first comma), 10-20 tokens as a class types them


def sentence(learner: int, round_: int) -> str:
    """Learner i's sentence in round k: its own name, and a different sentence each round (with --tokens 128 the
    next sentences of the same language after it, past 128 tokens)."""
    name = NAMES[learner % len(NAMES)] + (str(learner // len(NAMES)) if learner >= len(NAMES) else "")
    k = (learner * 5 + round_) % len(SENTENCES)
    text = SENTENCES[k]
    if SHORT:
        text = text.split(",")[0].split("，")[0]
    if LONG:
        zh = k >= N_ENGLISH
        pool = range(N_ENGLISH, len(SENTENCES)) if zh else range(N_ENGLISH)
        others = [SENTENCES[j] for j in pool if j != k]
        text += "".join(("" if zh else " ") + others[(round_ + j) % len(others)] for j in range(3 if zh else 2))
    return f"{name}: {text}"


N_ENGLISH = 8  # SENTENCES: the English ones first
WIRE_KB = {32: 150, 64: 150, 128: 300}  # the most one action may send down the wire (KB, p95), by text length


# --- statistics -------------------------------------------------------------------------------------
def percentile(xs: list[float], q: float) -> float | None:
    """Linear-interpolated percentile (q in 0..100) of xs; None for an empty list."""
    if not xs:
        return None
    s = sorted(xs)
    pos = (len(s) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


@dataclass
class Sample:
    learner: int
    action: str
    t: float  # seconds since the load started
    elapsed: float
    status: str
    errors: list[str]
    skipped: str = ""
    warnings: int = 0
    n_msgs: int = 0
    n_bytes: int = 0
    wire_bytes: int = 0


@dataclass
class Recorder:
    t0: float = field(default_factory=time.perf_counter)
    samples: list[Sample] = field(default_factory=list)

    def add(self, learner: int, action: str, res: RunResult | None, skipped: str = "", error: str = "") -> None:
        if res is None:
            res = RunResult(errors=[error] if error else [])
        self.samples.append(Sample(learner, action, time.perf_counter() - self.t0, res.elapsed, res.status,
                                   list(res.errors), skipped, len(res.warnings), res.n_msgs, res.n_bytes,
                                   res.wire_bytes))


def error_kind(text: str) -> str:
    for prefix in ("exception", "st.error", "timeout", "disconnect", "page not found", "wrong page"):
        if text.startswith(prefix):
            return prefix
    return "other"


def summarize(samples: list[Sample], order: list[str]) -> list[dict]:
    rows = []
    names = [n for n in order if any(s.action == n for s in samples)]
    names += sorted({s.action for s in samples} - set(names))
    for name in names + ["all"]:
        ss = [s for s in samples if name == "all" or s.action == name]
        done = [s.elapsed for s in ss if not s.skipped and not s.errors]
        kinds: dict[str, int] = {}
        for s in ss:
            for e in s.errors:
                kinds[error_kind(e)] = kinds.get(error_kind(e), 0) + 1
        rows.append({"action": name, "count": sum(1 for s in ss if not s.skipped),
                     "ok": len(done), "p50": percentile(done, 50), "p95": percentile(done, 95),
                     "max": max(done) if done else None, "errors": sum(1 for s in ss if s.errors),
                     "error_kinds": kinds, "skipped": sum(1 for s in ss if s.skipped),
                     "warned": sum(1 for s in ss if s.warnings),
                     "kb_per_run": (sum(s.n_bytes for s in ss) / len(ss) / 1024) if ss else None,
                     "wire_kb_p95": percentile([s.wire_bytes / 1024 for s in ss if not s.skipped], 95)})
    return rows


def print_table(rows: list[dict], wire_limit: float | None = None) -> None:
    """The table; with wire_limit (KB) a PASS / MISS column for each action's p95 bytes on the wire."""
    def f(v):
        return "-" if v is None else f"{v:.3f}"
    print(f"{'action':<16}{'count':>6}{'p50 s':>9}{'p95 s':>9}{'max s':>9}{'errors':>8}{'skipped':>9}"
          f"{'warned':>8}{'KB/run':>8}{'wire KB p95':>13}" + (f"  <= {wire_limit:g} KB" if wire_limit else ""))
    for r in rows:
        if r["action"] == "all":
            print("-" * (96 + (12 if wire_limit else 0)))
        kb = "-" if r["kb_per_run"] is None else f"{r['kb_per_run']:.0f}"
        wire = "-" if r["wire_kb_p95"] is None else f"{r['wire_kb_p95']:.0f}"
        verdict = "" if not wire_limit or r["wire_kb_p95"] is None else (
            "  PASS" if r["wire_kb_p95"] <= wire_limit else "  MISS")
        print(f"{r['action']:<16}{r['count']:>6}{f(r['p50']):>9}{f(r['p95']):>9}{f(r['max']):>9}"
              f"{r['errors']:>8}{r['skipped']:>9}{r['warned']:>8}{kb:>8}{wire:>13}{verdict}")


# --- the server process: CPU and memory ----------------------------------------------------------------
def pid_listening_on(port: int) -> int | None:
    """The pid of the process with a TCP socket listening on `port` (Linux /proc; None if not found)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            if int(parts[1].rsplit(":", 1)[1], 16) == port and parts[3] == "0A":  # 0A = LISTEN
                inodes.add(parts[9])
    if not inodes:
        return None
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            for fd in (d / "fd").iterdir():
                link = os.readlink(fd)
                if link.startswith("socket:[") and link[8:-1] in inodes:
                    return int(d.name)
        except OSError:
            continue
    return None


class ProcSampler:
    """CPU seconds (user+system, the process and its children that exited) and RSS of one process."""

    def __init__(self, pid: int):
        self.pid = pid
        self.tick = os.sysconf("SC_CLK_TCK")
        self.rss_peak = 0
        self.rss_samples: list[int] = []
        self.cpu0 = self.cpu()
        self.wall0 = time.perf_counter()

    def cpu(self) -> float:
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        utime, stime, cutime, cstime = (int(x) for x in fields[11:15])
        return (utime + stime + cutime + cstime) / self.tick

    def status(self, key: str) -> int:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
        return 0

    def sample(self) -> None:
        try:
            rss = self.status("VmRSS")
        except OSError:
            return
        self.rss_samples.append(rss)
        self.rss_peak = max(self.rss_peak, rss)

    def result(self) -> dict:
        wall = time.perf_counter() - self.wall0
        try:
            cpu = self.cpu() - self.cpu0
            hwm = self.status("VmHWM")
        except OSError:
            cpu, hwm = None, None
        return {"pid": self.pid, "wall_s": wall, "cpu_s": cpu, "cpu_per_wall": cpu / wall if cpu else None,
                "rss_peak_mb": self.rss_peak / 2**20, "rss_start_mb": (self.rss_samples or [0])[0] / 2**20,
                "rss_end_mb": (self.rss_samples or [0])[-1] / 2**20, "vm_hwm_mb": hwm / 2**20 if hwm else None}


async def sample_loop(sampler: ProcSampler, stop: asyncio.Event, every: float = 0.5) -> None:
    while not stop.is_set():
        sampler.sample()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), every)
    sampler.sample()


# --- starting a server ------------------------------------------------------------------------------
class Server:
    """`streamlit run app.py` on a free port in its own process group, stopped on exit."""

    def __init__(self, extra_args: list[str], timeout: float = 120.0, threads: int = 0):
        self.port = free_port()
        self.threads = threads  # > 0: OMP_NUM_THREADS of this server (replicas share the cores)
        self.url = f"http://127.0.0.1:{self.port}"
        self.extra_args, self.timeout = extra_args, timeout
        self.cache_dir = None
        self.proc = None
        self.log = None

    def __enter__(self) -> Server:
        env = dict(os.environ)
        if "TIKTOKEN_CACHE_DIR" not in env and SHARED_CACHE.is_dir():
            self.cache_dir = tempfile.mkdtemp(prefix="tiktoken-cache-")  # tiktoken deletes bad files
            for f in SHARED_CACHE.iterdir():
                shutil.copy(f, Path(self.cache_dir) / f.name)
            env["TIKTOKEN_CACHE_DIR"] = self.cache_dir
        elif "TIKTOKEN_CACHE_DIR" not in env:
            print(f"warning: no TIKTOKEN_CACHE_DIR and no {SHARED_CACHE}: the server may need the network")
        if self.threads:
            env["OMP_NUM_THREADS"] = str(self.threads)
        self.log = tempfile.NamedTemporaryFile(prefix="protocol-load-server-", suffix=".log", delete=False)
        cmd = [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true",
               "--server.port", str(self.port), "--browser.gatherUsageStats", "false", *self.extra_args]
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + self.timeout
        while not server_alive(self.url):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.__exit__(None, None, None)
                raise RuntimeError(f"streamlit did not come up on {self.url}; log: {self.log.name}")
            time.sleep(0.25)
        return self

    def log_tail(self, n: int = 3000) -> str:
        try:
            return Path(self.log.name).read_text(errors="replace")[-n:]
        except (OSError, AttributeError):
            return ""

    def __exit__(self, *exc) -> None:
        if self.proc is not None and self.proc.poll() is None:
            for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
                try:
                    os.killpg(self.proc.pid, sig)
                    self.proc.wait(timeout=wait)
                    break
                except ProcessLookupError:
                    break
                except subprocess.TimeoutExpired:
                    continue
        if self.cache_dir:
            shutil.rmtree(self.cache_dir, ignore_errors=True)
        if self.log is not None:
            self.log.close()


# --- one learner --------------------------------------------------------------------------------------
@dataclass
class Config:
    url: str  # one server, or several separated by commas (learner i uses the (i mod N)-th: sticky sessions)
    duration: float
    think: tuple[float, float]
    timeout: float
    model: str | None
    lang: str | None
    seed: int


def view_shows(c: StreamlitClient) -> dict:
    """The layer, mask, head and scale the Attention view shows, as attention.js keeps them (note_view): the server's
    pick where its serial was new to the view (a new view, a pick the server made), else the view's own last pick."""
    return dict(getattr(c, "view_pick", None) or {})


async def do_action(c: StreamlitClient, a: Action, learner: int, round_: int, rng: random.Random,
                    cfg: Config) -> RunResult:
    """Run one action; raises MissingWidget/ProtocolError when it cannot apply."""
    if a.kind == "open":
        params = {}
        if cfg.model and ":" in cfg.model:
            params["model"] = cfg.model
        if cfg.lang:
            params["lang"] = cfg.lang
        res = await c.open("/", urlencode(params))
        if cfg.model and ":" not in cfg.model and not res.errors:  # a label: choose it in the select box
            w = c.widget("model")
            match = [o for o in w.options if o == cfg.model] or [o for o in w.options if cfg.model.lower() in o.lower()]
            if not match:
                raise ProtocolError(f"--model {cfg.model!r} is no option of 'model': {w.options}")
            if c.value("model") != match[0]:
                r2 = await c.set_value("model", match[0])
                r2.elapsed += res.elapsed
                return r2
        return res
    if a.kind == "text":
        return await c.set_value(a.arg, sentence(learner, round_))
    if a.kind == "page":
        return await c.goto(a.arg)
    if a.kind == "pick":
        w = c.widget(a.arg)
        return await c.set_value(a.arg, random_other(w.options, c.value(a.arg), rng))
    if a.kind == "slider":
        w = c.widget(a.arg)
        p = w.proto
        lo, hi = a.values or (p.min, p.max)
        lo, hi = max(lo, p.min), min(hi, p.max)
        step = p.step or 0.01
        v = round(round(rng.uniform(lo, hi) / step) * step, 6)
        return await c.set_value(a.arg, v)
    if a.kind == "temperature":  # the Logits page's view tells the server (ui/sampling_view.py), else its slider
        if any(w.key == "sampling_view" for w in c.widgets.values()):
            held = c.states.get(c.widget("sampling_view").id)
            rule = json.loads(held.json_value).get("rule", {}) if held is not None and held.json_value else {}
            t = round(round(rng.uniform(*a.values) / 0.05) * 0.05, 2)
            return await c.set_view_state("sampling_view", "rule", {"k": 0, "p": 1.0, **rule, "T": t})
        return await do_action(c, replace(a, kind="slider"), learner, round_, rng, cfg)
    if a.kind in ("head", "layer", "mask"):  # the Attention page's view tells the server (ui/attention_view.py) where
        # it is drawn (a text of up to its VIEW_TOKENS tokens), else the Head or Layer box, Mask radio
        keys = {w.key for w in c.widgets.values()}
        if "attention_view" in keys and a.arg not in keys:
            pick = {"scale": "01", **view_shows(c)}
            if a.kind == "mask":
                pick["mask"] = "none" if pick.get("mask", "both") in ("causal", "both") else "both"
            else:
                pick[a.arg] = 1 - int(pick.get(a.arg, 0)) % 2
            c.view_pick = pick
            return await c.set_view_state("attention_view", "pick", pick)
        return await do_action(c, replace(a, kind="pick"), learner, round_, rng, cfg)
    if a.kind == "click":
        return await c.click(a.arg)
    raise ValueError(f"unknown action kind {a.kind!r}")


ASKS = {"layer": "view_asks_layers", "mask": "view_asks_masks"}  # the Attention view's own runs (rows of their own)


def note_view(c: StreamlitClient) -> None:
    """After a run, keep what attention.js keeps (ui/attention_view.py): the server's pick where its serial is new to
    the view, and what the maps element has sent (the blocks (mask set, layer) of one text, each set's kept cells of
    a layer)."""
    for w in c.widgets.values():
        data = json.loads(w.proto.json) if w.key in ("attention_view", "attention_maps") and w.proto.json else None
        if not data:
            continue
        if w.key == "attention_view" and data["pick"]["serial"] != getattr(c, "view_serial", None):
            c.view_serial = data["pick"]["serial"]
            c.view_pick = {k: data["pick"][k] for k in ("layer", "mask", "head", "scale")}
        elif w.key == "attention_maps":
            if getattr(c, "maps_key", None) != data["key"]:
                c.maps_key, c.maps_held = data["key"], set()
            c.maps_held |= {tuple(b) for b in data["blocks"]}
            c.maps_cells = [bin(int.from_bytes(base64.b64decode(m), "little")).count("1") * data["heads"]
                            for m in data["masks"]]


async def view_asks(c: StreamlitClient, kind: str) -> RunResult | None:
    """The Attention view's ask, as attention.js makes it when the pointer reaches its Layer list (kind "layer": the
    mask shown's other layers, nearest first) or its mask radio ("mask": the layer shown under the other masks), for
    those maps it does not hold, as many as one ask brings (the view's "cap"): the run it starts (the maps element's
    alone), or None where it does not ask (no view, every one held)."""
    w = next((w for w in c.widgets.values() if w.key == "attention_view"), None)
    if w is None or not w.proto.json or getattr(c, "maps_key", None) is None:
        return None
    data, shown = json.loads(w.proto.json), view_shows(c)
    if data["key"] != c.maps_key:
        return None
    s, layer = data["modes"].get(shown.get("mask"), 0), int(shown.get("layer", 0))
    if kind == "layer":
        blocks = [(s, other) for other in sorted(range(data["layers"]), key=lambda x: (abs(x - layer), x))]
    else:
        blocks = [(m, layer) for m in sorted(set(data["modes"].values()))]
    asked, total = [], 0
    for m, other in blocks:
        if (m, other) not in c.maps_held and total + c.maps_cells[m] <= data["cap"]:
            asked.append([m, other])
            total += c.maps_cells[m]
    if not asked:
        return None
    res = await c.set_view_state("attention_maps", "want", {"key": data["key"], "blocks": asked, "at": time.time()})
    note_view(c)
    return res


async def learner_loop(i: int, cfg: Config, rec: Recorder, start_delay: float, deadline: float) -> None:
    rng = random.Random(cfg.seed * 1000 + i)
    await asyncio.sleep(start_delay)
    urls = cfg.url.split(",")
    url = urls[i % len(urls)]  # always the same server, as a sticky load balancer would keep it
    c = StreamlitClient(url, timeout=cfg.timeout)
    need_open, round_, step = True, 0, 0
    try:
        while time.perf_counter() < deadline:
            a = OPEN if need_open else SCRIPT[step]
            try:
                if need_open and c.ws is not None:
                    await c.close()
                    c = StreamlitClient(url, timeout=cfg.timeout)
                if a.kind in ASKS:  # the pointer on the way to the view's Layer list or mask radio
                    asked = await view_asks(c, a.kind)
                    if asked is not None:
                        rec.add(i, ASKS[a.kind], asked)
                res = await do_action(c, a, i, round_, rng, cfg)
                note_view(c)
                rec.add(i, a.name, res)
                if res.status in ("TIMEOUT", "DISCONNECTED") or c.closed_reason:
                    need_open = True  # a browser would reload; start again from the home page
                    round_, step = round_ + 1, 0
                    continue
            except (MissingWidget, ProtocolError) as exc:
                rec.add(i, a.name, None, skipped=str(exc))
            except (TimeoutError, OSError) as exc:
                rec.add(i, a.name, None, error=f"disconnect: {type(exc).__name__}: {exc}")
                need_open = True
                await asyncio.sleep(1)
                continue
            if need_open:
                need_open = False
            else:
                step += 1
                if step == len(SCRIPT):
                    step, round_ = 0, round_ + 1
            await asyncio.sleep(max(0.0, min(rng.uniform(*cfg.think), deadline - time.perf_counter())))
    finally:
        await c.close()


async def run_load(cfg: Config, learners: int, ramp: float, pids: list[int], slow=None) -> dict:
    links = []
    if slow:  # every server behind one shared link (one SlowLink per server, sharing its two directions)
        from harness.slow_link import SlowLink

        urls = []
        for u in cfg.url.split(","):
            parts = urlsplit(u)
            link = SlowLink(parts.hostname, parts.port or 80, rate_mbit=slow[0], delay_ms=slow[1])
            if links:
                link.down, link.up = links[0].down, links[0].up
            links.append(link)
            urls.append(f"http://127.0.0.1:{await link.start()}")
        cfg = replace(cfg, url=",".join(urls))
    try:
        return await _load(cfg, learners, ramp, pids)
    finally:
        for link in links:
            await link.stop()


async def _load(cfg: Config, learners: int, ramp: float, pids: list[int]) -> dict:
    rec = Recorder()
    stop = asyncio.Event()
    samplers = [ProcSampler(pid) for pid in pids]
    sampling = [asyncio.create_task(sample_loop(s, stop)) for s in samplers]
    load0 = os.getloadavg()
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    rec.t0 = t0 = time.perf_counter()
    deadline = t0 + cfg.duration
    await asyncio.gather(*(learner_loop(i, cfg, rec, ramp * i / max(learners, 1), deadline)
                           for i in range(learners)))
    wall = time.perf_counter() - t0
    stop.set()
    for task in sampling:
        await task
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    client_cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    return {"samples": rec.samples, "wall_s": wall, "servers": [s.result() for s in samplers],
            "client": {"cpu_s": client_cpu, "cpu_per_wall": client_cpu / wall, "maxrss_mb": ru1.ru_maxrss / 1024},
            "loadavg_start": load0, "loadavg_end": os.getloadavg()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--learners", type=int, default=20)
    ap.add_argument("--duration", type=float, default=120.0, help="seconds of load (new actions start until then)")
    ap.add_argument("--url", default="http://127.0.0.1:8501")
    ap.add_argument("--start-server", action="store_true", help="start `streamlit run app.py` on a free port")
    ap.add_argument("--server-arg", action="append", default=[], help="extra argument for the started server")
    ap.add_argument("--replicas", type=int, default=1, help="with --start-server: this many servers, learners "
                    "spread over them and kept on one each (sticky sessions), torch threads cores / N each")
    ap.add_argument("--server-pid", type=int, help="pid to sample (default: the one listening on the url's port)")
    ap.add_argument("--model", default="app",
                    help=f"registry key (sent as ?model=KEY) or a label of the 'model' select box; 'app' (the "
                    f"default) = the app's own default model; {COURSE_BASE} = the course's Transformer")
    ap.add_argument("--lang", help="UI language sent as ?lang= (default: the app's)")
    ap.add_argument("--think", type=float, nargs=2, default=(1.0, 3.0), metavar=("MIN", "MAX"),
                    help="think time between actions, uniform in seconds (default 1 3)")
    ap.add_argument("--ramp", type=float, default=None, help="spread learner starts over S seconds "
                    "(default: min(10, duration/4))")
    ap.add_argument("--timeout", type=float, default=60.0, help="per action, seconds")
    ap.add_argument("--warmup", action=argparse.BooleanOptionalAction, default=True,
                    help="one unmeasured learner walk before the load (loads the model, fills caches)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--analyses", action="store_true",
                    help="walk: the analyses pages (lens with attribution, head effects, learn slider, FFN)")
    ap.add_argument("--every-page", action="store_true",
                    help="walk: type a new sentence, then visit every page once (first visits), instead of SCRIPT")
    ap.add_argument("--tokens", type=int, choices=sorted(WIRE_KB), default=64,
                    help="text length: a sentence's first clause (10-20 tokens), one sentence (40-64) or two "
                    "(100-128); the wire limit follows")
    ap.add_argument("--slow-link", type=float, nargs=2, metavar=("MBIT", "MS"),
                    help="learners reach the servers through one shared link of MBIT megabits per second each way, "
                    "each chunk MS milliseconds late (harness/slow_link.py: a venue's Wi-Fi)")
    ap.add_argument("--json", help="write the summary and every sample here")
    args = ap.parse_args(argv)
    global LONG, SHORT
    LONG, SHORT = args.tokens == 128, args.tokens == 32
    ramp = args.ramp if args.ramp is not None else min(10.0, args.duration / 4)
    if args.every_page:
        SCRIPT[:] = every_page_script()
    if args.analyses:
        SCRIPT[:] = ANALYSES
    if args.model == "app":
        args.model = None

    n = max(1, args.replicas) if args.start_server else 1
    threads = max(1, (os.cpu_count() or 1) // n) if n > 1 else 0
    servers = [Server(args.server_arg, threads=threads) for _ in range(n)] if args.start_server else []
    try:
        for server in servers:
            server.__enter__()
            print(f"started {server.url} (pid {server.proc.pid})" + (f", {threads} torch threads" if threads else ""))
        urls = [s.url for s in servers] or [u.rstrip("/") for u in args.url.split(",")]
        cfg = Config(",".join(urls), args.duration, tuple(args.think), args.timeout, args.model, args.lang, args.seed)
        pids = [s.proc.pid for s in servers] or ([args.server_pid] if args.server_pid else
                                                  [pid_listening_on(urlsplit(u).port or 80) for u in urls])
        if None in pids:
            print("warning: server process not found; no CPU/memory figures (give --server-pid)")
        pids = [p for p in pids if p is not None]
        if args.warmup:
            for u in urls:
                w = asyncio.run(warmup(replace(cfg, url=u)))
                print(f"warm-up walk ({u}): {w:.1f} s")
        print(f"{args.learners} learners, {args.duration:.0f} s, think {args.think[0]:g}-{args.think[1]:g} s, "
              f"ramp {ramp:.0f} s, url {cfg.url}, model {args.model or '(app default)'}")
        out = asyncio.run(run_load(cfg, args.learners, ramp, pids, args.slow_link))
    finally:
        for server in servers:
            server.__exit__(None, None, None)
    rows = summarize(out["samples"], [OPEN.name] + [a.name for a in SCRIPT])
    print()
    print_table(rows, WIRE_KB[args.tokens])
    if args.slow_link:
        print(f"(through one shared link of {args.slow_link[0]:g} Mbit/s each way, {args.slow_link[1]:g} ms late)")
    servers, cl = out["servers"], out["client"]
    print()
    print(f"wall {out['wall_s']:.1f} s; load average at start {fmt_load(out['loadavg_start'])}, "
          f"at end {fmt_load(out['loadavg_end'])} ({os.cpu_count()} CPUs)")
    for srv in servers:
        print(f"server pid {srv['pid']}: CPU {srv['cpu_s']:.1f} s over {srv['wall_s']:.1f} s wall = "
              f"{srv['cpu_per_wall']:.2f} cores; RSS start {srv['rss_start_mb']:.0f} MB, "
              f"peak {srv['rss_peak_mb']:.0f} MB, end {srv['rss_end_mb']:.0f} MB (VmHWM {srv['vm_hwm_mb']:.0f} MB)")
    done = sum(1 for s in out["samples"] if not s.skipped)
    if servers and all(s["cpu_s"] is not None for s in servers) and done:
        cpu = sum(s["cpu_s"] for s in servers)
        own = sum(1 for s in out["samples"] if not s.skipped and s.action not in ASKS.values())  # a learner's own
        print(f"servers together: {cpu:.1f} s of CPU = {cpu / out['wall_s']:.2f} cores, "
              f"{cpu / done:.3f} s per run ({done} runs), {cpu / max(own, 1):.3f} s per learner action ({own}: the "
              f"view's own asks not counted)")
    print(f"load generator: CPU {cl['cpu_s']:.1f} s = {cl['cpu_per_wall']:.3f} cores, max RSS {cl['maxrss_mb']:.0f} MB")
    errs = [(s.learner, s.action, e) for s in out["samples"] for e in s.errors]
    skips = [(s.learner, s.action, s.skipped) for s in out["samples"] if s.skipped]
    for title, items in (("errors", errs), ("skipped", skips)):
        if items:
            print(f"\n{title} (first 10 of {len(items)}):")
            for learner, action, text in items[:10]:
                print(f"  learner {learner} {action}: {text[:160]}")
    if args.json:
        doc = {"config": {**vars(args), "ramp": ramp, "script": [a.__dict__ for a in SCRIPT]},
               "summary": rows, "servers": servers, "client": cl, "wall_s": out["wall_s"],
               "loadavg_start": out["loadavg_start"], "loadavg_end": out["loadavg_end"], "cpus": os.cpu_count(),
               "samples": [s.__dict__ for s in out["samples"]]}
        Path(args.json).write_text(json.dumps(doc, indent=1, ensure_ascii=False), encoding="utf-8")
        print(f"\nwrote {args.json}")
    return 1 if any(r["errors"] for r in rows if r["action"] == "all") else 0


def fmt_load(la) -> str:
    return "/".join(f"{x:.2f}" for x in la)


async def warmup(cfg: Config) -> float:
    """One learner walks the script once, unmeasured (first model load, imports, caches)."""
    t0 = time.perf_counter()
    rec = Recorder()
    short = Config(cfg.url, 0, (0, 0), max(cfg.timeout, 180), cfg.model, cfg.lang, cfg.seed + 99)
    c = StreamlitClient(cfg.url, timeout=short.timeout)
    rng = random.Random(-1)
    try:
        for a in [OPEN, *SCRIPT]:
            try:
                res = await do_action(c, a, 10_000, 0, rng, short)
                rec.add(0, a.name, res)
                if res.errors:
                    print(f"  warm-up {a.name}: {res.errors[0][:200]}")
            except ProtocolError as exc:
                print(f"  warm-up {a.name}: skipped ({exc})")
    finally:
        await c.close()
    return time.perf_counter() - t0


if __name__ == "__main__":
    sys.exit(main())
