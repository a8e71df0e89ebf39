"""The dates-and-numbers translator, exact match per stratum: every number 0–9,999 in digits and in words, every date
1900–2099 in both English forms and every number 10,000–99,999 in both forms (exhaustive), and the held-out values;
then the cross-attention alignment of output date fields with their source tokens.

    python bench/translation.py [--model dates-zh] [--quick]

--quick skips the two exhaustive date strata and reads 2,000 drawn five-digit numbers per form instead of all 90,000
(the whole table is about 330,000 translations, several minutes on a CPU).
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from common import figure, parser, print_table, setup_env, write_result  # noqa: E402


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--model", default="dates-zh")
    args = p.parse_args()
    setup_env(args.device)
    from transformer_core.analysis.alignment import date_alignment
    from transformer_core.train.build import OUT
    from transformer_core.train.checkpoint import load_checkpoint
    from transformer_core.train.tasks import TASKS
    from transformer_core.train.translation import exact_match, strata

    model, card = load_checkpoint(OUT / args.model)
    model.eval()
    rows, figures, found = [], [], {}
    for name, examples in strata(2000 if args.quick else None).items():
        if args.quick and "(all)" in name and name.startswith("dates,"):
            continue
        t0 = time.perf_counter()
        r = exact_match(model, examples)
        found[name] = r
        rows.append((name, f"{r['n']:,}", f"{r['exact']:.4%}", r["wrong"], f"{time.perf_counter() - t0:.1f} s",
                     "; ".join(f"{s} → {g} (not {w})" for s, g, w in r["examples_wrong"][:2])))
        target = 1.0 if "0–9,999" in name else 0.999
        figures.append(figure(f"exact match, {name}", r["exact"], "", target, ">="))
    print_table(("stratum", "inputs", "exact", "wrong", "time", "first wrong"), rows)
    held = TASKS["dates"].splits[1]
    dates = [e for e in held if e.kind.startswith("date")][:: max(1, len(held) // 400)][:200]
    align = date_alignment(model, [(e.src, "=" + e.tgt) for e in dates])
    print(f"\ncross-attention: layer {align['layer']} head {align['head']} puts its strongest weight on the matching "
          f"source field for {align['score']:.1%} of {align['tokens']} output date tokens ({align['dates']} dates)")
    figures.append(figure("cross-attention alignment, best head", align["score"], "", 0.9, ">="))
    write_result("translation", figures, model=args.model, strata=found, alignment=align,
                 card_exact_by_stratum=card.get("exact_by_stratum"))


if __name__ == "__main__":
    main()
