"""Surprise per token: the model's probability of each actual next token as coloured chips over the text, the
text's mean loss and perplexity (read from the page's cached trace: no extra forward)."""

import pandas as pd
import streamlit as st

from transformer_core.analysis.surprise import surprise_from_logits
from ui.errors import show_error
from ui.figures import axis_labels, bars, visible
from ui.guidance import surprise_hint, try_these
from ui.i18n import t
from ui.session import page_context, through_app
from ui.tools import export_panel, surprise_chips
from ui.widgets import chart, count_text, explain, table

through_app()
ss = st.session_state


st.title(t("nav_surprise"))
loss_tex = rf"\text{{{t('tex_loss')}}}"
explain("sur_intro", rf"{loss_tex} = -\frac{{1}}{{T-1}}\sum_{{t=1}}^{{T-1}}\ln p(x_{{t}}\mid x_{{<t}}),\qquad"
        rf"\text{{{t('tex_perplexity')}}} = e^{{{loss_tex}}}")
try_these("surprise", dict(model="shipped:repeat", text="d a c b g f d a c"),
          dict(model="shipped:count", text="4 7 10 13"))
ctx = page_context()
model = ctx.model
if model.is_encoder_decoder:
    st.caption(t("sur_target_note"))
try:
    sur = surprise_from_logits(model, ctx.trace.decoder_ids, ctx.trace.logits[0])
except Exception as exc:  # noqa: BLE001 - one token, or anything else: a message, never a traceback
    show_error(exc)
    st.stop()

surprise_hint(sur)
probs, bits = sur.prob.tolist(), sur.bits.tolist()
m1, m2, m3 = st.columns(3)
m1.metric(t("sur_loss"), f"{sur.mean_loss:.4f}")
m2.metric(t("sur_ppl"), f"{sur.perplexity:.4g}")
m3.metric(t("sur_bits"), f"{sur.bits_per_token:.4f}")

st.subheader(t("sur_chips_title"))
surprise_chips(sur.labels, probs, bits, expected=(sur.expected_labels, sur.expected_prob.tolist()))
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
    t("sur_col_expected"): [visible(r["expected"]) for r in rows],  # what the model expected there instead
    t("sur_col_expected_prob"): [r["expected_prob"] for r in rows],
}), "surprise", formats={t("sur_col_prob"): "%.4f", t("sur_col_bits"): "%.3f", t("sur_col_nats"): "%.3f",
                         t("sur_col_expected_prob"): "%.4f"})
export_panel(sur, "surprise", ctx)
