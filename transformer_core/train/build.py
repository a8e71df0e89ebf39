"""Train and write the shipped models, each a folder with its weights, config and model card.

    python -m transformer_core.train.build [--out assets/models] [--only reverse copy ...]

Deterministic: fixed seeds, the CPU, one thread.
"""
from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path

import torch

from .cards import task_card
from .checkpoint import save_checkpoint
from .defaults import SHIPPED_TASKS
from .loop import train

COMMAND = "python -m transformer_core.train.build"
OUT = Path(__file__).resolve().parents[2] / "assets" / "models"


def build_task(name: str, out: Path) -> dict:
    """Train one task model, write OUT/name, return its card."""
    result = train(SHIPPED_TASKS[name])
    card = task_card(name, result) | {"command": f"{COMMAND} --only {name}"}
    shutil.rmtree(out / name, ignore_errors=True)
    save_checkpoint(result.model, out / name, card)
    return card


BUILDERS = {name: build_task for name in SHIPPED_TASKS}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--only", nargs="*", choices=sorted(BUILDERS), default=None)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # same reduction order on every machine: the same weights
    start = time.perf_counter()
    for name in args.only or BUILDERS:
        t0 = time.perf_counter()
        card = BUILDERS[name](name, args.out)
        print(f"{name:<14} {time.perf_counter() - t0:7.1f} s  " + ", ".join(
            f"{k} {card[k]}" for k in ("accuracy", "exact_match", "heldout_loss", "bigram_loss") if k in card),
            flush=True)
    size = sum(f.stat().st_size for f in args.out.rglob("*") if f.is_file())
    print(f"total {time.perf_counter() - start:.1f} s, {size / 2**20:.2f} MB in {args.out}")


if __name__ == "__main__":
    main()
