"""How the default model reads everyday text (written for this project, in no training text): unknown tokens, bits
per UTF-8 byte and top-1 next-token accuracy per group, beside an interpolated Kneser-Ney trigram over cl100k_base
built from the same training text; how whole its tokens are (English words, Chinese characters); how well it copies
a sentence or a list it has just read, and a word of its vocabulary put in a short sentence written twice; the
detected heads; greedy continuations in English and Chinese; and the name-mover demo's figures on held-out names
and templates. Prints every target with PASS / MISS.

    python bench/everyday.py [--model NAME] [--cache DIR] [--write-card] [--no-names]

The trigram needs the training corpora (fetched by `python -m transformer_core.train.build`, kept in the cache);
without them it is left out. --write-card stores the figures in the model's card (what the Model page shows).
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from common import figure, parser, print_table, setup_env, write_result  # noqa: E402


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--model", default="", help="a shipped model (default: the app's default)")
    p.add_argument("--cache", default="", help="where the build keeps the corpus archives")
    p.add_argument("--write-card", action="store_true", help="store the figures in the model's card")
    p.add_argument("--no-names", action="store_true", help="leave out the name-mover demo's figures")
    args = p.parse_args()
    setup_env(args.device)
    from transformer_core.train.build import DEFAULT_MODEL, OUT
    from transformer_core.train.checkpoint import load_checkpoint
    from transformer_core.train.corpora import CorpusError, load_corpus
    from transformer_core.train.corpus_data import DEFAULT_CACHE
    from transformer_core.train.everyday import BASELINE_CORPORA, TARGETS, report, vocabulary_shares

    name = args.model or DEFAULT_MODEL
    model, card = load_checkpoint(OUT / name)
    model.eval()
    cache = Path(args.cache) if args.cache else DEFAULT_CACHE
    t0 = time.perf_counter()
    try:
        names = set(card["train_config"]["corpus"]) | {c for cs in BASELINE_CORPORA.values() for c in cs}
        train = {n: load_corpus(n, cache).train for n in sorted(names)}
    except (CorpusError, KeyError) as exc:
        print(f"no training text ({exc}): the trigram baseline is left out")
        train = None
    rep = report(model, train)
    seconds = time.perf_counter() - t0
    tri = rep.get("trigram_bits_per_byte", {})
    rows = [(g, f["tokens"], f["unknown"], f"{f['bits_per_byte']:.3f}", f"{f['top1']:.1%}",
             f"{tri[g]:.3f}" if g in tri else "—") for g, f in rep["groups"].items()]
    print(f"{name}: everyday text ({', '.join(f'{k} {v}' for k, v in rep['texts'].items())} texts)")
    print_table(("group", "tokens", "unknown", "bits/byte", "top-1", "KN trigram bits/byte"), rows)
    conts = [rep["continuation"], rep["continuation_zh"]]
    for cont in conts:
        print(f"greedy: {cont['prompt']!r} -> {cont['text']!r} (a token at most {cont['most_repeats']}×)")
    copy, shares = rep["copy"], rep["vocabulary"]
    for enc, sh in ((model.cfg.encoding, shares), ("cl100k_2k", vocabulary_shares("cl100k_2k"))):
        print(f"{enc}: English words one token {sh['english_words_one_token']:.1%}, Chinese characters whole "
              f"{sh['chinese_characters_whole']:.1%}")
    print("\ncopying a text it has just read (the words of the second copy):")
    print_table(("texts", "words", "top-1", "median p"), [(g, f["words"], f"{f['top1']:.1%}", f"{f['median_p']:.3f}")
                                                       for g, f in copy.items() if g != "cat"])
    slots = rep["slots"]  # (report measured them)
    print("\na word of the vocabulary put in a frame written twice (no target: a learner's own short sentence):")
    print_table(("frame", "words", "top-1", "median p"), [(repr(f["frame"].replace("{}", "___")), f["words"],
                                                         f"{f['top1']:.1%}", f"{f['median_p']:.3f}")
                                                        for f in slots.values()])
    cat = copy["cat"]
    from transformer_core.text.tokenizer import load_encoding

    enc = load_encoding(model.cfg.encoding)
    pieces = [enc.decode([i]) for i in enc.encode(cat["answer"])]  # the report ranks the answer's first token
    first = pieces[0] if len(pieces) > 1 else cat["answer"]
    print(f"{cat['prompt']!r} -> {cat['answer']!r} ({' | '.join(map(repr, pieces))}): {first!r} rank {cat['rank']}, "
          f"p {cat['p']:.3f}")
    heads = card.get("heads", [])
    best = {k: max((h[k] for h in heads), default=0.0) for k in ("previous_token", "induction")}
    figures = [figure("unknown tokens, all everyday text", sum(f["unknown"] for f in rep["groups"].values()),
                      "", 1, "<")]
    for g, tgt in TARGETS.items():
        f = rep["groups"][g]
        figures += [figure(f"{g} bits per byte", f["bits_per_byte"], "", tgt["bits_per_byte"], "<="),
                    figure(f"{g} top-1", f["top1"], "", tgt["top1"], ">=")]
        if g in tri:
            figures.append(figure(f"{g} bits per byte below its KN trigram", f["bits_per_byte"], "", tri[g], "<"))
    for corpus, f in card.get("by_corpus", {}).items():
        figures.append(figure(f"{corpus} held-out loss below bigram", f["heldout_loss"], "nats", f["bigram_loss"]))
    figures += [figure("best previous-token head (card)", best["previous_token"], "", 0.4, ">="),
                figure("best induction head (card)", best["induction"], "", 0.5, ">="),
                *(figure(f"greedy continuation ({c['prompt']}): most repeats of a token", c["most_repeats"], "", 3,
                         "<") for c in conts),
                figure("English words that are one token", shares["english_words_one_token"], "",
                       rep["vocabulary_targets"]["english_words_one_token"], ">="),
                figure("Chinese characters never cut into byte pieces", shares["chinese_characters_whole"], "",
                       rep["vocabulary_targets"]["chinese_characters_whole"], ">=")]
    for g, f in copy.items():
        if g != "cat":
            figures += [figure(f"copy, {g}: top-1", f["top1"], "", rep["copy_targets"]["top1"], ">="),
                        figure(f"copy, {g}: median p", f["median_p"], "", rep["copy_targets"]["median_p"], ">=")]
    figures.append(figure(f"the cat sentence: rank of {first!r}" + (f", the first of {len(pieces)} tokens of "
                          f"{cat['answer']!r}" if len(pieces) > 1 else ""), cat["rank"], "", 1, "<="))
    if len(pieces) > 1:
        figures.append(figure(f"the cat sentence: {cat['answer']!r} is one token", len(pieces), "", 1, "<="))
    from transformer_core import prepare
    from transformer_core.analysis.next_word import next_words

    words = next_words(model, prepare(model, cat["prompt"]).src_ids[0].tolist(), top=5)  # the Logits page's table
    print(f"next words (the Logits page): {', '.join(f'{w.text!r} {w.prob:.3f}' for w in words)}")
    figures.append(figure(f"the cat sentence: rank of the word {cat['answer']!r} among the next words (pieces joined)",
                          next((k + 1 for k, w in enumerate(words) if w.text == cat["answer"]), 99), "", 1, "<="))
    if not args.no_names:
        figures += names_figures()
    if train:
        figures.append(figure("everyday lines found in training text", len(rep["found_in_training"]), "", 1, "<"))
    write_result("everyday", figures, model=name, report=rep, seconds=round(seconds, 1))
    if args.write_card:
        path = OUT / name / "card.json"
        data = json.loads(path.read_text(encoding="utf-8"))
        data["everyday"] = rep
        path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"wrote the figures into {path.relative_to(ROOT)}")


def names_figures() -> list[dict]:
    """The name-mover demo on held-out names and templates (recomputed from its weights) and its card's circuit."""
    import numpy as np

    from transformer_core.train.build import OUT
    from transformer_core.train.checkpoint import load_checkpoint
    from transformer_core.train.ioi import NAME_TARGETS
    from transformer_core.train.tasks import TASKS

    if not (OUT / "name-movers" / "config.json").is_file():
        print("no name-movers model: its figures are left out")
        return []
    model, card = load_checkpoint(OUT / "name-movers")
    task, out = TASKS["ioi"], []
    for lang in ("en", "zh"):
        d = task.logit_diffs(model, task.held_out(200, 77, lang))
        heads = card["circuit"]["by_language"][lang]["heads"]
        out += [figure(f"names ({lang}, held out): right name wins", float((d > 0).mean()), "",
                       NAME_TARGETS["right_name_wins"], ">="),
                figure(f"names ({lang}, held out): mean logit difference", float(np.mean(d)), "",
                       NAME_TARGETS["mean_logit_diff"], ">="),
                figure(f"names ({lang}): knocking out the top head (layer {heads['top'][0]} head {heads['top'][1]}) "
                       "removes", heads["top_removes"], "", NAME_TARGETS["top_head_removes"], ">=")]
    return out


if __name__ == "__main__":
    main()
