"""FFN & residual stream: how big the stream is after every sub-layer, what attention and the FFN each add,
what a LayerNorm does to one token, and which FFN neurons fire for it."""
import html

import numpy as np
import pandas as pd
import streamlit as st

from transformer_core.analysis.architecture import ACT_NAMES, NORM_NAMES
from transformer_core.analysis.neurons import SEARCH_TOP, neurons_for_token, read_neuron, token_search
from transformer_core.analysis.residual import (
    GATE_OPEN,
    active_fraction,
    gate_up,
    layer_norm_effect,
    norm_check,
    norm_pair,
    stream,
    top_neurons,
)
from transformer_core.errors import ExplorerError
from transformer_core.text.inputs import real_ids, sequence_labels, token_labels
from transformer_core.text.tokenizer import load_encoding, piece_of, token_bytes
from ui import cache
from ui.errors import show_error
from ui.figures import axis_labels, bars, md_quoted, plain, token_heatmap, visible
from ui.guidance import ffn_hint
from ui.i18n import t
from ui.own_words import number_box
from ui.parts import parts_table
from ui.plain_figures import figure
from ui.session import page_context, through_app
from ui.tools import export_panel
from ui.widgets import chart, explain, in_rows, table

through_app()
ss = st.session_state
ACT_TEX = {a: r"\max(0,\, {})" if a == "relu" else rf"\mathrm{{{{{name}}}}}({{}})" for a, name in ACT_NAMES.items()}


def formula(cfg) -> str:
    """The Add & Norm and the FFN as this model computes them: pre- or post-norm, its norm, activation and biases."""
    norm = rf"\mathrm{{{NORM_NAMES[cfg.norm]}}}"
    block = (rf"x \leftarrow x + \mathrm{{Sublayer}}\big({norm}(x)\big)" if cfg.norm_first else
             rf"x \leftarrow {norm}\big(x + \mathrm{{Sublayer}}(x)\big)")
    act = ACT_TEX[cfg.activation]
    b1, b2 = (" + b_1", " + b_2") if cfg.linear_bias else ("", "")
    gate, hidden = act.format(r"W_{gate}\,x"), act.format("W_1 x" + b1)  # (3.11: no backslash inside an f-string's {})
    ffn = rf"W_{{down}}\big({gate} \odot W_{{up}}\,x\big)" if cfg.ffn == "gated" else rf"W_2\,{hidden}{b2}"
    return rf"{block},\qquad \mathrm{{FFN}}(x) = {ffn}"


st.title(t("nav_ffn"))
ctx = page_context()
model, cfg, trace = ctx.model, ctx.model.cfg, ctx.trace
gated = cfg.ffn == "gated"
explain("ffn_intro", formula(cfg))
with st.expander(t("ffn_parts")):
    parts_table(cfg, ("norm", "ffn"))
side = "decoder"
if model.is_encoder_decoder:
    side = st.radio(t("ffn_side"), ["encoder", "decoder"], horizontal=True, key="ffn_side",
                    format_func=lambda s: t(f"ffn_side_{s}"))
ids = (trace.src_ids if side == "encoder" else trace.decoder_ids[None])[0]
labels = axis_labels(sequence_labels(model, ids))
steps = stream(trace, side, cfg.n_layers)
names = [t("ffn_step_embed") if s.layer is None else t("ffn_step", layer=s.layer, sub=t(f"ffn_sub_{s.sublayer}"))
         for s in steps]

norms = np.stack([s.norm.numpy() for s in steps], axis=1)  # (T, steps)
mean = norms.mean(0)  # (steps,) the chart's line, and what the hint says of it
ffn_hint(steps, names, mean, cfg.norm_first)
st.subheader(t("ffn_stream"))
st.markdown(t("ffn_stream_text", norm=t("ffn_norm_post" if not cfg.norm_first else "ffn_norm_pre")))
fig = figure([dict(type="scatter", x=names, y=mean, mode="lines+markers", name=t("ffn_mean_norm"))],
             {"height": 320, "margin": dict(l=10, r=10, t=30, b=10), "yaxis": {"title": t("ffn_norm_axis")}})
chart(fig, "ffn_stream_mean")
heat = token_heatmap(norms, labels, names, title=t("ffn_stream_tokens"), colorscale="Viridis", px_per_token=16,
                     hovertemplate=f"%{{y}} · %{{x}}<br>{t('ffn_norm_axis')} %{{z:.3f}}<extra></extra>")
heat.update_xaxes(tickvals=list(range(len(names))), ticktext=names)
chart(heat, "ffn_stream_tokens")

st.subheader(t("ffn_added"))
st.markdown(t("ffn_added_text"))
rows = [s for s in steps if s.added is not None]
added = pd.DataFrame({
    t("ffn_col_step"): [names[steps.index(s)] for s in rows],
    t("ffn_col_added"): [float(s.added.mean()) for s in rows],
    t("ffn_col_stream"): [float(s.norm.mean()) for s in rows],
})
chart(bars(added[t("ffn_col_step")].tolist(), added[t("ffn_col_added")].tolist(), x_title=t("ffn_col_added"),
           height=max(260, 28 * len(rows) + 80), secondary=(t("ffn_col_stream"), added[t("ffn_col_stream")].tolist())),
      "ffn_added")
table(added, "ffn_added", formats={t("ffn_col_added"): "%.3f", t("ffn_col_stream"): "%.3f"})

st.subheader(t("ffn_one_token"))
c1, c2 = st.columns(2)
position = c1.selectbox(t("ffn_token"), range(len(labels)), index=len(labels) - 1, format_func=lambda i: labels[i],
                        key=f"ffn_token_{len(labels)}")
layer = c2.selectbox(t("att_layer"), range(cfg.n_layers), key="ffn_layer")
ffn_step = next(s for s in steps if s.layer == layer and s.sublayer.endswith("ffn"))
effect = layer_norm_effect(ffn_step, position)
norm_name = NORM_NAMES[cfg.norm]
if effect is not None:
    st.markdown(t("ffn_ln_text", mi=effect.mean_in, si=effect.std_in, ni=effect.norm_in, mo=effect.mean_out,
                  so=effect.std_out, no=effect.norm_out, norm=norm_name))
    pair = norm_pair(ffn_step.ln_in[position], cfg.layer_norm_eps)
    st.markdown(t("ffn_two_norms", mean=pair.mean, std=pair.std, rms=pair.rms, norm=norm_name, diff=pair.difference))
    if (check := norm_check(model, ffn_step, side, position, pair)) is not None:  # pre-norm: what the FFN reads
        gap, has_bias = check
        st.caption(t("ffn_two_norms_check" + ("_bias" if has_bias else ""), norm=norm_name, gap=gap))
    n_show = min(64, pair.x.numel())
    dims = list(range(n_show))
    fig = figure([dict(type="scatter", x=dims, y=pair.x[:n_show].tolist(), mode="lines+markers",
                          name=t("ffn_ln_before")),
                     dict(type="scatter", x=dims, y=pair.layer_norm[:n_show].tolist(), mode="lines+markers",
                                name=t("ffn_legend_ln")),
                     dict(type="scatter", x=dims, y=pair.rms_norm[:n_show].tolist(), mode="lines+markers",
                                name=t("ffn_legend_rms"))],
                 {"height": 300, "margin": dict(l=10, r=10, t=30, b=10), "xaxis": {"title": t("emb_axis_dim")},
                  "yaxis": {"title": t("ffn_feature_value")}})
    chart(fig, "ffn_two_norms")
if gated:
    st.subheader(t("ffn_swiglu"))
    gu = gate_up(trace, side, layer, position)
    g, u, h, top = gu.gate, gu.up, gu.product, gu.top
    st.markdown(t("ffn_swiglu_text", n=g.numel(), open=gu.open_share * 100, thr=f"{GATE_OPEN:g}",
                  low=f"{float(g.min()):.2f}", high=f"{float(g.max()):.2f}"))
    fig = figure([dict(type="scatter", x=g.tolist(), y=u.tolist(), mode="markers", marker=dict(
        size=5, color=h.tolist(), colorscale="RdBu", cmid=0, colorbar=dict(title="gate·up")),
        customdata=list(range(g.numel())),
        hovertemplate=f"#%{{customdata}}<br>{t('ffn_col_gate')} %{{x:.3f}} · {t('ffn_col_up')} %{{y:.3f}}"
                      "<extra></extra>")],
                 {"height": 380, "margin": dict(l=10, r=10, t=30, b=10), "xaxis": {"title": t("ffn_gate_axis")},
                  "yaxis": {"title": t("ffn_up_axis")}})
    chart(fig, "ffn_gate_up")
    table(pd.DataFrame({t("ffn_col_neuron"): top, t("ffn_col_gate"): [float(g[i]) for i in top],
                        t("ffn_col_up"): [float(u[i]) for i in top], t("ffn_col_product"): [float(h[i]) for i in top]}),
          f"ffn_swiglu_{layer}_{position}", formats={t("ffn_col_gate"): "%.4f", t("ffn_col_up"): "%.4f",
                                                     t("ffn_col_product"): "%.4f"})
neurons = top_neurons(trace, side, layer, position, k=12)
frac = active_fraction(trace, side, layer)
st.markdown(t("ffn_neurons_text", d_ffn=cfg.d_ffn, act=cfg.activation, frac=(frac or 0.0) * 100))
if neurons:
    df = pd.DataFrame({t("ffn_col_neuron"): [n for n, _ in neurons], t("ffn_col_activation"): [v for _, v in neurons]})
    table(df, f"ffn_neurons_{layer}_{position}", formats={t("ffn_col_activation"): "%.4f"})


def byte_pieces(ids: list[int], names: list[str]) -> list[str]:
    """For each listed token that is only part of a character: which characters it can begin, or that it ends one."""
    enc = load_encoding(cfg.encoding)
    out = []
    for real, name in zip(real_ids(model, ids), names, strict=True):
        piece = piece_of(token_bytes(enc, real) or b"")
        if piece is not None:
            out.append(t("nr_piece_begins", tok=md_quoted(name), n=f"{int(piece[3]):,}", first=md_quoted(piece[1]),
                         last=md_quoted(piece[2]))
                       if piece[0] == "begins" else t("nr_piece_ends", tok=md_quoted(name)))
    return list(dict.fromkeys(out))


def linked_neuron() -> tuple[int, int] | None:
    """(layer, neuron) the URL's nlayer / neuron name (ui.state mirrors them), when both are inside this model."""
    layer_, neuron_ = ss.get("nr_layer"), ss.get("nr_neuron")
    if isinstance(layer_, int) and isinstance(neuron_, int) and 0 <= layer_ < cfg.n_layers and 0 <= neuron_ < cfg.d_ffn:
        return layer_, neuron_
    return None


def remember(widget: str, name: str) -> None:
    """A neuron picked here goes into the link (the sidebar writes the URL after this callback)."""
    ss[name] = int(ss[widget])
    ss[{"nr_layer": "nr_neuron", "nr_neuron": "nr_layer"}[name]] = int(
        ss.get(f"nr_neuron_{cfg.d_ffn}" if name == "nr_layer" else f"nr_layer_{cfg.n_layers}", 0))


def pick(layer_: int, neuron_: int) -> None:
    """A neuron found by a token: the pickers start on it (their state dropped) and it goes into the link."""
    ss["nr_layer"], ss["nr_neuron"] = int(layer_), int(neuron_)
    for widget in (f"nr_layer_{cfg.n_layers}", f"nr_neuron_{cfg.d_ffn}"):
        if widget in ss:
            del ss[widget]


def find_neurons(index) -> None:
    """Which neurons fire most on a token of the held-out text (by mean or largest activation); each is a button that
    opens it in the pickers below."""
    st.markdown(t("nr_find"))
    c1, c2 = st.columns([3, 2])
    typed = c1.text_input(t("nr_find_input"), key="nr_find", placeholder=t("nr_find_placeholder"))
    by = c2.radio(t("nr_find_by"), ["mean", "max"], horizontal=True, key="nr_find_by",
                  format_func=lambda b: t(f"nr_by_{b}"))
    if not typed:
        st.caption(t("nr_find_hint"))
        return
    try:
        found = token_search(model, index, typed)
    except ExplorerError as exc:
        show_error(exc)
        return
    if len(found.pieces) > 1:
        st.caption(t("nr_find_pieces", text=plain(found.text.strip()), n=len(found.pieces),
                     pieces=" · ".join(md_quoted(p) for p in found.pieces)))
    choices = found.choices
    chosen = choices[0]
    if len(choices) > 1:
        chosen = choices[st.radio(
            t("nr_find_token"), range(len(choices)), horizontal=True,
            key="nr_find_token_" + "_".join(str(c.token) for c in choices),
            format_func=lambda i: t("nr_find_choice", token=md_quoted(choices[i].label), n=f"{choices[i].count:,}"))]
    hits = neurons_for_token(model, index, chosen.token, by, k=SEARCH_TOP)
    st.markdown(t("nr_find_result", token=md_quoted(chosen.label), n=f"{chosen.count:,}", by=t(f"nr_by_{by}")))
    for col, (i, (layer_, neuron_, value)) in in_rows(enumerate(hits), 5):  # strongest first, also on a phone
        col.button(t("nr_pick", layer=layer_, neuron=neuron_, value=f"{value:.2f}"), key=f"nr_pick_{i}",
                   on_click=pick, args=(layer_, neuron_), width="stretch")


SHADE_UP, SHADE_DOWN = (255, 140, 0), (30, 136, 229)  # one colour scale: orange above 0, blue below


def shade(value: float, top: float) -> str:
    """A token's background: its activation on the neuron's one scale (full colour at the neuron's top activation)."""
    r, g, b = SHADE_UP if value >= 0 else SHADE_DOWN
    return f"rgba({r},{g},{b},{min(1.0, abs(value) / top) if top > 0 else 0:.2f})"


def examples_html(snippets, top: float) -> str:
    """The examples as running text, every token shaded by the neuron's activation on it (its value and the
    activation of each of its tokens on hover), the firing token boxed. All text HTML-escaped."""
    rows = []
    for s in snippets:
        spans = []
        for text, members in s.pieces:  # whole characters: a character split over tokens is one span
            strongest = max(members, key=lambda m: abs(float(s.acts[m])))
            title = "\n".join(f"{visible(s.tokens[m])}: {float(s.acts[m]):.3f}" for m in members)
            box = "outline:2px solid #c62828;outline-offset:-1px;font-weight:600;" if s.fire in members else ""
            spans.append(f"<span title='{html.escape(title, quote=True)}' style='background:"
                         f"{shade(float(s.acts[strongest]), top)};{box}border-radius:2px'>"
                         f"{html.escape(visible(text, spaces=False))}</span>")
        rows.append(f"<div style='display:flex;gap:10px;align-items:baseline;padding:3px 0;"
                    f"border-bottom:1px solid rgba(128,128,128,0.2)'><span style='min-width:3.5em;text-align:right;"
                    f"font-variant-numeric:tabular-nums;opacity:0.8'>{s.activation:.2f}</span>"
                    f"<span style='white-space:pre-wrap;line-height:1.7'>{''.join(spans)}</span></div>")
    return f"<div class='nr-examples'>{''.join(rows)}</div>"


def activation_histogram(reading, n_shown: int) -> None:
    """How the neuron's activation spreads over every held-out token (log counts), the top examples' range marked."""
    h = reading.histogram
    centres = ((h.edges[:-1] + h.edges[1:]) / 2).astype(np.float32)
    shapes, notes = [], []
    if reading.snippets:  # the examples above are everything right of this line
        low = float(min(s.activation for s in reading.snippets))
        shapes = [dict(type="line", x0=low, x1=low, y0=0, y1=1, yref="paper", line=dict(color="#c62828", dash="dot"))]
        notes = [dict(x=low, y=1, yref="paper", text=t("nr_hist_top", n=n_shown), showarrow=False, xanchor="left",
                      yanchor="top", font=dict(color="#c62828"))]
    fig = figure([dict(type="bar", x=centres, y=h.counts.astype(np.float32), width=float(h.edges[1] - h.edges[0]),
                       marker=dict(color="#ff8c00"),
                       hovertemplate=f"%{{x:.3f}}: %{{y:,}} {t('nr_hist_tokens')}<extra></extra>")],
                 {"height": 280, "margin": dict(l=10, r=10, t=40, b=10), "bargap": 0.05, "shapes": shapes,
                  "annotations": notes,
                  "title": t("nr_hist_title", n=f"{h.n_tokens:,}", share=f"{h.positive_share:.1%}"),
                  "xaxis": {"title": t("ffn_col_activation")},
                  "yaxis": {"title": t("nr_hist_axis"), "type": "log"}})
    chart(fig, "nr_histogram")


def read_a_neuron(default: int | None) -> None:
    """One neuron: find it by a token, its top held-out examples shaded token by token and its activation histogram
    (the shipped index), its activation on this text, what it writes."""
    st.subheader(t("nr_title"))
    explain("nr_intro")
    index = cache.neuron_index(ctx.key) if side == "decoder" else None
    if index is not None:
        find_neurons(index)
    c1, c2 = st.columns(2)
    keys = {"nr_layer": f"nr_layer_{cfg.n_layers}", "nr_neuron": f"nr_neuron_{cfg.d_ffn}"}
    asked = linked_neuron()  # a link's (or this session's last) neuron: the pickers start on it
    nr_layer = c1.selectbox(t("att_layer"), range(cfg.n_layers), index=asked[0] if asked else layer,
                            key=keys["nr_layer"], on_change=remember, args=(keys["nr_layer"], "nr_layer"))
    neuron = int(number_box(c2, t("nr_neuron"), 0, cfg.d_ffn - 1, asked[1] if asked else int(default or 0),
                            key=keys["nr_neuron"], on_change=remember, args=(keys["nr_neuron"], "nr_neuron")))
    if side != "decoder":
        st.caption(t("nr_no_index"))
        return
    snippets = cache.neuron_examples(ctx.key, ctx.device, nr_layer, neuron) if index is not None else None
    reading = read_neuron(model, trace, nr_layer, neuron, index, snippets=snippets)
    if index is None:
        st.caption(t("nr_no_index"))
    elif reading.snippets:
        top = max(s.activation for s in reading.snippets)
        st.markdown(t("nr_examples", n=len(reading.snippets), layer=nr_layer, neuron=neuron, top=f"{top:.3g}"))
        st.html(examples_html(reading.snippets, top))
    else:
        st.caption(t("nr_examples_none"))
    if reading.histogram is not None:
        activation_histogram(reading, len(reading.snippets))
        if gated:
            st.caption(t("nr_hist_gated"))
    fig = figure([dict(type="bar", x=list(range(len(labels))), y=reading.on_text.tolist(), customdata=labels,
                       hovertemplate="%{customdata}: %{y:.4f}<extra></extra>")],
                 {"height": 260, "margin": dict(l=10, r=10, t=30, b=10), "title": t("nr_on_text", layer=nr_layer,
                  neuron=neuron), "xaxis": {"tickmode": "array", "tickvals": list(range(len(labels))),
                  "ticktext": labels}, "yaxis": {"title": t("ffn_col_activation")}})
    chart(fig, "nr_on_text")
    if reading.up:
        up, down = reading.up, reading.down
        names = token_labels(model, [i for i, _ in up + down])
        c_up, c_down = st.columns(2)
        c_up.markdown(t("nr_up") + "  \n" + " · ".join(f"{md_quoted(n)} {v:+.2f}" for n, (_, v) in
                                                         zip(names[:len(up)], up, strict=True)))
        c_down.markdown(t("nr_down") + "  \n" + " · ".join(f"{md_quoted(n)} {v:+.2f}" for n, (_, v) in
                                                             zip(names[len(up):], down, strict=True)))
        pieces = byte_pieces([i for i, _ in up + down], names)
        if pieces:  # "‹E7 A1›" explained once: what a piece of a character is, and which characters it can be of
            st.caption(t("nr_pieces_note") + " " + "; ".join(pieces) + ".")
    export_panel(reading, "neuron", ctx, layer=nr_layer, neuron=neuron)


read_a_neuron(neurons[0][0] if neurons else None)
