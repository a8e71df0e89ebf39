"""Training tokens/s: transformer_core.training vs a plain PyTorch loop on the same model (course GPT sizes).

    python bench/train_speed.py [--device cpu|cuda] [--json PATH] [--iters N] [--repeats R] [--threads T]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SHARED_CACHE = ROOT.parent / "shared" / "tiktoken-cache"
if "TIKTOKEN_CACHE_DIR" not in os.environ and SHARED_CACHE.is_dir():
    os.environ["TIKTOKEN_CACHE_DIR"] = str(SHARED_CACHE)

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from transformer_core.model.device import device_name, pick_device  # noqa: E402
from transformer_core.model.transformer import build_model  # noqa: E402
from transformer_core.train.corpus import TEXT  # noqa: E402
from transformer_core.train.loop import TrainConfig, make_data, model_config, train  # noqa: E402

DEFAULT_JSON = ROOT / "bench" / "results" / "train_speed.json"


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def ours(tc: TrainConfig) -> float:
    """Tokens/s of transformer_core.training.train (its own timer: the loop, eval included if enabled)."""
    result = train(tc)
    return result.tokens / result.seconds


def reference(tc: TrainConfig) -> float:
    """Tokens/s of a plain loop: the course's get_batch, forward, cross_entropy, backward, AdamW step."""
    device = pick_device(tc.device)
    data = make_data(tc)
    model = build_model(model_config(tc, data), device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=tc.lr)
    sync(device)
    start = time.perf_counter()
    for _ in range(tc.max_iters):
        b = data.batch("train", tc.batch_size)
        x, y = b.src.to(device), b.labels.to(device)  # (B, T), (B, T)
        logits = model(x)  # (B, T, V)
        loss = F.cross_entropy(logits.flatten(0, 1), y.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    sync(device)
    return tc.max_iters * tc.batch_size * tc.context / (time.perf_counter() - start)


def measure(tc: TrainConfig, repeats: int) -> dict[str, float]:
    """Median tokens/s of each loop, run alternately so that machine load hits all of them alike."""
    loops = {"reference (plain PyTorch)": reference, "ours, eval off": lambda c: ours(replace(c, eval_interval=0)),
             "ours, course eval (every 50 steps, 20 batches)": ours}
    for fn in loops.values():  # warm-up: allocator, kernels, tokenizer
        fn(replace(tc, max_iters=10))
    runs = {name: [] for name in loops}
    for _ in range(repeats):
        for name, fn in loops.items():
            runs[name].append(fn(tc))
    return {name: statistics.median(v) for name, v in runs.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default=None, help="default: CUDA when available")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON)
    parser.add_argument("--iters", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = pick_device(args.device)
    tc = TrainConfig(text=TEXT, max_iters=args.iters, device=str(device), seed=0)  # course GPT hyper-parameters
    tps = measure(tc, args.repeats)
    ref = tps["reference (plain PyTorch)"]
    print(f"device: {device_name(device)} ({device}), torch {torch.__version__}, threads {torch.get_num_threads()}")
    print(f"course GPT: batch {tc.batch_size}, context {tc.context}, d_model {tc.d_model}, {tc.n_layers} layers, "
          f"{tc.n_heads} heads; {args.iters} iterations, median of {args.repeats}")
    print(f"{'loop':<48} {'tokens/s':>10} {'ms/step':>8} {'vs ref':>7}")
    for name, v in tps.items():
        print(f"{name:<48} {v:>10,.0f} {1000 * tc.batch_size * tc.context / v:>8.2f} {v / ref:>7.2f}")
    out = {"device": str(device), "device_name": device_name(device), "torch": torch.__version__,
           "threads": torch.get_num_threads(), "python": platform.python_version(), "iterations": args.iters,
           "repeats": args.repeats, "tokens_per_step": tc.batch_size * tc.context,
           "tokens_per_s": {k: round(v, 1) for k, v in tps.items()},
           "ratio_vs_reference": {k: round(v / ref, 3) for k, v in tps.items()}}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(out, indent=2), encoding="utf-8")
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
