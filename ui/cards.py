"""A model's card on the page: what it was trained on, how long, and what it measures against baselines."""
from __future__ import annotations

import streamlit as st

from .i18n import lang, t
from .widgets import table

FIGURES = ("heldout_loss", "bigram_loss", "unigram_loss", "unk_rate", "exact_match", "accuracy")


def show_card(card: dict, key: str) -> None:
    """Description, corpus provenance, the run, the measured figures and the detected heads (whatever it has)."""
    desc = card.get("description")
    if isinstance(desc, dict):
        st.markdown(desc.get(lang()) or desc.get("en", ""))
    corpora = card.get("corpus")
    corpora = corpora if isinstance(corpora, list) else [corpora] if isinstance(corpora, dict) else []
    for c in corpora:
        st.markdown(t("card_corpus", package=c.get("package", "—"), version=c.get("version", "—"),
                      licence=c.get("licence", "—"), sha=str(c.get("sha256", "—"))[:16]))
    if card.get("random_init"):
        st.info(t("card_random"), icon="🎲")
    run = {k: card[k] for k in ("steps", "tokens_seen", "train_seconds", "device") if k in card}
    if run:
        st.markdown(t("card_run", steps=run.get("steps", "—"), tokens=f"{run.get('tokens_seen', 0):,}",
                      seconds=run.get("train_seconds", "—"), device=run.get("device", "—")))
    figures = {k: card[k] for k in FIGURES if isinstance(card.get(k), (int, float))}
    if figures:
        cols = st.columns(len(figures))
        for col, (k, v) in zip(cols, figures.items(), strict=True):
            col.metric(t(f"card_{k}"), f"{v:.1%}" if k in ("unk_rate", "exact_match", "accuracy") else f"{v:.3f}",
                       help=t(f"card_{k}_help"))
        if "heldout_loss" in figures and "bigram_loss" in figures:
            gain = 1 - figures["heldout_loss"] / figures["bigram_loss"]
            st.caption(t("card_vs_bigram", pct=gain * 100) if gain > 0 else t("card_above_bigram", pct=-gain * 100))
    by_corpus = card.get("by_corpus")
    if isinstance(by_corpus, dict) and len(by_corpus) > 1:
        import pandas as pd

        st.markdown(f"**{t('card_by_corpus')}**")
        rows = [{t("card_col_text"): t(f"corpus_{name}") if name in ("kjv", "tang") else str(name),
                 **{t(f"card_{k}"): f.get(k) for k in ("heldout_loss", "bigram_loss", "unigram_loss")},
                 t("card_below_bigram"): f"{f.get('below_bigram', 0):.1%}",
                 t("card_unk_rate"): f"{f.get('unk_rate', 0):.2%}"}
                for name, f in by_corpus.items() if isinstance(f, dict)]
        table(pd.DataFrame(rows), f"by_corpus_{key}",
              formats={t(f"card_{k}"): "%.3f" for k in ("heldout_loss", "bigram_loss", "unigram_loss")})
    heads = card.get("heads")
    if isinstance(heads, list) and heads:
        import pandas as pd

        st.markdown(f"**{t('card_heads')}**")
        df = pd.DataFrame([{t("col_layer"): h.get("layer"), t("hd_col_head"): h.get("head"),
                            t("card_head_kind"): t(f"head_kind_{h.get('kind')}"), t("card_head_score"): h.get("score")}
                           for h in heads if isinstance(h, dict)])
        table(df, f"heads_{key}", formats={t("card_head_score"): "%.3f"})
    if card.get("command"):
        st.caption(t("card_command"))
        st.code(card["command"], language="bash")
