"""Surprise per token: the model's probability of each actual next token as coloured chips over the text, the
text's mean loss and perplexity (read from the page's cached trace: no extra forward)."""
import html

import pandas as pd
import streamlit as st

from transformer_core.analysis.export import export_npz, notebook_snippet
from transformer_core.analysis.surprise import surprise_from_logits
from transformer_core.errors import ExplorerError
from ui.errors import show_error
from ui.figures import axis_labels, bars, visible
from ui.i18n import t
from ui.session import page_context, through_app
from ui.widgets import chart, count_text, explain, file_stem, table

through_app()
ss = st.session_state


def prob_colour(p: float) -> str:
    """Red (the model did not expect it) through yellow to green (it was sure)."""
    return f"hsl({120 * min(max(p, 0.0), 1.0):.0f}, 75%, 80%)"


def surprise_chips(labels: list[str], probs: list[float], bits: list[float], mark=()) -> None:
    """The text's tokens as chips coloured by p(actual token | the tokens before it); the first has no colour.

    `mark`: positions drawn with a thick border (e.g. tokens that differ from another text). User text is escaped.
    """
    chips = []
    for i, tok in enumerate(labels):
        p = None if i == 0 else probs[i - 1]
        colour = "#eeeeee" if p is None else prob_colour(p)
        tip = t("sur_chip_first") if p is None else t("sur_chip_hover", p=f"{p:.4f}", bits=f"{bits[i - 1]:.2f}")
        border = "2px solid #c0392b" if i in set(mark) else "1px solid #bbb"
        data = "" if p is None else f" data-p='{p!r}'"
        chips.append(f"<span{data} title='{html.escape(f'#{i} · {tip}', quote=True)}' style='background:{colour};"
                     f"border:{border};border-radius:4px;padding:2px 4px;margin:2px;display:inline-block;"
                     f"font-family:monospace'>{html.escape(visible(tok))}</span>")
    st.html(f"<div style='line-height:2.2'>{''.join(chips)}</div>")


def export_panel(result, view: str, ctx, **params) -> None:
    """The view's numbers as .npz and the notebook code that recomputes them."""
    with st.expander(t("xp_title")):
        try:
            st.download_button(t("xp_npz"), export_npz(result), mime="application/octet-stream",
                               file_name=f"{file_stem('transformer-explorer', view, ctx.key.split(':')[-1])}.npz",
                               key=f"xp_npz_{view}")
            code = notebook_snippet(view, model=ctx.key.removeprefix("shipped:"), text=ss.get("text", ""),
                                    target=ss.get("tgt") if ctx.model.is_encoder_decoder else None, **params)
        except ExplorerError:
            st.caption(t("xp_unavailable"))
            return
        st.caption(t("xp_snippet"))
        st.code(code, language="python")
        if ss.get("gen_ids") or ss.get("allow_special"):
            st.caption(t("xp_generated"))


st.title(t("nav_surprise"))
explain("sur_intro", r"\text{loss} = -\frac{1}{T-1}\sum_{t=1}^{T-1}\ln p(x_{t}\mid x_{<t}),\qquad"
        r"\text{perplexity} = e^{\text{loss}}")
st.caption(t("sur_look"))
ctx = page_context()
model = ctx.model
if model.is_encoder_decoder:
    st.caption(t("sur_target_note"))
try:
    sur = surprise_from_logits(model, ctx.trace.decoder_ids, ctx.trace.logits[0])
except Exception as exc:  # noqa: BLE001 - one token, or anything else: a message, never a traceback
    show_error(exc)
    st.stop()

probs, bits = sur.prob.tolist(), sur.bits.tolist()
m1, m2, m3 = st.columns(3)
m1.metric(t("sur_loss"), f"{sur.mean_loss:.4f}")
m2.metric(t("sur_ppl"), f"{sur.perplexity:.4g}")
m3.metric(t("sur_bits"), f"{sur.bits_per_token:.4f}")

st.subheader(t("sur_chips_title"))
surprise_chips(sur.labels, probs, bits)
st.caption(t("sur_legend"))
if sur.unknown:
    st.caption(count_text("sur_unknown", len(sur.unknown)))

labels = axis_labels(sur.labels)[1:]
fig = bars(
    labels, bits, title=t("sur_chart_title"), x_title=t("sur_col_bits"), y_title=t("sur_col_bits"),
    height=max(260, 22 * len(labels) + 100), hover_format=".3f")
chart(fig, "sur_bits")

st.subheader(t("sur_table"))
rows = sur.table()
table(pd.DataFrame({
    t("sur_col_pos"): [r["position"] for r in rows],
    t("sur_col_token"): [visible(r["token"]) for r in rows],
    t("sur_col_prob"): [r["prob"] for r in rows],
    t("sur_col_bits"): [r["bits"] for r in rows],
    t("sur_col_nats"): [r["nats"] for r in rows],
}), "surprise", formats={t("sur_col_prob"): "%.4f", t("sur_col_bits"): "%.3f", t("sur_col_nats"): "%.3f"})
export_panel(sur, "surprise", ctx)
