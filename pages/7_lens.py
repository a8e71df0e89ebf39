"""Logit lens: the decoder's residual stream read out after the embeddings and after every layer (final norm, output
layer, softmax), so a learner sees at which layer the answer forms. Read from the page's cached trace."""
import numpy as np
import pandas as pd
import streamlit as st

from transformer_core.analysis.architecture import NORM_NAMES
from transformer_core.analysis.attribution import direct_logit_attribution
from transformer_core.analysis.logit_lens import EMBEDDINGS, answer_row, lens_from_trace
from transformer_core.analysis.tuned_lens import tuned_lens_from_trace
from transformer_core.text.inputs import sequence_labels, token_labels
from ui import cache
from ui.answers import answer_picker
from ui.chart_theme import HEAD_COLOURS
from ui.errors import show_error
from ui.figures import axis_labels, lines, md_visible, prob_text, token_heatmap, visible
from ui.guidance import lens_hint
from ui.i18n import t
from ui.plain_figures import figure
from ui.session import page_context, through_app
from ui.tools import export_panel
from ui.widgets import chart, explain, table

through_app()
ss = st.session_state
WINDOW = 48  # the heatmap shows at most this many positions (around the chosen one); the table has them all
TEXT_CAP = 40  # up to this many positions, each cell is written with its top token


PART_LOOKS = ({"color": "#9e9e9e"}, {"color": "#616161", "pattern": {"shape": "/"}},
              {"color": "#424242", "pattern": {"shape": "x"}}, {"color": "#bdbdbd", "pattern": {"shape": "."}})


def attribution_section(pos: int, token: int) -> None:
    """Direct logit attribution: which heads and FFNs wrote the answer's (first) token's logit at this position."""
    st.subheader(t("dla_title"))
    try:  # first: a model it cannot split (post-norm) gets the message alone, not an intro to bars never drawn
        a = direct_logit_attribution(model, ctx.trace, pos, int(token))
    except Exception as exc:  # noqa: BLE001 - shown as a message (a post-norm model), never a traceback
        show_error(exc)
        return
    norm = r"\mathrm{" + NORM_NAMES[model.cfg.norm] + "}" if model.cfg.final_norm else ""  # where the model has one
    explain("dla_intro_norm" if model.cfg.final_norm else "dla_intro_plain",
            r"\text{logit}_t = W_U[t]\cdot " + norm + r"\Big(x_{emb} + \sum_{\ell}\big(\sum_h W_O^{h}"
            r" z^{h}_{\ell} + b_O + \mathrm{FFN}_\ell\big)\Big) + b_t")
    st.caption(t("dla_answer", tok=md_visible(token_labels(model, [token])[0])))  # the answer picked above
    layers = [t("lens_row_layer", layer=layer) for layer in range(model.cfg.n_layers)]
    # heads in colours of their own, the other parts in hatched greys: no legend entry shares a look (12 parts
    # cycled through the theme's 10 colours, and "embeddings" looked like "head 0")
    fig = figure([*(dict(type="bar", x=layers, y=a.heads[:, h].tolist(), name=t("dla_head", h=h),
                         marker={"color": HEAD_COLOURS[h % len(HEAD_COLOURS)]}) for h in range(model.cfg.n_heads)),
                  dict(type="bar", x=layers, y=a.attn_bias.tolist(), name=t("dla_bias"), marker=PART_LOOKS[0]),
                  dict(type="bar", x=layers, y=a.ffn.tolist(), name="FFN", marker=PART_LOOKS[1]),
                  dict(type="bar", x=[t("lens_row_embed")], y=[a.embed], name=t("lens_row_embed"),
                       marker=PART_LOOKS[2]),
                  dict(type="bar", x=[t("dla_const")], y=[a.constant], name=t("dla_const"),  # the bars add up
                       marker=PART_LOOKS[3]),
                  dict(type="scatter", x=layers, y=a.per_layer().tolist(), mode="markers",
                       marker=dict(symbol="diamond", size=10, color="black"), name=t("dla_layer_sum"))],
                 {"barmode": "relative", "height": 380, "margin": dict(l=10, r=10, t=30, b=10),
                  "yaxis": {"title": t("dla_axis")}})
    chart(fig, "dla_bars")
    top = np.unravel_index(np.abs(a.heads).argmax(), a.heads.shape)
    st.markdown(t("dla_sum", tok=md_visible(token_labels(model, [a.token])[0]), logit=a.logit, total=a.total,
                  residue=a.residue, const=a.constant, layer=int(top[0]), head=int(top[1]),
                  value=float(a.heads[top]), ffn=int(np.abs(a.ffn).argmax()), fv=float(a.ffn[np.abs(a.ffn).argmax()])))
    st.caption(t("dla_scale_" + a.norm, scale=a.scale) + no_final_norm_note())
    export_panel(a, "attribution", ctx, position=pos, token=int(token))


def no_final_norm_note() -> str:
    """For a model with RMSNorm but no final norm (modern-gpt, shown with Llama's parts): Llama has one."""
    return " " + t("lens_unlike_llama") if model.cfg.norm == "rmsnorm" and not model.cfg.final_norm else ""


def answer_section(pos: int, rows: list[str]):
    """The answer the lens row and the attribution follow: the model's top tokens here, or any text (its first
    token: a logit is linear in the stream). Returns the lens row (or None after a message)."""
    top = ctx.trace.logits_at(pos).float().topk(min(10, model.cfg.vocab_size)).indices.tolist()
    picked = answer_picker(t("lens_answer"), "lens_answer", model, top, context=ctx.trace.decoder_ids.tolist())
    if picked is None:
        return None
    if len(picked.answer) > 1:
        st.caption(t("lens_answer_first", tok=visible(picked.answer.labels[0]), n=len(picked.answer)))
    try:
        row = answer_row(model, ctx.trace, int(pos), picked.answer, translators if tuned else None)
    except Exception as exc:  # noqa: BLE001 - shown as a message, never a traceback
        show_error(exc)
        return None
    title = t("lens_answer_title", tok=visible(picked.answer.labels[0]), pos=pos_labels[pos],
              lens=t("lens_which_tuned" if tuned else "lens_which_logit"))
    st.markdown(f"**{title}**")
    table(pd.DataFrame({t("lens_col_layer"): rows, t("lens_answer_col_prob"): row.probs,
                        t("lens_answer_col_rank"): row.ranks, t("lens_answer_col_logit"): row.logits}),
          "lens_answer_row", formats={t("lens_answer_col_prob"): "%.4g", t("lens_answer_col_logit"): "%.4f"})
    export_panel(row, "tuned_lens_answer" if tuned else "lens_answer", ctx, position=int(pos), answer=picked.spec)
    return row


def row_name(layer: int) -> str:
    return t("lens_row_embed") if layer == EMBEDDINGS else t("lens_row_layer", layer=layer)


st.title(t("nav_lens"))
ctx = page_context()
model = ctx.model
bias = " + b" if model.cfg.output_bias else ""
if model.cfg.final_norm:  # the formula and the words name a final norm only where the model has one
    explain("lens_intro_norm", r"p^{(\ell)}(\cdot\mid x_{\le t}) = \operatorname{softmax}\!\big(W_{\text{out}}\,"
            r"\mathrm{" + NORM_NAMES[model.cfg.norm] + r"}(h^{(\ell)}_t)" + bias + r"\big)")
else:
    explain("lens_intro_plain", r"p^{(\ell)}(\cdot\mid x_{\le t}) = \operatorname{softmax}\!\big(W_{\text{out}}\,"
            r"h^{(\ell)}_t" + bias + r"\big)")
    if no_final_norm_note():
        st.caption(no_final_norm_note().strip())
if model.is_encoder_decoder:
    st.caption(t("lens_decoder_note"))
c1, c2 = st.columns([1, 3])
k = int(c1.slider(t("lens_k"), 1, 10, 5, key="lens_k"))
translators = cache.tuned_lens(ctx.key, ctx.device)  # shipped beside the model, or None
tuned = translators is not None and st.radio(
    t("lens_which"), ["logit", "tuned"], horizontal=True, key="lens_which",
    format_func=lambda w: t(f"lens_which_{w}"), help=t("lens_which_help")) == "tuned"
n = ctx.trace.decoder_ids.numel()
pos_labels = axis_labels(sequence_labels(model, ctx.trace.decoder_ids.tolist()))
pos = c2.selectbox(t("lens_position"), range(n), index=n - 1, format_func=lambda i: pos_labels[i],
                   key=f"lens_pos_{n}")
lo = min(max(0, pos - WINDOW // 2), max(0, n - WINDOW))
hi = min(n, lo + WINDOW)
# the window drawn only: each of 29 readings of Qwen3-0.6B goes through a 151,936-token output layer; the lens not
# drawn is read at the chosen position alone (its KL is the one number of it the page shows)
drawn, one = (lo, hi), (pos, pos + 1)
try:
    with st.spinner(t("lens_running", n=model.cfg.n_layers + 1, vocab=f"{model.cfg.vocab_size:,}")):
        logit = lens_from_trace(model, ctx.trace, k=k, window=one if tuned else drawn)
        other = (tuned_lens_from_trace(model, ctx.trace, translators, k=k, window=drawn if tuned else one)
                 if translators is not None else None)
except Exception as exc:  # noqa: BLE001 - shown as a message, never a traceback
    show_error(exc)
    st.stop()
lens = other if tuned else logit
at = pos - lo  # the chosen position's column in the lens of the window


def whole_lens():
    """The lens of every position (the table of all and the export): computed when asked for."""
    if tuned:
        return tuned_lens_from_trace(model, ctx.trace, translators, k=k)
    return lens_from_trace(model, ctx.trace, k=k)


rows = [row_name(layer) for layer in lens.layers]
lens_hint(lens, rows, n)

z = lens.final_prob.numpy()  # (R, W)
top1 = np.array([[visible(lens.tokens[r][p][0]) for p in range(hi - lo)] for r in range(len(rows))], dtype=object)
p1 = lens.probs[:, :, 0].numpy()
final_tok = np.broadcast_to(top1[-1:], top1.shape)
custom = np.stack([top1, np.round(p1, 4).astype(object), final_tok], axis=-1).tolist()  # lists: fast JSON
hover = (f"%{{y}} · %{{x}}<br>{t('lens_hover_top')}: %{{customdata[0]}} (%{{customdata[1]}})<br>"
         f"{t('lens_hover_final')} ‘%{{customdata[2]}}’: %{{z:.4f}}<extra></extra>")
fig = token_heatmap(z, rows, pos_labels[lo:hi], title=t("lens_heat_title"), zmin=0.0, zmax=1.0,
                    customdata=custom, hovertemplate=hover, px_per_token=36, min_height=260, x0=lo)
fig.update_yaxes(tickvals=list(range(len(rows))), ticktext=rows)
if hi - lo <= TEXT_CAP:
    fig.update_traces(text=top1.tolist(), texttemplate="%{text}", textfont={"size": 11}, selector={"name": "values"})
fig.update_xaxes(title_text=t("lens_axis_pos"))
chart(fig, "lens_heat")
if n > WINDOW:
    st.caption(t("lens_window", lo=lo, hi=hi - 1, n=n))

final = lens.tokens[-1][at][0]
formed = int(lens.settled_rows()[at])  # the earliest row from which the final answer stays on top
st.markdown(t("lens_formed", pos=pos_labels[pos], tok=md_visible(final), row=rows[formed],
              p=prob_text(lens.probs[-1, at, 0])))

followed = answer_section(pos, rows)
c_rank, c_kl = st.columns(2)
with c_rank:  # how each layer's reading ranks the answer followed, and how far its whole distribution is from the end
    ranks = lens.final_rank[:, at].tolist() if followed is None else followed.ranks.tolist()
    shown = final if followed is None else token_labels(model, [followed.token])[0]
    ticks = [v for v in (1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000)
             if v <= max(2, max(ranks))]  # 1-2-5 steps: plotly's own log ticks crowd 2…9 between 1 and 10
    chart(lines(rows, {t("lens_rank_series", tok=visible(shown)): ranks},
                title=t("lens_rank_title" if followed is None else "lens_answer_rank_title", tok=visible(shown)),
                x_title=t("lens_col_layer"), y_title=t("lens_rank_axis"), height=280,
                y_axis={"type": "log", "autorange": "reversed", "tickmode": "array", "tickvals": ticks,
                        "ticktext": [f"{v:,}" for v in ticks]}), "lens_rank")
with c_kl:  # both lenses' KL to the final distribution when the model ships a tuned lens
    kl = {t("lens_which_logit"): logit.kl[:, pos - logit.first].tolist()}
    if other is not None:
        kl[t("lens_which_tuned")] = other.kl[:, pos - other.first].tolist()
    chart(lines(rows, kl, title=t("lens_kl_title"), x_title=t("lens_col_layer"), y_title=t("lens_kl_axis"),
                height=280), "lens_kl")
if other is not None and (entry := ctx.card.get("tuned_lens")):
    st.caption(t("lens_tuned_card", steps=entry["steps"], seconds=entry["seconds"],
                 logit=" · ".join(f"{x:.2f}" for x in entry["heldout_kl_logit_lens"]),
                 tuned=" · ".join(f"{x:.2f}" for x in entry["heldout_kl_tuned_lens"])))

attribution_section(pos, int(lens.ids[-1, at, 0]) if followed is None else followed.token)

st.subheader(t("lens_table_title", k=k, pos=pos_labels[pos]))
table(pd.DataFrame({
    t("lens_col_layer"): [rows[r] for r in range(len(rows)) for _ in range(k)],
    t("lens_col_rank"): [i + 1 for _ in rows for i in range(k)],
    t("lens_col_token"): [visible(lens.tokens[r][at][i]) for r in range(len(rows)) for i in range(k)],
    t("lens_col_prob"): [float(lens.probs[r, at, i]) for r in range(len(rows)) for i in range(k)],
    t("lens_col_final_rank"): [int(lens.final_rank[r, at]) for r in range(len(rows)) for _ in range(k)],
    t("lens_col_kl"): [float(lens.kl[r, at]) for r in range(len(rows)) for _ in range(k)],
}), f"logit_lens_{pos}", formats={t("lens_col_prob"): "%.4f", t("lens_col_kl"): "%.4f"})
all_box = st.expander(t("lens_all_title"), key="lens_all_open", on_change="rerun")
if all_box.open:  # built when opened: it reads every position, the window above only those drawn
    whole = whole_lens() if n > hi - lo else lens
    with all_box:
        table(pd.DataFrame({
            t("lens_col_layer"): [rows[r] for r in range(len(rows)) for _ in range(n)],
            t("lens_col_position"): [pos_labels[p] for _ in rows for p in range(n)],
            t("lens_col_token"): [visible(whole.tokens[r][p][0]) for r in range(len(rows)) for p in range(n)],
            t("lens_col_prob"): [float(whole.probs[r, p, 0]) for r in range(len(rows)) for p in range(n)],
            t("lens_col_final"): [float(whole.final_prob[r, p]) for r in range(len(rows)) for p in range(n)],
        }), "logit_lens_top1", formats={t("lens_col_prob"): "%.4f", t("lens_col_final"): "%.4f"})
export_panel(lens if n == hi - lo else whole_lens, "tuned_lens" if tuned else "logit_lens", ctx, k=k)
