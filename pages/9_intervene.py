"""Ablation and patching, live: switch off heads and FFNs and see the next token and the loss change against the
intact model; patch one head's output from a second text and see what moves. Every edit runs in this request's
own intervention context: the shared model is never changed."""
import numpy as np
import pandas as pd
import streamlit as st

from transformer_core.analysis.blocks import kinds, sides
from transformer_core.analysis.head_effects import CHUNK_BYTES, METRICS, head_effects, residual_effects
from transformer_core.analysis.interventions import ABLATION_MODES, ALIGNMENTS, ablate, patch, patch_source
from transformer_core.model.memory import KEEP_NONE
from transformer_core.model.transformer import param_counts
from transformer_core.text.inputs import sequence_labels, token_labels
from ui.errors import show_error
from ui.figures import axis_labels, bars, ranked_labels, signed_format, token_heatmap, visible
from ui.guidance import try_these
from ui.head_grid import head_grid
from ui.i18n import t
from ui.nav import open_head
from ui.session import page_context, through_app
from ui.tools import (
    check_b,
    cut_note,
    export_panel,
    inputs,
    kind_name,
    prep_for,
    prepared,
    reserve,
    text_b,
)
from ui.widgets import chart, clicked, count_text, delta, explain, table

through_app()
ss = st.session_state
AUTO_SWEEP_WORK = 2e9  # parameters × parts knocked out: below it the sweep runs with the page (the default: 0.2e9)


@st.cache_data(show_spinner=False, max_entries=64, ttl=1800)
def ablation_of(key, device, text, tgt, special, gen, heads: tuple, ffns: tuple, mode: str):
    model, prep = prep_for(key, device, text, tgt, special, gen, KEEP_NONE)
    with reserve(model, prep, keep=KEEP_NONE):
        return ablate(model, prep, list(heads), list(ffns), mode=mode), prep.longest, prep.cut_from


@st.cache_data(show_spinner=False, max_entries=64, ttl=1800)
def effects_of(key, device, text, tgt, special, gen, metric: str, token_a, token_b, mode: str):
    model, prep = prep_for(key, device, text, tgt, special, gen, KEEP_NONE)
    with reserve(model, prep, keep=KEEP_NONE, batches_of=CHUNK_BYTES):
        return head_effects(model, prep, metric, token_a, token_b, mode=mode), prep.longest, prep.cut_from


@st.cache_data(show_spinner=False, max_entries=32, ttl=1800)
def residual_of(key, device, text, tgt, special, gen, text_b, metric: str, token_a, token_b):
    model, prep = prep_for(key, device, text, tgt, special, gen, KEEP_NONE)
    prep_b = prepared(model, text_b, None, special, KEEP_NONE)
    with reserve(model, prep, prep_b, keep=KEEP_NONE, batches_of=CHUNK_BYTES):
        return residual_effects(model, prep, prep_b, metric, token_a, token_b), prep.longest, prep.cut_from


@st.cache_data(show_spinner=False, max_entries=32, ttl=1800)
def source_of(key, device, text_b, tgt_b, special, kind: str, layer: int):
    """Text B's side of a patch (its z at the block, its next token): kept while text A and the head change."""
    model, prep_b = prep_for(key, device, text_b, tgt_b, special, (), layer)
    with reserve(model, prep_b, keep=layer):
        return patch_source(model, prep_b, kind, layer)


@st.cache_data(show_spinner=False, max_entries=64, ttl=1800)
def patch_of(key, device, text, tgt, special, gen, text_b, tgt_b, kind: str, layer: int, head: int, align: str):
    model, prep = prep_for(key, device, text, tgt, special, gen, layer)
    prep_b = prepared(model, text_b, tgt_b, special, layer)
    source = source_of(key, device, text_b, tgt_b, special, kind, layer)
    with reserve(model, prep, keep=layer, batch=2):  # A intact and patched: one forward of two copies
        return patch(model, prep, prep_b, kind, layer, head, align=align, source=source), prep.longest, prep.cut_from


# --- text B (shared with the compare page through the "_text_b" / "_tgt_b" keys, which outlive the widgets) ----

# --- the page ---------------------------------------------------------------------------------------------------

def head_option(option: str, model) -> str:
    """A short name that fits a picker's chip whole ("L1 H3", "cross L1 H3"; the caption spells it out)."""
    kind, layer, head = option.split(":")
    short = t(f"iv_kind_short_{kind}") if model.is_encoder_decoder else ""
    return t("iv_head_short", kind=short, layer=layer, head=head)


def ffn_option(option: str, model) -> str:
    side, layer = option.split(":")
    return t("iv_ffn_name", side=t(f"iv_side_{side}") if model.is_encoder_decoder else t("iv_side_gpt"), layer=layer)


def moved_chart(model, eff, key: str, edited_name: str) -> None:
    """The tokens whose next-token probability moved most: intact and edited bars, and the same as a table."""
    names = ranked_labels(token_labels(model, [m[0] for m in eff.moved]))
    intact, edited = [m[1] for m in eff.moved], [m[2] for m in eff.moved]
    chart(bars(names, intact, title=t("iv_moved_title"), y_title=t("iv_intact"), x_title=t("iv_axis_prob"),
               secondary=(edited_name, edited), height=max(260, 26 * len(names) + 100), hover_format=".4f"), key)
    table(pd.DataFrame({t("iv_col_token"): names, t("iv_col_intact"): intact, t("iv_col_edited"): edited,
                        t("iv_col_change"): np.subtract(edited, intact)}),
          f"{key}_moved", formats={c: "%.4f" for c in (t("iv_col_intact"), t("iv_col_edited"), t("iv_col_change"))})


def summary(model, eff, key: str) -> None:
    """Loss and the intact top token's probability, intact vs edited, as a small table."""
    top = visible(token_labels(model, [eff.top_id])[0])
    loss = (np.nan, np.nan) if eff.loss_intact is None else (eff.loss_intact, eff.loss_edited)
    df = pd.DataFrame({
        t("iv_col_what"): [t("iv_row_loss"), t("iv_row_top", tok=top), t("iv_row_kl")],
        t("iv_col_intact"): [loss[0], eff.top_prob_intact, 0.0],
        t("iv_col_edited"): [loss[1], eff.top_prob_edited, eff.kl],
    })
    df[t("iv_col_change")] = df[t("iv_col_edited")] - df[t("iv_col_intact")]
    m1, m2, m3 = st.columns(3)
    m1.metric(t("iv_loss_change"), "—" if eff.loss_change is None else f"{eff.loss_change:+.4f}")
    m2.metric(t("iv_row_top", tok=top), f"{eff.top_prob_edited:.4f}",
              delta(eff.top_prob_edited - eff.top_prob_intact))
    m3.metric(t("iv_row_kl"), f"{eff.kl:.4g}")
    table(df, key, formats={c: "%.4f" for c in (t("iv_col_intact"), t("iv_col_edited"), t("iv_col_change"))})
    if eff.loss_intact is None:
        st.caption(t("iv_one_token"))
    for col, dist, name, which in zip(st.columns(2), (eff.intact, eff.edited), (t("iv_top_intact"), t("iv_top_edited")),
                                      ("intact", "edited"), strict=True):
        with col:
            st.markdown(f"**{name}**")
            table(pd.DataFrame({t("iv_col_token"): ranked_labels(token_labels(model, dist.ids)),
                                t("iv_col_prob"): dist.raw}), f"{key}_{which}_top", formats={t("iv_col_prob"): "%.4f"})


def heads_key(model_key: str) -> str:
    """The key of the heads-to-switch-off picker: one per model (its options are that model's heads)."""
    return f"iv_heads_{model_key}"


def pt_key(what: str, n: int) -> str:
    """The key of the patching layer / head picker for a model with n of them (a new range starts afresh)."""
    return f"iv_pt_{what}_{n}"


def ablation(ctx) -> None:
    model, cfg = ctx.model, ctx.model.cfg
    st.header(t("iv_title"))
    explain("iv_intro")
    try_these("ablation", dict(model="shipped:reverse", text="d a c b", tgt="= b c a",
                               picks={heads_key("shipped:reverse"): [f"cross:1:{h}" for h in range(4)]}),
              dict(model="shipped:repeat", text="d a c b g f d a c",
                   picks={heads_key("shipped:repeat"): ["dec_self:1:3"]}))
    heads = [f"{k}:{layer}:{h}" for k in kinds(model) for layer in range(cfg.n_layers) for h in range(cfg.n_heads)]
    ffns = [f"{s}:{layer}" for s in sides(model) for layer in range(cfg.n_layers)]
    c1, c2 = st.columns(2)
    picked_heads = c1.multiselect(t("iv_heads"), heads, key=heads_key(ctx.key), placeholder=t("iv_pick"),
                                  format_func=lambda o: head_option(o, model))
    picked_ffns = c2.multiselect(t("iv_ffns"), ffns, key=f"iv_ffns_{ctx.key}", placeholder=t("iv_pick"),
                                 format_func=lambda o: ffn_option(o, model))
    c1.caption(t("iv_short_note", kinds=t("iv_short_kinds") if model.is_encoder_decoder else ""))
    mode = st.radio(t("iv_mode"), ABLATION_MODES, key="iv_mode", horizontal=True,
                    format_func=lambda m: t(f"iv_mode_{m}"))
    if not picked_heads and not picked_ffns:
        st.info(t("iv_pick"), icon="👆")
        return
    head_list = tuple((k, int(layer), int(h)) for k, layer, h in (o.split(":") for o in picked_heads))
    ffn_list = tuple((s, int(layer)) for s, layer in (o.split(":") for o in picked_ffns))
    try:
        with st.spinner(t("ab_running")):
            found = ablation_of(*inputs(ctx), head_list, ffn_list, mode)
    except Exception as exc:  # noqa: BLE001 - a message, never a traceback
        show_error(exc)
        return
    cut_note(found, ctx)
    result = found[0]
    summary(model, result.effect, "ablation_summary")
    moved_chart(model, result.effect, "iv_ablate", t("iv_ablated"))
    st.caption(t("iv_loss_note"))
    export_panel(result, "ablate", ctx, heads=list(head_list), ffn_layers=list(ffn_list), mode=mode)


def patching(ctx) -> None:
    model, cfg = ctx.model, ctx.model.cfg
    st.header(t("pt_title"))
    explain("pt_intro")
    # repeat has 2 layers of 4 heads: its pickers' keys
    try_these("patching", dict(model="shipped:repeat", text="d a c b g f d a c", text_b="e h k j e h k",
                               picks={"iv_pt_kind": "dec_self", pt_key("layer", 2): 1, pt_key("head", 4): 3}))
    text, tgt = text_b("iv", model)
    options = list(kinds(model))
    if ss.get("iv_pt_kind") not in options:
        ss.iv_pt_kind = options[-1]
    c1, c2, c3, c4 = st.columns([3, 1, 1, 3])
    kind = c1.selectbox(t("pt_kind"), options, key="iv_pt_kind", format_func=lambda k: kind_name(k, model))
    ss.setdefault(pt_key("layer", cfg.n_layers), cfg.n_layers - 1)  # the last layer first; a "Try it" may set it
    layer = c2.selectbox(t("pt_layer"), range(cfg.n_layers), key=pt_key("layer", cfg.n_layers))
    head = c3.selectbox(t("pt_head"), range(cfg.n_heads), key=pt_key("head", cfg.n_heads))
    align = c4.radio(t("pt_align"), ALIGNMENTS, key="iv_pt_align", horizontal=True,
                     format_func=lambda a: t(f"pt_align_{a}"), help=t("pt_align_help"))
    if check_b(model, text, tgt) is None:
        return
    try:
        with st.spinner(t("pt_running")):
            found = patch_of(*inputs(ctx), text, tgt, kind, int(layer), int(head), align)
    except Exception as exc:  # noqa: BLE001 - unequal lengths for "exact", and anything else: a message
        show_error(exc)
        return
    cut_note(found, ctx)
    result = found[0]
    b_top = visible(token_labels(model, [result.source_top_id])[0])
    p0, p1 = result.source_top_in_a
    m1, m2 = st.columns(2)
    m1.metric(t("pt_b_top", tok=b_top), f"{p1:.4f}", delta(p1 - p0))
    m2.metric(t("iv_row_kl"), f"{result.effect.kl:.4g}")
    st.markdown(count_text("pt_result", len(result.positions), tok=b_top, p0=f"{p0:.4f}", p1=f"{p1:.4f}"))
    summary(model, result.effect, "patch_summary")
    moved_chart(model, result.effect, "iv_patch", t("pt_patched"))
    export_panel(result, "patch", ctx, text_b=text, target_b=tgt, kind=kind, layer=int(layer), head=int(head),
                 align=align)
    if not model.is_encoder_decoder:
        residual_grid(ctx, text)


def residual_grid(ctx, text_b: str) -> None:
    """Text B's residual stream patched into A at one (layer, position) at a time, on the metric picked above."""
    model = ctx.model
    st.subheader(t("rp_title"))
    explain("rp_intro")
    metric = ss.get("he_metric", "logit_diff")
    a, b = ss.get(f"he_a_{ctx.key}"), ss.get(f"he_b_{ctx.key}")
    if metric == "logit_diff" and a == b:
        st.info(t("he_same"), icon="👆")
        return
    if not st.toggle(t("rp_run"), key="rp_run"):  # L × T forwards in batches: on request
        return
    try:
        with st.spinner(t("rp_running")):
            found = residual_of(*inputs(ctx), text_b, metric, int(a) if metric != "loss" and a is not None else None,
                                int(b) if metric == "logit_diff" and b is not None else None)
    except Exception as exc:  # noqa: BLE001 - unequal lengths and anything else: a message, never a traceback
        show_error(exc)
        return
    res = found[0]
    labels = axis_labels(sequence_labels(model, ctx.trace.decoder_ids))
    rows = [t("lens_row_embed")] + [t("lens_row_layer", layer=layer) for layer in range(model.cfg.n_layers)]
    span = float(np.abs(res.grid).max()) or 1.0
    fig = token_heatmap(res.grid, rows, labels, colorscale="RdBu", zmin=-span, zmax=span, zmid=0, px_per_token=30,
                        min_height=200, hovertemplate="%{y} · %{x}: %{z:+.4f}<extra></extra>")
    chart(fig, "rp_grid")
    st.markdown(t("rp_summary", metric=t(f"he_metric_{metric}"), a=res.intact, b=res.source))
    export_panel(res, "residual_patch", ctx, text_b=text_b, target_b=None, metric=metric, token_a=res.token_a,
                 token_b=res.token_b)


def effects(ctx) -> None:
    """Every head (and FFN) knocked out alone, one picture: which parts this prediction depends on."""
    model, cfg = ctx.model, ctx.model.cfg
    st.header(t("he_title"))
    explain("he_intro")
    top = ctx.trace.logits[0, -1].float().topk(min(10, cfg.vocab_size)).indices.tolist()  # the model's top choices
    c1, c2, c3, c4 = st.columns([2, 2, 2, 2])
    metric = c1.radio(t("he_metric"), METRICS, key="he_metric", format_func=lambda m: t(f"he_metric_{m}"))
    name = {i: visible(token_labels(model, [i])[0]) for i in top}
    a = c2.selectbox(t("he_token_a"), top, key=f"he_a_{ctx.key}", format_func=name.get,
                     disabled=metric == "loss")
    b = c3.selectbox(t("he_token_b"), top, index=min(1, len(top) - 1), key=f"he_b_{ctx.key}", format_func=name.get,
                     disabled=metric != "logit_diff")
    mode = c4.radio(t("iv_mode"), ABLATION_MODES, key="he_mode", format_func=lambda m: t(f"iv_mode_{m}"))
    if metric == "logit_diff" and a == b:
        st.info(t("he_same"), icon="👆")
        return
    n_parts = len(kinds(model)) * cfg.n_layers * cfg.n_heads + cfg.n_layers
    if param_counts(model)["total"] * n_parts > AUTO_SWEEP_WORK and not st.toggle(t("he_run", n=n_parts), key="he_run"):
        return  # a big model: hundreds of forwards of it, on request (a small one runs at once)
    try:
        with st.spinner(t("he_running", n=n_parts)):
            found = effects_of(*inputs(ctx), metric, int(a) if metric != "loss" else None,
                               int(b) if metric == "logit_diff" else None, mode)
    except Exception as exc:  # noqa: BLE001 - a message, never a traceback
        show_error(exc)
        return
    cut_note(found, ctx)
    res = found[0]
    rows = [(k, layer) for k in res.heads for layer in range(cfg.n_layers)]
    last = list(res.heads)[-1]  # the decoder's FFN sits beside its last attention block of each layer
    z = np.array([list(res.heads[k][layer]) + [res.ffn[layer] if k == last else np.nan] for k, layer in rows],
                 dtype=np.float32)
    span = float(np.nanmax(np.abs(z))) or 1.0
    columns = [str(h) for h in range(cfg.n_heads)] + ["FFN"]
    ticks = [t("hd_row", block=kind_name(k, model), layer=layer) for k, layer in rows]
    at = [(h, i) for i in range(len(rows)) for h in range(cfg.n_heads)]  # each head's (column, row), row by row
    cells = [[kind_name(rows[i][0], model), rows[i][1], h, rows[i][0]] for h, i in at]
    fig = head_grid(z, ticks, columns, at, customdata=cells, marker_text=[f"{z[i, h]:+.4f}" for h, i in at],
                    hovertemplate=t("he_hover") + "<extra></extra>", colorscale="RdBu", zmin=-span, zmax=span, zmid=0,
                    texttemplate=f"%{{z:{signed_format(span)}}}" if len(columns) <= 17 else None,
                    colorbar=t("he_change"), x_title=t("hd_col_head"), marker_px=22, row_px=40)
    picked = clicked(fig, "he_grid", trace_name="heads")
    if picked is not None:
        open_head(str(picked[3]), int(picked[1]), int(picked[2]))
    kind, layer, head, change = res.largest()
    what = t(f"he_metric_{metric}")
    st.markdown(t("he_summary", metric=what, intact=res.intact, block=kind_name(kind, model), layer=layer, head=head,
                  change=change, ffn=int(np.abs(res.ffn).argmax()), fchange=float(res.ffn[np.abs(res.ffn).argmax()])))
    st.caption(t("he_click"))
    export_panel(res, "head_effects", ctx, metric=metric, token_a=int(a) if metric != "loss" else None,
                 token_b=int(b) if metric == "logit_diff" else None, mode=mode)


st.title(t("nav_intervene"))
ctx = page_context()
ablation(ctx)
effects(ctx)
patching(ctx)
