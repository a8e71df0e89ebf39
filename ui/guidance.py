"""“What to look for”: two lines per view, written from what this model actually shows on this text."""
from __future__ import annotations

import streamlit as st

from .i18n import t


def look_for(key: str, **params) -> None:
    """A short box: what to look for in the view below (the string `look_<key>`, filled with live numbers)."""
    st.info(t(f"look_{key}", **params), icon="👀")


def attention_hint(records: list, random_init: bool) -> None:
    """Name the clearest heads of the shown layer and block, or say that random weights show no pattern."""
    if random_init:
        look_for("attention_random")
        return
    best = sorted((r for r in records if r.label), key=lambda r: -r.strength)[:2]
    if not best:
        look_for("attention_none")
        return
    heads = t("look_list_sep").join(t("look_head", layer=r.layer, head=r.head, kind=t("head_kind_" + r.label),
                                      score=r.strength) for r in best)
    look_for("attention", heads=heads)
