"""BPE merge playback: how the tokenizer builds one token from bytes, merge by merge (lowest rank first), and how
many merges each token of the whole text took."""
import html

import pandas as pd
import streamlit as st

from transformer_core.analysis.bpe import HINT_WORDS, han_examples, text_merges, token_playback, word_build
from transformer_core.text.tokenizer import character_labels, display_bytes
from ui.errors import show_error
from ui.figures import axis_labels, bars, md_visible, quoted, visible
from ui.i18n import lang, sentences, t
from ui.model_choice import load_selected_model
from ui.session import through_app
from ui.tools import export_panel
from ui.widgets import CHIP_COLOURS, chart, count_text, explain, table, within

through_app()
ss = st.session_state
TEXT_CAP = 5_000  # characters of the sidebar text analysed here (the merges of a longer text repeat the same story)
WORD_CAP = 200
CHART_CAP = 120  # tokens in the merges-per-token chart
PART_COLOURS = CHIP_COLOURS[1:]  # the first is close to the red that marks the part just merged


@st.cache_data(show_spinner=False, max_entries=64, ttl=1800)
def merges_of(text: str, encoding: str):
    return text_merges(text, encoding)


@st.cache_data(show_spinner=False, max_entries=256, ttl=1800)
def playback_of(token_id: int, encoding: str):
    return token_playback(token_id, encoding)


def chips(parts: list[str], highlight: int | None = None, subs: list[str] | None = None) -> None:
    """Parts as chips (escaped); the one at `highlight` in red; optional small text under each."""
    out = []
    for i, part in enumerate(parts):
        colour = "#f5b7b1" if i == highlight else PART_COLOURS[i % len(PART_COLOURS)]
        border = "2px solid #c0392b" if i == highlight else "1px solid #bbb"
        sub = f"<sub style='color:#555'>{html.escape(subs[i])}</sub>" if subs else ""
        out.append(f"<span style='background:{colour};border:{border};border-radius:4px;padding:2px 5px;margin:2px;"
                   f"display:inline-block;font-family:monospace'>{html.escape(visible(part))}{sub}</span>")
    st.html(f"<div style='line-height:2.2'>{''.join(out)}</div>")


def one_token(tid: int, encoding: str) -> None:
    try:
        pb = playback_of(tid, encoding)
    except Exception as exc:  # noqa: BLE001 - a special token or anything else: a message
        show_error(exc)
        return
    st.markdown(t("bpe_token_text", tok=md_visible(pb.label), id=pb.id, bytes=count_text("bpe_n_bytes", len(pb.raw)),
                  merges=count_text("bpe_n_merges_short", pb.n_merges)))
    if pb.n_merges == 0:
        st.info(t("bpe_single"), icon="🧱")
        chips([display_bytes(pb.raw)])
    else:
        step = int(st.slider(t("bpe_step"), 0, pb.n_merges, 0, key=f"bpe_step_{encoding}_{tid}",
                             help=t("bpe_step_help")))
        if step == 0:
            chips([display_bytes(bytes([b])) for b in pb.raw])
            st.caption(t("bpe_step0", n=len(pb.raw)))
        else:
            s = pb.steps[step - 1]
            chips([display_bytes(p) for p in s.parts], highlight=s.at)
            st.caption(t("bpe_step_text", s=step, n=pb.n_merges, left=visible(display_bytes(s.pair[0])),
                         right=visible(display_bytes(s.pair[1])), rank=s.rank, parts=len(s.parts)))
        rows = pb.table()
        table(pd.DataFrame({
            t("bpe_col_step"): [("▶ " if r["step"] == step else "") + str(r["step"]) for r in rows],
            t("bpe_col_left"): [visible(r["left"]) for r in rows],
            t("bpe_col_right"): [visible(r["right"]) for r in rows],
            t("bpe_col_rank"): [r["rank"] for r in rows],
            t("bpe_col_parts"): [" · ".join(visible(p) for p in r["parts"]) for r in rows],
        }), f"bpe_steps_{tid}")
        st.caption(t("bpe_rank_note"))
    export_panel(pb, "bpe_token", key=str(tid), token_id=tid, encoding=encoding)


def whole_text(tm, text: str, encoding: str) -> None:
    st.subheader(t("bpe_text_title"))
    c1, c2, c3 = st.columns(3)
    c1.metric(t("bpe_n_tokens"), len(tm.tokens))
    c2.metric(t("bpe_n_merges"), tm.n_merges)
    c3.metric(t("bpe_n_chunks"), len(tm.chunks))
    labels = character_labels(tm.ids, encoding)  # a part of a character shown with its character, not bytes
    chips(labels, subs=[str(x.n_merges) for x in tm.tokens])
    st.caption(t("bpe_chips_note"))
    shown = tm.tokens[:CHART_CAP]
    chart(bars(axis_labels(labels[:CHART_CAP]), [x.n_merges for x in shown], title=t("bpe_chart_title"),
               x_title=t("bpe_axis_merges"), y_title=t("bpe_axis_merges"), height=max(260, 22 * len(shown) + 100),
               hover_format="d", x_format="d"), "bpe_merges")
    if len(tm.tokens) > CHART_CAP:
        st.caption(t("bpe_chart_cap", n=CHART_CAP, total=len(tm.tokens)))
    export_panel(tm, "bpe_text", key="text", text=text, encoding=encoding)


@st.cache_data(show_spinner=False, max_entries=16, ttl=1800)
def look_for(encoding: str, language: str) -> str:
    """What to look for, built by this encoding: the example words' tokens and merges, a common and a rare
    Chinese character (every figure from word_build)."""
    out = [t("bpe_look_intro")]
    for k, word in enumerate(word_build(w, encoding) for w in HINT_WORDS):
        label, labels = visible(word.text), " · ".join(quoted(display_bytes(p)) for p in word.parts)
        if not word.steps:
            out.append(t("bpe_look_no_merge", word=label, n=len(word.parts), enc=encoding))
            continue
        first, merges = word.steps[0], count_text("bpe_n_merges_short", word.n_merges)
        pair = dict(left=visible(display_bytes(first.pair[0])), right=visible(display_bytes(first.pair[1])),
                    first=first.rank)
        if len(word.parts) == 1:
            out.append(t("bpe_look_whole" if k == 0 else "bpe_look_whole_short", word=label, merges=merges,
                         last=word.steps[-1].rank, **pair))
        else:
            out.append(t("bpe_look_pieces" if k == 0 else "bpe_look_pieces_short", word=label, k=len(word.parts),
                         parts=labels, merges=merges, enc=encoding, **pair))
    common, rare = han_examples(encoding)
    if common is not None:
        out.append(t("bpe_look_han", ch=common.text, b=len(common.text.encode("utf-8")),
                     merges=count_text("bpe_n_merges_short", common.n_merges)))
    if rare is not None:
        out.append(t("bpe_look_rare", ch=rare.text, b=len(rare.parts)))
    return sentences(*out)


st.title(t("nav_bpe"))
explain("bpe_intro")
_, model, _, _ = load_selected_model()
encoding = model.cfg.encoding
try:
    st.caption(look_for(encoding, lang()))
except Exception as exc:  # noqa: BLE001 - an encoding that cannot load offline: a message
    show_error(exc)
source = st.radio(t("bpe_source"), ["text", "word"], key="bpe_source", horizontal=True,
                  format_func=lambda s: t(f"bpe_src_{s}"))
if source == "word":
    text = within(st.text_input(t("bpe_word"), key="bpe_word", placeholder=t("bpe_word_hint")), WORD_CAP)
else:
    text = within(ss.get("text", "") or "", TEXT_CAP, "bpe_cut")
if not text.strip():
    st.warning(t("bpe_empty_word" if source == "word" else "bpe_empty"), icon="✍️")
    st.stop()
try:
    tm = merges_of(text, encoding)
except Exception as exc:  # noqa: BLE001 - e.g. an encoding that cannot load offline: a message
    show_error(exc)
    st.stop()
if not tm.tokens:
    st.warning(t("bpe_empty"), icon="✍️")
    st.stop()

st.subheader(t("bpe_one_title"))
most = max(range(len(tm.tokens)), key=lambda i: tm.tokens[i].n_merges)
pick = st.selectbox(t("bpe_token"), range(len(tm.tokens)), index=most, key=f"bpe_pick_{source}_{len(tm.tokens)}",
                    format_func=lambda i: f"{i} {quoted(tm.tokens[i].label)} · "
                    + count_text("bpe_n_merges_short", tm.tokens[i].n_merges))
one_token(tm.tokens[pick].id, encoding)
whole_text(tm, text, encoding)
