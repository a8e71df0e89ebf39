"""A model's card on the page: what it was trained on, how long, and what it measures against baselines."""
from __future__ import annotations

import streamlit as st

from .figures import visible
from .i18n import lang, sentences, strings, t
from .widgets import preformatted, table

FIGURES = ("heldout_loss", "bigram_loss", "unigram_loss", "unk_rate", "exact_match", "accuracy")
HEAD_SCORES = ("previous_token", "first_token", "self", "induction",  # a card's head scores (train.cards.CARD_KINDS)
               "removes_en", "removes_zh")  # (the name-mover demo's: the share of the logit difference a head carries)


def show_card(card: dict, key: str) -> None:
    """Description, corpus provenance, the run, the measured figures and the detected heads (whatever it has)."""
    desc = card.get("description")
    if isinstance(desc, dict):
        st.markdown(desc.get(lang()) or desc.get("en", ""))
    summary = card.get("summary")
    if isinstance(summary, dict):
        st.info(summary.get(lang()) or summary.get("en", ""), icon="🧭")
    show_read(card, key)
    corpora = card.get("corpus")
    corpora = corpora if isinstance(corpora, list) else [corpora] if isinstance(corpora, dict) else []
    for c in corpora:
        st.markdown(corpus_line(c))
    if card.get("random_init"):
        st.info(t("card_random"), icon="🎲")
    run = {k: card[k] for k in ("steps", "tokens_seen", "train_seconds", "device") if k in card}
    if run:
        steps = run.get("steps", "—")
        st.markdown(t("card_run", steps=f"{steps:,}" if isinstance(steps, int) else steps,
                      tokens=f"{run.get('tokens_seen', 0):,}",
                      seconds=run.get("train_seconds", "—"), device=device_label(run.get("device", "—"))))
    if isinstance(card.get("best_step"), int) and card["best_step"] != card.get("steps"):
        every = (card.get("train_config") or {}).get("eval_interval", "—")
        st.caption(t("card_best_step", step=f"{card['best_step']:,}", every=every))
    figures = {k: card[k] for k in FIGURES if isinstance(card.get(k), (int, float))}
    if figures:
        cols = st.columns(len(figures))
        for col, (k, v) in zip(cols, figures.items(), strict=True):
            col.metric(t(f"card_{k}"), f"{v:.1%}" if k in ("unk_rate", "exact_match", "accuracy") else f"{v:.3f}",
                       help=t(f"card_{k}_help"))
        if "heldout_loss" in figures and "bigram_loss" in figures:
            gain = 1 - figures["heldout_loss"] / figures["bigram_loss"]
            above = "card_above_bigram_fact" if isinstance(card.get("advice"), list) else "card_above_bigram"
            said = t("card_vs_bigram", pct=gain * 100) if gain > 0 else t(above, pct=-gain * 100)
            unigram = figures.get("unigram_loss")
            if gain > 0 and unigram and unigram < figures["bigram_loss"]:  # the weaker baseline alone would flatter
                said = sentences(said, t("card_vs_unigram_too", pct=(1 - figures["heldout_loss"] / unigram) * 100))
            st.caption(said)
        by_corpus = card.get("by_corpus")
        first = next(iter(by_corpus.items()), None) if isinstance(by_corpus, dict) and len(by_corpus) > 1 else None
        if first and isinstance(first[1], dict) and first[1].get("heldout_loss") == figures.get("heldout_loss"):
            st.caption(t("card_headline_corpus", corpus=corpus_label(first[0])))  # not every corpus's
    show_advice(card)
    by_corpus = card.get("by_corpus")
    if isinstance(by_corpus, dict) and len(by_corpus) > 1:
        import pandas as pd

        st.markdown(f"**{t('card_by_corpus')}**")
        rows = [{t("card_col_text"): corpus_label(name),
                 **{t(f"card_{k}"): f.get(k) for k in ("heldout_loss", "bigram_loss", "unigram_loss")},
                 t("card_below_bigram"): f"{f.get('below_bigram', 0):.1%}",
                 t("card_unk_rate"): f"{f.get('unk_rate', 0):.2%}"}
                for name, f in by_corpus.items() if isinstance(f, dict)]
        table(pd.DataFrame(rows), f"by_corpus_{key}",
              formats={t(f"card_{k}"): "%.3f" for k in ("heldout_loss", "bigram_loss", "unigram_loss")})
    show_everyday(card, key)
    show_circuit(card, key)
    show_heads(card.get("heads"), key)
    if card.get("command"):
        st.caption(t("card_command"))
        preformatted(card["command"])


def corpus_line(c: dict) -> str:
    """One corpus of a card: a package's name, version, licence and hash, or what a program wrote the examples from."""
    if not c.get("generated"):
        return t("card_corpus", package=c.get("package", "—"), version=c.get("version", "—"),
                 licence=c.get(f"licence_{lang()}") or c.get("licence", "—"), sha=str(c.get("sha256", "—"))[:16])
    line = t("card_corpus_generated")
    if isinstance(c.get("templates"), list) and isinstance(c.get("names"), list):  # the name-mover demo's sentences
        try:
            line = sentences(line, t("card_corpus_templates", templates=" + ".join(map(str, c["templates"])),
                                     names=" + ".join(map(str, c["names"])),
                                     held=" + ".join(map(str, c.get("held_templates", []))) or "—"))
        except (TypeError, ValueError):  # a card read from an uploaded file may hold anything
            pass
    return line


def show_heads(heads, key: str) -> None:
    """The card's heads table: the detector's attention scores (a language model's), or, for the name-mover demo,
    the share of the right name's lead that knocking each head out removes, in each language."""
    rows = [h for h in heads if isinstance(h, dict)] if isinstance(heads, list) else []
    if not rows:
        return
    import pandas as pd

    knockout = any(isinstance(h.get("removes_en"), (int, float)) for h in rows)
    words = "card_knock" if knockout else "card_head"
    kinds = [k for k in HEAD_SCORES if any(isinstance(h.get(k), (int, float)) for h in rows)]
    st.markdown(f"**{t('card_knocks' if knockout else 'card_heads')}**")
    scale = 100 if knockout else 1  # shares as percentages: "82%", not 0.817
    number = "%.0f%%" if knockout else "%.3f"

    def score(v):
        return v * scale if isinstance(v, (int, float)) else v

    df = pd.DataFrame([{t("col_layer"): h.get("layer"), t("hd_col_head"): h.get("head"),
                        t(f"{words}_kind"): t(f"head_kind_{h.get('kind')}"), t(f"{words}_score"): score(h.get("score")),
                        **{t(f"head_kind_{k}"): score(h.get(k)) for k in kinds}} for h in rows])
    table(df, f"heads_{key}", formats={c: number for c in [t(f"{words}_score"), *(t(f"head_kind_{k}") for k in kinds)]})
    if knockout:
        from transformer_core.train.build import NAME_MOVER_SHARE
        from transformer_core.train.ioi import READS_NAMES

        st.caption(t("card_knock_note", share=f"{NAME_MOVER_SHARE:.0%}", reads=f"{READS_NAMES:.2f}"))
    else:
        st.caption(t("card_heads_note"))


def show_advice(card: dict) -> None:
    """What the run's curves say to do next (train.advice: each item a code and the figures it cites)."""
    advice = card.get("advice")
    for item in advice if isinstance(advice, list) else []:
        code = item.get("code") if isinstance(item, dict) else None
        if code not in ("unk", "overfit", "longer"):
            continue
        try:  # a card read from an uploaded file may hold anything: an item whose figures do not format is left out
            text = t(f"card_advice_{code}", **item)
            if code == "unk" and isinstance(item.get("examples"), list) and item["examples"]:
                text = sentences(text, t("card_advice_unk_words", words=" · ".join(str(w) for w in item["examples"])))
            if code == "overfit" and isinstance(item.get("kept"), int):
                text = sentences(text, t("card_advice_kept", step=f"{item['kept']:,}"))
        except (ValueError, TypeError):
            continue
        (st.info if code == "longer" else st.warning)(text, icon="📈" if code == "longer" else "⚠️")


def corpus_label(name: str) -> str:
    """A corpus's name as a learner reads it (its key when the app has no words for it)."""
    return t(f"corpus_{name}") if f"corpus_{name}" in strings() else str(name)


def show_read(card: dict, key: str) -> None:
    """What a language model read: each corpus and its share of the training rows (the sampling weights)."""
    tc = card.get("train_config")
    names = tc.get("corpus") if isinstance(tc, dict) else None
    if not isinstance(names, list) or len(names) < 2:
        return
    import pandas as pd

    weights = tc.get("corpus_weights") or [1.0] * len(names)
    total = sum(weights) or 1.0
    st.markdown(f"**{t('card_read')}**")
    table(pd.DataFrame({t("card_col_text"): [corpus_label(n) for n in names],
                        t("card_col_share"): [f"{w / total:.0%}" for w in weights]}), f"read_{key}")


def show_everyday(card: dict, key: str) -> None:
    """The everyday texts' bits per byte and top-1 beside the trigram baseline and the targets."""
    ev = card.get("everyday")
    if not isinstance(ev, dict) or not isinstance(ev.get("groups"), dict):
        return
    import pandas as pd

    tri, targets = ev.get("trigram_bits_per_byte", {}), ev.get("targets", {})
    st.markdown(f"**{t('card_everyday')}**", help=t("card_everyday_help"))
    rows = [{t("card_col_group"): t(f"everyday_{g}"), t("card_col_unknown"): f.get("unknown"),
             t("card_col_bpb"): f.get("bits_per_byte"), t("card_col_top1"): f"{f.get('top1', 0):.0%}",
             t("card_col_trigram"): tri.get(g),
             t("card_col_target"): (f"≤ {targets[g]['bits_per_byte']} · ≥ {targets[g]['top1']:.0%}"
                                    if g in targets else None)}
            for g, f in ev["groups"].items() if isinstance(f, dict)]
    table(pd.DataFrame(rows), f"everyday_{key}", formats={t("card_col_bpb"): "%.3f", t("card_col_trigram"): "%.3f"})
    for cont in (ev.get("continuation"), ev.get("continuation_zh")):
        if isinstance(cont, dict):
            st.caption(t("card_greedy", prompt=cont.get("prompt", ""), text=cont.get("text", "")))
    shares = ev.get("vocabulary")
    if isinstance(shares, dict) and {"english_words_one_token", "chinese_characters_whole"} <= shares.keys():
        # to a tenth of a percent: 99.8% is not 100% (the card's summary says 99.8%)
        st.markdown(t("card_vocab_shares", en=f"{shares['english_words_one_token']:.1%}",
                      n_en=shares.get("english_words", "—"), zh=f"{shares['chinese_characters_whole']:.1%}",
                      n_zh=shares.get("chinese_characters", "—")))
    copy = ev.get("copy")
    if isinstance(copy, dict):
        st.markdown(f"**{t('card_copy')}**", help=t("card_copy_help"))
        rows = [{t("card_col_group"): t(f"copy_{g.replace(' ', '_')}"), t("card_copy_words"): f.get("words"),
                 t("card_col_top1"): f"{f.get('top1', 0):.0%}", t("card_copy_median"): f.get("median_p")}
                for g, f in copy.items() if g != "cat" and isinstance(f, dict)]
        table(pd.DataFrame(rows), f"copy_{key}", formats={t("card_copy_median"): "%.2f"})
        cat = copy.get("cat")
        if isinstance(cat, dict):
            st.caption(cat_caption(cat, card.get("encoding") or (card.get("train_config") or {}).get("encoding")))
    slots = [f for f in ev["slots"].values() if isinstance(f, dict)] if isinstance(ev.get("slots"), dict) else []
    if slots:  # a word in a short text written twice (train/everyday.py: slot_copy)
        st.markdown(f"**{t('card_slots')}**", help=t("card_slots_help", n=slots[0].get("words", "—")))
        rows = [{t("card_slots_frame"): str(f.get("frame", "")).replace("{}", "___"),
                 t("card_copy_words"): f.get("words"), t("card_col_top1"): f"{f.get('top1', 0):.0%}",
                 t("card_copy_median"): f.get("median_p")}
                for f in slots]
        table(pd.DataFrame(rows), f"slots_{key}", formats={t("card_copy_median"): "%.2f"})


def device_label(device: str) -> str:
    """A card's device as a learner reads it: "CPU", "CUDA"; a GPU's own name as the card gives it."""
    return device.upper() if device in ("cpu", "cuda", "mps") else device


def cat_caption(cat: dict, encoding: str | None) -> str:
    """The repeated cat sentence's figure: the rank and probability are its answer's first token's (the card measures
    the first token of a word), so an answer of several tokens names that token."""
    answer, fields = str(cat.get("answer", "")), dict(prompt=cat.get("prompt", ""), rank=cat.get("rank", "—"),
                                                      p=f"{cat.get('p', 0):.2f}")
    try:
        from transformer_core.text.tokenizer import tokenize

        tokens = tokenize(answer, encoding).tokens if encoding else []
    except Exception:  # noqa: BLE001 - an encoding that cannot load here: the answer as the card gives it
        tokens = []
    if len(tokens) > 1:
        return t("card_copy_cat_first", answer=answer, first=visible(tokens[0].text), **fields)
    return t("card_copy_cat", answer=answer, **fields)


def show_circuit(card: dict, key: str) -> None:
    """The name-mover demo's card: how often the right name wins (training and held-out names and templates, per
    language) and the heads whose knock-out removes the most of the logit difference."""
    circuit = card.get("circuit")
    if not isinstance(circuit, dict) or not isinstance(circuit.get("by_language"), dict):
        return
    import pandas as pd

    st.markdown(f"**{t('card_circuit')}**", help=t("card_circuit_help"))
    rows = []
    for lang_key, row in circuit["by_language"].items():
        for split in ("train", "held_out"):
            f = row.get(split) if isinstance(row, dict) else None
            if isinstance(f, dict):
                rows.append({t("card_circuit_lang"): t(f"card_lang_{lang_key}"), t("card_circuit_split"):
                             t(f"card_split_{split}"), t("card_circuit_wins"): f"{f.get('right_name_wins', 0):.0%}",
                             t("card_circuit_diff"): f.get("mean_logit_diff")})
    table(pd.DataFrame(rows), f"circuit_{key}", formats={t("card_circuit_diff"): "%.2f"})
    for lang_key, row in circuit["by_language"].items():
        heads = row.get("heads") if isinstance(row, dict) else None
        if isinstance(heads, dict) and isinstance(heads.get("top"), list):
            st.caption(top_head_text(heads, t(f"card_lang_{lang_key}")))


def top_head_text(heads: dict, lang: str) -> str:
    """The card's top head in a sentence: the share of the logit difference its knock-out removes, and, where the
    card measured them, the name it reads at the answer and what it writes straight into that name's logit."""
    from transformer_core.train.ioi import name_read  # (only for this card: off the cold start)

    layer, head = heads["top"][:2]
    fields = {"lang": lang, "layer": layer, "head": head, "share": f"{heads.get('top_removes', 0):.0%}"}
    try:
        which = str(name_read(heads)[layer][head])
        return t("card_circuit_reads", **fields, change=float(heads["top_change"]),
                 att=float(heads[f"to_{which}"][layer][head]), which=t(f"card_circuit_which_{which}"),
                 direct=float(heads[f"writes_{which}"][layer][head]))
    except (KeyError, IndexError, TypeError, ValueError):  # a card measured before these fields
        return t("card_circuit_top", **fields)
