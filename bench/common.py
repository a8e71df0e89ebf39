"""Shared by the bench scripts: paths, env, result files, tables, process memory, texts of exact token counts.

What tests use too (starting a server, Chromium, the protocol client, AppTest) is in harness/ at the repository root;
importing this module puts the root on sys.path, so a bench script run as `python bench/NAME.py` imports both.

Every bench writes bench/results/<name>.json = {"name", "env", "figures": [figure(...), ...], ...raw data};
bench/run_all.py reads the "figures" lists (name, value, unit, target, ok) into one summary table.
"""
from __future__ import annotations

import argparse
import atexit
import json
import math
import operator
import os
import platform
import shutil
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
COURSE_BASE = "preset:course-base@cl100k_base"
DEVICE_ENV = "TRANSFORMER_EXPLORER_DEVICE"
OPS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}
if str(ROOT) not in sys.path:  # transformer_core, ui, service and harness
    sys.path.insert(0, str(ROOT))


def setup_env(device: str | None = None) -> dict:
    """Offline tiktoken and the device for this process and the servers it starts; returns the env dict."""
    from harness.server import tiktoken_cache

    if "TIKTOKEN_CACHE_DIR" not in os.environ and (tmp := tiktoken_cache()):  # a writable copy of the shared files
        os.environ["TIKTOKEN_CACHE_DIR"] = tmp  # servers and child benches inherit it
        atexit.register(shutil.rmtree, tmp, ignore_errors=True)
    if device:
        os.environ[DEVICE_ENV] = device
    return {k: os.environ[k] for k in ("TIKTOKEN_CACHE_DIR", DEVICE_ENV) if k in os.environ}


def parser(doc: str) -> argparse.ArgumentParser:
    """An argument parser with the options every bench takes."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=("cpu", "cuda"), default=None,
                   help=f"torch device for the app (default: ${DEVICE_ENV}, else auto)")
    p.add_argument("--quick", action="store_true", help="fewer repeats / shorter runs")
    return p


def figure(name: str, value, unit: str = "", target: float | None = None, op: str = "<", note: str = "") -> dict:
    """One measured figure and its target; ok is None when there is no target or no value."""
    ok = None if target is None or value is None else OPS[op](value, target)
    return {"name": name, "value": value, "unit": unit, "target": target, "op": op, "ok": ok, "note": note}


def run_env() -> dict:
    import torch

    return {"python": platform.python_version(), "torch": torch.__version__, "cpus": os.cpu_count(),
            "threads": torch.get_num_threads(), "device": os.environ.get(DEVICE_ENV, "auto"),
            "cuda": torch.cuda.is_available(), "machine": platform.machine(),
            "loadavg": os.getloadavg(), "time": time.strftime("%Y-%m-%d %H:%M:%S")}


def write_result(name: str, figures: list[dict], **data) -> Path:
    """bench/results/<name>.json with env, figures and any raw data; prints the figures' table."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps({"name": name, "env": run_env(), "figures": figures, **data}, indent=2,
                               ensure_ascii=False, default=str), encoding="utf-8")
    print()
    print_figures(figures)
    print(f"\nwrote {path.relative_to(ROOT)}")
    return path


def fmt(value, unit: str = "") -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        value = f"{value:.3g}" if abs(value) < 100 else f"{value:.0f}"
    return f"{value} {unit}".strip()


def verdict(ok) -> str:
    return {True: "PASS", False: "MISS", None: "-"}[ok]


def print_figures(figures: list[dict]) -> None:
    rows = [(f["name"], fmt(f["value"], f["unit"]),
             "-" if f["target"] is None else f"{f['op']} {fmt(f['target'], f['unit'])}", verdict(f["ok"]), f["note"])
            for f in figures]
    print_table(("figure", "value", "target", "", "note"), rows)


def print_table(headers, rows) -> None:
    """A plain fixed-width table on stdout."""
    rows = [tuple(str(c) for c in r) for r in rows]
    widths = [max(len(str(h)), *(len(r[i]) for r in rows)) if rows else len(str(h)) for i, h in enumerate(headers)]
    line = "  ".join(f"{h:<{w}}" for h, w in zip(headers, widths))
    print(line.rstrip())
    print("  ".join("-" * w for w in widths))
    for r in rows:
        print("  ".join(f"{c:<{w}}" for c, w in zip(r, widths)).rstrip(), flush=True)


def median(xs):
    return statistics.median(xs) if xs else None


def percentile(xs, q: float):
    """Nearest-rank percentile (q in 0..100) of a list; None when empty."""
    if not xs:
        return None
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, math.ceil(q / 100 * len(s)) - 1))]


# --- process memory, from /proc (no psutil dependency) ------------------------------------------------------

def _children(pid: int) -> list[int]:
    kids = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            kids += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    return kids


def process_tree(pid: int) -> list[int]:
    """pid and all its descendants."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += _children(p)
    return out


def rss_mb(pid: int) -> float:
    """Resident memory (VmRSS) of one process in MB; 0 if it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def tree_rss_mb(pid: int) -> float:
    """VmRSS summed over a process and its descendants, in MB."""
    return sum(rss_mb(p) for p in process_tree(pid))


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds used so far by a process and its descendants (alive ones)."""
    total = 0
    for p in process_tree(pid):
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15 of stat)
        except (OSError, IndexError, ValueError):
            pass
    return total / os.sysconf("SC_CLK_TCK")


def machine_busy_seconds() -> tuple[float, float]:
    """(busy CPU seconds, total CPU seconds) of the whole machine so far, from /proc/stat."""
    vals = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = vals[3] + (vals[4] if len(vals) > 4 else 0)  # idle + iowait
    tick = os.sysconf("SC_CLK_TCK")
    return (sum(vals) - idle) / tick, sum(vals) / tick


# marker words: one per browser session, so a session that shows another's word shows cross-talk
WORDS = ("walrus", "zebra", "falcon", "otter", "badger", "heron", "lynx", "bison", "gecko", "koala", "lemur",
         "moose", "narwhal", "ocelot", "panda", "quail", "raven", "salmon", "tapir", "wombat", "alpaca", "beaver",
         "cobra", "dingo", "egret", "ferret", "gibbon", "hyena", "ibis", "jackal", "llama", "marmot", "osprey",
         "puffin", "robin", "stork", "toucan", "vulture", "weasel", "yak")  # sessions beyond 40 share words


# --- texts of an exact token count ---------------------------------------------------------------------------

SOURCE_SENTENCE = ("The small robot walked across the quiet garden, counting every red flower it could find "
                   "before the evening rain began. ")
TARGET_SENTENCE = ("A little machine crossed the calm park and counted the flowers until the rain started "
                   "falling at night. ")


def text_of_tokens(n: int, sentence: str = SOURCE_SENTENCE, encoding: str = "cl100k_base") -> str:
    """A text that encodes to exactly n tokens (the sentence repeated and cut at a token boundary)."""
    from transformer_core.text.tokenizer import decode, tokenize

    ids = tokenize(sentence * (n // 4 + 2), encoding).ids
    best = None
    for cut in range(n, n + 32):  # a cut can merge on re-encoding; step until the count is exact
        text = decode(ids[:cut], encoding).strip()
        got = len(tokenize(text, encoding).ids)
        if got == n:
            return text
        if best is None or abs(got - n) < best[0]:
            best = (abs(got - n), text)
    if best is not None and best[0] <= 2:  # a tokenizer whose merges never land on n exactly: the nearest count
        return best[1]
    raise ValueError(f"could not build a text of exactly {n} tokens")


def quiet_streamlit() -> None:
    """Drop Streamlit's 'missing ScriptRunContext' warnings in AppTest scripts (each run resets log levels)."""
    import logging

    logging.getLogger("streamlit.runtime.scriptrunner_utils.script_run_context").addFilter(
        lambda record: "ScriptRunContext" not in record.getMessage())
