"""Ablation and patching, live: switch off heads and FFNs and see the next token and the loss change against the
intact model; patch one head's output from a second text and see what moves. Every edit runs in this request's
own intervention context: the shared model is never changed."""
import numpy as np
import pandas as pd
import streamlit as st

from service import budget
from service.budget import MemoryBudgetError
from transformer_core.analysis.blocks import kinds, sides
from transformer_core.analysis.export import export_npz, notebook_snippet
from transformer_core.analysis.interventions import ABLATION_MODES, ALIGNMENTS, ablate, patch
from transformer_core.errors import ExplorerError
from transformer_core.model.memory import KEEP_NONE, trace_bytes
from transformer_core.text.inputs import prepare, token_labels
from ui import cache
from ui.errors import show_error
from ui.figures import axis_labels, bars, visible
from ui.i18n import t
from ui.session import page_context, through_app
from ui.widgets import chart, count_text, explain, file_stem, table

through_app()
ss = st.session_state
CUTS_SHOWN: set[str] = set()  # this run's notes that a section read fewer tokens (each said once)
TEXT_B_MAX = 20_000  # characters kept of text B (the model reads at most max_len tokens of it anyway)


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


def inputs(ctx) -> tuple:
    """What a cached computation depends on: model, device, text, target, special tokens, generated tokens."""
    tgt = ss.get("tgt") if ctx.model.is_encoder_decoder else None
    return ctx.key, ctx.device, ss.get("text", ""), tgt, bool(ss.get("allow_special")), tuple(ss.get("gen_ids") or ())


def _longest(prep) -> int:
    return max(prep.src_ids.size(1), 0 if prep.tgt_ids is None else prep.tgt_ids.size(1))


def _fit(model, prep, keep):
    """The input cut to what one task may hold in the server's memory budget when the analysis keeps `keep`
    (KEEP_ALL, a layer, KEEP_NONE); MemoryBudgetError when not even one token fits."""
    fits = budget.trace_tokens(model.cfg, _longest(prep), keep=keep)
    if fits < 1:
        raise MemoryBudgetError("memory_too_big", mb=budget.to_mb(trace_bytes(model.cfg, 1, 1, keep=keep)),
                                limit=budget.to_mb(budget.task_limit()), setting=budget.SETTING_NAME)
    return prep.cut(fits)


def _prep(key, device, text, tgt, special, gen, keep):
    """The shared model and the sidebar's input for it, cut to what fits (see _fit)."""
    model, _ = cache.get_model(key, device)
    return model, _fit(model, prepare(model, text, tgt, allow_special=special, extra=gen), keep)


def _reserve(model, *preps, keep):
    """Hold the memory of one traced forward of the longest of these inputs while the analysis runs."""
    n_src = max(p.src_ids.size(1) for p in preps)
    n_tgt = None if preps[0].tgt_ids is None else max(p.tgt_ids.size(1) for p in preps)
    return budget.trace_reservation(model.cfg, n_src, n_tgt, keep=keep)


def cut_note(result, ctx) -> None:
    """Say so when the analysis read fewer tokens than the page's trace (a long text on a big model)."""
    _, n, total = result
    text = t("err.trace_cut", n=n, total=total, limit=budget.to_mb(budget.task_limit()))
    if total is not None and n < _longest(ctx.prep) and text not in CUTS_SHOWN:
        CUTS_SHOWN.add(text)
        st.warning(text, icon="✂️")


@st.cache_data(show_spinner=False, max_entries=64, ttl=1800)
def ablation_of(key, device, text, tgt, special, gen, heads: tuple, ffns: tuple, mode: str):
    model, prep = _prep(key, device, text, tgt, special, gen, KEEP_NONE)
    with _reserve(model, prep, keep=KEEP_NONE):
        return ablate(model, prep, list(heads), list(ffns), mode=mode), _longest(prep), prep.cut_from


@st.cache_data(show_spinner=False, max_entries=64, ttl=1800)
def patch_of(key, device, text, tgt, special, gen, text_b, tgt_b, kind: str, layer: int, head: int, align: str):
    model, prep = _prep(key, device, text, tgt, special, gen, layer)
    prep_b = _fit(model, prepare(model, text_b, tgt_b, allow_special=special), layer)
    with _reserve(model, prep, prep_b, keep=layer):
        return patch(model, prep, prep_b, kind, layer, head, align=align), _longest(prep), prep.cut_from


# --- text B (shared with the compare page through the "_text_b" / "_tgt_b" keys, which outlive the widgets) ----

def _default_b(text: str) -> str:
    """A second text to start from: the sidebar's words in reverse order (its characters, for one word)."""
    words = text.split()
    return " ".join(reversed(words)) if len(words) > 1 else text[::-1]


def _keep_b(widget: str, shadow: str) -> None:
    value = ss.get(widget) or ""
    if len(value) > TEXT_B_MAX:
        ss[widget] = value = value[:TEXT_B_MAX]
        ss["_text_b_cut"] = True
    ss[shadow] = value


def text_b(prefix: str, model) -> tuple[str, str | None]:
    """Text area(s) for text B (and its target, for an encoder-decoder model); their values."""
    widgets = {"_text_b": (f"{prefix}_text_b", _default_b(ss.get("text", ""))),
               "_tgt_b": (f"{prefix}_tgt_b", ss.get("tgt") or "")}
    for shadow, (widget, default) in widgets.items():
        if widget not in ss:
            ss[widget] = ss.get(shadow, default)
    st.text_area(t("tb_text"), key=f"{prefix}_text_b", height=80, help=t("tb_help"), on_change=_keep_b,
                 args=(f"{prefix}_text_b", "_text_b"))
    tgt = None
    if model.is_encoder_decoder:
        st.text_area(t("tb_tgt"), key=f"{prefix}_tgt_b", height=70, on_change=_keep_b,
                     args=(f"{prefix}_tgt_b", "_tgt_b"))
        tgt = ss[f"{prefix}_tgt_b"]
    if ss.pop("_text_b_cut", False):
        st.caption(t("tb_cut", n=f"{TEXT_B_MAX:,}"))
    return ss[f"{prefix}_text_b"], tgt


def check_b(model, text: str, tgt: str | None):
    """Text B prepared for the model, or None after a clear message."""
    if not text.strip():
        st.warning(t("tb_empty"), icon="✍️")
        return None
    if model.is_encoder_decoder and not (tgt or "").strip():
        st.warning(t("tb_tgt_empty"), icon="✍️")
        return None
    try:
        prep = prepare(model, text, tgt, allow_special=bool(ss.get("allow_special")))
    except Exception as exc:  # noqa: BLE001 - a text the model cannot read, a broken tokenizer: a message
        show_error(exc)
        return None
    if prep.src.truncated or (prep.tgt is not None and prep.tgt.truncated):
        st.info(t("tb_truncated", n=model.cfg.max_len), icon="✂️")
    return prep


# --- the page ---------------------------------------------------------------------------------------------------

def kind_name(kind: str, model) -> str:
    return t("hd_kind_gpt_self") if not model.is_encoder_decoder else t(f"hd_kind_{kind}")


def head_option(option: str, model) -> str:
    kind, layer, head = option.split(":")
    return t("hd_head_name", block=kind_name(kind, model), layer=layer, head=head)


def ffn_option(option: str, model) -> str:
    side, layer = option.split(":")
    return t("iv_ffn_name", side=t(f"iv_side_{side}") if model.is_encoder_decoder else t("iv_side_gpt"), layer=layer)


def moved_chart(model, eff, key: str, edited_name: str) -> None:
    """The tokens whose next-token probability moved most: intact and edited bars, and the same as a table."""
    names = axis_labels([visible(x) for x in token_labels(model, [m[0] for m in eff.moved])])
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
              f"{eff.top_prob_edited - eff.top_prob_intact:+.4f}")
    m3.metric(t("iv_row_kl"), f"{eff.kl:.4g}")
    table(df, key, formats={c: "%.4f" for c in (t("iv_col_intact"), t("iv_col_edited"), t("iv_col_change"))})
    if eff.loss_intact is None:
        st.caption(t("iv_one_token"))
    for col, dist, name, which in zip(st.columns(2), (eff.intact, eff.edited), (t("iv_top_intact"), t("iv_top_edited")),
                                      ("intact", "edited"), strict=True):
        with col:
            st.markdown(f"**{name}**")
            table(pd.DataFrame({t("iv_col_token"): axis_labels([visible(x) for x in token_labels(model, dist.ids)]),
                                t("iv_col_prob"): dist.raw}), f"{key}_{which}_top", formats={t("iv_col_prob"): "%.4f"})


def ablation(ctx) -> None:
    model, cfg = ctx.model, ctx.model.cfg
    st.header(t("iv_title"))
    explain("iv_intro")
    st.caption(t("iv_look"))
    heads = [f"{k}:{layer}:{h}" for k in kinds(model) for layer in range(cfg.n_layers) for h in range(cfg.n_heads)]
    ffns = [f"{s}:{layer}" for s in sides(model) for layer in range(cfg.n_layers)]
    c1, c2 = st.columns(2)
    picked_heads = c1.multiselect(t("iv_heads"), heads, key=f"iv_heads_{ctx.key}",
                                  format_func=lambda o: head_option(o, model))
    picked_ffns = c2.multiselect(t("iv_ffns"), ffns, key=f"iv_ffns_{ctx.key}",
                                 format_func=lambda o: ffn_option(o, model))
    mode = st.radio(t("iv_mode"), ABLATION_MODES, key="iv_mode", horizontal=True,
                    format_func=lambda m: t(f"iv_mode_{m}"))
    if not picked_heads and not picked_ffns:
        st.info(t("iv_pick"), icon="👆")
        return
    head_list = tuple((k, int(layer), int(h)) for k, layer, h in (o.split(":") for o in picked_heads))
    ffn_list = tuple((s, int(layer)) for s, layer in (o.split(":") for o in picked_ffns))
    try:
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
    st.caption(t("pt_look"))
    text, tgt = text_b("iv", model)
    options = list(kinds(model))
    if ss.get("iv_pt_kind") not in options:
        ss.iv_pt_kind = options[-1]
    c1, c2, c3, c4 = st.columns([3, 1, 1, 3])
    kind = c1.selectbox(t("pt_kind"), options, key="iv_pt_kind", format_func=lambda k: kind_name(k, model))
    layer = c2.selectbox(t("pt_layer"), range(cfg.n_layers), index=cfg.n_layers - 1, key=f"iv_pt_layer_{cfg.n_layers}")
    head = c3.selectbox(t("pt_head"), range(cfg.n_heads), key=f"iv_pt_head_{cfg.n_heads}")
    align = c4.radio(t("pt_align"), ALIGNMENTS, key="iv_pt_align", horizontal=True,
                     format_func=lambda a: t(f"pt_align_{a}"), help=t("pt_align_help"))
    if check_b(model, text, tgt) is None:
        return
    try:
        found = patch_of(*inputs(ctx), text, tgt, kind, int(layer), int(head), align)
    except Exception as exc:  # noqa: BLE001 - unequal lengths for "exact", and anything else: a message
        show_error(exc)
        return
    cut_note(found, ctx)
    result = found[0]
    b_top = visible(token_labels(model, [result.source_top_id])[0])
    p0, p1 = result.source_top_in_a
    m1, m2 = st.columns(2)
    m1.metric(t("pt_b_top", tok=b_top), f"{p1:.4f}", f"{p1 - p0:+.4f}")
    m2.metric(t("iv_row_kl"), f"{result.effect.kl:.4g}")
    st.markdown(count_text("pt_result", len(result.positions), tok=b_top, p0=f"{p0:.4f}", p1=f"{p1:.4f}"))
    summary(model, result.effect, "patch_summary")
    moved_chart(model, result.effect, "iv_patch", t("pt_patched"))
    export_panel(result, "patch", ctx, text_b=text, target_b=tgt, kind=kind, layer=int(layer), head=int(head),
                 align=align)


st.title(t("nav_intervene"))
ctx = page_context()
ablation(ctx)
patching(ctx)
