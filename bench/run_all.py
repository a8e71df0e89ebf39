"""Run every bench and print one summary: each figure, its target, PASS/MISS.

    python bench/run_all.py [--quick] [--device cpu|cuda] [--only NAME ...] [--skip NAME ...] [--strict]

Runs, one after the other as subprocesses (their output goes to bench/results/<name>.log):
  forward       traced vs untraced forward, ours vs nn.Transformer      (bench/forward.py)
  train_speed   training steps per second                               (bench/train_speed.py)
  page_cost     each page's rerun time and chart bytes, 16/64/256 tokens (bench/page_cost.py)
  page_draw     each page drawn in Chromium, 128 tokens, one learner     (bench/page_draw.py)
  sweeps        every head knocked out alone, against one forward each   (bench/sweeps.py)
  memory        server RSS with 1 and 10 browser sessions               (bench/memory.py)
  cold_start    launch to first page and first charts, 3 runs           (bench/cold_start.py)
  load_test     20 concurrent browser sessions, + one training          (bench/load_test.py)
  deploy_check  2 replicas behind nginx, sticky sessions                (bench/deploy_check.py)
Each writes bench/results/<name>.json; this script reads their "figures" (forward.py's and train_speed.py's
own formats through small adapters; the targets below)
and writes bench/results/summary.json. --quick: fewer repeats, fewer sessions, shorter runs (~10 min on a
2-core CPU instead of ~30). Needs Chromium + Playwright (scripts/install_browser.sh) for the browser
benches and nginx (scripts/install_nginx.sh) for deploy_check. Exit status 1 with --strict if any figure
misses its target or a bench fails.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time

from common import RESULTS, ROOT, figure, fmt, parser, print_table, setup_env, verdict

PY = sys.executable
# name -> (script, extra args for a full run, extra args for --quick, timeout s)
BENCHES = {
    "forward": ("forward.py", [], ["--lengths", "16", "64", "--repeat", "3"], 1200),
    "train_speed": ("train_speed.py", [], ["--iters", "100", "--repeats", "1"], 1200),
    "page_cost": ("page_cost.py", [], ["--quick"], 1200),
    "page_draw": ("page_draw.py", [], ["--quick"], 900),
    "sweeps": ("sweeps.py", [], ["--quick", "--lengths", "32", "73"], 600),
    "memory": ("memory.py", [], ["--quick"], 1200),
    "cold_start": ("cold_start.py", [], ["--quick"], 900),
    "load_test": ("load_test.py", ["--train-one"], ["--quick"], 2400),
    "deploy_check": ("deploy_check.py", [], ["--quick"], 900),
}
# forward.py and train_speed.py write their own JSON, not figures: read with the targets below
FORWARD_TARGETS = {"traced_over_untraced": 1.25, "ours_over_reference": 1.3}  # at 64 tokens
TRAIN_TARGET = 0.8  # our training loop (eval off) at least 0.8x the tokens/s of a plain PyTorch loop


def accepts(script: str, option: str) -> bool:
    """Whether a bench script's --help lists an option (benches written by others vary)."""
    try:
        out = subprocess.run([PY, str(ROOT / "bench" / script), "--help"], capture_output=True, text=True,
                             timeout=120, cwd=ROOT).stdout
    except (OSError, subprocess.TimeoutExpired):
        return False
    return option in out


def forward_figures(doc: dict) -> list[dict]:
    figs = []
    for row in doc.get("results", []):
        tag = f"{row.get('preset')} @{row.get('length')} tok"
        at64 = row.get("length") == 64
        figs.append(figure(f"forward untraced, {tag}", row.get("untraced_ms"), "ms"))
        figs.append(figure(f"forward traced / untraced, {tag}", row.get("traced_over_untraced"), "x",
                           FORWARD_TARGETS["traced_over_untraced"] if at64 else None, "<=",
                           note=""))
        if row.get("ours_over_reference") is not None:
            figs.append(figure(f"forward ours / nn.Transformer, {tag}", row["ours_over_reference"], "x",
                               FORWARD_TARGETS["ours_over_reference"] if at64 else None, "<=",
                               note=""))
    return figs


def train_figures(doc: dict) -> list[dict]:
    figs = [figure(f"train tokens/s, {name}", v, "tok/s") for name, v in doc.get("tokens_per_s", {}).items()]
    for name, ratio in doc.get("ratio_vs_reference", {}).items():
        if not name.startswith("reference"):
            eval_off = "eval off" in name
            figs.append(figure(f"train speed vs plain loop, {name}", ratio, "x", TRAIN_TARGET if eval_off else None,
                               ">=", note="proposed target" if eval_off else ""))
    return figs


ADAPTERS = {"forward": forward_figures, "train_speed": train_figures}


def generic_figures(doc: dict) -> list[dict]:
    """Top-level numbers of a result file without a "figures" list, shown without targets."""
    return [figure(k, v) for k, v in doc.items() if isinstance(v, (int, float)) and not isinstance(v, bool)]


def run_bench(name: str, quick: bool, device: str | None) -> dict:
    script, full_args, quick_args, timeout = BENCHES[name]
    path = ROOT / "bench" / script
    if not path.exists():
        return {"name": name, "status": f"missing: bench/{script}", "figures": []}
    args = list(quick_args if quick else full_args)
    if args and not all(accepts(script, a) for a in args if a.startswith("--")):
        args = []
    if device and accepts(script, "--device"):
        args += ["--device", device]
    result_file = RESULTS / f"{name}.json"
    log = RESULTS / f"{name}.log"
    start = time.time()
    print(f"\n=== {name}: {' '.join(['python', 'bench/' + script, *args])}  (log: {log.relative_to(ROOT)})",
          flush=True)
    try:
        with open(log, "w", encoding="utf-8") as out:
            rc = subprocess.run([PY, str(path), *args], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                timeout=timeout).returncode
    except subprocess.TimeoutExpired:
        rc = "timeout"
    wall = time.time() - start
    tail = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-3:]
    if not result_file.exists() or result_file.stat().st_mtime < start:
        return {"name": name, "status": f"no result (exit {rc}): {' | '.join(tail)[-300:]}", "figures": [],
                "wall_s": wall}
    doc = json.loads(result_file.read_text(encoding="utf-8"))
    figs = doc.get("figures") or ADAPTERS.get(name, generic_figures)(doc)
    status = "ok" if rc == 0 else f"exit {rc}"
    print(f"    {status}, {len(figs)} figures, {wall:.0f} s", flush=True)
    return {"name": name, "status": status, "figures": figs, "wall_s": wall}


def main(argv=None) -> int:
    p = parser(__doc__)
    p.add_argument("--only", nargs="+", choices=list(BENCHES), default=None)
    p.add_argument("--skip", nargs="+", choices=list(BENCHES), default=[])
    p.add_argument("--strict", action="store_true", help="exit 1 if a figure misses or a bench fails")
    args = p.parse_args(argv)
    setup_env(args.device)
    RESULTS.mkdir(parents=True, exist_ok=True)
    names = [n for n in (args.only or BENCHES) if n not in args.skip]
    runs = [run_bench(n, args.quick, args.device) for n in names]

    rows, misses = [], 0
    for r in runs:
        if not r["figures"]:
            rows.append((r["name"], "(did not run)", "-", "-", "ERROR", r["status"][:100]))
            misses += 1
        for f in r["figures"]:
            target = "-" if f.get("target") is None else f"{f.get('op', '<')} {fmt(f['target'], f.get('unit', ''))}"
            rows.append((r["name"], f["name"], fmt(f["value"], f.get("unit", "")), target, verdict(f.get("ok")),
                         f.get("note", "")[:70]))
            misses += f.get("ok") is False
    print("\n\nSUMMARY" + (" (--quick)" if args.quick else "") + f", device {args.device or 'auto'}\n")
    print_table(("bench", "figure", "value", "target", "", "note"), rows)
    passed = sum(1 for r in rows if r[4] == "PASS")
    print(f"\n{passed} PASS, {misses} MISS/ERROR, {sum(1 for r in rows if r[4] == '-')} without target")
    (RESULTS / "summary.json").write_text(json.dumps({"quick": args.quick, "device": args.device, "runs": runs},
                                                     indent=2, ensure_ascii=False, default=str), encoding="utf-8")
    print(f"wrote {(RESULTS / 'summary.json').relative_to(ROOT)}")
    return 1 if args.strict and misses else 0


if __name__ == "__main__":
    raise SystemExit(main())
