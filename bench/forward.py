"""Forward-pass benchmark: untraced vs traced (every hook captured), and ours vs torch.nn.Transformer.

    python bench/forward.py [--device cpu|cuda] [--presets course-base] [--lengths 16 64 256]
                            [--repeat N] [--warmup N] [--threads N] [--json PATH]

Each length runs the three forwards interleaved (untraced, traced, reference), after warmup, and reports
the median of --repeat runs. Batch 1, source and target both `length` tokens, inference mode, eager.
The reference is nn.Transformer with the same sizes (dropout 0, batch_first) plus the same embeddings,
sinusoid positions and output Linear; note that nn.Transformer adds a final LayerNorm to each stack.
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script from any folder

from transformer_core import (  # noqa: E402 - after the sys.path line
    TransformerConfig,
    build_model,
    preset,
    run,
    run_with_trace,
    sinusoid_table,
)
from transformer_core.model.device import device_name, pick_device  # noqa: E402

DEFAULT_JSON = ROOT / "bench" / "results" / "forward.json"


class Reference(nn.Module):
    """Embeddings + sinusoid positions + nn.Transformer + output Linear, sized like `cfg`."""

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.src_embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.tgt_embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.register_buffer("pe", sinusoid_table(cfg.max_len, cfg.d_model), persistent=False)
        self.transformer = nn.Transformer(
            d_model=cfg.d_model, nhead=cfg.n_heads, num_encoder_layers=cfg.n_layers,
            num_decoder_layers=cfg.n_layers, dim_feedforward=cfg.d_ffn, dropout=0.0, batch_first=True,
        )
        self.out = nn.Linear(cfg.d_model, cfg.vocab_size)

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        Ts, Tt = src.size(1), tgt.size(1)
        s = self.src_embed(src) + self.pe[:Ts]  # (B, Ts, d)
        t = self.tgt_embed(tgt) + self.pe[:Tt]  # (B, Tt, d)
        causal = nn.Transformer.generate_square_subsequent_mask(Tt, device=tgt.device)  # (Tt, Tt)
        return self.out(self.transformer(s, t, tgt_mask=causal, tgt_is_causal=True))  # (B, Tt, vocab)


def timer(device: torch.device) -> Callable[[Callable[[], object]], float]:
    """Milliseconds for one call, synchronising CUDA before and after."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    def time_ms(fn: Callable[[], object]) -> float:
        sync()
        start = time.perf_counter()
        result = fn()
        sync()
        elapsed = (time.perf_counter() - start) * 1000.0
        del result
        return elapsed

    return time_ms


def bench_preset(name: str, lengths: list[int], repeat: int, warmup: int, device: torch.device) -> list[dict]:
    cfg = preset(name)
    t0 = time.perf_counter()
    model = build_model(cfg, device)
    print(f"built {name} in {time.perf_counter() - t0:.1f} s "
          f"({sum(p.numel() for p in model.parameters()) / 1e6:.1f} M parameters)", flush=True)
    reference = None
    if cfg.arch == "encoder_decoder":
        torch.manual_seed(0)
        reference = Reference(cfg).to(device).eval()
    time_ms = timer(device)
    rows = []
    for length in lengths:
        if length > cfg.max_len:
            print(f"  skip length {length}: {name} takes at most max_len={cfg.max_len}", flush=True)
            continue
        g = torch.Generator().manual_seed(length)
        src = torch.randint(0, cfg.vocab_size, (1, length), generator=g).to(device)
        tgt = torch.randint(0, cfg.vocab_size, (1, length), generator=g).to(device) if reference else None

        def reference_forward(src=src, tgt=tgt):
            with torch.inference_mode():
                return reference(src, tgt)

        kinds: dict[str, Callable[[], object]] = {
            "untraced": lambda src=src, tgt=tgt: run(model, src, tgt),
            "traced": lambda src=src, tgt=tgt: run_with_trace(model, src, tgt),
        }
        if reference is not None:
            kinds["reference"] = reference_forward
        for _ in range(warmup):
            for fn in kinds.values():
                time_ms(fn)
        samples: dict[str, list[float]] = {k: [] for k in kinds}
        for _ in range(repeat):  # interleaved, so drift in machine load hits every kind alike
            for kind, fn in kinds.items():
                samples[kind].append(time_ms(fn))
        med = {k: statistics.median(v) for k, v in samples.items()}
        row = {
            "preset": name, "length": length,
            "untraced_ms": med["untraced"], "traced_ms": med["traced"],
            "traced_over_untraced": med["traced"] / med["untraced"],
            "reference_ms": med.get("reference"),
            "ours_over_reference": med["untraced"] / med["reference"] if "reference" in med else None,
            "min_ms": {k: min(v) for k, v in samples.items()},  # robust to a busy machine
            "samples_ms": samples,
        }
        rows.append(row)
        ref = f"{'-':>18} {'-':>9}" if row["reference_ms"] is None else \
            f"{row['reference_ms']:18.1f} {row['ours_over_reference']:9.2f}"
        print(f"  {length:6d} {row['untraced_ms']:12.1f} {row['traced_ms']:10.1f} "
              f"{row['traced_over_untraced']:6.2f} {ref}", flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default=None, help="cpu or cuda (default: $TRANSFORMER_EXPLORER_DEVICE, else auto)")
    parser.add_argument("--presets", nargs="+", default=["course-base"])
    parser.add_argument("--lengths", nargs="+", type=int, default=[16, 64, 256])
    parser.add_argument("--repeat", type=int, default=5, help="timed runs per length and kind (median reported)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed runs per length and kind first")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: leave as is)")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON, help=f"results file (default {DEFAULT_JSON})")
    args = parser.parse_args(argv)
    if args.repeat < 1 or args.warmup < 0:
        parser.error("--repeat must be >= 1 and --warmup >= 0")

    if args.threads:
        torch.set_num_threads(args.threads)
    device = pick_device(args.device)
    env = {
        "device": str(device), "device_name": device_name(device), "torch": torch.__version__,
        "threads": torch.get_num_threads(), "python": platform.python_version(), "machine": platform.machine(),
        "processor": platform.processor() or platform.machine(), "repeat": args.repeat, "warmup": args.warmup,
        "batch": 1,
    }
    print(f"device {env['device_name']} ({device}), torch {env['torch']}, {env['threads']} threads, "
          f"median of {args.repeat} after {args.warmup} warmup", flush=True)
    results = []
    for name in args.presets:
        print(f"\n{name}\n  {'length':>6} {'untraced ms':>12} {'traced ms':>10} {'ratio':>6} "
              f"{'nn.Transformer ms':>18} {'ours/ref':>9}", flush=True)
        results += bench_preset(name, args.lengths, args.repeat, args.warmup, device)

    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"env": env, "results": results}, indent=2), encoding="utf-8")
    print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
