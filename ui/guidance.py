"""“What to look for”: two lines per view, written from what this model actually shows on this text."""
from __future__ import annotations

from collections import Counter

import streamlit as st

from service import catalog

from .figures import md_quoted, prob_text
from .i18n import t
from .model_choice import try_example
from .state import viewer
from .widgets import count_text


def look_for(key: str, **params) -> None:
    """A short box: what to look for in the view below (the string `look_<key>`, filled with live numbers)."""
    st.info(t(f"look_{key}", **params), icon="👀")


def attention_hint(records: list, random_init: bool) -> None:
    """Name the clearest heads of the shown layer and block, or say that random weights show no pattern."""
    if random_init:
        look_for("attention_random")
        return
    best = sorted((r for r in records if r.labels), key=lambda r: -r.strength)[:2]
    if not best:
        look_for("attention_none")
        return
    heads = t("look_list_sep").join(t("look_head", layer=r.layer, head=r.head, kind=t("head_kind_" + r.strongest),
                                      score=r.strength) for r in best)
    look_for("attention", heads=heads)


def lens_hint(lens, rows: list[str], total: int) -> None:
    """Where the final answer settles on this text (how many positions per row) and how its probability rises;
    of a lens of a window of the text (`total` positions), says that its counts are the window's."""
    n = len(lens.labels)
    scope = t("look_lens_scope_all") if n == total else t("look_lens_scope_window", n=n, lo=lens.first,
                                                           hi=lens.first + n - 1, total=total)
    settled = Counter(lens.settled_rows().tolist())  # row -> positions
    where = t("look_list_sep").join(count_text("look_lens_at", settled[r], row=rows[r]) for r in sorted(settled))
    rise = " → ".join(f"{float(p):.2f}" for p in lens.final_prob.mean(dim=1))
    look_for("lens", scope=scope, where=where, rise=rise)


def heads_hint(records: list, threshold: float, name) -> None:
    """The clearest head of each pattern on this text (`name(record)` names a head), and the induction pair when
    this model shows one: induction heads with a previous-token head in an earlier layer."""
    best = {}  # pattern -> the head with the highest score of it among heads labelled so
    for k, rec in sorted(((k, r) for r in records for k in r.labels), key=lambda kr: -kr[1].scores[kr[0]]):
        best.setdefault(k, rec)
    if not best:  # no label: name the head with the highest score of any pattern
        def score(r) -> float:
            return max((v for v in r.scores.values() if v is not None), default=0.0)

        top = max(records, key=score, default=None)
        look_for("heads_none", thr=threshold, head=name(top) if top else "—", score=score(top) if top else 0.0)
        return
    heads = t("look_list_sep").join(t("look_named_head", head=name(r), kind=t(f"hd_pat_{k}"), score=r.scores[k])
                                    for k, r in best.items())
    induction = sorted({r.layer for r in records if "induction" in r.labels})
    previous = sorted({r.layer for r in records if "previous_token" in r.labels and r.kind == "dec_self"})
    pair = ""
    if induction and previous and previous[0] < induction[-1]:
        pair = t("look_heads_pair", ind=layers_phrase(induction), prev=layers_phrase(previous))
    look_for("heads", heads=heads, pair=pair)


def layers_phrase(layers: list[int]) -> str:
    """"layer 1", "layers 0 and 1", "layers 0, 1 and 2" (第 0、1 和 2 层)."""
    if len(layers) == 1:
        return t("layers_one", n=layers[0])
    return t("layers_many", first=t("layers_sep").join(map(str, layers[:-1])), last=layers[-1])


def ffn_hint(steps: list, names: list[str], mean, pre_norm: bool) -> None:
    """The sub-layer that writes the most into the residual stream (the largest mean ‖added‖); in a pre-norm model,
    how the stream's mean length (`mean`, the page's chart: one value per step) moved (it mostly grows, but a
    sub-layer may shrink it: the hint says which)."""
    biggest = max((i for i, s in enumerate(steps) if s.added is not None), key=lambda i: float(steps[i].added.mean()),
                  default=None)
    if biggest is None:
        return
    added = f"{float(steps[biggest].added.mean()):.1f}"  # the bar chart's value: what the hint names is a write
    if not pre_norm:
        look_for("ffn", step=names[biggest], added=added)
        return
    falls = int(sum(b < a for a, b in zip(mean, mean[1:])))
    look_for("ffn_pre_falls" if falls else "ffn_pre", step=names[biggest], added=added, first=f"{mean[0]:.1f}",
             last=f"{mean[-1]:.1f}", n=falls, m=len(mean) - 1)


def sinks_hint(every: list, name, threshold: float, small: float) -> None:
    """Which head parks the most weight on the first token here, and how to tell parked from used weight; nothing
    when no head passes the threshold (the page then says that no head is a sink, and why). `small`: the KL and loss
    change below which the page's verdict calls the weight parked."""
    if every and every[0].first_weight > threshold:
        look_for("sinks", head=name(every[0]), weight=every[0].first_weight, small=f"{small:g}")


def try_these(key: str, *examples: dict) -> None:
    """A page's suggested experiments (the string `try_<key>`: figures measured on the models it names), with one
    button per example that loads its model and texts (ui.model_choice.try_example's arguments)."""
    st.caption(t(f"try_{key}"))
    shown = [ex for ex in examples if catalog.entry(ex["model"], viewer()) is not None]
    for col, (i, ex) in zip(st.columns(max(len(shown), 3)), enumerate(shown)):
        name = catalog.entry(ex["model"], viewer()).label
        col.button(t("try_it", model=name), key=f"try_{key}_{i}", on_click=try_example, kwargs=ex,
                   icon=":material/science:", help=t("try_it_help", text=ex["text"]))


def surprise_hint(sur) -> None:
    """The most and the least surprising token of this text, each with its position (one token can be both, at two
    places), what the model expected instead of the worst, and what the mean loss averages."""
    worst, best = sur.extremes()  # positions 1..T-1: entry position - 1 of the arrays
    look_for("surprise", worst=md_quoted(sur.labels[worst]), wp=worst, pw=prob_text(sur.prob[worst - 1]),
             bw=float(sur.bits[worst - 1]), exp=md_quoted(sur.expected_labels[worst - 1]),
             pe=prob_text(sur.expected_prob[worst - 1]), best=md_quoted(sur.labels[best]), bp=best,
             pb=prob_text(sur.prob[best - 1]), loss=sur.mean_loss, n=len(sur.bits))
