"""Train and write the shipped checkpoints (deterministic: fixed seed, CPU, one thread).

    python -m transformer_core.make_assets [--out assets/checkpoints] [--only copy reverse ...]
"""
from __future__ import annotations

import argparse
import random
import time
from dataclasses import replace
from pathlib import Path

import torch

from . import corpus
from .alignment import alignment_mass
from .checkpoint import save_checkpoint
from .tasks import TASKS, SeqToSeqTask
from .training import TrainConfig, TrainResult, describe, estimate_loss, make_data, train

COMMAND = "python -m transformer_core.make_assets"
SEED = 0
OUT = Path(__file__).resolve().parents[1] / "assets" / "checkpoints"
ACCURACY_N, ACCURACY_SEED = 512, 99

TASK_BASE = TrainConfig(batch_size=64, d_model=64, n_layers=2, n_heads=4, dropout=0.0, eval_interval=100,
                        eval_iters=4, lr_schedule="cosine", seed=SEED, device="cpu")
SEQ2SEQ_BASE = replace(TASK_BASE, d_model=128, d_ffn=512, lr=3e-3)  # wider: sharper cross-attention maps
PLANS: dict[str, TrainConfig] = {
    "copy": replace(SEQ2SEQ_BASE, task="copy", max_iters=600),
    "reverse": replace(SEQ2SEQ_BASE, task="reverse", max_iters=1500),
    "sort": replace(SEQ2SEQ_BASE, task="sort", max_iters=2000),
    "repeat": replace(TASK_BASE, task="repeat", max_iters=1500),
    "count": replace(TASK_BASE, task="count", max_iters=1000),
    # the course's small GPT (doc 003 hyper-parameters) on the project's own text
    "corpus-gpt": TrainConfig(text=corpus.TEXT, max_iters=2000, seed=SEED, device="cpu"),
}


DEFAULT_MODEL = "reverse"  # cross-attention shows a learned anti-diagonal at first sight


def task_meta(name: str, result: TrainResult) -> dict:
    """Meta for a task checkpoint: descriptions, examples, accuracy on fresh examples, alignment."""
    task = TASKS[name]
    meta = {
        "task": name, "arch": task.arch, "description": {"en": task.description, "zh": task.description_zh},
        "example_src": task.example.src, "example_tgt": task.example.tgt,
        "accuracy": round(task.accuracy(result.model, n=ACCURACY_N, seed=ACCURACY_SEED), 4),
        "accuracy_metric": task.metric, "accuracy_examples": ACCURACY_N, "accuracy_seed": ACCURACY_SEED,
        "default": name == DEFAULT_MODEL,  # the app opens on this one
    }
    if isinstance(task, SeqToSeqTask):
        meta["answer_steps"] = "as many tokens as the input has"
        meta["cross_attention_alignment"] = alignment_mass(result.model, task)  # per decoder layer
    return meta


def lm_meta(result: TrainResult) -> dict:
    """Meta for the corpus language model: next-token accuracy and loss on each split."""
    data = make_data(result.config)
    acc = {s: next_token_accuracy(result.model, data.splits[s], result.config.context) for s in data.splits}
    loss = estimate_loss(result.model, data, replace(result.config, eval_iters=50), "cpu")
    return {
        "task": "corpus-gpt", "arch": "decoder_only",
        "description": {"en": "The course's small GPT trained on a short text about Transformers written for "
                              "this project (English and Chinese).",
                        "zh": "课程里的小 GPT，在本项目自己写的一小段介绍 Transformer 的文字（英文和中文）上训练。"},
        "example_src": corpus.EXAMPLE_PROMPT, "example_tgt": "",
        "accuracy": round(acc["val"], 4), "accuracy_metric": "next-token accuracy on the validation split "
        "(the last 20% of the text, never trained on)", "train_accuracy": round(acc["train"], 4),
        "train_loss": round(loss["train"], 4), "val_loss": round(loss["val"], 4), "tokens": data.n_tokens,
    }


@torch.no_grad()
def next_token_accuracy(model, data: torch.Tensor, context: int) -> float:
    """Argmax next-token accuracy over consecutive windows of a split."""
    starts = range(0, len(data) - context, context)
    x = torch.stack([data[i : i + context] for i in starts])  # (N, T)
    y = torch.stack([data[i + 1 : i + context + 1] for i in starts])  # (N, T)
    return float((model(x).argmax(-1) == y).float().mean())


def make(name: str, out: Path) -> dict:
    """Train one plan, write OUT/name.pt + .json, return its meta."""
    tc = PLANS[name]
    random.seed(SEED)
    start = time.perf_counter()
    result = train(tc)
    meta = task_meta(name, result) if tc.task else lm_meta(result)
    meta |= {"iterations": result.iterations, "seed": tc.seed, "command": COMMAND, "train_config": describe(tc),
             "final_train_loss": round(sum(result.history.step_loss[-50:]) / 50, 5)}
    save_checkpoint(result.model, out / name, meta)
    print(f"{name:<11} {time.perf_counter() - start:6.1f} s  accuracy {meta['accuracy']:.4f}"
          + (f"  alignment {meta['cross_attention_alignment']}" if "cross_attention_alignment" in meta else ""),
          flush=True)
    return meta


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--only", nargs="*", choices=sorted(PLANS), default=None)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # same reduction order on every machine: the same weights
    start = time.perf_counter()
    for name in args.only or PLANS:
        make(name, args.out)
    size = sum(f.stat().st_size for f in args.out.iterdir() if f.is_file())
    print(f"total {time.perf_counter() - start:.1f} s, {size / 2**20:.2f} MB in {args.out}")


if __name__ == "__main__":
    main()
