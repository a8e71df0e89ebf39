"""Head catalogue: every head of every layer labelled with what it mostly looks at (on the learner's text, and on a
random sequence repeated twice for induction); a click opens its attention map. Then attention sinks: heads that
park their weight on the first token, and what removing that weight does to the output."""
import numpy as np
import pandas as pd
import streamlit as st

from transformer_core.analysis.heads import (
    CROSS_PATTERNS,
    SELF_PATTERNS,
    THRESHOLD,
    default_length,
    detect_heads,
    probe_count,
)
from transformer_core.analysis.sinks import find_sinks, remove_sink
from transformer_core.model.memory import KEEP_ALL
from transformer_core.text.inputs import sequence_labels, token_labels
from ui import cache
from ui.errors import show_error
from ui.figures import COLUMN_PX, axis_labels, bars, lines, token_heatmap, visible
from ui.guidance import heads_hint, sinks_hint
from ui.head_grid import head_grid
from ui.i18n import sentences, t
from ui.nav import open_head
from ui.own_words import pick_many
from ui.session import page_context, through_app
from ui.tools import cut_note, export_panel, head_rows, inputs, kind_name, prep_for, probe_length, reserve
from ui.widgets import chart, clicked, count_text, explain, table

through_app()
ss = st.session_state
NONE = "none"  # the label of a head with no pattern above the threshold


@st.cache_data(show_spinner=False, max_entries=32, ttl=1800)
def heads_of(key, device, text, tgt, special, gen, length: int, threshold: float):
    """(records, tokens read, tokens before a cut or None, the probe's length used). A big model on a small
    memory budget gets a shorter probe (what one task may trace; the caption says which length was used)."""
    model, prep = prep_for(key, device, text, tgt, special, gen, KEEP_ALL)
    length = probe_length(model, length)
    with reserve(model, prep, keep=KEEP_ALL, at_least=2 * length):  # the text, or one probe sequence
        records = detect_heads(model, prep, threshold=threshold, length=length, count=probe_count(model, length),
                               induction=cache.induction_by_block(key, device, length))
    return records, prep.longest, prep.cut_from, length


@st.cache_data(show_spinner=False, max_entries=32, ttl=1800)
def first_weights(key, device, text, tgt, special, gen):
    """(every head's mean weight on the first token, strongest first; tokens read; tokens before a cut or None)."""
    model, prep = prep_for(key, device, text, tgt, special, gen, KEEP_ALL)
    with reserve(model, prep, keep=KEEP_ALL):
        return find_sinks(model, prep, threshold=0.0), prep.longest, prep.cut_from


@st.cache_data(show_spinner=False, max_entries=32, ttl=1800)
def sink_removal(key, device, text, tgt, special, gen, kind: str, layer: int, head: int):
    model, prep = prep_for(key, device, text, tgt, special, gen, layer)
    with reserve(model, prep, keep=layer):
        return remove_sink(model, prep, kind, layer, head), prep.longest, prep.cut_from


def head_name(kind: str, layer: int, head: int, model) -> str:
    return t("hd_head_name", block=kind_name(kind, model), layer=layer, head=head)


def label_names(r) -> str:
    """The head's labels by name (the text's, then the probe's), or "none"."""
    return " + ".join(t(f"hd_pat_{k}") for k in r.labels) or t(f"hd_pat_{NONE}")


def labels_grid(records, model):
    """Every head in the grid of ui.head_grid. Colour = its label's score (else its best score on the text); text =
    its label (the pattern of its highest score above the threshold: one per cell), or for a head with no pattern
    above the threshold its best pattern in brackets with that score on hover."""
    rows = list(dict.fromkeys((r.kind, r.layer) for r in records))
    n_heads = model.cfg.n_heads
    z = np.full((len(rows), n_heads), np.nan, dtype=np.float32)
    text = np.full((len(rows), n_heads), "", dtype=object)
    for r in records:
        best, score = r.best
        z[rows.index((r.kind, r.layer)), r.head] = r.strength if r.labels else score
        text[rows.index((r.kind, r.layer)), r.head] = (t(f"hd_short_{r.label}") if r.label  # its highest score's
                                                       else f"({t(f'hd_short_{best}')})" if best else "")
    font = 11 if n_heads <= 8 else 9 if n_heads <= 12 else 8
    hover = [f"{head_name(r.kind, r.layer, r.head, model)}<br>{t('hd_col_label')}: {label_names(r)}"
             f"<br>{t('hd_col_best')}: {t(f'hd_pat_{r.best[0]}') if r.best[0] else '—'} {r.best[1]:.3f}"
             for r in records]
    names, block = head_rows(rows, model)
    return head_grid(z, names, None,
                     [(r.head, rows.index((r.kind, r.layer))) for r in records], customdata=list(range(len(records))),
                     hover=hover, hovertemplate="%{hovertext}<extra></extra>", text=text.tolist(),
                     texttemplate="%{text}", font_size=font, colorbar=t("hd_col_best"), x_title=t("hd_col_head"),
                     y_title=block, title=t("hd_chart_title"))


def catalogue(ctx) -> None:
    model, cfg = ctx.model, ctx.model.cfg
    patterns = [*SELF_PATTERNS, *(CROSS_PATTERNS if model.is_encoder_decoder else ())]
    patterns = list(dict.fromkeys(patterns))
    hi_len = min(cfg.max_len // 2, 64)
    with st.expander(t("hd_settings")):
        c1, c2 = st.columns(2)
        default_len = min(hi_len, default_length(model))  # the probe of the Attention page and the model card
        length = int(c1.slider(t("hd_length"), 2, max(hi_len, 3), default_len, key=f"hd_length_{hi_len}",
                               help=t("hd_length_help"), disabled=hi_len < 3))
        length = min(length, hi_len)
        threshold = float(c2.slider(t("hd_threshold"), 0.05, 0.95, THRESHOLD, 0.05, key="hd_threshold",
                                    help=t("hd_threshold_help")))
    try:
        with st.spinner(t("hd_running")):
            found = heads_of(*inputs(ctx), length, threshold)
    except Exception as exc:  # noqa: BLE001 - a message, never a traceback
        show_error(exc)
        return
    cut_note(found[:3], ctx)
    records, length = found[0], found[3]
    labelled = [r for r in records if r.labels]
    st.markdown(t("hd_count", n=len(labelled), total=len(records), thr=threshold))
    heads_hint(records, threshold, lambda r: head_name(r.kind, r.layer, r.head, model))
    picked = clicked(labels_grid(records, model), "hd_grid", trace_name="heads")
    if picked is not None:
        r = records[int(picked)]
        open_head(r.kind, r.layer, r.head)
    st.caption(t("hd_click_hint"))

    options = [*patterns, NONE]
    shown = pick_many(st, t("hd_filter"), options, default=options, key=f"hd_filter_{len(options)}",
                      format_func=lambda p: t(f"hd_pat_{p}"))
    keep = [r for r in records if set(r.labels or (NONE,)) & set(shown)]
    present = [p for p in patterns if any(r.scores.get(p) is not None for r in records)]
    df = pd.DataFrame({
        t("hd_col_block"): [kind_name(r.kind, model) for r in keep],
        t("hd_col_layer"): [r.layer for r in keep],
        t("hd_col_head"): [r.head for r in keep],
        t("hd_col_label"): [label_names(r) for r in keep],
        t("hd_col_score"): [r.strength for r in keep],
        t("hd_col_best_text"): [f"{t(f'hd_pat_{r.best[0]}')} {r.best[1]:.3f}" if r.best[0] else "—" for r in keep],
        **{t(f"hd_pat_{p}"): [r.scores.get(p) for r in keep] for p in present},
    })
    table(df, "head_catalogue", formats={c: "%.3f" for c in [t("hd_col_score"), *(t(f"hd_pat_{p}") for p in present)]})
    st.caption(sentences(t("hd_sort_hint"), t("hd_probe_note", count=probe_count(model, length), length=length)))

    c1, c2 = st.columns([3, 1])
    choice = c1.selectbox(t("hd_open_pick"), range(len(records)), key=f"hd_open_{len(records)}",
                          format_func=lambda i: head_name(records[i].kind, records[i].layer, records[i].head, model)
                          + f" · {label_names(records[i])}")
    if c2.button(t("hd_open_button"), key="hd_open_button", icon=":material/visibility:"):
        r = records[choice]
        open_head(r.kind, r.layer, r.head)
    export_panel(records, "heads", ctx, threshold=threshold, length=length, count=probe_count(model, length),
                 seed=0)


def labels_of(ctx, kind: str) -> tuple[list[str], list[str]]:
    """(query labels, key labels) of a kind of attention."""
    model, trace = ctx.model, ctx.trace
    src = axis_labels(sequence_labels(model, trace.src_ids[0].tolist()))
    dec = axis_labels(sequence_labels(model, trace.decoder_ids.tolist()))
    return (src if kind == "enc_self" else dec), (dec if kind == "dec_self" else src)


KL_SMALL = 0.01  # nats: a mean KL over the text and a loss change both below this "barely move" the predictions


def sinks(ctx) -> None:
    model = ctx.model
    st.header(t("sk_title"))
    explain("sk_intro")
    thr = float(st.slider(t("sk_threshold"), 0.05, 0.95, 0.5, 0.05, key="sk_threshold"))
    try:
        weights = first_weights(*inputs(ctx))
    except Exception as exc:  # noqa: BLE001
        show_error(exc)
        return
    cut_note(weights, ctx)
    every = weights[0]
    sinks_hint(every, lambda s: head_name(s.kind, s.layer, s.head, model), thr, KL_SMALL)
    found = [s for s in every if s.first_weight > thr]
    if found:
        st.markdown(count_text("sk_found", len(found), thr=thr))
        table(pd.DataFrame({
            t("hd_col_block"): [kind_name(s.kind, model) for s in found],
            t("hd_col_layer"): [s.layer for s in found],
            t("hd_col_head"): [s.head for s in found],
            t("sk_col_weight"): [s.first_weight for s in found],
        }), "attention_sinks", formats={t("sk_col_weight"): "%.4f"})
    else:
        best = every[0].first_weight if every else 0.0
        st.info(sentences(t("sk_none", thr=thr, best=f"{best:.3f}"), t("sk_none_why")), icon="ℹ️")
    export_panel(found, "sinks", ctx, threshold=thr)
    choices = found or every[:8]
    if not choices:
        return
    i = st.selectbox(t("sk_pick"), range(len(choices)), key=f"sk_pick_{len(choices)}_{len(found)}",
                     format_func=lambda j: f"{head_name(choices[j].kind, choices[j].layer, choices[j].head, model)}"
                     f" · {choices[j].first_weight:.3f}")
    s = choices[i]
    try:
        removal = sink_removal(*inputs(ctx), s.kind, s.layer, s.head)[0]
    except Exception as exc:  # noqa: BLE001
        show_error(exc)
        return
    eff = removal.effect
    top = visible(token_labels(model, [eff.top_id])[0])
    m1, m2, m3, m4 = st.columns(4)
    m1.metric(t("sk_top", tok=top), f"{eff.top_prob_edited:.4f}", f"{eff.top_prob_edited - eff.top_prob_intact:+.4f}")
    m2.metric(t("sk_kl"), f"{eff.kl:.4g}")
    m3.metric(t("sk_kl_mean"), f"{removal.mean_kl:.4g}")
    m4.metric(t("sk_loss"), "—" if eff.loss_change is None else f"{eff.loss_change:+.4f}")
    # one verdict over the whole text (the positions the loss is taken over), the last position's KL cited beside
    loss = eff.loss_change
    changes = {"kl": f"{eff.kl:.2g}", "kl_mean": f"{removal.mean_kl:.2g}", "n": len(removal.kl_positions),
               "loss": "—" if loss is None else f"{loss:+.4f}", "small": f"{KL_SMALL:g}",
               "block": f"{100 * removal.largest_change('block'):.0f}",
               "layer": f"{100 * removal.largest_change('layer'):.0f}", "thr": f"{thr:.2f}",
               "weight": f"{s.first_weight:.3f}", "emptied": int(removal.emptied.sum())}
    if s.first_weight <= thr:  # not a sink by the stated measure: no claim about parked weight
        verdict = "sk_verdict_not_sink"
    else:
        small = removal.mean_kl < KL_SMALL and (loss is None or abs(loss) < KL_SMALL)
        verdict = "sk_verdict_small" if small else "sk_verdict_big"
    emptied = "sk_emptied_note_one" if changes["emptied"] == 1 else "sk_emptied_note"  # "1 row", not "1 row(s)"
    st.markdown(sentences(t(verdict, **changes), t(emptied, **changes) if changes["emptied"] else ""))
    q_lab, k_lab = labels_of(ctx, s.kind)
    kw = {"zmin": 0.0, "zmax": 1.0, "px_per_token": 16, "min_height": 280, "max_height": 700, "width_px": COLUMN_PX,
          "hovertemplate": "%{y} → %{x}: %{z:.4f}<extra></extra>"}
    for col, w, title, key in zip(st.columns(2), (removal.weights_before, removal.weights_after),
                                  (t("sk_before"), t("sk_after")), ("sk_before", "sk_after"), strict=True):
        with col:
            chart(token_heatmap(w.numpy(), q_lab, k_lab, title=title, **kw), key)
    chart(lines(q_lab, {t("sk_block_change"): removal.block_change.numpy(),
                        t("sk_layer_change"): removal.layer_change.numpy()},
                title=t("sk_change_title"), x_title=t("sk_axis_query"), y_title=t("sk_axis_change"), height=300),
          "sk_change")
    names = [visible(x) for x in token_labels(model, [m[0] for m in eff.moved])]
    chart(bars(axis_labels(names), [m[1] for m in eff.moved], title=t("sk_next"), y_title=t("sk_intact"),
               x_title=t("sk_axis_prob"), secondary=(t("sk_removed"), [m[2] for m in eff.moved]),
               height=max(260, 26 * len(names) + 100), hover_format=".4f"), "sk_next")
    st.caption(t("sk_moved_note"))
    export_panel(removal, "remove_sink", ctx, kind=s.kind, layer=s.layer, head=s.head)


st.title(t("nav_heads"))
explain("hd_intro")
ctx = page_context()
catalogue(ctx)
sinks(ctx)
