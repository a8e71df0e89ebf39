"""How the default model reads everyday text (written for this project, in no training text): unknown tokens, bits
per UTF-8 byte and top-1 next-token accuracy per group, beside an interpolated Kneser-Ney trigram over cl100k_base
built from the same training text; the detected heads; a greedy continuation. Prints the issue's targets.

    python bench/everyday.py [--model NAME] [--cache DIR] [--write-card]

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
    args = p.parse_args()
    setup_env(args.device)
    from transformer_core.train.build import DEFAULT_MODEL, OUT
    from transformer_core.train.checkpoint import load_checkpoint
    from transformer_core.train.corpora import CorpusError, load_corpus
    from transformer_core.train.corpus_data import DEFAULT_CACHE
    from transformer_core.train.everyday import BASELINE_CORPORA, TARGETS, report

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
    cont = rep["continuation"]
    print(f"\ngreedy: {cont['prompt']!r} -> {cont['text']!r} (a token at most {cont['most_repeats']}×)")
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
                figure("greedy continuation: most repeats of a token", cont["most_repeats"], "", 3, "<")]
    if train:
        figures.append(figure("everyday lines found in training text", len(rep["found_in_training"]), "", 1, "<"))
    write_result("everyday", figures, model=name, report=rep, seconds=round(seconds, 1))
    if args.write_card:
        path = OUT / name / "card.json"
        data = json.loads(path.read_text(encoding="utf-8"))
        data["everyday"] = rep
        path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"wrote the figures into {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
