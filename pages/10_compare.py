"""Compare two texts side by side through the same model: the next-token distribution, the per-token surprise and
one head's attention of text A (the sidebar's) and text B (typed here), with what differs highlighted."""

import numpy as np
import pandas as pd
import streamlit as st

from transformer_core.analysis.blocks import kinds
from transformer_core.analysis.compare import compare, extra_positions, score_pair
from transformer_core.model.memory import KEEP_NONE
from transformer_core.text.inputs import token_labels
from ui.answers import answer_picker, names_note, preset_names
from ui.errors import show_error
from ui.figures import (
    COLUMN_PX,
    DIVERGING,
    axis_labels,
    bars,
    md_visible,
    prob_text,
    quoted,
    ranked_labels,
    token_heatmap,
    visible,
)
from ui.guidance import try_these
from ui.i18n import sentences, t
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
    surprise_chips,
    text_b,
)
from ui.widgets import chart, delta, explain, table

through_app()
ss = st.session_state
TOP = 10


@st.cache_data(show_spinner=False, max_entries=64, ttl=1800)
def comparison(key, device, text, tgt, special, gen, text_b, tgt_b, kind: str, layer: int, head: int):
    model, prep = prep_for(key, device, text, tgt, special, gen, layer)
    prep_b = prepared(model, text_b, tgt_b, special, layer)
    with reserve(model, prep, prep_b, keep=layer):
        return compare(model, prep, prep_b, kind, layer, head, top=TOP), prep.longest, prep.cut_from


# --- text B (shared with the intervene page through the "_text_b" / "_tgt_b" keys, which outlive the widgets) ----

# --- chips coloured by surprise -----------------------------------------------------------------------------------

# --- the page -----------------------------------------------------------------------------------------------------

def selectors(model) -> tuple[str, int, int]:
    cfg, options = model.cfg, list(kinds(model))
    if ss.get("cmp_kind") not in options:
        ss.cmp_kind = ss.get("block") if ss.get("block") in options else options[-1]
    c1, c2, c3 = st.columns([3, 1, 1])
    kind = c1.selectbox(t("pt_kind"), options, key="cmp_kind", format_func=lambda k: kind_name(k, model))
    layer = c2.selectbox(t("pt_layer"), range(cfg.n_layers), key=f"cmp_layer_{cfg.n_layers}",
                         index=min(int(ss.get("layer", 0) or 0), cfg.n_layers - 1))
    head = c3.selectbox(t("pt_head"), range(cfg.n_heads), key=f"cmp_head_{cfg.n_heads}",
                        index=min(int(ss.get("head", 0) or 0), cfg.n_heads - 1))
    return kind, int(layer), int(head)


def side_view(model, side, name: str, other_ids, key: str, zmax: float) -> None:
    """One text's column: chips (each occurrence beyond the other text's count marked), loss, next token, the
    head's weights."""
    st.subheader(name)
    sur = side.surprise
    surprise_chips(side.labels, None if sur is None else sur.prob.tolist(), None if sur is None else sur.bits.tolist(),
                   mark=extra_positions(list(side.ids), list(other_ids)),
                   expected=None if sur is None else (sur.expected_labels, sur.expected_prob.tolist()))
    m1, m2 = st.columns(2)
    m1.metric(t("cmp_loss"), "—" if sur is None else f"{sur.mean_loss:.4f}")
    m2.metric(t("cmp_ppl"), "—" if sur is None else f"{sur.perplexity:.4g}")
    nt = side.next_token
    names = ranked_labels(token_labels(model, nt.ids))
    fig = bars(names, nt.raw, title=t("cmp_next_title"), y_title=t("cmp_col_prob"), x_title=t("cmp_col_prob"),
               height=max(260, 24 * len(names) + 100), hover_format=".4f", x_axis={"range": [0, 1]})
    chart(fig, f"cmp_next_{key}")
    q, k = axis_labels(side.query_labels), axis_labels(side.key_labels)
    chart(token_heatmap(side.weights.numpy(), q, k, title=t("cmp_attention_title"), zmin=0.0, zmax=zmax,
                        px_per_token=16, min_height=280, max_height=800, width_px=COLUMN_PX,
                        hovertemplate="%{y} → %{x}: %{z:.4f}<extra></extra>"), f"cmp_att_{key}")


def differences(model, comp) -> None:
    d = comp.diff
    top = md_visible(token_labels(model, [d.top_id])[0])  # in a metric's label and a sentence: markdown
    st.subheader(t("cmp_diff"))
    m1, m2, m3, m4 = st.columns(4)
    m1.metric(t("cmp_top", tok=top), f"{d.top_prob_b:.4f}", delta(d.top_prob_change), help=t("cmp_top_help"))
    m2.metric(t("cmp_tv"), f"{d.total_variation:.4f}", help=t("cmp_tv_help"))
    m3.metric(t("cmp_kl_ab"), f"{d.kl_ab:.4g}")
    m4.metric(t("cmp_kl_ba"), f"{d.kl_ba:.4g}")
    st.markdown(t("cmp_top_text", tok=top, pa=prob_text(d.top_prob_a), pb=prob_text(d.top_prob_b)))
    if d.same_tokens:  # as multisets: the same tokens the same number of times
        st.markdown(t("cmp_same_tokens"))
    else:
        st.markdown(t("cmp_more", a=counted(d.more_a, "a"), b=counted(d.more_b, "b")))


def counted(more: list[tuple[str, int, int]], side: str) -> str:
    """‘ Mary’ (2 in B, 1 in A), ‘ John’ (1 in B, 0 in A); — when none."""
    return t("list_sep").join(t(f"cmp_count_{side}", tok=md_visible(x), n=n, m=m) for x, n, m in more) or "—"


@st.cache_data(show_spinner=False, max_entries=64, ttl=1800)
def pair_of(key, device, text, tgt, special, gen, text_b, tgt_b, x: tuple, y: tuple):
    """Answers x and y (model ids) scored after A and after B."""
    model, prep = prep_for(key, device, text, tgt, special, gen, KEEP_NONE)
    prep_b = prepared(model, text_b, tgt_b, special, KEEP_NONE)
    with reserve(model, prep, prep_b, keep=KEEP_NONE):
        return score_pair(model, prep, prep_b, list(x), list(y))


def pair_section(ctx, comp, text_b: str, tgt_b: str | None) -> None:
    """Two answers the learner picks (A's top two by default, or any text), each scored after A and after B."""
    model = ctx.model
    st.subheader(t("cmp_pair_title"))
    st.caption(t("cmp_pair_intro"))
    top = list(comp.a.next_token.ids)
    ca, cb = st.columns(2)
    context = list(comp.a.ids)
    names = preset_names(st.session_state.get("text", ""), f"cmp_x_{ctx.key}", f"cmp_y_{ctx.key}")
    x = answer_picker(t("cmp_pair_x"), f"cmp_x_{ctx.key}", model, top, index=0, context=context, container=ca)
    y = answer_picker(t("cmp_pair_y"), f"cmp_y_{ctx.key}", model, top, index=1, context=context, container=cb)
    names_note(names, x, y, "XY")
    if x is None or y is None:
        return
    try:
        pair = pair_of(*inputs(ctx), text_b, tgt_b, x.answer.ids, y.answer.ids)
    except Exception as exc:  # noqa: BLE001 - no room for a long answer, or anything else: a message
        show_error(exc)
        return
    names = {"x": md_visible(x.answer.text), "y": md_visible(y.answer.text)}  # sentences drawn as markdown
    m1, m2, m3 = st.columns(3)
    m1.metric(t("cmp_pair_margin_a"), f"{pair.margin_a:+.3f}")
    m2.metric(t("cmp_pair_margin_b"), f"{pair.margin_b:+.3f}")
    m3.metric(t("cmp_pair_change"), f"{pair.margin_b - pair.margin_a:+.3f}")
    cols = {"a": t("cmp_pair_col_a"), "b": t("cmp_pair_col_b"), "pa": t("cmp_pair_col_pa"), "pb": t("cmp_pair_col_pb")}
    table(pd.DataFrame({
        t("cmp_pair_col_answer"): [quoted(x.answer.text), quoted(y.answer.text)],
        cols["a"]: list(pair.a), cols["b"]: list(pair.b),
        cols["pa"]: [float(np.exp(v)) for v in pair.a], cols["pb"]: [float(np.exp(v)) for v in pair.b],
    }), "compare_pair", formats={c: "%.4f" for c in cols.values()})
    st.markdown(sentences(*(prefers(pair, side, names) for side in ("a", "b")), t(
        "cmp_pair_moved", d=f"{pair.margin_b - pair.margin_a:+.3f}", x=names["x"], y=names["y"])))
    if len(x.answer) > 1 or len(y.answer) > 1:
        st.caption(t("cmp_pair_multi"))


def prefers(pair, side: str, names: dict) -> str:
    """After A (or B) the model prefers x to y by this margin (or y to x, or neither)."""
    margin = pair.margin_a if side == "a" else pair.margin_b
    win, lose = ("x", "y") if margin > 0 else ("y", "x")
    if margin == 0:
        return t(f"cmp_pair_tie_{side}", x=names["x"], y=names["y"])
    return t(f"cmp_pair_prefers_{side}", win=names[win], lose=names[lose], m=f"{abs(margin):.3f}")


def per_token(comp) -> None:
    """Per position: each text's token and the probability the model gave it; differing tokens marked."""
    a, b = comp.a, comp.b
    if a.surprise is None or b.surprise is None:
        st.caption(t("cmp_one_token"))
        return
    n = max(len(a.labels), len(b.labels))

    def col(side, i, what):
        if i >= len(side.labels):
            return None
        if what == "token":
            return visible(side.labels[i])
        return None if i == 0 else float(side.surprise.prob[i - 1])

    df = pd.DataFrame({
        t("cmp_col_pos"): list(range(n)),
        t("cmp_col_token_a"): [col(a, i, "token") for i in range(n)],
        t("cmp_col_p_a"): [col(a, i, "p") for i in range(n)],
        t("cmp_col_token_b"): [col(b, i, "token") for i in range(n)],
        t("cmp_col_p_b"): [col(b, i, "p") for i in range(n)],
    })
    df[t("cmp_col_diff")] = df[t("cmp_col_p_b")] - df[t("cmp_col_p_a")]
    df[t("cmp_col_same")] = [t("cmp_yes") if x == y else t("cmp_no") for x, y in
                             zip(df[t("cmp_col_token_a")], df[t("cmp_col_token_b")], strict=True)]
    table(df, "compare_surprise", formats={c: "%.4f" for c in (t("cmp_col_p_a"), t("cmp_col_p_b"), t("cmp_col_diff"))})


st.title(t("nav_compare"))
explain("cmp_intro")
try_these("compare", dict(model="shipped:repeat", text="d a c b g f d a c", text_b="d a c b g f d a b"),
          dict(model="shipped:reverse", text="d a c b", tgt="= b c a", text_b="b c a d", tgt_b="= d a c b"))
ctx = page_context()
model = ctx.model
text, tgt = text_b("cmp", model)
kind, layer, head = selectors(model)
if check_b(model, text, tgt) is None:
    st.stop()
try:
    with st.spinner(t("cmp_running")):  # seconds on a big model: never a still screen
        found = comparison(*inputs(ctx), text, tgt, kind, layer, head)
except Exception as exc:  # noqa: BLE001 - a message, never a traceback
    show_error(exc)
    st.stop()
cut_note(found, ctx)
comp = found[0]

differences(model, comp)
zmax = 1.0
for col, side, other, name, key in zip(st.columns(2), (comp.a, comp.b), (comp.b, comp.a),
                                       (t("cmp_a"), t("cmp_b")), ("a", "b"), strict=True):
    with col:
        side_view(model, side, name, other.ids, key, zmax)
st.caption(t("cmp_chips_note"))
wa, wb = comp.a.weights.numpy(), comp.b.weights.numpy()
if wa.shape == wb.shape:
    delta = wb - wa
    lim = float(np.abs(delta).max()) or 1.0
    fig = token_heatmap(delta, axis_labels(comp.a.query_labels), axis_labels(comp.a.key_labels),
                        title=t("cmp_delta_title"), colorscale=DIVERGING, zmin=-lim, zmax=lim, zmid=0.0,
                        px_per_token=16, min_height=280, max_height=800,
                        hovertemplate="%{y} → %{x}: %{z:+.4f}<extra></extra>")
    chart(fig, "cmp_delta")
else:
    st.caption(t("cmp_delta_shape"))
pair_section(ctx, comp, text, tgt)
st.subheader(t("cmp_per_token"))
per_token(comp)
export_panel(comp, "compare", ctx, text_b=text, target_b=tgt, kind=kind, layer=layer, head=head, top=TOP)
