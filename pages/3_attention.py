"""Page 3: attention. One head large (every token labelled; click a cell to explain it), all heads of the layer as
thumbnails that pick the head (both drawn and switched in the browser, and for a short text the layer and mask too:
ui.attention_view; a longer text gets the server's charts), scores before and after masking side by side (drawn in the
browser: ui.attention_pair), Q/K/V and one query step by step."""
import numpy as np
import pandas as pd
import streamlit as st

from service.urlstate import SCALES  # the one list of colour scales (a link may name one)
from transformer_core.analysis.alignment import prep_rows
from transformer_core.analysis.all_heads import head_view as all_heads_view
from transformer_core.analysis.all_heads import model_view
from transformer_core.analysis.attention_steps import query_steps, row_sums
from transformer_core.analysis.heads import PROBE_PATTERNS, default_length, label_block, probe_count
from transformer_core.analysis.qk_attribution import qk_attribution
from transformer_core.analysis.qk_norm import qk_norm_effect
from transformer_core.errors import InputError
from transformer_core.model.masks import MASK_MODES
from transformer_core.model.memory import KEEP_ALL
from transformer_core.model.transformer import DEFAULT_MASKS
from transformer_core.text.inputs import sequence_labels
from ui import cache
from ui.attention_maps import attention_maps, is_set_mask, mask_sets, text_key, view_knows
from ui.attention_pair import attention_pair, pair_data
from ui.attention_view import attention_view, in_browser, view_data
from ui.errors import show_error
from ui.figures import (
    COLUMN_PX,
    DIVERGING,
    axis_labels,
    block_labels,
    block_max,
    scaled_weights,
    token_heatmap,
)
from ui.guidance import attention_hint
from ui.head_view import head_view, model_view_figure
from ui.i18n import sentences, t
from ui.masked_cells import mark_cells
from ui.model_choice import load_selected_model
from ui.panels import panel_heatmaps, thumbnails
from ui.plain_figures import figure
from ui.session import layer_maps, page_context, through_app
from ui.state import generated, keep_view_in_model
from ui.tools import export_panel, inputs, prep_for, reserve
from ui.widgets import chart, clicked, explain, table, tensor_frame

through_app()

HOVER_CAP = 96  # up to this many tokens, hover shows q·k, the scaled score and the weight of each cell (up to
# ui.attention_view.VIEW_TOKENS the browser's view draws the map, and a click on a cell explains it)
SIDE_CAP = 256  # the before/after pair shows a window of at most this many tokens
MAIN_CAP = 256  # the large map's most rows and columns (longer: blocks of tokens, each its largest weight)
THUMB_CAP = 96  # thumbnails are pooled to at most this many rows and columns
KIND_LABEL = {"enc_self": "block_enc_self", "dec_self": "block_dec_self", "cross": "block_cross"}
ss = st.session_state


def _clamp(key: str, n: int, default: int = 0) -> None:
    """Keep an int widget value (from the URL or another model) inside 0..n-1."""
    v = ss.get(key, default)
    ss[key] = min(max(int(v), 0), n - 1) if str(v).lstrip("-").isdigit() and len(str(v)) < 6 else default


def _on_block_change() -> None:
    ss.mask_mode = DEFAULT_MASKS[ss.block]
    ss.pop("att_cell", None)


def selectors(model) -> tuple[str, dict]:
    """The block widget (before the trace, which depends on it); the block, and the places of the layer, mask, head
    and colour-scale widgets, which the page draws after the trace unless the browser's view holds them."""
    cfg = model.cfg
    if "_pick_layer" in ss:  # a model-view thumbnail was clicked in the last run
        ss.layer = ss.pop("_pick_layer")
    if "_pick_head" in ss:  # a thumbnail was clicked in the last run
        ss.head = ss.pop("_pick_head")
        ss.pop("att_cell", None)
    keep_view_in_model(cfg.n_layers, cfg.n_heads)
    kinds = ["enc_self", "dec_self", "cross"] if model.is_encoder_decoder else ["dec_self"]
    if ss.get("block") not in kinds:  # not chosen yet (or another model's): cross-attention shows most
        # a link may name its mask without the block: the mask stays (a block of another model's takes its default)
        from_link = ss.get("block") is None and ss.get("mask_mode") in MASK_MODES
        ss.block = kinds[-1]
        if not from_link:
            _on_block_change()
    if ss.get("mask_mode") not in MASK_MODES:
        ss.mask_mode = DEFAULT_MASKS[ss.block]
    if ss.get("att_scale") not in SCALES:
        ss.att_scale = "01"
    c1, c2, c3, c4, c5 = st.columns([1, 3, 1, 3, 2])
    c2.selectbox(t("att_block"), kinds, key="block", on_change=_on_block_change, help=t("att_block_help"),
                 format_func=lambda k: t("block_gpt_self" if not model.is_encoder_decoder else KIND_LABEL[k]))
    return ss.block, {"layer": c1.empty(), "head": c3.empty(), "mask": c4.empty(), "scale": c5.empty()}


def server_controls(model, slots) -> None:
    """The server's layer, mask, head and colour-scale widgets (a map too long for the browser's view)."""
    slots["layer"].selectbox(t("att_layer"), range(model.cfg.n_layers), key="layer")
    slots["mask"].radio(t("att_mask_mode"), MASK_MODES, key="mask_mode", horizontal=True,
                        format_func=lambda m: t(f"mask_{m}"))
    slots["head"].selectbox(t("att_head"), range(model.cfg.n_heads), key="head")
    slots["scale"].radio(t("att_scale"), SCALES, key="att_scale", horizontal=True,
                         format_func=lambda s: t(f"att_scale_{s}"), help=t("att_scale_help"))


def block_source(ctx, stages, kind: str, records: dict[int, object], first: dict[int, str], mine: int,
                 masks: list[np.ndarray]):
    """The view's maps of (mask set, layer) for ui.attention_maps.attention_maps: (the heads' weights, their labels),
    from the page's trace (the chosen block), else from the text traced with that set's mask (ui.session.layer_maps:
    every layer's weights); None where they cannot be had or their mask is not the set's (is_set_mask)."""
    def source(block):
        s, layer = block
        if (s, layer) == (mine, stages.layer):
            got, labels = stages, records
        else:
            traced = layer_maps(ctx, kind, None if s == mine else {kind: first[s]})
            if traced is None:
                return None
            got = traced[1][layer]
            labels = head_labels(ctx, got, kind, traced[0])
        if not is_set_mask(got, masks[s]):
            return None
        return got.weights[0].float().numpy(), [label_text(labels.get(h)) for h in range(got.n_heads)]
    return source


def browser_maps(ctx, stages, kind: str, records: dict[int, object], q_lab, k_lab, text: str) -> tuple[int, int] | None:
    """The head large and every head small, drawn and switched in the browser with the layer, the mask and the colour
    scale (ui.attention_maps: the maps' element; ui.attention_view: the view), kept under `text` (`view_key`); returns
    the clicked (query, key) cell, if any."""
    modes, first, masks = mask_sets(kind, stages.n_q, stages.n_k)
    mine, n_layers, heads = modes[ss.mask_mode], ctx.model.cfg.n_layers, stages.n_heads
    attention_maps(text, masks, (mine, stages.layer), n_layers, heads,
                   block_source(ctx, stages, kind, records, first, mine, masks))
    n_gen = generated_rows(stages.n_q)
    # the kind filter's pills are this block's: another layer or mask the view switches to shows every head
    attention_view(view_data(text, n_layers, heads, modes, q_lab, k_lab, ((mine, stages.layer),
                                                                          kind_filter(records, heads)),
                             generated=n_gen))
    say_generated(n_gen, stages.n_q)
    return ss.get("att_cell")


def view_key(ctx, kind: str) -> str:
    """The key of the text and block the view draws (its maps are kept under it; the pair reads its labels)."""
    ids = [ctx.trace.src_ids[0].tolist(), None if ctx.trace.tgt_ids is None else ctx.trace.tgt_ids[0].tolist()]
    return text_key(ctx.key, kind, ids)


def generated_rows(n_q: int) -> int:
    """How many of the map's last rows are generated tokens (the decoder's), 0 where none or all are."""
    n_gen = len(generated()) if ss.block != "enc_self" else 0
    return n_gen if n_gen < n_q else 0


def say_generated(n_gen: int, n_q: int) -> None:
    if n_gen:
        st.caption(t("att_generated_rows", n=n_gen, row=n_q - 1))


def main_map(stages, head: int, q_lab, k_lab) -> None:
    """The chosen head's softmax weights, large, for a text longer than the browser's view takes (hover only: its
    cells are too small to aim at; one query's arithmetic is under "Step by step for one query token")."""
    weights = stages.head("weights", head).numpy()
    mask = stages.head("mask", head).numpy()
    z, axis = scaled_weights(np.where(mask, weights, np.nan), ss.att_scale)
    n_q, n_k = weights.shape
    title = t("att_main_title", layer=ss.layer, head=head, scale=t(f"att_scale_{ss.att_scale}"))
    step = -(-max(n_q, n_k) // MAIN_CAP)
    if step > 1:  # a long text: blocks of step × step tokens, each its largest weight (light in the browser)
        z, mask = block_max(z, step), block_max(np.where(mask, 1.0, np.nan), step) == 1.0
        fig = token_heatmap(z, q_lab[::step], k_lab[::step], step=step, **axis, fixed_margins=True,
                            categories=(block_labels(q_lab, step), block_labels(k_lab, step)),
                            hovertemplate=f"{t('attn_queries')}: %{{y}}<br>{t('attn_keys')}: %{{x}}<br>"
                                          f"{t('att_block_max')} = %{{z:.4f}}<extra></extra>", title=title)
        mark_cells(fig, ~mask, hovertemplate=f"%{{y}} → %{{x}}: {t('att_masked_hover')} → 0", value=0.0, step=step)
        chart(fig, "att_main")
        st.caption(t("att_pooled_hint", n=max(n_q, n_k), step=step))
        return
    custom, hover = None, f"{t('attn_queries')}: %{{y}}<br>{t('attn_keys')}: %{{x}}<br>{t('attn_col_weight')} = " \
                          "%{z:.4f}<extra></extra>"
    if max(n_q, n_k) <= HOVER_CAP:
        raw, scaled = stages.head("scores", head).numpy(), stages.head("scaled", head).numpy()
        # numbers in customdata, the token labels the axes' categories: one string per row and column (per-cell names
        # cost 2 × rows × columns strings; an array mixing strings and numbers made plotly's JSON fall back to a slow
        # Python walk, 5x the time of the whole chart)
        custom = np.stack([raw, scaled, weights], axis=-1).astype(np.float32)
        hover = (f"{t('attn_queries')}: %{{y}}<br>{t('attn_keys')}: %{{x}}<br>q·k = %{{customdata[0]:.4f}}<br>"
                 f"q·k/√d_k = %{{customdata[1]:.4f}}<br>{t('attn_col_weight')} = %{{customdata[2]:.4f}}<extra></extra>")
    fig = token_heatmap(z, q_lab, k_lab, title=title, **axis, customdata=custom, fixed_margins=True,
                        categories=(q_lab, k_lab), hovertemplate=hover)
    mark_cells(fig, ~mask, hovertemplate=f"{t('attn_queries')} %{{y}} · {t('attn_keys')} %{{x}}<br>"
               f"{t('att_masked_hover')} → 0", value=0.0)
    n_gen = generated_rows(n_q)
    if n_gen:
        mark_generated(fig, n_q, n_k, n_gen)
    say_generated(n_gen, n_q)
    chart(fig, "att_main")
    st.caption(t("att_zoom_hint", n=max(n_q, n_k)))


def part_name(part: tuple) -> str:
    """A part of the residual stream as the QK view names it ("L1 H5", "FFN 0", "embeddings", "biases")."""
    kind = part[0]
    if kind == "head":
        return t("att_qka_head", layer=part[1], head=part[2])
    return t(f"att_qka_{kind}", layer=part[1] if len(part) > 1 else "")


def why_here(ctx, head: int, query: int, key: int, q_lab, k_lab) -> None:
    """The clicked score split by where q and k came from (query part × key part), with what sums it."""
    st.subheader(t("att_qka_title", q=q_lab[query], k=k_lab[key]))
    try:
        a = ctx.trace.memo(("qk_attribution", ss.layer, head, query, key),
                           lambda: qk_attribution(ctx.model, ctx.trace, ss.layer, head, query, key))
    except InputError:
        st.caption(t("att_qka_post_norm"))
        return
    names = [part_name(p) for p in a.parts]
    varying = a.matrix[:, :-1]  # the last column, the key side's biases, is the same for every key: left out below
    lim = float(np.abs(varying).max()) if varying.size else 0.0
    lim = lim or 1.0  # one colour scale for the columns that decide where the head looks (the biases' saturate)
    fig = token_heatmap(a.matrix, names, names, title=t("att_qka_map"), colorscale=DIVERGING, zmin=-lim, zmax=lim,
                        zmid=0, x_title=t("att_qka_key_side"), y_title=t("att_qka_query_side"),
                        categories=(names, names),
                        hovertemplate=f"{t('att_qka_query_side')}: %{{y}}<br>{t('att_qka_key_side')}: %{{x}}<br>"
                                      "%{z:.4f}<extra></extra>")
    chart(fig, "att_qka")
    order = np.argsort(-np.abs(varying), axis=None)[:10]
    rows, cols = np.unravel_index(order, varying.shape)
    table(pd.DataFrame({t("att_qka_query_side"): [names[i] for i in rows],
                        t("att_qka_key_side"): [names[j] for j in cols],
                        t("att_qka_share"): [float(a.matrix[i, j]) for i, j in zip(rows, cols, strict=True)]}),
          f"att_qka_{ss.layer}_{head}_{query}_{key}", formats={t("att_qka_share"): "%.4f"})
    key_const = float(a.matrix[:, -1].sum())  # the key side's biases: the same for every key of this query
    st.markdown(t("att_qka_text", score=a.score, total=a.total, residue=a.residue, const=key_const,
                  n=len(a.parts)))
    export_panel(a, "qk_attribution", ctx, layer=ss.layer, head=head, query=query, key=key)


def mark_generated(fig, n_q: int, n_k: int, n_gen: int) -> None:
    """A dashed line above the first generated row and a red outline round the newest query's row (the one the
    last generation step computed, with the cached keys and values of every row above it)."""
    first = n_q - n_gen
    fig.add_shape(type="line", x0=-0.5, x1=n_k - 0.5, y0=first - 0.5, y1=first - 0.5,
                  line={"color": "#d62728", "width": 2, "dash": "dash"})
    fig.add_shape(type="rect", x0=-0.5, x1=n_k - 0.5, y0=n_q - 1.5, y1=n_q - 0.5, line={"color": "#d62728", "width": 3},
                  name="newest query")


def side_by_side(stages, head, q_lab, k_lab, view: str | None) -> None:
    """Scaled scores before and after the mask, one colour scale, drawn in the browser (ui.attention_pair: the map
    sent once; the axis labels read from the view where it draws this text: `view` is its key); a text longer than
    SIDE_CAP shows a window of it (the slider)."""
    n_q, n_k = stages.n_q, stages.n_k
    lo = 0
    if max(n_q, n_k) > SIDE_CAP:
        lo = st.slider(t("att_window"), 0, max(n_q, n_k) - SIDE_CAP, 0, key="att_window")
    qs, ks = slice(min(lo, max(n_q - SIDE_CAP, 0)), None), slice(min(lo, max(n_k - SIDE_CAP, 0)), None)
    scaled = stages.head("scaled", head).numpy()[qs, ks][:SIDE_CAP, :SIDE_CAP]
    mask = stages.head("mask", head).numpy()[qs, ks][:SIDE_CAP, :SIDE_CAP]
    attention_pair(pair_data(scaled, mask, list(q_lab[qs][:SIDE_CAP]), list(k_lab[ks][:SIDE_CAP]), view=view))


def head_labels(ctx, stages, kind: str, trace=None) -> dict[int, object]:
    """head -> the detector's record for this block: its patterns on the traced text, and induction (measured once
    per model on random repeated sequences). {} if it cannot run: the maps stand without labels. trace: the one the
    stages are of (the page's, or the text traced with another mask for the view)."""
    try:
        induction = None
        if kind != "cross":  # measured once per model: a big one takes seconds, and says what it is doing
            with st.spinner(t("att_probe_running", count=probe_count(ctx.model), length=default_length(ctx.model))):
                induction = cache.induction_by_block(ctx.key, ctx.device).get((kind, stages.layer))
        # once per trace (every session reading this text shares it): the view titles every layer's heads each run
        return (trace or ctx.trace).memo(("head_labels", kind, stages.layer), lambda: {
            r.head: r for r in label_block(kind, stages.layer, stages.weights, induction, prep=ctx.prep)})
    except Exception:  # noqa: BLE001 - labels are extra
        return {}


def label_text(record, scores: bool = True) -> str:
    """The head's label and its score ("itself 0.91"): analysis.heads.label, the rule of every page and card."""
    if record is None or not record.labels:
        return t("head_kind_mixed")
    return " · ".join(t("head_kind_" + k) + (f" {record.scores[k]:.2f}" if scores else "") for k in record.labels)


def what_head_does(record, head: int) -> None:
    """The chosen head's label: pattern, score, on which input, and what that pattern does."""
    if record is None:
        return
    if not record.labels:
        st.caption(t("head_what_none", head=head))
        return
    lines = [sentences(t("head_what", head=head, kind=t("head_kind_" + k), score=record.scores[k]),
                       t("head_on_probe" if k in PROBE_PATTERNS else "head_on_text"), t("head_does_" + k))
             for k in record.labels]
    st.info("\n\n".join(lines), icon="🔎")


def heads_table(records: dict[int, object]) -> None:
    """This block's heads with every score, sortable by any column; a kind filter narrows the thumbnails."""
    if not records:
        return
    patterns = sorted({p for r in records.values() for p, v in r.scores.items() if v is not None})
    df = pd.DataFrame([{t("att_head"): h, t("card_head_kind"): label_text(r, scores=False) if r.labels else "—",
                        **{t("head_kind_" + p): r.scores.get(p) for p in patterns}} for h, r in records.items()])
    with st.expander(t("att_heads_table")):
        table(df, f"heads_{ss.block}_{ss.layer}", formats={t("head_kind_" + p): "%.3f" for p in patterns})


def kind_filter(records: dict[int, object], heads: int) -> list[int]:
    """The heads shown small: all, or those of the kinds the learner picked (pills, when the heads are labelled)."""
    kinds_found = sorted({k for r in records.values() for k in r.labels})
    shown = list(range(heads))
    if kinds_found:
        key = f"att_kinds_{ss.block}_{ss.layer}"
        kept = ss.setdefault("_att_kinds", {})  # each layer's pick: Streamlit forgets a widget's state the first run
        if key not in ss and key in kept:  # it is not drawn (another layer shown), so it comes back from here
            ss[key] = [k for k in kept[key] if k in kinds_found]
        wanted = st.pills(t("att_filter_kind"), kinds_found, selection_mode="multi", key=key,
                          format_func=lambda k: t("head_kind_" + k))
        kept[key] = list(wanted or [])
        if wanted:
            shown = [h for h in shown if records.get(h) is not None and set(records[h].labels) & set(wanted)]
    return shown


def head_thumbnails(stages, heads: int, records: dict[int, object]) -> None:
    """Every head of this layer and block, small; a click picks the head shown large above."""
    st.subheader(t("att_grid"))
    shown = kind_filter(records, heads)
    w = stages.weights[0].float().numpy()  # (nh, Tq, Tk)
    mask = stages.mask[0].numpy()
    step = max(1, -(-max(w.shape[-2:]) // THUMB_CAP))  # pool long maps so thumbnails stay light
    if step > 1:
        w, mask = w[:, ::step, ::step], mask[:, ::step, ::step]
    z, axis = scaled_weights(np.where(mask, w, np.nan), ss.att_scale)
    # the label on a second line at the title's own size (a <sup> made it about 8 px)
    titles = [f"{t('att_head')} {h}<br>{label_text(records.get(h))}" if records else f"{t('att_head')} {h}"
              for h in shown]
    n = len(shown)
    fig = thumbnails([z[h] for h in shown], titles, cols=min(n, 8 if n > 8 else 4 if n > 4 else n),
                     zmin=axis["zmin"], zmax=axis["zmax"], masked=[~mask[h] for h in shown], ticks=axis.get("colorbar"),
                     selected=shown.index(int(ss.head)) if int(ss.head) in shown else None)
    picked = clicked(fig, "att_thumbs")
    if picked is not None:  # the Head select box already exists in this run: set it at the start of the next
        ss._pick_head = shown[int(picked)]
        st.rerun()
    st.caption(t("att_thumbs_hint") + (" " + t("att_thumbs_pooled", step=step) if step > 1 else ""))


@st.cache_data(show_spinner=False, max_entries=32, ttl=1800)
def model_view_of(key, device, text, tgt, special, gen, kind: str):
    model, prep = prep_for(key, device, text, tgt, special, gen, KEEP_ALL)
    with reserve(model, prep, keep=KEEP_ALL):
        return model_view(model, prep.src_ids, prep.tgt_ids, kind)


def all_heads(ctx, stages, kind: str, q_lab, k_lab) -> None:
    """Every layer × head at once (model view) and this layer's heads as lines (head view); built on opening."""
    box = st.expander(t("att_all_title"), key="att_all_open", on_change="rerun")
    if not box.open:
        return
    with box:
        model_tab, head_tab = st.tabs([t("att_model_view"), t("att_head_view")])
        with model_tab:
            try:
                with st.spinner(t("att_model_view_running")):
                    view = model_view_of(*inputs(ctx), kind)
            except Exception as exc:  # noqa: BLE001 - a message, never a traceback
                show_error(exc)
                return
            fig = model_view_figure(view, [t("att_head") + f" {h}" for h in range(view.n_heads)],
                                    [t("att_layer") + f" {layer}" for layer in range(view.n_layers)])
            picked = clicked(fig, "att_model_view", trace_name="heads")
            if picked is not None:
                ss._pick_head, ss._pick_layer = int(picked[1]), int(picked[0])
                st.rerun()
            st.caption(t("att_model_view_hint", n=view.n_layers * view.n_heads, kb=view.mosaic.nbytes / 1024)
                       + (" " + t("att_thumbs_pooled", step=view.step) if view.step > 1 else ""))
            export_panel(view, "model_view", ctx, boxed=False, kind=kind)
        with head_tab:
            hv = all_heads_view(stages.weights, stages.layer, kind)
            sent = head_view(hv.weights, list(q_lab[hv.first:][-hv.weights.shape[1]:]),
                             list(k_lab[hv.first:][-hv.weights.shape[2]:]),
                             [t("att_head") + f" {h}" for h in range(hv.weights.shape[0])])
            st.caption(t("att_head_view_hint", layer=ss.layer, kb=sent / 1024)
                       + (" " + t("att_head_view_cut", n=hv.weights.shape[-1]) if hv.first else ""))
            export_panel(hv, "head_view", ctx, boxed=False, kind=kind, layer=int(ss.layer))


def explain_cell(stages, head, q_lab, k_lab, cell) -> None:
    """The one-query arithmetic for the clicked cell: the row's numbers, the chosen key highlighted."""
    n_q, n_k = stages.n_q, stages.n_k
    query, key = min(cell[0], n_q - 1), min(cell[1], n_k - 1)
    s = query_steps(stages, head, query)
    st.subheader(t("att_cell_title", q=q_lab[query], k=k_lab[key]))
    keep = bool(s.mask[key])
    st.markdown(t("att_cell_numbers", raw=float(s.raw[key]), d_k=s.d_k, sqrt=s.scale, scaled=float(s.scaled[key]),
                  mask=t("attn_mask_keep") if keep else t("attn_mask_block"), w=float(s.weights[key]),
                  total=float(s.weights.sum())))
    st.latex(rf"w_{{{query},{key}}} = \frac{{e^{{{float(s.scaled[key]):.3f}}}}}{{\sum_j e^{{s_{{{query},j}}}}}}"
             + (rf" = {float(s.weights[key]):.4f}" if keep else r" = 0 \;(\text{masked})"))
    steps_table(s, k_lab, query, highlight=key, where="cell")


def steps_table(s, k_lab, query: int, highlight: int | None = None, where: str = "query") -> None:
    masked = [f"{x:.4f}" if keep else "−∞" for x, keep in zip(s.masked.tolist(), s.mask.tolist(), strict=True)]
    df = pd.DataFrame({
        t("attn_col_key"): [("▶ " if i == highlight else "") + k for i, k in enumerate(k_lab)],
        t("attn_col_raw"): s.raw.numpy(),
        t("attn_col_scaled"): s.scaled.numpy(),
        t("attn_col_mask"): [t("attn_mask_keep") if m else t("attn_mask_block") for m in s.mask.tolist()],
        t("attn_col_masked"): masked,
        t("attn_col_weight"): s.weights.numpy(),
    })
    table(df, f"attention_{where}_{query}", formats=four_decimals(df), numbered=False)  # (keys: "3 ‘␣on’")
    st.caption(t("attn_step_sum", s=float(s.weights.sum()), n=int((~s.mask).sum()), total=len(s.mask)))
    st.markdown(f"**{t('att_output')}**")
    # one row per dimension of the head: as one row of d_k columns, each column had its own format and schema (1.7 KB
    # on the wire in every run after a switch, against 0.6)
    df = pd.DataFrame({t("attn_dims"): np.arange(len(s.output)), "z": s.output.numpy()})
    table(df, f"attention_{where}_output_{query}", formats={"z": "%.4f"}, numbered=False, width="content")
    st.caption(t("attn_output_check", d=s.max_difference))


def four_decimals(df: pd.DataFrame) -> dict[str, str]:
    """Show every number column of a table with 4 decimals (the CSV keeps full precision)."""
    return {c: "%.4f" for c in df.columns if pd.api.types.is_numeric_dtype(df[c])}


def one_query(stages, head, q_lab, k_lab) -> None:
    st.subheader(t("att_step"))
    st.markdown(t("attn_step_intro"))
    n_q = stages.n_q
    _clamp("att_query_idx", n_q, n_q // 2)
    query = st.selectbox(t("attn_query_pick"), range(n_q), key="att_query_idx", format_func=lambda i: q_lab[i])
    s = query_steps(stages, head, query)
    st.caption(t("attn_dk", d_k=s.d_k, sqrt=s.scale))
    steps_table(s, k_lab, query)


def qkv(stages, head, q_lab, k_lab) -> None:
    """Q, K and V of the head, built when opened: three maps of T × d_k numbers were a third of the page's bytes on
    the wire, sent again at every switch of head or layer."""
    n_heads, n_kv = stages.n_heads, stages.n_heads // stages.group
    if n_kv < n_heads:  # grouped-query attention: this head reads a K/V head it shares with its group
        kv = stages.kv_head(head)
        st.markdown(t("att_gqa", head=head, kv=kv, n=n_heads, n_kv=n_kv, g=stages.group,
                      shared=", ".join(str(h) for h in range(n_heads) if stages.kv_head(h) == kv)))
        table(pd.DataFrame({t("att_gqa_kv"): list(range(n_kv)), t("att_gqa_queries"): [
            ", ".join(str(h) for h in range(n_heads) if stages.kv_head(h) == k) for k in range(n_kv)]}), "att_gqa")
    box = st.expander(t("att_qkv"), key="att_qkv_maps_open", on_change="rerun")
    if not box.open:
        return
    with box:
        if stages.has("q_rot"):
            st.caption(t("att_rope_qk"))
        mats = {s: stages.head(s, head).numpy() for s in ("q", "k", "v")}
        labels = {"q": q_lab, "k": k_lab, "v": k_lab}
        # one chart whose panels share the token rows: Q, K and V of a self-attention block; cross-attention's Q rows
        # are the decoder's tokens and K, V's the encoder's
        for group in [("q", "k", "v")] if list(q_lab) == list(k_lab) else [("q",), ("k", "v")]:
            chart(panel_heatmaps([mats[s] for s in group], list(labels[group[0]]),
                                 [f"{s.upper()} {tuple(mats[s].shape)}" for s in group], x_title=t("attn_dims"),
                                 hovertemplate=t("attn_hover_qkv")), "att_" + "".join(group))
        # three tables of Tq x d_k numbers are built only for a learner who asks for them
        if st.toggle(t("attn_qkv_tables"), key="att_qkv_open"):
            for tab, (s, m) in zip(st.tabs(["Q", "K", "V"]), mats.items(), strict=True):
                with tab:
                    df = tensor_frame(m, labels[s], [str(d) for d in range(m.shape[1])]).reset_index(
                        names=t("col_token"))
                    table(df, f"attention_{s}", formats=four_decimals(df))


def qk_norm_view(model, stages, head: int, q_lab, k_lab) -> None:
    """Qwen3's QK-norm on this head: q's and k's lengths before and after, and the weights with and without it."""
    fx = qk_norm_effect(model, stages, head)
    if fx is None:
        return
    st.subheader(t("att_qkn_title"))
    spread_without, spread_with = fx.spread
    st.markdown(t("att_qkn_text", d_k=fx.d_k, qlo=float(fx.q_before.min()), qhi=float(fx.q_before.max()),
                  klo=float(fx.k_before.min()), khi=float(fx.k_before.max()), qalo=float(fx.q_after.min()),
                  qahi=float(fx.q_after.max()), kalo=float(fx.k_after.min()), kahi=float(fx.k_after.max()),
                  without=spread_without, with_=spread_with))
    lengths = figure([dict(type="scatter", x=list(range(len(labels))), y=ys.tolist(), mode="lines+markers",
                           name=name, customdata=list(labels),
                           hovertemplate="%{customdata}: %{y:.3f}<extra>" + name + "</extra>")
                      for labels, ys, name in ((q_lab, fx.q_before, t("att_qkn_q_before")),
                                               (q_lab, fx.q_after, t("att_qkn_q_after")),
                                               (k_lab, fx.k_before, t("att_qkn_k_before")),
                                               (k_lab, fx.k_after, t("att_qkn_k_after")))],
                     {"height": 300, "margin": dict(l=10, r=10, t=30, b=10), "xaxis": {"title": t("col_position")},
                      "yaxis": {"title": t("att_qkn_length"), "type": "log"}})
    chart(lengths, "att_qkn_lengths")
    n = min(len(q_lab), SIDE_CAP)
    value = f"{t('attn_queries')}: %{{y}}<br>{t('attn_keys')}: %{{x}}<br>%{{z:.4f}}<extra></extra>"
    kw = {"zmin": 0.0, "zmax": 1.0, "px_per_token": 12, "max_height": 900, "width_px": COLUMN_PX,
          "fixed_margins": True, "categories": (list(q_lab[:n]), list(k_lab[:n])), "hovertemplate": value}
    for col, w, key in zip(st.columns(2), (fx.weights_with, fx.weights_without), ("with", "without"), strict=True):
        with col:
            chart(token_heatmap(w[:n, :n], q_lab[:n], k_lab[:n], title=t(f"att_qkn_{key}"), **kw), f"att_qkn_{key}")
    st.caption(t("att_qkn_note"))


def date_alignment_view(ctx, stages, head: int, q_lab, k_lab) -> None:
    """Dates model, cross-attention: which source token each output year / month / day token attends to most."""
    if ctx.prep.tgt is None:
        return
    rows = prep_rows(ctx.prep, stages.head("weights", head))  # the same rows as the head's `fields` score
    st.subheader(t("att_align_title"))
    if not rows:
        st.caption(t("att_align_not_date"))
        return
    table(pd.DataFrame({
        t("att_align_out"): [q_lab[r["position"]] for r in rows],
        t("att_align_field"): [t(f"field_{r['field']}") for r in rows],
        t("att_align_src"): [k_lab[r["source"]] for r in rows],
        t("attn_col_weight"): [r["weight"] for r in rows],
        t("att_align_match"): ["✓" if r["hit"] else "✗" for r in rows]}), f"align_{ss.layer}_{head}",
        formats={t("attn_col_weight"): "%.3f"})
    best = ctx.card.get("cross_attention") or {}
    st.caption(t("att_align_summary", hits=sum(r["hit"] for r in rows), n=len(rows), layer=ss.layer, head=head)
               + (" " + t("att_align_card", layer=best["layer"], head=best["head"], score=best["score"],
                          dates=best["dates"]) if {"layer", "head", "score", "dates"} <= set(best) else ""))


def sums_and_pitfalls(stages, kind: str, mode: str) -> None:
    lo, hi, n_empty = row_sums(stages.weights, stages.mask)
    st.success(t("att_rowsum", lo=lo, hi=hi), icon="✅")
    if n_empty:
        st.info(t("att_all_masked"), icon="ℹ️")
    if mode in ("padding", "both"):
        st.caption(t("attn_padding_note"))
    with st.expander(t("att_pitfalls_title")):
        st.markdown(t("att_pitfall"))
        if kind == "cross":
            st.markdown(t("cross_pitfall"))


st.title(t("nav_attention"))
explain("att_intro", r"\mathrm{Attention}(Q,K,V)=\mathrm{softmax}\!\left(\frac{QK^\top}{\sqrt{d_k}}+M\right)V")
st.caption(t("attn_formula_note"))
_, model, _, _ = load_selected_model()
kind, slots = selectors(model)
if kind == "cross" and ss.mask_mode in ("causal", "both"):
    st.caption(t("attn_cross_no_causal"))
ctx = page_context(layer=ss.layer, masks={kind: ss.mask_mode})
try:
    stages = ctx.trace.attention(kind, ss.layer)
    if stages is None:
        st.error(t("attn_missing"))
        st.stop()
    src = np.array(axis_labels(sequence_labels(model, ctx.trace.src_ids[0])), dtype=object)
    tgt = (np.array(axis_labels(sequence_labels(model, ctx.trace.tgt_ids[0])), dtype=object)
           if ctx.trace.tgt_ids is not None else src)
    q_lab, k_lab = (src if kind == "enc_self" else tgt), (tgt if kind == "dec_self" else src)
    # layer, mask, head and colour scale switched in the browser, where the block's mask is the one its view expects
    view = in_browser(stages.n_q, stages.n_k) and view_knows(stages, kind, ss.mask_mode)
    text = view_key(ctx, kind) if view else None  # the view's text and block; None: the server draws the maps
    if not view:
        server_controls(model, slots)
    head = int(ss.head)
    records = head_labels(ctx, stages, kind)
    attention_hint(list(records.values()), bool(ctx.card.get("random_init")))
    what_head_does(records.get(head), head)
    cell = None
    if view:
        cell = browser_maps(ctx, stages, kind, records, list(q_lab), list(k_lab), text)
    else:
        main_map(stages, head, list(q_lab), list(k_lab))
    if cell is not None:
        explain_cell(stages, head, list(q_lab), list(k_lab), cell)
        query, key = min(cell[0], stages.n_q - 1), min(cell[1], stages.n_k - 1)
        if kind == "dec_self" and key <= query:  # a key the query may see
            why_here(ctx, head, query, key, list(q_lab), list(k_lab))
    if kind == "cross" and ctx.card.get("task") == "dates":
        date_alignment_view(ctx, stages, head, list(q_lab), list(k_lab))
    sums_and_pitfalls(stages, kind, ss.mask_mode)
    if not view:
        head_thumbnails(stages, model.cfg.n_heads, records)
    all_heads(ctx, stages, kind, q_lab, k_lab)
    heads_table(records)
    if kind != "cross" and records:
        st.caption(t("att_probe_note", count=probe_count(model), length=default_length(model)))
    st.subheader(t("att_before_after"))
    side_by_side(stages, head, q_lab, k_lab, text)
    one_query(stages, head, list(q_lab), list(k_lab))
    qkv(stages, head, list(q_lab), list(k_lab))
    qk_norm_view(model, stages, head, q_lab, k_lab)
except Exception as exc:  # noqa: BLE001 - shown as a message, never a traceback
    show_error(exc)
