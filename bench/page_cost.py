"""Each page's rerun time and the bytes it sends, at 16/64/256 tokens (AppTest, course-base preset).

    python bench/page_cost.py [--quick] [--device cpu|cuda] [--lengths 16 64 256] [--reruns 5] [--pages lens heads]
                              [--model shipped:everyday-gpt]

Per page and length: the first run on the page (trace computed unless another page already cached it), the
median of --reruns reruns once the trace is cached, the run after typing a new text of the same length
(trace computed), the bytes of plotly figure JSON the page sends (sum of each chart's spec) and the bytes of
every element. Source and target texts are exactly N tokens. Targets at 64 tokens: rerun < 0.5 s on every
page, attention page chart data < 1 MB.
"""
from __future__ import annotations

import time
from pathlib import Path

from common import (
    COURSE_BASE,
    TARGET_SENTENCE,
    figure,
    median,
    parser,
    print_table,
    quiet_streamlit,
    setup_env,
    text_of_tokens,
    write_result,
)

RERUN_TARGET_S = 0.5
CHART_TARGET_B = 1_000_000


def element_nodes(node):
    """Every element (leaf) of an AppTest tree."""
    children = getattr(node, "children", None)
    if children:
        for c in children.values():
            yield from element_nodes(c)
    elif getattr(node, "proto", None) is not None:
        yield node


def sizes(at) -> tuple[int, int, int]:
    """(plotly figure JSON bytes, number of charts, bytes of every element's proto) of the last run."""
    charts = at.get("plotly_chart")
    chart_bytes = sum(len(c.proto.spec.encode("utf-8")) for c in charts)
    total = 0
    for el in element_nodes(at._tree):
        try:
            total += el.proto.ByteSize()
        except AttributeError:
            pass
    return chart_bytes, len(charts), total


def timed_run(at) -> float:
    start = time.perf_counter()
    at.run()
    return time.perf_counter() - start


def measure_page(page: str, n: int, reruns: int, model: str = COURSE_BASE, encoding: str = "cl100k_base") -> dict:
    """`encoding`: the model's own tokenizer, so the texts are exactly n of its tokens."""
    from streamlit.testing.v1 import AppTest

    from harness.apptest import APP

    src, tgt = text_of_tokens(n, encoding=encoding), text_of_tokens(n, TARGET_SENTENCE, encoding=encoding)
    at = AppTest.from_file(APP, default_timeout=300)
    at.query_params.update(model=model, text=src, tgt=tgt, lang="en")
    at.run()
    at.switch_page(page)
    first = timed_run(at)
    times = [timed_run(at) for _ in range(reruns)]
    errors = [e.value for e in at.exception]
    chart_b, n_charts, total_b = sizes(at)
    row = {"page": Path(page).stem.split("_", 1)[-1], "tokens": n, "first_s": first, "rerun_s": median(times),
           "reruns_s": times, "chart_bytes": chart_b, "charts": n_charts, "element_bytes": total_b,
           "exceptions": errors}
    # a new text of the same length: the trace is computed again (what typing costs)
    new_src = text_of_tokens(n, f"On the {row['page']} page a learner typed this: {TARGET_SENTENCE}",
                             encoding=encoding)  # uncached
    if at.sidebar.text_area(key="text") is not None:
        at.sidebar.text_area(key="text").input(new_src)
        row["new_text_s"] = timed_run(at)
        row["exceptions"] += [e.value for e in at.exception]
    return row


def main(argv=None) -> int:
    p = parser(__doc__)
    p.add_argument("--lengths", nargs="+", type=int, default=None)
    p.add_argument("--reruns", type=int, default=None)
    p.add_argument("--pages", nargs="+", default=None, help="only these pages (names as in the table)")
    p.add_argument("--model", default=COURSE_BASE, help="a catalog key (default: the course-base preset)")
    args = p.parse_args(argv)
    setup_env(args.device)
    quiet_streamlit()
    from harness.apptest import no_pages_dir_mode, page_files

    lengths = args.lengths or ([64] if args.quick else [16, 64, 256])
    reruns = args.reruns or (3 if args.quick else 5)
    rows = []
    with no_pages_dir_mode():
        for page in page_files():
            if args.pages and Path(page).stem.split("_", 1)[-1] not in args.pages:
                continue
            for n in lengths:
                try:
                    row = measure_page(page, n, reruns, args.model)
                except Exception as exc:  # noqa: BLE001 - a broken page is a result, not a crash of the bench
                    row = {"page": Path(page).stem.split("_", 1)[-1], "tokens": n, "exceptions": [repr(exc)]}
                rows.append(row)
                print(f"{row['page']:<12} {n:4d} tok  rerun {row.get('rerun_s') or 0:.3f} s  first "
                      f"{row.get('first_s') or 0:.2f} s  new text {row.get('new_text_s') or 0:.2f} s  charts "
                      f"{row.get('charts', 0)} ({(row.get('chart_bytes') or 0) / 1e3:.0f} kB)  "
                      f"errors {len(row['exceptions'])}", flush=True)

    print()
    print_table(("page", "tokens", "rerun s", "first s", "new text s", "charts", "chart kB", "all kB", "errors"),
                [(r["page"], r["tokens"], f"{r.get('rerun_s') or 0:.3f}", f"{r.get('first_s') or 0:.2f}",
                  f"{r.get('new_text_s') or 0:.2f}", r.get("charts", "-"), f"{(r.get('chart_bytes') or 0) / 1e3:.0f}",
                  f"{(r.get('element_bytes') or 0) / 1e3:.0f}", len(r["exceptions"])) for r in rows])
    figures = []
    at64 = [r for r in rows if r["tokens"] == 64]
    for r in at64:
        figures.append(figure(f"page {r['page']}: rerun @64 tok", r.get("rerun_s"), "s", RERUN_TARGET_S,
                              note=f"{len(r['exceptions'])} exceptions" if r["exceptions"] else ""))
    for r in at64:
        if r["page"] == "attention":
            figures.append(figure("page attention: chart data @64 tok", r.get("chart_bytes"), "B", CHART_TARGET_B))
    biggest = max((r for r in rows if r.get("chart_bytes") is not None), key=lambda r: r["chart_bytes"], default=None)
    if biggest:
        figures.append(figure("largest chart data (any page, any length)", biggest["chart_bytes"], "B",
                              note=f"{biggest['page']} @{biggest['tokens']} tok"))
    slowest = max((r for r in rows if r.get("rerun_s") is not None), key=lambda r: r["rerun_s"], default=None)
    if slowest:
        figures.append(figure("slowest rerun (any page, any length)", slowest["rerun_s"], "s",
                              note=f"{slowest['page']} @{slowest['tokens']} tok"))
    for r in (r for r in rows if r["tokens"] == 128):  # the default model's context: each page's first visit
        figures.append(figure(f"page {r['page']}: first visit @128 tok", r.get("first_s"), "s", 2.0))
    errors = sum(len(r["exceptions"]) for r in rows)
    figures.append(figure("page exceptions", errors, "", 0, "<="))
    write_result("page_cost", figures, rows=rows, lengths=lengths, reruns=reruns, model=args.model)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
