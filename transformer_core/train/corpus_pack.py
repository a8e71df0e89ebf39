"""Cleaned corpora packed into a few small files, for a machine that cannot reach the package registries.

    python -m transformer_core.train.corpus_pack --out .corpora [--only everyday-gpt] [--cache DIR]

The registry archives are large (chinese-poetry alone is 85 MB), and a GPU machine that runs a training may reach no
network and take little beside the repository (64 MiB where the default was trained); the cleaned train / held-out texts
a recipe reads are a few MB compressed. `load_corpus(name, folder)` reads `folder/NAME.corpus.xz` when it is there,
checks the texts against the sha256 the provenance recorded when they were cleaned, and never fetches. Pass the folder
as the build's --cache. The folder is a cache: never commit it (it is in .gitignore).
"""
from __future__ import annotations

import argparse
from pathlib import Path

from .corpora import load_corpus, write_packed


def pack(names: list[str], cache: Path, out: Path) -> list[Path]:
    """Load each corpus from the registry cache (fetching it once) and write it packed to `out`."""
    return [write_packed(load_corpus(n, cache), out) for n in names]


def main(argv: list[str] | None = None) -> None:
    from .corpus_data import DEFAULT_CACHE
    from .defaults import SHIPPED_LMS

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="the folder to write (give it to the build's --cache)")
    parser.add_argument("--only", nargs="*", choices=sorted(SHIPPED_LMS), default=None,
                        help="the language models whose corpora to pack (default: every one)")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="where the registry archives are kept")
    args = parser.parse_args(argv)
    names = sorted({c for m in (args.only or SHIPPED_LMS) for c in SHIPPED_LMS[m]["config"].corpus})
    for path in pack(names, args.cache, args.out):
        print(f"{path}  {path.stat().st_size / 2**20:.2f} MB")


if __name__ == "__main__":
    main()
