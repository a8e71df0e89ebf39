"""Today's decoders on this machine: memory, load time, forward time and every page's first visit at 64 tokens for
SmolLM2-135M, Qwen2.5-0.5B and Qwen3-0.6B (their real configs, in the app's own loader) and the shipped modern-gpt.

    python bench/modern.py [--quick] [--device cpu|cuda] [--tokens 64] [--pages home attention ...]
                           [--models shipped:modern-gpt smollm2-135m qwen2.5-0.5b qwen3-0.6b]

With no hub here, the two hub models are stood in for by random weights of exactly their configuration, written
in bfloat16 into a temporary Hugging Face cache (HF_HOME) the app then loads offline as it would the real files;
the tokenizer is a small byte-level BPE with the family's pre-tokenizer. Time and memory depend on the sizes, not
on the weights' values, so the figures hold for the real models; the predictions do not mean anything. Target:
every page < 3 s on a 64-token text for SmolLM2-135M and the shipped modern model, < 10 s for Qwen2.5-0.5B and
Qwen3-0.6B (their 151,936-token output layer makes the logit lens heavy).
"""
from __future__ import annotations

import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

from common import figure, parser, print_table, quiet_streamlit, setup_env, text_of_tokens, write_result

PAGE_TARGET_S = 3.0
BIG_PAGE_TARGET_S = 10.0  # the two 0.5-0.6 B models


def configs() -> dict[str, tuple[str, str, dict]]:
    """hub key -> (repository, family, published config.json values), from the families themselves."""
    from transformer_core.sources.hf_decoder import families

    return {ref: (repo, f.model_type, f.published) for f in families().values() for ref, (_, repo) in f.hub.items()
            if f.published}


def stand_in_cache(home: Path, ref: str) -> None:
    """Random weights of the model's real config in the HF cache layout (refs/main -> snapshots/<commit>/...)."""
    import torch

    from harness.hf_models import hf_classes, trained_tokenizer

    repo, family, sizes = configs()[ref]
    cls = hf_classes(family)
    snap = home / "hub" / f"models--{repo.replace('/', '--')}" / "snapshots" / ("0" * 40)
    snap.mkdir(parents=True, exist_ok=True)
    (snap.parents[1] / "refs").mkdir(exist_ok=True)
    (snap.parents[1] / "refs" / "main").write_text("0" * 40)
    torch.manual_seed(0)
    model = cls[1](cls[0](**sizes)).to(torch.bfloat16)
    model.save_pretrained(snap)
    trained_tokenizer("qwen2" if family.startswith("qwen") else "smollm2").save(str(snap / "tokenizer.json"))


def measure_model(key: str, tokens: int) -> dict:
    """Load (time, bytes, peak RSS growth) and one untraced and one traced forward of `tokens` tokens."""
    from service import catalog
    from transformer_core import trace_text
    from transformer_core.model.memory import module_bytes

    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    model, card = catalog.load(key, "cpu")
    load_s = time.perf_counter() - start
    text = text_of_tokens(tokens, encoding=model.cfg.encoding)  # exactly `tokens` of the model's own tokens
    trace_text(model, text)  # warm
    start = time.perf_counter()
    prep, _ = trace_text(model, text)
    trace_s = time.perf_counter() - start
    params = sum(p.numel() for p in model.parameters())
    return {"key": key, "params": params, "model_mb": module_bytes(model) / 2**20, "load_s": load_s,
            "trace_s": trace_s, "tokens": int(prep.src_ids.size(1)),
            "rss_growth_mb": (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0) / 1024,
            "encoding": model.cfg.encoding}


def main(argv=None) -> int:
    p = parser(__doc__)
    p.add_argument("--models", nargs="+", default=["shipped:modern-gpt", "smollm2-135m", "qwen2.5-0.5b", "qwen3-0.6b"])
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--pages", nargs="+", default=None)
    args = p.parse_args(argv)
    home = Path(tempfile.mkdtemp(prefix="hf-stand-in-"))
    os.environ.update(HF_HOME=str(home), HF_HUB_OFFLINE="1")  # before huggingface_hub is imported
    setup_env(args.device)
    quiet_streamlit()
    import page_cost

    from harness.apptest import no_pages_dir_mode, page_files

    rows, pages, figures = [], [], []
    for name in args.models:
        key = name if ":" in name else f"hf:{name}"
        if name in configs():
            t0 = time.perf_counter()
            stand_in_cache(home, name)
            print(f"{name}: stand-in weights written in {time.perf_counter() - t0:.0f} s", flush=True)
        row = measure_model(key, args.tokens)
        rows.append(row)
        print(json.dumps(row), flush=True)
        figures += [figure(f"{key}: model in memory", round(row["model_mb"]), "MB"),
                    figure(f"{key}: load", round(row["load_s"], 2), "s"),
                    figure(f"{key}: traced forward @{args.tokens} tok", round(row["trace_s"], 3), "s")]
        with no_pages_dir_mode():
            for page in page_files():
                page_name = Path(page).stem.split("_", 1)[-1]
                if page_name == "train" or (args.pages and page_name not in args.pages):
                    continue
                got = page_cost.measure_page(page, args.tokens, 1 if args.quick else 2, key, row["encoding"])
                got["model"] = key
                pages.append(got)
                print(f"  {page_name:<12} first {got['first_s']:.2f} s  rerun {got['rerun_s']:.2f} s  "
                      f"errors {len(got['exceptions'])}", flush=True)
                target = BIG_PAGE_TARGET_S if name in ("qwen2.5-0.5b", "qwen3-0.6b") else PAGE_TARGET_S
                figures.append(figure(f"{key}: page {page_name} first visit @{args.tokens} tok",
                                      round(got["first_s"], 2), "s", target,
                                      note=f"{len(got['exceptions'])} exceptions" if got["exceptions"] else ""))
    print()
    print_table(("model", "params", "MB", "load s", "trace s"),
                [(r["key"], f"{r['params']:,}", f"{r['model_mb']:.0f}", f"{r['load_s']:.1f}", f"{r['trace_s']:.2f}")
                 for r in rows])
    write_result("modern", figures, models=rows, pages=pages, tokens=args.tokens, python=sys.version.split()[0])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
