"""Cleaned corpora packed into a few small files, for a machine that cannot reach the package registries.

    python -m transformer_core.train.corpus_pack --out .corpora [--only everyday-gpt] [--cache DIR]

The registry archives are large (chinese-poetry alone is 85 MB), and a GPU machine that runs a training may reach no
network and take little beside the repository (64 MiB where the default was trained); the cleaned train / held-out texts
a recipe reads are a few MB compressed. `load_corpus(name, folder)` reads `folder/NAME.corpus.xz` when it is there,
checks the texts against the sha256 the provenance recorded when they were cleaned, and never fetches. Pass the folder
as the build's --cache. The folder is a cache: never commit it (it is in .gitignore).

Beside the corpora go the other things a recipe reads from outside the working tree: the word list a
words-and-characters vocabulary keeps whole (its one file, not the 56 MB wheel) and the model a recipe starts from
when git keeps it (`git:COMMIT:PATH`, written to `bases/`, where the build looks first: a machine given the working
tree has no git history).
"""
from __future__ import annotations

import argparse
from pathlib import Path

from .corpora import WORDS_PACKED, load_corpus, word_list_file, write_packed
from .transfer import base_folder


def pack(names: list[str], cache: Path, out: Path) -> list[Path]:
    """Load each corpus from the registry cache (fetching it once) and write it packed to `out`."""
    return [write_packed(load_corpus(n, cache), out) for n in names]


def pack_extras(models: list[str], cache: Path, out: Path) -> list[Path]:
    """The word list (where a model's vocabulary keeps everyday words whole) and the git-kept models the recipes
    (CPU and GPU) start from, written to `out`."""
    from .defaults import SHIPPED_LMS

    recipes = [SHIPPED_LMS[m] for m in models]
    paths = []
    if any("words" in r.get("subset", {}) for r in recipes):
        out.mkdir(parents=True, exist_ok=True)
        (out / WORDS_PACKED).write_bytes(word_list_file(cache)[0])
        paths.append(out / WORDS_PACKED)
    starts = {c.init_from for r in recipes for c in (r["config"], r.get("gpu_config")) if c and c.init_from}
    for start in sorted(s for s in starts if s.startswith("git:")):
        paths += sorted(base_folder(start, out).iterdir())
    return paths


def main(argv: list[str] | None = None) -> None:
    from .corpus_data import DEFAULT_CACHE
    from .defaults import SHIPPED_LMS

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="the folder to write (give it to the build's --cache)")
    parser.add_argument("--only", nargs="*", choices=sorted(SHIPPED_LMS), default=None,
                        help="the language models whose corpora to pack (default: every one)")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="where the registry archives are kept")
    args = parser.parse_args(argv)
    models = args.only or sorted(SHIPPED_LMS)
    names = sorted({c for m in models for c in SHIPPED_LMS[m]["config"].corpus})
    for path in pack(names, args.cache, args.out) + pack_extras(models, args.cache, args.out):
        print(f"{path}  {path.stat().st_size / 2**20:.2f} MB")


if __name__ == "__main__":
    main()
