"""Page 3: one attention block of one layer — scores before/after masking, softmax, every head, Q/K/V, one query."""
import numpy as np
import pandas as pd
import streamlit as st

from transformer_core.analysis.attention_steps import query_steps, row_sums
from transformer_core.model.masks import MASK_MODES
from transformer_core.model.transformer import DEFAULT_MASKS
from transformer_core.text.inputs import token_labels
from ui.errors import show_error
from ui.figures import (
    DIVERGING,
    SEQUENTIAL,
    add_mask_marks,
    axis_labels,
    heatmap,
    heatmap_grid,
)
from ui.i18n import t
from ui.session import load_selected_model, page_context, through_app
from ui.widgets import chart, explain, table, tensor_frame

through_app()

CAP = 128  # tokens shown per heatmap axis; longer sequences are cropped (tables keep every token)
GRID_CAP = 64  # the all-heads grid draws n_heads heatmaps: fewer tokens keep it small
GRID_WIDE = 32  # longer sequences get a 2-column grid with taller heatmaps, so every label stays readable
GRID_STAGES = ("scores", "scaled", "masked", "weights")
KIND_LABEL = {"enc_self": "block_enc_self", "dec_self": "block_dec_self", "cross": "block_cross"}
ss = st.session_state


def _clamp(key: str, n: int, default: int = 0) -> None:
    """Keep an int widget value (from the URL or another model) inside 0..n-1."""
    v = ss.get(key, default)
    ss[key] = min(max(int(v), 0), n - 1) if str(v).lstrip("-").isdigit() else default


def _on_block_change() -> None:
    ss.mask_mode = DEFAULT_MASKS[ss.block]


def selectors(model) -> str:
    """Layer, block, head and mask widgets (before the trace, which depends on them); returns the block kind."""
    cfg = model.cfg
    _clamp("layer", cfg.n_layers)
    _clamp("head", cfg.n_heads)
    c1, c2, c3, c4 = st.columns([1, 3, 1, 3])
    c1.selectbox(t("att_layer"), range(cfg.n_layers), key="layer")
    kinds = ["enc_self", "dec_self", "cross"] if model.is_encoder_decoder else ["dec_self"]
    if ss.get("block") not in kinds:  # not chosen yet (or another model's): cross-attention shows most
        ss.block = kinds[-1]
        _on_block_change()
    if ss.get("mask_mode") not in MASK_MODES:
        ss.mask_mode = DEFAULT_MASKS[ss.block]

    def block_label(kind: str) -> str:
        return t("block_gpt_self" if not model.is_encoder_decoder else KIND_LABEL[kind])

    c2.selectbox(t("att_block"), kinds, key="block", format_func=block_label, on_change=_on_block_change)
    c3.selectbox(t("att_head"), range(cfg.n_heads), key="head")
    c4.radio(t("att_mask_mode"), MASK_MODES, key="mask_mode", horizontal=True, format_func=lambda m: t(f"mask_{m}"))
    return ss.block


def styled(fig, template: str):
    """Hover names the query token, the key token and the value (mask overlays keep their own hover)."""
    for tr in fig.data:
        if tr.type == "heatmap" and tr.name != "mask":
            tr.hovertemplate = template + "<extra></extra>"
    return fig


def value_hover() -> str:
    return f"{t('attn_hover_pos')}<br>{t('attn_hover_value')} %{{z:.4f}}"


def masked_hover() -> str:
    return f"{t('attn_hover_pos')}<br>{t('att_masked_hover')}"


def zero_hover() -> str:
    """Hover of a masked softmax weight: the overlay holds its value, 0."""
    return f"{t('attn_hover_pos')}<br>{t('attn_hover_value')} %{{z:.4f}} ({t('attn_masked_zero')})"


def four_decimals(df: pd.DataFrame) -> dict[str, str]:
    """Show every number column of a table with 4 decimals (the CSV keeps full precision)."""
    return {c: "%.4f" for c in df.columns if pd.api.types.is_numeric_dtype(df[c])}


def mark_masked(fig, stage: str, masked, k_lab, q_lab, **where) -> None:
    """✕ on masked cells (which hold NaN): scores hover as −∞, softmax weights as the exact 0 they are."""
    hover, value = (zero_hover(), 0.0) if stage == "weights" else (masked_hover(), 1.0)
    add_mask_marks(fig, masked, k_lab, q_lab, hovertemplate=hover, value=value, **where)


def side_by_side(stages, head, q_lab, k_lab, n) -> None:
    scaled = stages.head("scaled", head, n).numpy()
    mask = stages.head("mask", head, n).numpy()
    weights = stages.head("weights", head, n).numpy()
    lim = float(np.abs(scaled).max()) or 1.0  # one colour scale for before and after
    axes = {"x_title": t("attn_keys"), "y_title": t("attn_queries")}
    kw = {**axes, "zmin": -lim, "zmax": lim, "zmid": 0, "colorscale": DIVERGING}
    figs = [
        heatmap(scaled, k_lab, q_lab, title=t("att_before"), **kw),
        heatmap(np.where(mask, scaled, np.nan), k_lab, q_lab, title=t("att_after"), **kw),
        heatmap(np.where(mask, weights, np.nan), k_lab, q_lab, title=t("att_weights"), colorscale=SEQUENTIAL,
                zmin=0, zmax=1, **axes),
    ]
    mark_masked(figs[1], "masked", ~mask, k_lab, q_lab)
    mark_masked(figs[2], "weights", ~mask, k_lab, q_lab)
    for col, fig, key in zip(st.columns(3), figs, ("before", "after", "weights"), strict=True):
        with col:
            chart(styled(fig, value_hover()), f"att_{key}")


def head_grid(stages, q_lab, k_lab, n) -> None:
    st.subheader(t("att_grid"))
    stage = st.radio(t("att_grid_stage"), GRID_STAGES, index=3, horizontal=True, key="att_grid_stage_sel",
                     format_func=lambda s: t(f"attn_stage_{s}"))
    mats = stages.head(stage, None, n).numpy()
    masked = ~stages.head("mask", None, n).numpy()
    marked = stage in ("masked", "weights")
    if marked:
        mats = np.where(masked, np.nan, mats)
    weights = {"colorscale": SEQUENTIAL, "zmin": 0, "zmax": 1}  # weights always on 0..1, like the chart above
    kw = weights if stage == "weights" else {"colorscale": DIVERGING, "zmid": 0}
    wide = max(len(q_lab), len(k_lab)) > GRID_WIDE
    cols = min(2 if wide else 4, len(mats))
    fig = heatmap_grid(list(mats), [f"{t('att_head')} {h}" for h in range(len(mats))], k_lab, q_lab, cols=cols,
                       row_height=460 if wide else None, x_title=t("attn_keys"), y_title=t("attn_queries"), **kw)
    styled(fig, value_hover())
    if marked:
        for h, m in enumerate(masked):
            mark_masked(fig, stage, m, k_lab, q_lab, row=h // cols + 1, col=h % cols + 1, marks=m.size <= 32 * 32)
    st.caption(t("attn_grid_note"))
    chart(fig, "att_grid")


def qkv(stages, head, q_lab, k_lab, n) -> None:
    st.subheader(t("att_qkv"))
    mats = {s: stages.head(s, head) for s in ("q", "k", "v")}
    labels = {"q": q_lab, "k": k_lab, "v": k_lab}
    dims = [str(d) for d in range(mats["q"].size(-1))]
    for col, (s, m) in zip(st.columns(3), mats.items(), strict=True):
        with col:
            fig = heatmap(m[:n].numpy(), dims, labels[s][:n], title=f"{s.upper()} {tuple(m.shape)}",
                          x_title=t("attn_dims"), y_title=t("attn_tokens"), zmid=0)
            chart(styled(fig, t("attn_hover_qkv")), f"att_{s}")
    with st.expander(t("attn_qkv_tables")):
        for tab, (s, m) in zip(st.tabs(["Q", "K", "V"]), mats.items(), strict=True):
            with tab:
                df = tensor_frame(m.numpy(), labels[s], dims).reset_index(names=t("col_token"))
                table(df, f"attention_{s}", formats=four_decimals(df))


def steps(stages, head, q_lab, k_lab) -> None:
    st.subheader(t("att_step"))
    st.markdown(t("attn_step_intro"))
    n_q = stages.weights.size(-2)
    _clamp("att_query_idx", n_q, n_q // 2)
    query = st.selectbox(t("attn_query_pick"), range(n_q), key="att_query_idx", format_func=lambda i: q_lab[i])
    s = query_steps(stages, head, query)
    st.caption(t("attn_dk", d_k=s.d_k, sqrt=s.scale))
    masked = [f"{x:.4f}" if keep else "−∞" for x, keep in zip(s.masked.tolist(), s.mask.tolist(), strict=True)]
    df = pd.DataFrame({
        t("attn_col_key"): k_lab,
        t("attn_col_raw"): s.raw.numpy(),
        t("attn_col_scaled"): s.scaled.numpy(),
        t("attn_col_mask"): [t("attn_mask_keep") if m else t("attn_mask_block") for m in s.mask.tolist()],
        t("attn_col_masked"): masked,
        t("attn_col_weight"): s.weights.numpy(),
    })
    table(df, f"attention_query_{query}", formats=four_decimals(df))
    st.caption(t("attn_step_sum", s=float(s.weights.sum()), n=int((~s.mask).sum()), total=len(s.mask)))
    st.markdown(f"**{t('att_output')}**")
    out = s.output.numpy()[None, :]
    df = tensor_frame(out, [q_lab[query]], [str(d) for d in range(out.shape[1])]).reset_index(names=t("col_token"))
    table(df, f"attention_output_{query}", formats=four_decimals(df))
    st.caption(t("attn_output_check", d=s.max_difference))


def sums_and_pitfalls(stages, kind: str, mode: str) -> None:
    lo, hi, n_empty = row_sums(stages.weights, stages.mask)
    st.success(t("att_rowsum", lo=lo, hi=hi), icon="✅")
    if n_empty:
        st.info(t("att_all_masked"), icon="ℹ️")
    if mode in ("padding", "both"):
        st.caption(t("attn_padding_note"))
    st.warning(t("att_pitfall"), icon="⚠️")
    if kind == "cross":
        st.warning(t("cross_pitfall"), icon="⚠️")


st.title(t("nav_attention"))
explain("att_intro", r"\mathrm{Attention}(Q,K,V)=\mathrm{softmax}\!\left(\frac{QK^\top}{\sqrt{d_k}}+M\right)V")
st.caption(t("attn_formula_note"))
_, model, _, _ = load_selected_model()
kind = selectors(model)
if kind == "cross" and ss.mask_mode in ("causal", "both"):
    st.caption(t("attn_cross_no_causal"))
ctx = page_context(layer=ss.layer, masks={kind: ss.mask_mode})
try:
    stages = ctx.trace.attention(kind, ss.layer)
    if stages is None:
        st.error(t("attn_missing"))
        st.stop()
    src = axis_labels(token_labels(model, ctx.trace.src_ids[0]))
    tgt = axis_labels(token_labels(model, ctx.trace.tgt_ids[0])) if ctx.trace.tgt_ids is not None else src
    q_lab, k_lab = (src if kind == "enc_self" else tgt), (tgt if kind == "dec_self" else src)
    n_tok = max(len(q_lab), len(k_lab))
    if n_tok > GRID_CAP:
        st.info(t("attn_long", n=n_tok, cap=CAP, grid_cap=GRID_CAP), icon="✂️")
    head = ss.head
    side_by_side(stages, head, q_lab[:CAP], k_lab[:CAP], CAP)
    sums_and_pitfalls(stages, kind, ss.mask_mode)
    head_grid(stages, q_lab[:GRID_CAP], k_lab[:GRID_CAP], GRID_CAP)
    steps(stages, head, q_lab, k_lab)
    qkv(stages, head, q_lab, k_lab, CAP)
except Exception as exc:  # noqa: BLE001 - shown as a message, never a traceback
    show_error(exc)
