"""Build the neuron index of a shipped language model from the held-out samples shipped beside its weights (no
corpus download, no training): each FFN neuron's top activations over that text, for the FFN page's "read a
neuron". Deterministic: the same weights and text give the same file.

    python -m transformer_core.train.neuron_index [--only everyday-gpt modern-gpt] [--models assets/models]
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from ..analysis.neurons import index_folder
from .build import OUT
from .checkpoint import load_checkpoint
from .defaults import SHIPPED_LMS


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=None, choices=sorted(SHIPPED_LMS))
    parser.add_argument("--models", type=Path, default=OUT)
    args = parser.parse_args(argv)
    for name in args.only or sorted(SHIPPED_LMS):
        folder = args.models / name
        start = time.perf_counter()
        model, _ = load_checkpoint(folder)
        path = index_folder(model, folder)
        print(f"{name}: {path.stat().st_size / 1024:.0f} kB in {time.perf_counter() - start:.1f} s", flush=True)


if __name__ == "__main__":
    main()
