"""Train and write every shipped model: a folder with its weights, config and model card.

    python -m transformer_core.train.build [--only NAME ...] [--out assets/models] [--cache DIR] [--threads N]
    python -m transformer_core.train.build --only everyday-gpt --recipe gpu --cache .corpora   (on a GPU machine)

The language models fetch their corpus from its package registry (Debian's bible-kjv-text, npm's chinese-poetry)
into --cache once; a rebuild is then offline. Fixed seeds: the same machine gives the same weights. A GPU is used
when there is one (the card names the device). Recipes are in train/defaults.py.
"""
from __future__ import annotations

import argparse
import shutil
import time
from dataclasses import replace
from functools import partial
from pathlib import Path

import numpy as np
import torch

from .cards import card_heads, heldout_loss, run_fields, task_card, text_card
from .checkpoint import save_checkpoint
from .defaults import SHIPPED_LMS, SHIPPED_TASKS, SHIPPED_TRANSLATION, described
from .loop import TrainResult, train
from .tasks import TASKS
from .vocab import encode_lines

COMMAND = "python -m transformer_core.train.build"
OUT = Path(__file__).resolve().parents[2] / "assets" / "models"
DEFAULT_MODEL = "everyday-gpt"  # the app opens on it: it reads everyday English and Chinese, no ⟨unk⟩


def fp16(model):
    """Round the weights through float16 (what ships: half the size), so the card measures the shipped model."""
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.half().float())
    return model


def save(name: str, out: Path, result: TrainResult, card: dict, dtype: str = "float32", command: str = "") -> dict:
    card = {"name": name, **card, "command": command or f"{COMMAND} --only {name}", "default": name == DEFAULT_MODEL}
    shutil.rmtree(out / name, ignore_errors=True)
    save_checkpoint(result.model.cpu(), out / name, card, dtype=dtype)
    return card


def generated(**fields) -> dict:
    """A card's corpus when a program writes the examples by rule: nothing downloaded, so no package, version, licence
    or hash; `fields` say what the program draws from (the name-mover demo's templates and names)."""
    return {"generated": True, **fields}


def build_task(name: str, out: Path, cache: str) -> dict:
    """A synthetic task model (copy, reverse, sort, repeat, count)."""
    result = train(SHIPPED_TASKS[name], progress(name))
    card = task_card(name, result) | {"order": 20 + list(SHIPPED_TASKS).index(name),
                                      "corpus": generated()}
    return save(name, out, result, card)


def progress(name: str):
    """Print the training loss every 100 steps (a build takes minutes), and the steps when a budget sets them."""
    start, planned = time.perf_counter(), [None]  # the steps planned so far

    def callback(p) -> None:
        if planned[0] not in (None, p.max_iters):
            print(f"  {name} fits {p.max_iters} steps in its time budget ({p.iteration} steps timed)", flush=True)
        planned[0] = p.max_iters
        if p.iteration % 100 == 0 or p.iteration == p.max_iters:
            print(f"  {name} step {p.iteration}/{p.max_iters} loss {p.loss:.3f} "
                  f"({time.perf_counter() - start:.0f} s)", flush=True)
    return callback


def build_subset(recipe: dict, cache: str) -> str:
    """Write the recipe's byte-fallback vocabulary (text/subset.py) to assets/encodings: the tokens of the base
    encoding that its training text uses most (each corpus counted by its sampling weight), merge-closed."""
    from collections import Counter

    from ..text import tokenizer
    from ..text.subset import choose_subset, words_and_characters, write_subset
    from .corpora import load_corpus
    from .corpus_data import DEFAULT_CACHE

    spec = recipe["subset"]
    tc = spec.get("chosen_by", recipe["config"])  # the recipe whose corpora choose it (kept when the mix changes)
    base = tokenizer.load_encoding(spec["base"])
    weights = tc.corpus_weights or (1.0,) * len(tc.corpus)
    counts: Counter = Counter()
    for corpus, weight in zip(tc.corpus, weights, strict=True):
        ids = encode_lines(base, load_corpus(corpus, Path(cache) if cache else DEFAULT_CACHE).train)
        share = weight / len(ids)
        for i, c in Counter(ids).items():
            counts[base.decode_single_token_bytes(i)] += c * share
    about = {"chosen_from": list(tc.corpus), "weights": list(weights), "command": f"{COMMAND} --only "
             + recipe["name"], "why": spec["why"]}
    if "chars" in spec:  # whole words and characters (text/subset.py: words_and_characters)
        chars, words, about["words_from"] = whole_units(tc, spec, cache)
        first_rank = max(base.max_token_value, *base._special_tokens.values()) + 1
        subset = words_and_characters(counts, base._mergeable_ranks, spec["size"], chars, words, first_rank)
        about["new_tokens"] = sum(r >= first_rank for r in subset.values())
    else:
        subset = choose_subset(counts, base._mergeable_ranks, spec["size"])
    write_subset(tokenizer.BUNDLED, spec["name"], subset, spec["base"], about)
    tokenizer._cache.pop(spec["name"], None)  # a rebuilt subset replaces one loaded earlier
    return spec["name"]


def whole_units(tc, spec: dict, cache: str) -> tuple[list[str], list[bytes], dict]:
    """What a words-and-characters vocabulary keeps whole: the `chars` most frequent Chinese characters of the
    recipe's corpora (each corpus counted by its weight), and the everyday English words of PyPI `wordfreq` (the
    `words` most frequent with a leading space, the `capitalised` most frequent also capitalised, with and without
    one); returns them and the word list's provenance."""
    from collections import Counter

    from .corpora import BLOCKED, load_corpus, load_word_list
    from .corpus_data import DEFAULT_CACHE

    folder = Path(cache) if cache else DEFAULT_CACHE
    chars: Counter = Counter()
    for corpus, weight in zip(tc.corpus, tc.corpus_weights or (1.0,) * len(tc.corpus), strict=True):
        text = load_corpus(corpus, folder).train
        for ch, n in Counter(c for c in text if "\u4e00" <= c <= "\u9fff").items():
            chars[ch] += n * weight / len(text)
    words, provenance = load_word_list(folder)
    words = [w for w in words if w.isascii() and w.isalpha() and not BLOCKED.search(w)]
    kept = ([f" {w}" for w in words[: spec["words"]]] + [f" {w.capitalize()}" for w in words[: spec["capitalised"]]]
            + [w.capitalize() for w in words[: spec["capitalised"]]])
    if spec.get("names"):  # the name-mover demo's names (train/ioi.py), with and without a space before them
        from .ioi import NAMES_EN, NAMES_ZH

        kept += [f" {n}" for n in NAMES_EN] + list(NAMES_EN)
    top = [c for c, _ in chars.most_common(spec["chars"])]
    if spec.get("names"):
        top += [c for n in NAMES_ZH for c in n if c not in top]
    return top, [w.encode() for w in kept], provenance


# A trial of the GPU recipe: TrainConfig field -> (its option here, type, help); the parser is built from it and the
# card's command names the options used, so the command on a card always repeats its run
TRIAL_OPTIONS = {
    "budget_s": ("--budget", float, "the GPU recipe's training seconds"),
    "max_iters": ("--steps", int, "the GPU recipe's steps (at most; its budget may stop it sooner)"),
    "device": ("--device", str, "the GPU recipe on another device (cpu)"),
    "batch_size": ("--batch", int, "the GPU recipe's rows per step"),
    "dropout": ("--dropout", float, "the GPU recipe's dropout"),
    "d_model": ("--d-model", int, "a wider model (d_model)"),
    "d_ffn": ("--d-ffn", int, "the FFN's hidden width"),
    "embed_std": ("--embed-std", float, "the embeddings' initial spread"),
}


def gpu_command(name: str, changes: dict) -> str:
    """The command that repeats a GPU build of `name` with these trial changes (README, Models)."""
    trial = "".join(f" {TRIAL_OPTIONS[k][0]} {v:g}" if isinstance(v, float) else f" {TRIAL_OPTIONS[k][0]} {v}"
                    for k, v in changes.items())
    return f"{COMMAND} --only {name} --recipe gpu --cache .corpora{trial}"


def build_lm(name: str, out: Path, cache: str, gpu: bool = False, **changes) -> dict:
    """A decoder-only language model on its corpus, measured on held-out text it never trained on (`gpu`: its GPU
    recipe, for a machine that has one; `changes`: TrainConfig fields for a trial (TRIAL_OPTIONS), e.g. a short
    budget or more steps)."""
    recipe = SHIPPED_LMS[name]
    tc = replace(recipe["gpu_config" if gpu else "config"], cache_dir=cache, **changes)
    if "subset" in recipe:
        tc = replace(tc, encoding=build_subset({"name": name, **recipe}, cache))
    result = train(tc, progress(name))
    model, data = fp16(result.model.cpu().eval()), result.data
    card = {"arch": "decoder_only", "description": described(name, tc.d_model, tc.n_layers),
            "example_src": recipe["example"],
            "example_tgt": "", "order": recipe["order"], **run_fields(result),
            "corpus": [{"package": p["package"], "version": p["version"], "licence": p["licence"],
                        **({"licence_zh": p["licence_zh"]} if "licence_zh" in p else {}),  # (none if packed before)
                        "sha256": p["train_sha256"], "registry": p["registry"]} for p in data.provenance]}
    by_corpus = {  # each language measured on its own held-out text, against baselines from its own training text
        corpus: text_card(model, train_ids, held_ids, tc.context, unk_id=data.vocab.unk)
        for corpus, train_ids, held_ids in zip(tc.corpus, data.streams["train"], data.streams["val"], strict=True)}
    card |= by_corpus[tc.corpus[0]]  # the headline figures: the first corpus (the English one when bilingual)
    if len(tc.corpus) > 1:
        card["by_corpus"] = by_corpus
    card["heads"] = card_heads(model, data.streams["val"][0], tc.context)
    card["everyday"] = everyday_report(model, tc, cache)
    if "summary" in recipe:
        card["summary"] = recipe["summary"]
    texts, card["heldout_sample"] = heldout_samples(model, data)
    card = save(name, out, result, card, dtype="float16",
                command=gpu_command(name, changes) if gpu else "")
    for corpus, text in texts.items():  # beside the weights (save() starts the folder afresh)
        (out / name / f"heldout_{corpus}.txt").write_text(text, encoding="utf-8")
    from ..analysis.neurons import index_folder

    index_folder(model, out / name)  # the FFN page's "read a neuron"
    return card


def everyday_report(model, tc, cache: str) -> dict:
    """The card's everyday figures (train/everyday.py); the trigram baselines from the corpora this model read."""
    from .corpora import load_corpus
    from .corpus_data import DEFAULT_CACHE
    from .everyday import report

    return report(model, {c: load_corpus(c, Path(cache) if cache else DEFAULT_CACHE).train for c in tc.corpus})


SAMPLE_TOKENS = 4096


def heldout_samples(model, data) -> tuple[dict[str, str], dict]:
    """The first lines of each corpus's held-out text (about SAMPLE_TOKENS tokens), shipped beside the weights with
    the model's loss on them: a test recomputes that loss and the heads' scores without the corpus download."""
    from ..text.tokenizer import load_encoding
    from .vocab import encode_lines, to_model_ids

    enc = load_encoding(model.cfg.encoding)
    texts, samples = {}, {}
    for corpus, heldout in data.heldout_texts.items():
        lines, n = [], 0
        for line in heldout.split("\n"):
            if n >= SAMPLE_TOKENS:
                break
            lines.append(line)
            n += len(encode_lines(enc, line + "\n"))
        texts[corpus] = "\n".join(lines) + "\n"
        ids = to_model_ids(data.vocab, encode_lines(enc, texts[corpus]))
        loss = heldout_loss(model, ids, data.context)
        samples[corpus] = {"tokens": int(len(ids) - 1), "heldout_loss": round(loss, 4)}
    return texts, samples


def build_translation(name: str, out: Path, cache: str) -> dict:
    """The English-to-Chinese dates and numbers model: exact match per stratum (exhaustive where it can be), and how
    well cross-attention aligns each output field with its source."""
    from ..analysis.alignment import date_alignment
    from .translation import PROVENANCE, exact_match, strata

    task = TASKS["dates"]
    result = train(SHIPPED_TRANSLATION, progress(name))
    model = fp16(result.model.cpu().eval())
    by_stratum = {k: exact_match(model, v) for k, v in strata().items()}
    for k, v in by_stratum.items():
        print(f"  {k:<36} {v['exact']:.4%} of {v['n']:,}", flush=True)
    held = task.splits[1]
    exact = exact_match(model, held)["exact"]  # every held-out value, greedy until EOS
    dates = [e for e in held if e.kind.startswith("date")][:: max(1, len(held) // 400)][:200]
    card = {"task": "dates", "arch": "encoder_decoder", "description": {"en": task.description,
                                                                         "zh": task.description_zh},
            "example_src": task.example.src, "example_tgt": task.example.tgt, "accuracy": exact,
            "accuracy_metric": task.metric, "exact_match": exact, "heldout_examples": len(held), "unk_rate": 0.0,
            "exact_by_stratum": {k: {f: v[f] for f in ("exact", "n", "wrong")} for k, v in by_stratum.items()},
            "cross_attention": date_alignment(model, [(e.src, "=" + e.tgt) for e in dates]),
            "domain": {k: PROVENANCE[k] for k in ("kinds", "years", "numbers", "split")},
            "order": 3, **run_fields(result),
            "corpus": generated()}
    return save(name, out, result, card, dtype="float16")


def build_names(name: str, out: Path, cache: str) -> dict:
    """The name-mover demo (train/ioi.py): trained on templated sentences, measured on held-out names and templates,
    its name-mover heads found with the app's head sweep (the card says which, per language)."""
    from . import ioi
    from .defaults import SHIPPED_IOI

    ioi.write_names_vocabulary()
    result = train(SHIPPED_IOI, progress(name))
    model = fp16(result.model.cpu().eval())
    save(name, out, result, task_card("ioi", result))  # the weights first: measuring the circuit takes minutes
    card = task_card("ioi", result) | {
        "order": 4, **names_circuit(model),
        "corpus": generated(templates=[len(ioi.TEMPLATES_EN), len(ioi.TEMPLATES_ZH)],
                            names=[len(ioi.NAMES_EN), len(ioi.NAMES_ZH)],  # (English, Chinese)
                            held_templates=[len(ioi.HELD_EN), len(ioi.HELD_ZH)])}
    return save(name, out, result, card, dtype="float16")


def names_circuit(model) -> dict:
    """The name-mover demo's measured card fields: its circuit (ioi.circuit_report) and the heads table."""
    from .ioi import circuit_report

    circuit = circuit_report(model, TASKS["ioi"])
    return {"circuit": circuit, "heads": ioi_heads(circuit)}


def measure_names(folder: Path) -> dict:
    """Measure the shipped name-mover demo's circuit again from its weights (no training) and rewrite its card."""
    from .checkpoint import load_checkpoint, write_card

    model, card = load_checkpoint(folder)
    card = {**card, **names_circuit(model.eval())}
    write_card(folder, card)
    return card


def ioi_heads(circuit: dict) -> list[dict]:
    """The card's heads table for the name-mover demo: every head with the share of the logit difference knocking it
    out removes (English and Chinese), labelled by the name it reads at the answer when its knock-out removes enough in
    both languages: a name mover reads the right name, a repeated-name head the repeated one (both: ioi.READS_NAMES)."""
    from .ioi import name_read, reads_a_name

    by = {lang: circuit["by_language"][lang]["heads"] for lang in ("en", "zh")}
    en, zh = (np.asarray(by[lang]["relative_change"]) for lang in ("en", "zh"))
    named = reads_a_name(by["en"]) & reads_a_name(by["zh"])
    read = {lang: name_read(heads) for lang, heads in by.items()}
    rows = []
    for layer in range(en.shape[0]):
        for head in range(en.shape[1]):
            removes = {"removes_en": round(float(-en[layer, head]), 3), "removes_zh": round(float(-zh[layer, head]), 3)}
            which = {read[lang][layer, head] for lang in by}  # the same name in both languages, or no label
            strong = min(removes.values()) >= NAME_MOVER_SHARE and named[layer, head] and len(which) == 1
            kind = {"answer": "name_mover", "repeated": "repeated_name"}[which.pop()] if strong else None
            rows.append({"layer": layer, "head": head, "kind": kind, "score": max(removes.values()), **removes})
    return rows


NAME_MOVER_SHARE = 0.2  # a head whose knock-out removes this share of the logit difference in both languages (and
# that reads a name at the answer in both: ioi.READS_NAMES) is labelled by the name it reads


def build_snapshots(name: str, out: Path, cache: str) -> dict:
    """The repeat task with snapshots along training (train/snapshots.py): watch an induction head form."""
    from .snapshots import RECIPE, measure, save_snapshots, schedule

    steps, states, measures = set(schedule(RECIPE.max_iters)), {}, {}
    log = progress(name)

    def keep(p) -> None:
        log(p)
        if p.iteration in steps:
            states[p.iteration] = {k: v.detach().cpu().half().clone() for k, v in p.model.state_dict().items()}
            was = p.model.training
            p.model.eval()
            measures[p.iteration] = measure(p.model)
            p.model.train(was)

    result = train(RECIPE, keep)
    card = task_card("repeat", result) | {"order": 30, "snapshots": len(states), "snapshot_steps": sorted(states),
                                          "description": {"en": "The repeat task, with 40 snapshots of its weights "
                                                          "along training: watch its induction head form (the Learn "
                                                          "page).", "zh": "重复任务，带训练途中的 40 个权重快照："
                                                          "看它的归纳头怎样形成（“看模型学习”页）。"},
                                          "corpus": generated()}
    card = save(name, out, result, card)
    save_snapshots(out / name, states, result.history.step_loss, measures)
    return card


BUILDERS = {**{n: build_lm for n in SHIPPED_LMS}, "dates-zh": build_translation, "name-movers": build_names,
            "induction-steps": build_snapshots,
            **{n: build_task for n in SHIPPED_TASKS}}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--only", nargs="*", choices=sorted(BUILDERS), default=None)
    parser.add_argument("--cache", default="", help="where corpus archives are kept (default ~/.cache/...)")
    parser.add_argument("--threads", type=int, default=0, help="CPU threads (0: torch's default)")
    parser.add_argument("--recipe", choices=("cpu", "gpu"), default="cpu",
                        help="gpu: the language models' GPU recipes (train/defaults.py; see README, Models)")
    parser.add_argument("--measure", action="store_true",
                        help="name-movers only: measure its circuit again from the shipped weights, no training")
    for field, (option, kind, why) in TRIAL_OPTIONS.items():
        parser.add_argument(option, dest=field, type=kind, default=None, help=f"a trial: {why}")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    builders = BUILDERS
    if args.measure:
        builders = {"name-movers": lambda name, out, cache: measure_names(out / name)}
        if args.only != ["name-movers"]:
            parser.error("--measure: name --only name-movers")
    if args.recipe == "gpu":
        changes = {k: getattr(args, k) for k in TRIAL_OPTIONS if getattr(args, k) is not None}
        builders = {n: partial(build_lm, gpu=True, **changes) for n, r in SHIPPED_LMS.items() if "gpu_config" in r}
        if not set(args.only or ()) <= set(builders) or not args.only:
            parser.error(f"--recipe gpu: name one of {sorted(builders)} with --only")
    start = time.perf_counter()
    for name in args.only or builders:
        t0 = time.perf_counter()
        card = builders[name](name, args.out, args.cache)
        shown = ", ".join(f"{k} {card[k]}" for k in ("accuracy", "exact_match", "heldout_loss", "bigram_loss",
                                                     "unk_rate") if isinstance(card.get(k), (int, float)))
        print(f"{name:<14} {time.perf_counter() - t0:7.1f} s  {shown}", flush=True)
    size = sum(f.stat().st_size for f in args.out.rglob("*") if f.is_file())
    print(f"total {time.perf_counter() - start:.1f} s, {size / 2**20:.2f} MB in {args.out}")


if __name__ == "__main__":
    main()
