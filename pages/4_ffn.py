"""FFN & residual stream: how big the stream is after every sub-layer, what attention and the FFN each add,
what a LayerNorm does to one token, and which FFN neurons fire for it."""
import numpy as np
import pandas as pd
import streamlit as st

from transformer_core.analysis.architecture import ACT_NAMES, NORM_NAMES
from transformer_core.analysis.neurons import read_neuron
from transformer_core.analysis.residual import (
    active_fraction,
    gate_up,
    layer_norm_effect,
    norm_check,
    norm_pair,
    stream,
    top_neurons,
)
from transformer_core.text.inputs import sequence_labels, token_labels
from ui import cache
from ui.figures import axis_labels, bars, token_heatmap, visible
from ui.guidance import look_for
from ui.i18n import t
from ui.plain_figures import figure
from ui.session import page_context, through_app
from ui.tools import export_panel
from ui.widgets import chart, explain, table

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
side = "decoder"
if model.is_encoder_decoder:
    side = st.radio(t("ffn_side"), ["encoder", "decoder"], horizontal=True, key="ffn_side",
                    format_func=lambda s: t(f"ffn_side_{s}"))
ids = (trace.src_ids if side == "encoder" else trace.decoder_ids[None])[0]
labels = axis_labels(sequence_labels(model, ids))
steps = stream(trace, side, cfg.n_layers)
names = [t("ffn_step_embed") if s.layer is None else t("ffn_step", layer=s.layer, sub=t(f"ffn_sub_{s.sublayer}"))
         for s in steps]

biggest = max((s for s in steps if s.added is not None), key=lambda s: float(s.added.mean()), default=None)
if biggest is not None:
    look_for("ffn_pre" if cfg.norm_first else "ffn", step=names[steps.index(biggest)])
st.subheader(t("ffn_stream"))
st.markdown(t("ffn_stream_text", norm=t("ffn_norm_post" if not cfg.norm_first else "ffn_norm_pre")))
norms = np.stack([s.norm.numpy() for s in steps], axis=1)  # (T, steps)
fig = figure([dict(type="scatter", x=names, y=norms.mean(0), mode="lines+markers", name=t("ffn_mean_norm"))],
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
    st.markdown(t("ffn_swiglu_text", n=g.numel(), open=gu.open_share * 100))
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


def read_a_neuron(default: int | None) -> None:
    """One neuron: its top held-out snippets (the shipped index), its activation on this text, what it writes."""
    st.subheader(t("nr_title"))
    explain("nr_intro")
    index = cache.neuron_index(ctx.key) if side == "decoder" else None
    c1, c2 = st.columns(2)
    nr_layer = c1.selectbox(t("att_layer"), range(cfg.n_layers), index=layer, key=f"nr_layer_{cfg.n_layers}")
    neuron = int(c2.number_input(t("nr_neuron"), 0, cfg.d_ffn - 1, int(default or 0), key=f"nr_neuron_{cfg.d_ffn}"))
    if side != "decoder":
        st.caption(t("nr_no_index"))
        return
    reading = read_neuron(model, trace, nr_layer, neuron, index)
    fig = figure([dict(type="bar", x=list(range(len(labels))), y=reading.on_text.tolist(), customdata=labels,
                       hovertemplate="%{customdata}: %{y:.4f}<extra></extra>")],
                 {"height": 260, "margin": dict(l=10, r=10, t=30, b=10), "title": t("nr_on_text", layer=nr_layer,
                  neuron=neuron), "xaxis": {"tickmode": "array", "tickvals": list(range(len(labels))),
                  "ticktext": labels}, "yaxis": {"title": t("ffn_col_activation")}})
    chart(fig, "nr_on_text")
    if index is None:
        st.caption(t("nr_no_index"))
    else:
        snippets = reading.snippets
        st.markdown(t("nr_snippets", n=len(snippets)))
        table(pd.DataFrame({
            t("ffn_col_activation"): [s.activation for s in snippets],
            t("nr_col_before"): [visible(s.before, spaces=False) for s in snippets],
            t("nr_col_token"): [visible(s.tokens[s.fire]) for s in snippets],
            t("nr_col_after"): [visible(s.after, spaces=False) for s in snippets]}),
            f"nr_snippets_{nr_layer}_{neuron}", formats={t("ffn_col_activation"): "%.3f"})
    if reading.up:
        up, down = reading.up, reading.down
        names = token_labels(model, [i for i, _ in up + down])
        c_up, c_down = st.columns(2)
        c_up.markdown(t("nr_up") + "  \n" + " · ".join(f"`{visible(n)}` {v:+.2f}" for n, (_, v) in
                                                         zip(names[:len(up)], up, strict=True)))
        c_down.markdown(t("nr_down") + "  \n" + " · ".join(f"`{visible(n)}` {v:+.2f}" for n, (_, v) in
                                                             zip(names[len(up):], down, strict=True)))
    export_panel(reading, "neuron", ctx, layer=nr_layer, neuron=neuron)


read_a_neuron(neurons[0][0] if neurons else None)
