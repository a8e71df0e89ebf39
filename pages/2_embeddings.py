"""Page 2: token embeddings, the sine/cosine positional encoding, their sum and the √d_model balance."""
import pandas as pd
import streamlit as st

from transformer_core.analysis.architecture import vocab_parts
from transformer_core.analysis.positions import (
    position_table,
    rope_offset_scores,
    rope_table,
    scale_balance,
    similarity,
)
from transformer_core.model.positional import sinusoid_table
from transformer_core.text.inputs import real_ids, sequence_labels, token_labels
from ui.errors import show_error
from ui.figures import DIVERGING, SEQUENTIAL, axis_labels, bars, lines, md_quoted, token_heatmap
from ui.guidance import look_for
from ui.i18n import t
from ui.own_words import pick_many
from ui.session import page_context, through_app
from ui.widgets import chart, explain, table, tensor_frame

through_app()

MAX_DIMS = 128  # dimensions sent to the browser at once
MAX_POSITIONS = 256  # positions in the PE heatmap, curves and similarity matrix
PE_LATEX = (r"PE_{(pos,\,2i)} = \sin\!\left(\frac{pos}{10000^{2i/d_{\text{model}}}}\right),\qquad "
            r"PE_{(pos,\,2i+1)} = \cos\!\left(\frac{pos}{10000^{2i/d_{\text{model}}}}\right)")
SMALL_COLUMNS = ["sin i=0", "cos i=0", "sin i=1", "cos i=1"]


def dim_name(i: int, sinusoidal: bool) -> str:
    return f"d{i} ({'sin' if i % 2 == 0 else 'cos'}, i={i // 2})" if sinusoidal else f"d{i}"


st.title(t("nav_embeddings"))
explain("emb_intro", r"x_{pos} = E[t_{pos}]\cdot s + PE_{pos},\qquad s \in \{1, \sqrt{d_{\text{model}}}\}")
ctx = page_context()
cfg = ctx.model.cfg
d = cfg.d_model

side = "decoder"
if ctx.model.is_encoder_decoder:
    choice = st.radio(t("enc_side"), ["src", "tgt"], format_func=lambda s: t(f"side_{s}"), horizontal=True,
                      key="emb_side")
    side = "encoder" if choice == "src" else "decoder"
ids = (ctx.trace.src_ids if side == "encoder" or not ctx.model.is_encoder_decoder else ctx.trace.tgt_ids)[0]
emb = ctx.trace.embeddings(side)
tok, scaled, pe, summed = emb.tok[0], emb.scaled[0], emb.pe[0], emb.sum[0]  # (T, d) each
n_tok = ids.numel()
labels = axis_labels(sequence_labels(ctx.model, ids))
st.caption(t("emb_shapes", side=t(f"map_side_{side}"), n=n_tok, d=d, shape=f"(1, {n_tok}, {d})"))
# a compacted vocabulary (cfg.vocab_map): the tokenizer's ids are not the rows of E; told on the text's last token
# whose two differ (without a map they never do)
differ = [(row, tid) for row, tid in zip(ids.tolist(), real_ids(ctx.model, ids), strict=True) if row != tid]
if differ:
    row, tid = differ[-1]
    st.caption(t("emb_rows", v=cfg.vocab_size, tokens=vocab_parts(cfg).ordinary, enc=cfg.encoding,
                 tok=md_quoted(token_labels(ctx.model, [row])[0]), tid=tid, row=row))  # ids, not all tokens

lo, hi = st.slider(t("emb_dims"), 0, d - 1, (0, min(d, 64) - 1), key=f"emb_dims_{d}",
                   help=t("emb_dims_help", n=MAX_DIMS))
if hi - lo + 1 > MAX_DIMS:
    hi = lo + MAX_DIMS - 1
    st.caption(t("emb_dims_capped", lo=lo, hi=hi, n=MAX_DIMS))


def dims_map(z, rows, key: str, title_y: str) -> None:
    """Rows (tokens or positions) × dimensions lo..hi, diverging around 0; hover names row, dimension, value. The
    rows' labels name them (and the heading says "tokens × dimensions"), so no axis title, and the colour bar sits
    under the map: on a phone the two took half the chart's width."""
    fig = token_heatmap(z, rows, None, colorscale=DIVERGING, zmid=0, x0=lo, px_per_token=16, max_height=900,
                        hovertemplate=f"{title_y} %{{y}} · {t('emb_axis_dim')} %{{x}}<br>%{{z:.4f}}<extra></extra>",
                        x_title=t("emb_axis_dim"), fixed_margins=True, colorbar_below=True)
    chart(fig, key)


st.subheader(t("emb_tok"))
dims_map(tok[:, lo:hi + 1], labels, "emb_tok", t("col_token"))

rotary = cfg.positional == "rope"
cap = min(cfg.max_len, MAX_POSITIONS)


def rope_section() -> None:
    """RoPE adds nothing here: it turns each pair of a head's q and k dimensions by an angle that grows with the
    position. The angle table is the sine/cosine table's counterpart; q·k of two fixed vectors depends on the
    offset between their positions only."""
    hs, theta = cfg.head_dim, cfg.rope_theta
    st.subheader(t("emb_rope"))
    explain("emb_rope_text", r"\theta_i = b^{-2i/d_{head}},\quad \begin{pmatrix} q_i \\ q_{i+d_{head}/2} \end{pmatrix}"
            r"\mapsto \begin{pmatrix} \cos p\theta_i & -\sin p\theta_i \\ \sin p\theta_i & \cos p\theta_i "
            r"\end{pmatrix} \begin{pmatrix} q_i \\ q_{i+d_{head}/2} \end{pmatrix}")
    st.caption(t("emb_rope_sizes", base=f"{theta:,.0f}", hs=hs, pairs=hs // 2))
    n_pos = min(max(n_tok, 32), cap)
    angles = rope_table(n_pos, hs, theta)  # (n, hs/2)
    fig = token_heatmap(angles.cos(), [str(p) for p in range(n_pos)], None, colorscale=DIVERGING, zmid=0,
                        px_per_token=10, max_height=700, customdata=angles.unsqueeze(-1).numpy(),
                        hovertemplate=f"{t('col_position')} %{{y}} · {t('emb_rope_pair')} %{{x}}<br>"
                                      "cos %{z:.3f} · %{customdata[0]:.3f} rad<extra></extra>",
                        x_title=t("emb_rope_pair"), y_title=t("col_position"), fixed_margins=True)
    chart(fig, "emb_rope_angles")
    st.subheader(t("emb_rope_offset"))
    stages = ctx.trace.attention("dec_self" if side == "decoder" else "enc_self", ctx.layer)
    if stages is None or not stages.has("q"):
        return
    c1, c2, c3 = st.columns(3)
    head = c1.selectbox(t("att_head"), range(cfg.n_heads), key=f"emb_rope_head_{cfg.n_heads}")
    qi = c2.selectbox(t("emb_rope_q"), range(n_tok), index=n_tok - 1, format_func=lambda i: labels[i],
                      key=f"emb_rope_q_{n_tok}")
    ki = c3.selectbox(t("emb_rope_k"), range(n_tok), format_func=lambda i: labels[i], key=f"emb_rope_k_{n_tok}")
    q, k = stages.head("q", head)[qi], stages.head("k", head)[ki]  # (hs,) before the rotation
    starts = tuple(sorted({0, min(16, cfg.max_len // 4), min(64, cfg.max_len // 2)}))  # where the key sits
    offsets = range(0, max(1, min(64, cfg.max_len - max(starts))))
    curves = rope_offset_scores(q, k, theta, offsets, starts)
    spread = max(abs(a - b) for c in curves.values() for a, b in zip(c, curves[starts[0]], strict=True))
    st.markdown(t("emb_rope_offset_text", layer=ctx.layer, head=head, q=labels[qi], k=labels[ki], spread=spread))
    chart(lines(offsets, {t("emb_rope_start", p=p): v for p, v in curves.items()}, x_title=t("emb_rope_offset_axis"),
                y_title="q·k"), "emb_rope_offsets")


if rotary:
    st.info(t("emb_note_rope"), icon="ℹ️")
    rope_section()
else:
    st.subheader(t("emb_pe"))
    explain("emb_pe_text", PE_LATEX)
    if cfg.positional == "sinusoidal":
        look_for("embeddings", d=d)
    sinusoidal = cfg.positional == "sinusoidal"
    if not sinusoidal:
        st.info(t(f"emb_note_{cfg.positional}"), icon="ℹ️")
    more = st.checkbox(t("emb_pos_more"), key="emb_pos_more")
    n_pos = (st.slider(t("emb_pos_n"), 1, cap, min(max(n_tok, 32), cap), key=f"emb_pos_n_{cap}") if more
             else min(n_tok, cap))
    if not more and n_tok > cap:
        st.caption(t("emb_pos_capped", n=cap, total=n_tok))
    table_pe = position_table(ctx.model, n_pos, side)  # (n_pos, d)
    pos_labels = [str(p) for p in range(n_pos)]
    dims_map(table_pe[:, lo:hi + 1], pos_labels, "emb_pe", t("col_position"))

    st.subheader(t("emb_pe_curves"))
    default_dims = sorted({i for i in (0, 1, 4, 5, d // 2, d - 2) if i < d})
    chosen = pick_many(st, t("emb_pe_dims"), list(range(d)), default=default_dims, max_selections=8,
                       key=f"emb_curve_dims_{d}", format_func=lambda i: dim_name(i, sinusoidal))
    if chosen:
        series = {dim_name(i, sinusoidal): table_pe[:, i].tolist() for i in chosen}
        chart(lines(range(n_pos), series, x_title=t("col_position"), y_title="PE"), "emb_curves")

st.subheader(t("emb_sum"))
dims_map(summed[:, lo:hi + 1], labels, "emb_sum", t("col_token"))

if not rotary:  # a RoPE model adds nothing to the embeddings: no balance to show
    st.subheader(t("emb_scale"))
    explain("emb_scale_intro",
            r"\text{mean}\,|E\cdot\sqrt{d_{\text{model}}}| = \sqrt{d_{\text{model}}}\;\text{mean}\,|E|")
    try:
        bal = scale_balance(tok, scaled, pe)
        st.markdown(t("emb_means", tok=bal["tok"], scaled=bal["scaled"], pe=bal["pe"]) + " "
                    + t("emb_model_scales" if cfg.scale_embedding else "emb_model_no_scale", factor=bal["factor"]))
        if bal["pe"] > 0:  # a model that scales has no "would": the ratio it runs with
            st.markdown(t("emb_scale_is", now=bal["scaled"] / bal["pe"]) if cfg.scale_embedding else
                        t("emb_scale_would", sqrt=bal["sqrt_scaled"], ratio=bal["sqrt_scaled"] / bal["pe"],
                          now=bal["scaled"] / bal["pe"]))
        names = [t("emb_bar_tok"), t("emb_bar_scaled"), t("emb_bar_sqrt"), t("emb_bar_pe")]
        chart(bars(names, [bal["tok"], bal["scaled"], bal["sqrt_scaled"], bal["pe"]], x_title=t("emb_mean_abs"),
                   height=260), "emb_balance")
    except Exception as exc:  # noqa: BLE001 - shown as a message, never a traceback
        show_error(exc)

if not rotary:
    st.subheader(t("emb_sim"))
    explain("emb_sim_text", r"PE_p\cdot PE_q = \sum_{i} \cos\!\big(\omega_i\,(p-q)\big),\qquad "
            r"\omega_i = 10000^{-2i/d_{\text{model}}}" if sinusoidal else None)
    sim = token_heatmap(similarity(table_pe), pos_labels, pos_labels, colorscale=SEQUENTIAL, px_per_token=10,
                        max_height=800, hovertemplate="%{y} · %{x}: %{z:.3f}<extra></extra>",
                        x_title=t("col_position"), y_title=t("col_position"), fixed_margins=True)
    chart(sim, "emb_sim")

st.subheader(t("emb_small"))
st.markdown(t("emb_small_text"))
small = sinusoid_table(6, 4).double().numpy()  # rounded in float64, as torch prints it (0.9999, not 1.0)
table(tensor_frame(small, pd.Index(range(6), name="pos"), SMALL_COLUMNS).reset_index(), "pe_small",
      formats=dict.fromkeys(SMALL_COLUMNS, "%.4f"))  # 0.0100 as the course prints it (and the caption), not 0.01
